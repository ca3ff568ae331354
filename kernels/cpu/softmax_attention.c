/* softmax_attention.c - a retained softmax layer: append this step's keys and
 * values to the slot's KV cache, then causal GQA attention over it.
 *
 * Work is cut into items of up to LZ_GEMM_ROWS query rows of one head of one
 * sequence, shared among the threads. An item's scores and its weighted sum of
 * values are products of one shape (cblas_sgemm of LZ_GEMM_ROWS rows by KEYS
 * keys), over key blocks aligned at position 0: a block past a row's last key
 * adds exact zeros, so a row comes out the same bits whatever the rows beside it
 * (the step's other tokens, the prompt cut into chunks or decoded a token at a time). */
#include <math.h>   // expf, sqrtf, INFINITY
#include <stdlib.h> // malloc, calloc, free, abort
#include <string.h> // memcpy, memset

#include <cblas.h> // cblas_sgemm

#include "cpu_gemm.h"    // LZ_GEMM_ROWS
#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for

enum { ROWS = LZ_GEMM_ROWS, KEYS = 64 }; /* query rows of an item, keys of a block */

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

typedef struct {
    int seq, i0, rows; /* rows i0 .. i0 + rows - 1 of sequence seq */
} row_block;

typedef struct {
    const float *q, *kc, *vc; /* q: this head's first row; kc, vc: this slot's cache at this kv head */
    float *out;               /* this head's first output row */
    size_t q_row, kv_row;     /* floats between two tokens' rows */
    int p0, rows, d, window;  /* position of the first row; sliding window (0: none) */
    float scale;
} item;

