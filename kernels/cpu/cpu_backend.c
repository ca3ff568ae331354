/* cpu_backend.c - the CPU reference backend: fp32 activations in host memory,
 * weights converted to fp32 (F32 tensors used in place from the mapping when
 * aligned), and the op table that points at the kernels of this folder. */
#include <stdint.h> // uintptr_t
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy, memset

#include "cpu_kernels.h"
#include "sample_rule.h" // LZ_SAMPLE_MAX_VOCAB

struct lz_backend {
    int unused;
};

static lz_status cpu_alloc(lz_backend *be, size_t bytes, void **out) {
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return lz_fail(LZ_ERR_NOMEM, "cpu backend: out of memory allocating %zu bytes", bytes);
    return LZ_OK;
}

static void cpu_free(lz_backend *be, void *p) { free(p); }

static lz_status cpu_zero(lz_backend *be, void *p, size_t bytes) {
    memset(p, 0, bytes);
    return LZ_OK;
}

static lz_status cpu_upload_weight(lz_backend *be, const lz_host_tensor *src, int64_t rows, int64_t cols,
                                   lz_weight *out) {
    if (rows * cols != src->numel)
        return lz_fail(LZ_ERR_INTERNAL, "tensor '%s': %lld elements viewed as [%lld, %lld]", src->name,
                       (long long)src->numel, (long long)rows, (long long)cols);
    // every weight is checked: one pass at memory speed (docs/running.md, "Non-finite values")
    const size_t bad = lz_first_nonfinite(src->data, src->dtype, (size_t)src->numel);
    if (bad < (size_t)src->numel)
        return lz_fail(LZ_ERR_INPUT, "tensor '%s': element %zu is a NaN or an infinity", src->name, bad);
    *out = (lz_weight){NULL, LZ_DTYPE_F32, rows, cols, false, 0};
    if (src->lasting && src->dtype == LZ_DTYPE_F32 && ((uintptr_t)src->data % sizeof(float)) == 0) {
        out->data = (void *)src->data; // zero copy: the mapping outlives the model
        return LZ_OK;
    }
    LZ_TRY(cpu_alloc(be, sizeof(float) * (size_t)src->numel, &out->data));
    lz_convert_to_f32(out->data, src->data, src->dtype, (size_t)src->numel);
    out->owned = true;
    return LZ_OK;
}

// splitmix64 of (seed, index): any element's value is independent of the others'
static float random_value(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * 0x1.0p-53 * 2.0 - 1.0); // uniform in [-1, 1)
}

static lz_status cpu_random_weight(lz_backend *be, int64_t rows, int64_t cols, float mean, float std, uint64_t seed,
                                   lz_weight *out) {
    const size_t n = (size_t)(rows * cols);
    *out = (lz_weight){NULL, LZ_DTYPE_F32, rows, cols, true, 0};
    LZ_TRY(cpu_alloc(be, sizeof(float) * n, &out->data));
    float *w = out->data;
    const float a = std * 1.7320508f; // uniform [-a, a] has std a / sqrt(3)
    for (size_t i = 0; i < n; i++)
        w[i] = mean + a * random_value(seed, i);
    return LZ_OK;
}

static void cpu_free_weight(lz_backend *be, lz_weight *w) {
    if (w->owned)
        free(w->data);
    *w = (lz_weight){0};
}

static lz_status cpu_copy_f32(lz_backend *be, float *dst, const void *src, size_t n) {
    memcpy(dst, src, sizeof(float) * n);
    return LZ_OK;
}
static lz_status cpu_act_from_host(lz_backend *be, void *dst, const float *src, size_t n) {
    memcpy(dst, src, sizeof(float) * n);
    return LZ_OK;
}
static lz_status cpu_upload_f32(lz_backend *be, float *dst, const float *src, size_t n) {
    return cpu_act_from_host(be, dst, src, n);
}
static lz_status cpu_copy_bytes(lz_backend *be, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return LZ_OK;
}
static lz_status cpu_sync(lz_backend *be) { return LZ_OK; }
static void cpu_destroy(lz_backend *be) { free(be); }
static lz_status cpu_begin_step(lz_backend *be, const int32_t *ids, const lz_batch *b, const int32_t *rows, int n) {
    return LZ_OK; // the kernels read the host arrays directly
}

