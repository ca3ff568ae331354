/* attention_grad.c - causal softmax attention's gradients of one kv head's group on the CPU, in
 * blocks of query rows whose products go through cpu_gemm.h.
 *
 * The equations are the reference's (backward/attention_backward.inc): per query row i,
 *   p_ij = e^{s_ij - lse_i}, s_ij = q_i . k_j / sqrt(d), j <= i;  out_i = sum_j p_ij v_j,
 *   D_i = dout_i . out_i,  ds_ij = p_ij (dout_i . v_j - D_i) / sqrt(d),
 *   dq_i = sum_j ds_ij k_j,  dk_j += ds_ij q_i,  dv_j += p_ij dout_i.
 * A block of B rows holds its scores [B, i1] (i1: one past its last row) whole, so that its
 * log-sum-exps are exact without an online rescale, and nothing of size T x T is held. */
#include <math.h>   // expf, logf, sqrtf, INFINITY

#include "cpu_gemm.h" // lz_gemm
#include "cpu_kernels.h"

void attention_grad_group(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                          const float *v, int T, int Hq, int Hkv, int d, int kvh, float *scratch) {
    const int ldq = Hq * d, ldk = Hkv * d, group = Hq / Hkv;
    const float scale = 1.0f / sqrtf((float)d);
    float *P = scratch, *dS = scratch + (size_t)LZ_ATTN_GRAD_ROWS * T;
    float *out = dS + (size_t)LZ_ATTN_GRAD_ROWS * T, *D = out + (size_t)LZ_ATTN_GRAD_ROWS * d;
    const float *kg = k + (size_t)kvh * d, *vg = v + (size_t)kvh * d;
    float *dkg = dk + (size_t)kvh * d, *dvg = dv + (size_t)kvh * d;
    for (int h = kvh * group; h < (kvh + 1) * group; h++)
        for (int i0 = 0; i0 < T; i0 += LZ_ATTN_GRAD_ROWS) {
            const int rows = T - i0 < LZ_ATTN_GRAD_ROWS ? T - i0 : LZ_ATTN_GRAD_ROWS, i1 = i0 + rows;
            const float *qb = q + (size_t)i0 * ldq + (size_t)h * d, *gob = dout + (size_t)i0 * ldq + (size_t)h * d;
            lz_gemm(false, true, rows, i1, d, scale, qb, ldq, kg, ldk, 0.0f, P, i1);
            for (int r = 0; r < rows; r++) { // the row's softmax over j <= i; zeros past it
                float *pr = P + (size_t)r * i1, m = -INFINITY, l = 0;
                const int last = i0 + r;
                for (int j = 0; j <= last; j++)
                    m = pr[j] > m ? pr[j] : m;
                for (int j = 0; j <= last; j++)
                    l += expf(pr[j] - m);
                const float lse = m + logf(l);
                for (int j = 0; j <= last; j++)
                    pr[j] = expf(pr[j] - lse);
                for (int j = last + 1; j < i1; j++)
                    pr[j] = 0;
            }
            lz_gemm(false, false, rows, d, i1, 1.0f, P, i1, vg, ldk, 0.0f, out, d);
            lz_gemm(false, true, rows, i1, d, 1.0f, gob, ldq, vg, ldk, 0.0f, dS, i1);
            for (int r = 0; r < rows; r++) {
                D[r] = 0;
                for (int c = 0; c < d; c++)
                    D[r] += gob[(size_t)r * ldq + c] * out[(size_t)r * d + c];
                float *dsr = dS + (size_t)r * i1;
                const float *pr = P + (size_t)r * i1;
                for (int j = 0; j < i1; j++)
                    dsr[j] = pr[j] * (dsr[j] - D[r]) * scale;
            }
            lz_gemm(false, false, rows, d, i1, 1.0f, dS, i1, kg, ldk, 0.0f, dq + (size_t)i0 * ldq + (size_t)h * d,
                    ldq);
            lz_gemm(true, false, i1, d, rows, 1.0f, dS, i1, qb, ldq, 1.0f, dkg, ldk);
            lz_gemm(true, false, i1, d, rows, 1.0f, P, i1, gob, ldq, 1.0f, dvg, ldk);
        }
}