static int first_key(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

// keys (or values) [b * KEYS, b * KEYS + KEYS) of the cache: in place when written up to `last`, else
// the written ones copied to pad and the rest zero
static const float *key_block(const float *cache, size_t kv_row, int b, int last, int d, float *pad, int *ld) {
    const int t0 = b * KEYS;
    if (t0 + KEYS - 1 <= last) {
        *ld = (int)kv_row;
        return cache + (size_t)t0 * kv_row;
    }
    memset(pad, 0, sizeof(float) * KEYS * d);
    for (int t = t0; t <= last; t++)
        memcpy(pad + (size_t)(t - t0) * d, cache + (size_t)t * kv_row, sizeof(float) * d);
    *ld = d;
    return pad;
}

static void attend_item(const item *it) {
    const int d = it->d, last = it->p0 + it->rows - 1;
    const int b_lo = first_key(it->p0, it->window) / KEYS, b_hi = last / KEYS, n_b = b_hi - b_lo + 1;
    const size_t ld_s = (size_t)n_b * KEYS;
    float *buf = calloc((size_t)ROWS * d * 2 + (size_t)KEYS * d + (size_t)ROWS * ld_s + ROWS, sizeof(float));
    if (!buf)
        abort(); // an item's rows of scores: small next to the KV cache the caller holds
    float *qb = buf, *ob = qb + (size_t)ROWS * d, *pad = ob + (size_t)ROWS * d, *sc = pad + (size_t)KEYS * d;
    float *den = sc + (size_t)ROWS * ld_s;
    for (int r = 0; r < it->rows; r++) // rows past it->rows stay zero
        memcpy(qb + (size_t)r * d, it->q + (size_t)r * it->q_row, sizeof(float) * d);
    for (int b = b_lo; b <= b_hi; b++) {
        int ld;
        const float *kb = key_block(it->kc, it->kv_row, b, last, d, pad, &ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ROWS, KEYS, d, 1.0f, qb, d, kb, ld, 0.0f,
                    sc + (size_t)(b - b_lo) * KEYS, (int)ld_s);
    }
    // each row: its keys' probabilities (unnormalised), zero outside [first, p]
    for (int r = 0; r < it->rows; r++) {
        const int p = it->p0 + r, lo = first_key(p, it->window) - b_lo * KEYS, hi = p - b_lo * KEYS;
        float *s = sc + (size_t)r * ld_s, m = -INFINITY, sum = 0.0f;
        for (int t = lo; t <= hi; t++) {
            s[t] *= it->scale;
            m = s[t] > m ? s[t] : m;
        }
        for (int t = lo; t <= hi; t++) {
            s[t] = expf(s[t] - m);
            sum += s[t];
        }
        memset(s, 0, sizeof(float) * (size_t)lo);
        memset(s + hi + 1, 0, sizeof(float) * (ld_s - (size_t)hi - 1));
        den[r] = sum;
    }
    for (int b = b_lo; b <= b_hi; b++) {
        int ld;
        const float *vb = key_block(it->vc, it->kv_row, b, last, d, pad, &ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ROWS, d, KEYS, 1.0f, sc + (size_t)(b - b_lo) * KEYS,
                    (int)ld_s, vb, ld, b == b_lo ? 0.0f : 1.0f, ob, d);
    }
    for (int r = 0; r < it->rows; r++)
        for (int j = 0; j < d; j++)
            it->out[(size_t)r * it->q_row + j] = ob[(size_t)r * d + j] / den[r];
    free(buf);
}

typedef struct {
    float *out;
    const float *q;
    const lz_layer_state *st;
    const lz_batch *batch;
    const lz_attn_dims *dims;
    const row_block *blocks;
    float scale;
} attention_job;

// items [begin, end): item i is head i % Hq of row block i / Hq
static void attend_items(void *ctx, size_t begin, size_t end, int worker) {
    const attention_job *j = ctx;
    const lz_attn_dims *dims = j->dims;
    const int d = dims->head_dim, Hq = dims->n_heads, group = dims->n_heads / dims->n_kv_heads;
    const size_t kv_row = (size_t)dims->n_kv_heads * d, q_row = (size_t)Hq * d;
    for (size_t i = begin; i < end; i++) {
        const row_block *rb = &j->blocks[i / (size_t)Hq];
        const int h = (int)(i % (size_t)Hq), s = rb->seq, tok = j->batch->start[s] + rb->i0;
        const size_t cache = (size_t)j->batch->slot[s] * dims->kv_capacity * kv_row + (size_t)(h / group) * d;
        const item it = {j->q + (size_t)tok * q_row + (size_t)h * d, (const float *)j->st->k_cache + cache,
                         (const float *)j->st->v_cache + cache, j->out + (size_t)tok * q_row + (size_t)h * d,
                         q_row, kv_row, j->batch->pos[s] + rb->i0, rb->rows, d, dims->sliding_window, j->scale};
        attend_item(&it);
    }
}

// out [T, Hq, d]; q [T, Hq, d]; k, v [T, Hkv, d] (RoPE already applied)
void softmax_attention_forward(float *out, const float *q, const float *k, const float *v, lz_layer_state *st,
                               const lz_batch *batch, const lz_attn_dims *dims) {
    append_kv(k, v, st, batch, dims);
    const int d = dims->head_dim, Hq = dims->n_heads;
    int n_blocks = 0;
    for (int s = 0; s < batch->n_seqs; s++)
        n_blocks += (batch->len[s] + ROWS - 1) / ROWS;
    row_block *blocks = malloc(sizeof(row_block) * (size_t)(n_blocks > 0 ? n_blocks : 1));
    if (!blocks)
        abort(); // a few ints per 16 tokens of the step
    n_blocks = 0;
    size_t work = 0; // multiply-adds of the products, for the threads it is worth
    for (int s = 0; s < batch->n_seqs; s++)
        for (int i0 = 0; i0 < batch->len[s]; i0 += ROWS) {
            blocks[n_blocks++] = (row_block){s, i0, batch->len[s] - i0 < ROWS ? batch->len[s] - i0 : ROWS};
            work += (size_t)2 * ROWS * Hq * d * (size_t)(batch->pos[s] + i0 + ROWS);
        }
    attention_job j = {out, q, st, batch, dims, blocks, 1.0f / sqrtf((float)d)};
    const size_t items = (size_t)n_blocks * Hq;
    lz_cpu_parallel(items, lz_cpu_threads_for(items, work, LZ_GRAIN_GEMM), attend_items, &j);
    free(blocks);
}