/* Adapters from the op table's untyped signatures to the fp32 kernels. */
static lz_status op_embedding(lz_backend *be, void *out, const lz_weight *t, const int32_t *ids, int T) {
    embedding_forward(out, t->data, ids, T, (int)t->cols);
    return LZ_OK;
}
static lz_status op_rmsnorm(lz_backend *be, void *out, const void *x, const lz_weight *w, int T, float eps) {
    rmsnorm_forward(out, x, w->data, T, (int)w->cols, eps);
    return LZ_OK;
}
static lz_status op_linear(lz_backend *be, void *out, const void *x, const lz_weight *w, const lz_weight *b, int T) {
    linear_forward(out, x, w->data, b && b->data ? b->data : NULL, T, (int)w->cols, (int)w->rows);
    return LZ_OK;
}

static lz_status op_linear_many(lz_backend *be, int count, void *const *outs, const void *x, const lz_weight *const *ws,
                                const lz_weight *const *biases, int T) {
    for (int i = 0; i < count; i++)
        LZ_TRY(op_linear(be, outs[i], x, ws[i], biases ? biases[i] : NULL, T));
    return LZ_OK;
}
static lz_status op_add(lz_backend *be, void *y, const void *x, size_t n) {
    add_forward(y, x, n);
    return LZ_OK;
}
static lz_status op_swiglu(lz_backend *be, void *out, const void *g, const void *u, size_t n) {
    swiglu_forward(out, g, u, n);
    return LZ_OK;
}
static lz_status op_gather(lz_backend *be, void *out, const void *x, const int32_t *rows, int n, int C) {
    gather_rows_forward(out, x, rows, n, C);
    return LZ_OK;
}
static lz_status op_argmax(lz_backend *be, int32_t *ids, const void *x, int n, int C) {
    argmax_rows_forward(ids, x, n, C);
    return LZ_OK;
}
static lz_status op_sample(lz_backend *be, int32_t *ids, const void *x, int n, int C, const lz_sample_row *params) {
    if (C < 1 || C > LZ_SAMPLE_MAX_VOCAB)
        return lz_fail(LZ_ERR_INPUT, "sample_rows: a vocabulary of %d tokens (1 to %d)", C, LZ_SAMPLE_MAX_VOCAB);
    sample_rows_forward(ids, x, n, C, params);
    return LZ_OK;
}
static lz_status op_rope(lz_backend *be, void *q, void *k, const float *inv_freq, const lz_batch *b, const lz_attn_dims *d) {
    rope_forward(q, k, inv_freq, b, d);
    return LZ_OK;
}
static lz_status op_softmax_attention(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                                 lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
    softmax_attention_forward(out, q, k, v, st, b, d);
    return LZ_OK;
}
static lz_status op_feature_map(lz_backend *be, void *out, const void *x, const lz_weight *w, int T, int Hx, int Hout,
                           int d, int f, bool exp_map) {
    feature_map_forward(out, x, w->data, (int)w->rows, T, Hx, Hout, d, f, exp_map);
    return LZ_OK;
}
static lz_status op_log_sigmoid(lz_backend *be, void *out, const void *x, int T) {
    log_sigmoid_forward(out, x, T);
    return LZ_OK;
}
static lz_status op_gla_chunked(lz_backend *be, void *out, const void *pq, const void *pk, const void *v, const void *lg,
                           lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
    gla_chunked_forward(out, pq, pk, v, lg, st, b, d);
    return LZ_OK;
}
static lz_status op_gla_recurrent(lz_backend *be, void *out, const void *pq, const void *pk, const void *v, const void *lg,
                             lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
    gla_recurrent_forward(out, pq, pk, v, lg, st, b, d);
    return LZ_OK;
}
static lz_status op_window(lz_backend *be, void *out, const void *q, const void *k, const void *v, const lz_weight *meta,
                      float alpha, lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
    window_attention_forward(out, q, k, v, meta->data, alpha, st, b, d);
    return LZ_OK;
}

