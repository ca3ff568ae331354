/* rope.c - rotary position embedding, HF "rotate_half" layout: dimension j
 * pairs with j + d/2, angle = position * inv_freq[j] computed in fp32 as HF does. */
#include <math.h> // cosf, sinf

#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for

static void rotate_head(float *x, const float *cosv, const float *sinv, int half) {
    for (int j = 0; j < half; j++) {
        float a = x[j], b = x[j + half];
        x[j] = a * cosv[j] - b * sinv[j];
        x[j + half] = b * cosv[j] + a * sinv[j];
    }
}

typedef struct {
    float *q, *k;
    const float *inv_freq;
    const lz_batch *batch;
    const lz_attn_dims *dims;
} rope_job;

static void rope_rows(void *ctx, size_t begin, size_t end, int worker) {
    const rope_job *j = ctx;
    const int d = j->dims->head_dim, half = d / 2;
    float cosv[512], sinv[512]; // head_dim <= 1024 is checked at load
    for (size_t t = begin; t < end; t++) {
        float p = (float)j->batch->token_pos[t];
        for (int i = 0; i < half; i++) {
            float angle = p * j->inv_freq[i];
            cosv[i] = cosf(angle);
            sinv[i] = sinf(angle);
        }
        for (int h = 0; h < j->dims->n_heads; h++)
            rotate_head(j->q + (t * j->dims->n_heads + h) * d, cosv, sinv, half);
        for (int h = 0; h < j->dims->n_kv_heads; h++)
            rotate_head(j->k + (t * j->dims->n_kv_heads + h) * d, cosv, sinv, half);
    }
}

// q [T, Hq, d], k [T, Hkv, d] rotated in place at batch->token_pos
void rope_forward(float *q, float *k, const float *inv_freq, const lz_batch *batch, const lz_attn_dims *dims) {
    rope_job j = {q, k, inv_freq, batch, dims};
    const size_t T = (size_t)batch->n_tokens;
    lz_cpu_parallel(T, lz_cpu_threads_for(T, T * (dims->n_heads + dims->n_kv_heads) * dims->head_dim, LZ_GRAIN_LIGHT),
                    rope_rows, &j);
}
