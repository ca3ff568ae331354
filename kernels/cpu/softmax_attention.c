/* softmax_attention.c - a retained softmax layer: append this step's keys and
 * values to the slot's KV cache, then causal GQA attention over it. */
#include <math.h>   // expf, sqrtf, INFINITY
#include <stdlib.h> // malloc, free
#include <string.h> // memcpy

#include "cpu_kernels.h"

static void append_kv(const float *k, const float *v, lz_layer_state *st, const lz_batch *batch,
                      const lz_attn_dims *dims) {
    const size_t row = (size_t)dims->n_kv_heads * dims->head_dim;
    float *kc = st->k_cache, *vc = st->v_cache;
    for (int s = 0; s < batch->n_seqs; s++) {
        size_t base = (size_t)batch->slot[s] * dims->kv_capacity;
        for (int i = 0; i < batch->len[s]; i++) {
            size_t dst = (base + (size_t)batch->pos[s] + i) * row, src = (size_t)(batch->start[s] + i) * row;
            memcpy(kc + dst, k + src, sizeof(float) * row);
            memcpy(vc + dst, v + src, sizeof(float) * row);
        }
    }
}

// One query row against keys [first, p] of one kv head of one slot.
static void attend_one(float *out, const float *q, const float *kc, const float *vc, int first, int p,
                       size_t row, int d, float scale, float *scores) {
    float m = -INFINITY;
    for (int t = first; t <= p; t++) {
        const float *kt = kc + (size_t)t * row;
        float s = 0.0f;
        for (int j = 0; j < d; j++)
            s += q[j] * kt[j];
        scores[t - first] = s * scale;
        if (scores[t - first] > m)
            m = scores[t - first];
    }
    float den = 0.0f;
    for (int j = 0; j < d; j++)
        out[j] = 0.0f;
    for (int t = first; t <= p; t++) {
        float e = expf(scores[t - first] - m);
        den += e;
        const float *vt = vc + (size_t)t * row;
        for (int j = 0; j < d; j++)
            out[j] += e * vt[j];
    }
    for (int j = 0; j < d; j++)
        out[j] /= den;
}

// out [T, Hq, d]; q [T, Hq, d]; k, v [T, Hkv, d] (RoPE already applied)
void softmax_attention_forward(float *out, const float *q, const float *k, const float *v, lz_layer_state *st,
                               const lz_batch *batch, const lz_attn_dims *dims) {
    append_kv(k, v, st, batch, dims);
    const int d = dims->head_dim, Hq = dims->n_heads, group = dims->n_heads / dims->n_kv_heads;
    const size_t row = (size_t)dims->n_kv_heads * d;
    const float scale = 1.0f / sqrtf((float)d);
    float *scores = malloc(sizeof(float) * (size_t)dims->kv_capacity);
    if (!scores)
        abort(); // kv_capacity floats: tiny next to the cache the caller allocated
    for (int s = 0; s < batch->n_seqs; s++) {
        const size_t base = (size_t)batch->slot[s] * dims->kv_capacity * row;
        const float *kc = (const float *)st->k_cache + base, *vc = (const float *)st->v_cache + base;
        for (int i = 0; i < batch->len[s]; i++) {
            int p = batch->pos[s] + i, tok = batch->start[s] + i;
            int first = dims->sliding_window > 0 && p - dims->sliding_window + 1 > 0 ? p - dims->sliding_window + 1 : 0;
            for (int h = 0; h < Hq; h++) {
                int g = h / group;
                attend_one(out + ((size_t)tok * Hq + h) * d, q + ((size_t)tok * Hq + h) * d, kc + (size_t)g * d,
                           vc + (size_t)g * d, first, p, row, d, scale, scores);
            }
        }
    }
    free(scores);
}
