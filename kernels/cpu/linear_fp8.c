/* linear_fp8.c - the reference of a linear layer whose weight is FP8 E4M3
 * codes with one fp32 scale per row (kernels/fp8_rule.h):
 * out[t][o] = s_o * sum_i x[t][i] * q[o][i] (+ bias[o]), summed in order of i
 * in fp32 as linear_forward sums. Each row is decoded once (exactly) and
 * serves every token; four tokens run side by side, each with its own sum, so
 * the result does not depend on T. */
#include <stdlib.h> // malloc, free

#include "cpu_kernels.h"
#include "fp8_rule.h" // lz_e4m3_to_float
#include "real.h"     // dots_f32

lz_status linear_fp8_forward(float *out, const float *x, const uint8_t *q, const float *scale, const float *bias,
                             int T, int n_in, int n_out) {
    float value[256];
    for (int c = 0; c < 256; c++)
        value[c] = lz_e4m3_to_float((uint8_t)c);
    // one buffer: the decoded row, then every token's sum with it
    float *row = malloc(sizeof(float) * ((size_t)n_in + (size_t)T + 1));
    if (!row)
        return lz_fail(LZ_ERR_NOMEM, "cpu backend: out of memory for an FP8 row of %d", n_in);
    float *acc = row + n_in;
    for (int o = 0; o < n_out; o++) {
        const uint8_t *qo = q + (size_t)o * n_in;
        for (int i = 0; i < n_in; i++)
            row[i] = value[qo[i]];
        dots_f32(acc, x, (size_t)n_in, row, T, n_in);
        const float s = scale[o], b = bias ? bias[o] : 0.0f;
        for (int t = 0; t < T; t++)
            out[(size_t)t * n_out + o] = bias ? acc[t] * s + b : acc[t] * s;
    }
    free(row);
    return LZ_OK;
}