/* The fused ops as the compositions they stand for (the reference the GPU's fused kernels are checked against). */
static lz_status op_norm_swiglu(lz_backend *be, void *out, void *xn, void *up, const void *x, const lz_weight *norm,
                                float eps, const lz_weight *w_gate, const lz_weight *b_gate, const lz_weight *w_up,
                                const lz_weight *b_up, int T) {
    void *outs[2] = {out, up};
    const lz_weight *w[2] = {w_gate, w_up}, *b[2] = {b_gate, b_up};
    LZ_TRY(op_rmsnorm(be, xn, x, norm, T, eps));
    LZ_TRY(op_linear_many(be, 2, outs, xn, w, b, T));
    return op_swiglu(be, out, out, up, (size_t)T * (size_t)w_gate->rows);
}
static lz_status op_linear_residual(lz_backend *be, void *y, void *tmp, const void *x, const lz_weight *w,
                                    const lz_weight *bias, int T) {
    LZ_TRY(op_linear(be, tmp, x, w, bias, T));
    return op_add(be, y, tmp, (size_t)T * (size_t)w->rows);
}
/* log_sigmoid, the two feature maps, gla_recurrent; the intermediates in host memory of their own. */
static lz_status op_gla_decode(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                               const void *gate_logit, const lz_weight *fmap_q, const lz_weight *fmap_k, bool exp_map,
                               lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
    const int T = b->n_tokens, F = 2 * d->feature_dim;
    float *phi_q = malloc(sizeof(float) * (size_t)T * d->n_heads * F);
    float *phi_k = malloc(sizeof(float) * (size_t)T * d->n_state_heads * F), *lg = malloc(sizeof(float) * (size_t)T);
    lz_status s = LZ_OK;
    if (!phi_q || !phi_k || !lg) {
        s = lz_fail(LZ_ERR_NOMEM, "cpu backend: out of memory in gla_decode");
    } else {
        log_sigmoid_forward(lg, gate_logit, T);
        feature_map_forward(phi_q, q, fmap_q->data, (int)fmap_q->rows, T, d->n_heads, d->n_heads, d->head_dim,
                            d->feature_dim, exp_map);
        feature_map_forward(phi_k, k, fmap_k->data, (int)fmap_k->rows, T, d->n_kv_heads, d->n_state_heads,
                            d->head_dim, d->feature_dim, exp_map);
        gla_recurrent_forward(out, phi_q, phi_k, v, lg, st, b, d);
    }
    free(phi_q);
    free(phi_k);
    free(lg);
    return s;
}

static const lz_ops cpu_ops = {
    .name = "cpu",
    .act_size = sizeof(float),
    .backward = &lz_cpu_backward_table,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .upload_weight = cpu_upload_weight,
    .free_weight = cpu_free_weight,
    .random_weight = cpu_random_weight,
    .measure_ceilings = NULL,
    .memory_info = NULL,
    .act_to_host = cpu_copy_f32,
    .act_from_host = cpu_act_from_host,
    .upload_f32 = cpu_upload_f32,
    .copy_to_host = cpu_copy_bytes,
    .copy_from_host = cpu_copy_bytes,
    .copy_to_host_async = cpu_copy_bytes,
    .copy_from_host_async = cpu_copy_bytes,
    .host_alloc = cpu_alloc, // host memory is what the CPU backend uses anyway
    .host_free = cpu_free,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .begin_step = cpu_begin_step,
    .graph_begin = NULL,
    .graph_end = NULL,
    .graph_reset = NULL,
    .p2p_id = NULL,
    .p2p_init = NULL,
    .p2p_send = NULL,
    .p2p_recv = NULL,
    .embedding = op_embedding,
    .rmsnorm = op_rmsnorm,
    .linear = op_linear,
    .linear_many = op_linear_many,
    .norm_swiglu = op_norm_swiglu,
    .linear_residual = op_linear_residual,
    .add = op_add,
    .swiglu = op_swiglu,
    .gather_rows = op_gather,
    .argmax_rows = op_argmax,
    .sample_rows = op_sample,
    .rope = op_rope,
    .softmax_attention = op_softmax_attention,
    .feature_map = op_feature_map,
    .log_sigmoid = op_log_sigmoid,
    .gla_chunked = op_gla_chunked,
    .gla_recurrent = op_gla_recurrent,
    .gla_decode = op_gla_decode,
    .window_attention = op_window,
};

lz_status lz_cpu_backend_create(lz_backend **be, const lz_ops **ops) {
    *be = calloc(1, sizeof(lz_backend));
    if (!*be)
        return lz_fail(LZ_ERR_NOMEM, "cpu backend: out of memory");
    *ops = &cpu_ops;
    return LZ_OK;
}
