/* linear_fp8.c - the reference of a linear layer whose weight is FP8 E4M3
 * codes with one fp32 scale per row (kernels/fp8_rule.h):
 * out[t][o] = s_o * sum_i x[t][i] * q[o][i] (+ bias[o]), summed in order of i
 * in fp32 as linear_forward sums. Each row is decoded once (exactly) and
 * serves every token; four tokens run side by side, each with its own sum, so
 * the result does not depend on T. */
#include <stdlib.h> // malloc, free

#include "cpu_kernels.h"
#include "fp8_rule.h" // lz_e4m3_to_float

lz_status linear_fp8_forward(float *out, const float *x, const uint8_t *q, const float *scale, const float *bias,
                             int T, int n_in, int n_out) {
    float value[256];
    for (int c = 0; c < 256; c++)
        value[c] = lz_e4m3_to_float((uint8_t)c);
    float *row = malloc(sizeof(float) * (size_t)(n_in > 0 ? n_in : 1));
    if (!row)
        return lz_fail(LZ_ERR_NOMEM, "cpu backend: out of memory for an FP8 row of %d", n_in);
    for (int o = 0; o < n_out; o++) {
        const uint8_t *qo = q + (size_t)o * n_in;
        for (int i = 0; i < n_in; i++)
            row[i] = value[qo[i]];
        const float s = scale[o], b = bias ? bias[o] : 0.0f;
        int t = 0;
        for (; t + 4 <= T; t += 4) {
            const float *x0 = x + (size_t)t * n_in, *x1 = x0 + n_in, *x2 = x1 + n_in, *x3 = x2 + n_in;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            for (int i = 0; i < n_in; i++) {
                a0 += x0[i] * row[i];
                a1 += x1[i] * row[i];
                a2 += x2[i] * row[i];
                a3 += x3[i] * row[i];
            }
            const float acc[4] = {a0, a1, a2, a3};
            for (int k = 0; k < 4; k++)
                out[(size_t)(t + k) * n_out + o] = bias ? acc[k] * s + b : acc[k] * s;
        }
        for (; t < T; t++) {
            const float *xt = x + (size_t)t * n_in;
            float acc = 0.0f;
            for (int i = 0; i < n_in; i++)
                acc += xt[i] * row[i];
            out[(size_t)t * n_out + o] = bias ? acc * s + b : acc * s;
        }
    }
    free(row);
    return LZ_OK;
}
