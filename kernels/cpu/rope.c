/* rope.c - rotary position embedding, HF "rotate_half" layout: dimension j
 * pairs with j + d/2, angle = position * inv_freq[j] computed in fp32 as HF does. */
#include <math.h> // cosf, sinf

#include "cpu_kernels.h"
#include "cpu_threads.h" // LZ_PARALLEL_FOR, lz_cpu_threads_for

static void rotate_head(float *x, const float *cosv, const float *sinv, int half) {
    for (int j = 0; j < half; j++) {
        float a = x[j], b = x[j + half];
        x[j] = a * cosv[j] - b * sinv[j];
        x[j + half] = b * cosv[j] + a * sinv[j];
    }
}

// q [T, Hq, d], k [T, Hkv, d] rotated in place at batch->token_pos
void rope_forward(float *q, float *k, const float *inv_freq, const lz_batch *batch, const lz_attn_dims *dims) {
    const int d = dims->head_dim, half = d / 2;
    LZ_PARALLEL_FOR(lz_cpu_threads_for((size_t)batch->n_tokens,
                                        (size_t)batch->n_tokens * (dims->n_heads + dims->n_kv_heads) * d, 1 << 14))
    for (int t = 0; t < batch->n_tokens; t++) {
        float cosv[512], sinv[512]; // head_dim <= 1024 is checked at load
        float p = (float)batch->token_pos[t];
        for (int j = 0; j < half; j++) {
            float angle = p * inv_freq[j];
            cosv[j] = cosf(angle);
            sinv[j] = sinf(angle);
        }
        for (int h = 0; h < dims->n_heads; h++)
            rotate_head(q + ((size_t)t * dims->n_heads + h) * d, cosv, sinv, half);
        for (int h = 0; h < dims->n_kv_heads; h++)
            rotate_head(k + ((size_t)t * dims->n_kv_heads + h) * d, cosv, sinv, half);
    }
}
