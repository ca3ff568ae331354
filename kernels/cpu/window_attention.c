/* window_attention.c - the Lizard window branch: softmax attention over the
 * last w positions (i-w+1 .. i), raw q and k (no RoPE), with the meta-memory
 * logits t_j added to the denominator only:
 *   WIN_i = sum_t exp(s_it) v_t / (sum_j exp(t_j) + sum_t exp(s_it)).
 * Keys before this step come from the ring (position p in row p % w). */
#include <math.h>   // expf, sqrtf, INFINITY
#include <stdlib.h> // malloc, free, abort
#include <string.h> // memcpy

#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for

typedef struct {
    const float *k, *v;           /* this step's rows */
    float *ring_k, *ring_v;       /* this slot's ring */
    int pos0, start, row;         /* first position of the step, its first row, floats per token */
    int w;
} window_src;

static const float *key_at(const window_src *src, int p, int g, int d) {
    if (p >= src->pos0)
        return src->k + (size_t)(src->start + p - src->pos0) * src->row + (size_t)g * d;
    return src->ring_k + (size_t)(p % src->w) * src->row + (size_t)g * d;
}
static const float *value_at(const window_src *src, int p, int g, int d) {
    if (p >= src->pos0)
        return src->v + (size_t)(src->start + p - src->pos0) * src->row + (size_t)g * d;
    return src->ring_v + (size_t)(p % src->w) * src->row + (size_t)g * d;
}

// out[d] += alpha * WIN for one query at position p, kv head g
static void window_one(float *out, const float *q, int p, int g, const window_src *src, const float *meta, int n_meta,
                       float alpha, int d) {
    const float scale = 1.0f / sqrtf((float)d);
    const int first = p - src->w + 1 > 0 ? p - src->w + 1 : 0;
    float scores[4096], m = -INFINITY; // w <= 4096 is checked at load
    int t = first;
    for (; t + 4 <= p + 1; t += 4) { // four keys at a time: their sums overlap, each in the order below
        const float *k0 = key_at(src, t, g, d), *k1 = key_at(src, t + 1, g, d), *k2 = key_at(src, t + 2, g, d),
                    *k3 = key_at(src, t + 3, g, d);
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (int j = 0; j < d; j++) {
            s0 += q[j] * k0[j];
            s1 += q[j] * k1[j];
            s2 += q[j] * k2[j];
            s3 += q[j] * k3[j];
        }
        scores[t - first] = s0 * scale, scores[t + 1 - first] = s1 * scale;
        scores[t + 2 - first] = s2 * scale, scores[t + 3 - first] = s3 * scale;
    }
    for (; t <= p; t++) {
        const float *kt = key_at(src, t, g, d);
        float s = 0.0f;
        for (int j = 0; j < d; j++)
            s += q[j] * kt[j];
        scores[t - first] = s * scale;
    }
    for (t = first; t <= p; t++)
        if (scores[t - first] > m)
            m = scores[t - first];
    for (int j = 0; j < n_meta; j++)
        if (meta[j] > m)
            m = meta[j];
    float den = 0.0f, num[1024] = {0};
    for (int j = 0; j < n_meta; j++)
        den += expf(meta[j] - m);
    for (t = first; t <= p; t++) {
        const float e = expf(scores[t - first] - m);
        const float *vt = value_at(src, t, g, d);
        den += e;
        for (int j = 0; j < d; j++)
            num[j] += e * vt[j];
    }
    for (int j = 0; j < d; j++)
        out[j] += alpha * num[j] / den;
}

// Keep the last w positions of this step in the ring.
static void ring_store(float *ring_k, float *ring_v, const window_src *src, int len) {
    const int from = len > src->w ? len - src->w : 0;
    for (int i = from; i < len; i++) {
        const size_t dst = (size_t)((src->pos0 + i) % src->w) * src->row, row = (size_t)(src->start + i) * src->row;
        memcpy(ring_k + dst, src->k + row, sizeof(float) * src->row);
        memcpy(ring_v + dst, src->v + row, sizeof(float) * src->row);
    }
}

typedef struct {
    float *out;
    const float *q, *meta_logits;
    float alpha;
    const lz_batch *batch;
    const lz_attn_dims *dims;
    const window_src *src;
    const int *seq_of;
} window_job;

// items [begin, end): item i is head i % Hq of row i / Hq
static void window_items(void *ctx, size_t begin, size_t end, int worker) {
    const window_job *j = ctx;
    const int d = j->dims->head_dim, Hq = j->dims->n_heads, group = j->dims->n_heads / j->dims->n_kv_heads;
    for (size_t i = begin; i < end; i++) {
        const int tok = (int)(i / (size_t)Hq), h = (int)(i % (size_t)Hq), s = j->seq_of[tok];
        if (s < 0)
            continue; // a row of no sequence
        const int p = j->batch->pos[s] + tok - j->batch->start[s];
        window_one(j->out + ((size_t)tok * Hq + h) * d, j->q + ((size_t)tok * Hq + h) * d, p, h / group, &j->src[s],
                   j->meta_logits, j->dims->n_meta, j->alpha, d);
    }
}

// (every query row and head on the threads, the rings written once all have read them)
void window_attention_forward(float *out, const float *q, const float *k, const float *v, const float *meta_logits,
                              float alpha, lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims) {
    const int d = dims->head_dim, Hq = dims->n_heads;
    const int row = dims->n_kv_heads * d, T = batch->n_tokens;
    window_src *src = malloc(sizeof(window_src) * (size_t)(batch->n_seqs > 0 ? batch->n_seqs : 1));
    int *seq_of = malloc(sizeof(int) * (size_t)(T > 0 ? T : 1));
    if (!src || !seq_of)
        abort(); // a few words per sequence and token of the step
    for (int t = 0; t < T; t++)
        seq_of[t] = -1;
    for (int s = 0; s < batch->n_seqs; s++) {
        float *rk = (float *)st->ring_k + (size_t)batch->slot[s] * dims->window * row;
        float *rv = (float *)st->ring_v + (size_t)batch->slot[s] * dims->window * row;
        src[s] = (window_src){k, v, rk, rv, batch->pos[s], batch->start[s], row, dims->window};
        for (int i = 0; i < batch->len[s]; i++)
            seq_of[batch->start[s] + i] = s;
    }
    window_job j = {out, q, meta_logits, alpha, batch, dims, src, seq_of};
    const size_t items = (size_t)T * Hq;
    lz_cpu_parallel(items, lz_cpu_threads_for(items, items * dims->window * d, LZ_GRAIN_LOOP), window_items, &j);
    for (int s = 0; s < batch->n_seqs; s++)
        ring_store(src[s].ring_k, src[s].ring_v, &src[s], batch->len[s]);
    free(src);
    free(seq_of);
}
