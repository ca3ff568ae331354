/* backward_ops_cpu.c - the backward op table of the CPU reference backend
 * (backward_ops.h): fp32 activations and gradients in host memory, the f32
 * build of the training kernels (train_kernels.h) run one sequence of the
 * batch at a time, each from position 0. */
#include <math.h>   // sqrt, sqrtf, cosf, sinf
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy, memset

#include "backward_ops.h"
#include "cpu_kernels.h"
#include "dropout_rule.h"  // lz_dropout_drops
#include "train_kernels.h" // the f32 reference kernels

/* ---- the sequences of a batch -------------------------------------------------------------- */

/* Every sequence of b lies inside its n_tokens rows and starts at position 0 (training
 * sequences are whole); *longest = the most tokens of one. */
static lz_status check_training_batch(const lz_batch *b, const char *op, int *longest) {
    int most = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->pos[s] != 0)
            return lz_fail(LZ_ERR_INTERNAL,
                           "%s backward: sequence %d starts at position %d; training sequences start at 0", op, s,
                           (int)b->pos[s]);
        if (b->start[s] < 0 || b->len[s] < 0 || b->start[s] + b->len[s] > b->n_tokens)
            return lz_fail(LZ_ERR_INTERNAL, "%s backward: sequence %d (rows %d + %d) outside the batch's %d rows", op,
                           s, (int)b->start[s], (int)b->len[s], b->n_tokens);
        most = b->len[s] > most ? b->len[s] : most;
    }
    *longest = most;
    return LZ_OK;
}

static lz_status host_buffer(float **out, size_t n, const char *what) {
    if (!(*out = malloc(sizeof(float) * (n ? n : 1))))
        return lz_fail(LZ_ERR_NOMEM, "cpu backward: out of memory for %s (%zu floats)", what, n);
    return LZ_OK;
}

static lz_status check_f32_weight(const lz_weight *w, const char *op) {
    if (w->dtype != LZ_DTYPE_F32)
        return lz_fail(LZ_ERR_INTERNAL, "%s backward: a %s weight on the CPU backend (its weights are F32)", op,
                       lz_dtype_name(w->dtype));
    return LZ_OK;
}

/* ---- RMSNorm, SwiGLU, linear, RoPE --------------------------------------------------------- */

/* rinv of each row recomputed from x with the inference op's arithmetic (basic.c: the sum of
 * squares in fp32, 1 / sqrt(ss / C + eps)), then the reference backward one row at a time. */
static lz_status bw_rmsnorm(lz_backend *be, float *dx, const float *dy, const void *x, const lz_weight *w, int N,
                            float eps) {
    LZ_TRY(check_f32_weight(w, "rmsnorm"));
    const int C = (int)w->cols;
    const float *xs = x;
    for (int t = 0; t < N; t++) {
        const float *xt = xs + (size_t)t * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++)
            ss += xt[c] * xt[c];
        const float rinv = 1.0f / sqrtf(ss / (float)C + eps);
        rmsnorm_backward_f32(dx + (size_t)t * C, dy + (size_t)t * C, xt, w->data, &rinv, 1, C);
    }
    return LZ_OK;
}

static lz_status bw_swiglu(lz_backend *be, float *dg, float *du, const float *dh, const void *g, const void *u,
                           size_t n) {
    swiglu_backward_f32(dg, du, dh, g, u, n);
    return LZ_OK;
}

static lz_status bw_linear(lz_backend *be, float *dx, const float *dy, const lz_weight *w, int N, bool accumulate) {
    LZ_TRY(check_f32_weight(w, "linear"));
    if (!accumulate)
        memset(dx, 0, sizeof(float) * (size_t)N * (size_t)w->cols);
    linear_backward_input_f32(dx, dy, w->data, N, (int)w->cols, (int)w->rows);
    return LZ_OK;
}

// rope_train's rotation with sign -1 (angle in fp32 as the inference kernel) of every head of one row
static void rotate_back(float *x, int H, int d, const float *cs, const float *sn) {
    const int half = d / 2;
    for (int h = 0; h < H; h++) {
        float *xh = x + (size_t)h * d;
        for (int j = 0; j < half; j++) {
            const float a = xh[j], b = xh[j + half];
            xh[j] = a * cs[j] - b * sn[j];
            xh[j + half] = b * cs[j] + a * sn[j];
        }
    }
}

static lz_status bw_rope(lz_backend *be, float *dq, float *dk, const float *inv_freq, const lz_batch *b,
                         const lz_attn_dims *dims) {
    const int d = dims->head_dim, half = d / 2;
    if (d > LZ_TRAIN_MAX_D)
        return lz_fail(LZ_ERR_INTERNAL, "rope backward: head_dim %d past %d", d, LZ_TRAIN_MAX_D);
    float cs[LZ_TRAIN_MAX_D / 2], sn[LZ_TRAIN_MAX_D / 2];
    for (int t = 0; t < b->n_tokens; t++) {
        const float p = (float)b->token_pos[t];
        for (int j = 0; j < half; j++) {
            const float angle = p * inv_freq[j];
            cs[j] = cosf(angle);
            sn[j] = -sinf(angle);
        }
        rotate_back(dq + (size_t)t * dims->n_heads * d, dims->n_heads, d, cs, sn);
        if (dk)
            rotate_back(dk + (size_t)t * dims->n_kv_heads * d, dims->n_kv_heads, d, cs, sn);
    }
    return LZ_OK;
}

/* ---- softmax attention --------------------------------------------------------------------- */

/* Per sequence: the forward again for out and the log-sum-exp of every row, then the backward
 * (which overwrites its rows of dq, dk, dv). Rows of no sequence get zero gradients. */
static lz_status bw_attention(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const void *q,
                              const void *k, const void *v, const lz_batch *b, const lz_attn_dims *dims) {
    const int Hq = dims->n_heads, Hkv = dims->n_kv_heads, d = dims->head_dim;
    int longest;
    LZ_TRY(check_training_batch(b, "attention", &longest));
    if (Hkv <= 0 || Hq % Hkv != 0)
        return lz_fail(LZ_ERR_INTERNAL, "attention backward: %d query heads over %d kv heads", Hq, Hkv);
    if (dims->sliding_window > 0 && longest > dims->sliding_window)
        return lz_fail(LZ_ERR_INTERNAL,
                       "attention backward: a sequence of %d tokens past the sliding window of %d (the backward is "
                       "full causal)",
                       longest, dims->sliding_window);
    const size_t qrow = (size_t)Hq * d, krow = (size_t)Hkv * d;
    memset(dq, 0, sizeof(float) * (size_t)b->n_tokens * qrow);
    memset(dk, 0, sizeof(float) * (size_t)b->n_tokens * krow);
    memset(dv, 0, sizeof(float) * (size_t)b->n_tokens * krow);
    float *out = NULL, *lse = NULL;
    lz_status st = host_buffer(&out, (size_t)longest * qrow, "attention outputs");
    if (st == LZ_OK)
        st = host_buffer(&lse, (size_t)longest * Hq, "attention log-sum-exps");
    const float *qs = q, *ks = k, *vs = v;
    for (int s = 0; st == LZ_OK && s < b->n_seqs; s++) {
        const size_t r0 = (size_t)b->start[s];
        const int T = b->len[s];
        attention_train_forward_f32(out, lse, qs + r0 * qrow, ks + r0 * krow, vs + r0 * krow, T, Hq, Hkv, d);
        attention_backward_f32(dq + r0 * qrow, dk + r0 * krow, dv + r0 * krow, dout + r0 * qrow, out, lse,
                               qs + r0 * qrow, ks + r0 * krow, vs + r0 * krow, T, Hq, Hkv, d);
    }
    free(out);
    free(lse);
    return st;
}

/* ---- the Lizard layer's attention ---------------------------------------------------------- */

typedef struct {
    lz_lizard_geom g; /* the shape its buffers were sized for */
    lz_lizard_scratch_f32 s;
} cpu_lizard_scratch;

// the shapes the reference kernels' stack buffers and head mappings hold
static lz_status check_lizard_geom(const lz_lizard_geom *g) {
    if (g->f < 1 || g->f > LZ_TRAIN_MAX_F || g->d < 1 || g->d > LZ_TRAIN_MAX_D || g->w < 1 || g->w > LZ_TRAIN_MAX_W)
        return lz_fail(LZ_ERR_INTERNAL, "lizard backward: feature_dim %d, head_dim %d, window %d (limits %d, %d, %d)",
                       g->f, g->d, g->w, LZ_TRAIN_MAX_F, LZ_TRAIN_MAX_D, LZ_TRAIN_MAX_W);
    if (g->Hkv < 1 || g->Hq % g->Hkv != 0 || (g->Hs != g->Hkv && g->Hs != g->Hq) ||
        (g->n_wq != 1 && g->n_wq != g->Hq) || (g->n_wk != 1 && g->n_wk != g->Hs))
        return lz_fail(LZ_ERR_INTERNAL, "lizard backward: heads Hq %d, Hkv %d, state %d, phi_q %d, phi_k %d", g->Hq,
                       g->Hkv, g->Hs, g->n_wq, g->n_wk);
    return LZ_OK;
}

static lz_status bw_lizard_scratch_create(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens,
                                          int C) {
    *out = NULL;
    LZ_TRY(check_lizard_geom(g));
    cpu_lizard_scratch *s = calloc(1, sizeof *s);
    if (!s || lz_lizard_scratch_create_f32(&s->s, g, max_tokens > 0 ? max_tokens : 1, C)) {
        free(s);
        return lz_fail(LZ_ERR_NOMEM, "lizard backward: out of memory for the scratch of %d tokens", max_tokens);
    }
    s->g = *g;
    *out = s;
    return LZ_OK;
}

static void bw_lizard_scratch_free(lz_backend *be, void *scratch) {
    cpu_lizard_scratch *s = scratch;
    if (!s)
        return;
    lz_lizard_scratch_free_f32(&s->s);
    free(s);
}

static lz_status bw_lizard(lz_backend *be, void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq,
                           float *dk, float *dv, const float *dout, const lz_lizard_params_f32 *p, const void *x,
                           const void *q, const void *k, const void *v, const lz_batch *b, const lz_lizard_geom *g,
                           int C) {
    cpu_lizard_scratch *s = scratch;
    int longest;
    LZ_TRY(check_training_batch(b, "lizard", &longest));
    LZ_TRY(check_lizard_geom(g));
    if (!s)
        return lz_fail(LZ_ERR_INTERNAL, "lizard backward: no scratch");
    if (g->Hq != s->g.Hq || g->Hs != s->g.Hs || g->d != s->g.d || g->f != s->g.f || C != s->s.C)
        return lz_fail(LZ_ERR_INTERNAL,
                       "lizard backward: a layer of Hq %d, state heads %d, head_dim %d, f %d, C %d on a scratch made "
                       "for %d, %d, %d, %d, %d",
                       g->Hq, g->Hs, g->d, g->f, C, s->g.Hq, s->g.Hs, s->g.d, s->g.f, s->s.C);
    if (longest > s->s.max_T)
        return lz_fail(LZ_ERR_INTERNAL, "lizard backward: a sequence of %d tokens past its scratch's %d", longest,
                       s->s.max_T);
    if (!dx || !dq || !dk || !dv)
        return lz_fail(LZ_ERR_INTERNAL, "lizard backward: dx, dq, dk and dv are all required");
    const size_t qrow = (size_t)g->Hq * g->d, krow = (size_t)g->Hkv * g->d;
    const float *xs = x, *qs = q, *ks = k, *vs = v;
    for (int i = 0; i < b->n_seqs; i++) {
        const size_t r0 = (size_t)b->start[i];
        const int T = b->len[i];
        if (T == 0)
            continue;
        lz_lizard_layer_forward_f32(NULL, p, xs + r0 * C, qs + r0 * qrow, ks + r0 * krow, vs + r0 * krow, T, g, &s->s);
        lz_lizard_layer_backward_f32(grad, dx + r0 * C, dq + r0 * qrow, dk + r0 * krow, dv + r0 * krow,
                                     dout + r0 * qrow, p, xs + r0 * C, qs + r0 * qrow, ks + r0 * krow, vs + r0 * krow,
                                     T, g, &s->s);
    }
    return LZ_OK;
}

/* ---- LoRA ------------------------------------------------------------------------------------ */

/* The CPU computes with A and B themselves: no copies to keep. */
static lz_status bw_lora_sync(lz_backend *be, lz_lora *l) { return LZ_OK; }
static void bw_lora_release(lz_backend *be, lz_lora *l) {}

static lz_status check_lora(const lz_lora *l, const lz_dropout *drop, const lz_batch *b, const char *op,
                            int *longest) {
    int most = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->start[s] < 0 || b->len[s] < 0 || b->start[s] + b->len[s] > b->n_tokens)
            return lz_fail(LZ_ERR_INTERNAL, "%s: sequence %d (rows %d + %d) outside the batch's %d rows", op, s,
                           (int)b->start[s], (int)b->len[s], b->n_tokens);
        most = b->len[s] > most ? b->len[s] : most;
    }
    *longest = most;
    if (l->r < 1 || l->r > LZ_TRAIN_MAX_RANK)
        return lz_fail(LZ_ERR_INTERNAL, "%s: rank %d (1 to %d)", op, l->r, LZ_TRAIN_MAX_RANK);
    if (drop && !(drop->p >= 0 && drop->p < 1))
        return lz_fail(LZ_ERR_INTERNAL, "%s: dropout %g (0 to below 1)", op, drop->p);
    if (drop && drop->p > 0 && !drop->streams)
        return lz_fail(LZ_ERR_INTERNAL, "%s: dropout %g without the sequences' streams", op, drop->p);
    return LZ_OK;
}

static bool dropping(const lz_dropout *drop) { return drop && drop->p > 0; }

/* mask [T, in] of one sequence: 0 where the rule drops, 1 / (1 - p) where it keeps. */
static void dropout_mask(float *mask, uint64_t stream, double p, int T, int in) {
    const float keep = (float)(1.0 / (1.0 - p));
    const uint64_t n = (uint64_t)T * (uint64_t)in;
    for (uint64_t e = 0; e < n; e++)
        mask[e] = lz_dropout_drops(stream, e, p) ? 0.0f : keep;
}

static lz_status bw_lora_forward(lz_backend *be, void *y, float *u, const void *x, const lz_lora *l,
                                 const lz_dropout *drop, const lz_batch *b) {
    int longest;
    LZ_TRY(check_lora(l, drop, b, "lora forward", &longest));
    float *mask = NULL;
    if (dropping(drop))
        LZ_TRY(host_buffer(&mask, (size_t)longest * l->in, "the LoRA dropout mask"));
    float *ys = y;
    const float *xs = x;
    for (int s = 0; s < b->n_seqs; s++) {
        const size_t r0 = (size_t)b->start[s];
        if (mask)
            dropout_mask(mask, drop->streams[s], drop->p, b->len[s], l->in);
        lora_train_forward_f32(ys + r0 * l->out, u + r0 * l->r, xs + r0 * l->in, l->A, l->B, mask, l->scale, b->len[s],
                               l->in, l->out, l->r);
    }
    free(mask);
    return LZ_OK;
}

static lz_status bw_lora_backward(lz_backend *be, lz_lora *l, float *dx, const float *dy, const void *x,
                                  const float *u, const lz_dropout *drop, const lz_batch *b) {
    int longest;
    LZ_TRY(check_lora(l, drop, b, "lora backward", &longest));
    float *mask = NULL;
    if (dropping(drop))
        LZ_TRY(host_buffer(&mask, (size_t)longest * l->in, "the LoRA dropout mask"));
    const float *xs = x;
    for (int s = 0; s < b->n_seqs; s++) {
        const size_t r0 = (size_t)b->start[s];
        if (mask)
            dropout_mask(mask, drop->streams[s], drop->p, b->len[s], l->in);
        lora_backward_f32(l->dA, l->dB, dx ? dx + r0 * l->in : NULL, dy + r0 * l->out, xs + r0 * l->in, u + r0 * l->r,
                          l->A, l->B, mask, l->scale, b->len[s], l->in, l->out, l->r);
    }
    free(mask);
    return LZ_OK;
}

/* ---- the head's loss ------------------------------------------------------------------------- */

static lz_status bw_cross_entropy(lz_backend *be, double *loss, float *dh, const void *h, const lz_weight *w,
                                  const int32_t *targets, int N, float grad_scale) {
    LZ_TRY(check_f32_weight(w, "cross_entropy"));
    const int V = (int)w->rows;
    for (int t = 0; t < N; t++)
        if (targets[t] >= V)
            return lz_fail(LZ_ERR_INPUT, "cross_entropy: row %d's target %d past the vocabulary of %d", t,
                           (int)targets[t], V);
    *loss = lm_head_cross_entropy_f32(dh, h, w->data, targets, N, (int)w->cols, V, grad_scale);
    return LZ_OK;
}

/* ---- tensors --------------------------------------------------------------------------------- */

static lz_status bw_copy(lz_backend *be, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return LZ_OK;
}

static lz_status bw_to_f32(lz_backend *be, float *dst, const void *src, size_t n) {
    memcpy(dst, src, sizeof(float) * n);
    return LZ_OK;
}

static lz_status bw_add(lz_backend *be, float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
    return LZ_OK;
}

static lz_status bw_sum_squares(lz_backend *be, double *out, const float *x, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * x[i];
    *out = acc;
    return LZ_OK;
}

/* The moments stored in fp32, the rest in double, as runtime/train's lz_adamw_tensor. */
static lz_status bw_adamw(lz_backend *be, float *p, float *m, float *v, const float *g, size_t n,
                          const lz_adamw_update *u) {
    for (size_t e = 0; e < n; e++) {
        const float gs = g[e] * u->grad_scale;
        m[e] = (float)(u->beta1 * m[e] + (1 - u->beta1) * gs);
        v[e] = (float)(u->beta2 * v[e] + (1 - u->beta2) * (double)gs * gs);
        const double update = (m[e] / u->bias1) / (sqrt(v[e] / u->bias2) + u->eps);
        p[e] = (float)(p[e] - u->lr * (update + u->weight_decay * p[e]));
    }
    return LZ_OK;
}

/* A weight that points into a checkpoint's (read-only) mapping is given memory of its own first;
 * cpu_backend's free_weight frees it once owned. */
static lz_status bw_weight_set(lz_backend *be, lz_weight *w, const float *src) {
    LZ_TRY(check_f32_weight(w, "weight_set"));
    const size_t n = (size_t)w->rows * (size_t)w->cols;
    if (!w->owned) {
        float *own;
        LZ_TRY(host_buffer(&own, n, "a trained weight's own copy"));
        w->data = own;
        w->owned = true;
    }
    memcpy(w->data, src, sizeof(float) * n);
    return LZ_OK;
}

const lz_backward_ops lz_cpu_backward_table = {
    .rmsnorm = bw_rmsnorm,
    .swiglu = bw_swiglu,
    .linear = bw_linear,
    .rope = bw_rope,
    .attention = bw_attention,
    .lizard_scratch_create = bw_lizard_scratch_create,
    .lizard_scratch_free = bw_lizard_scratch_free,
    .lizard = bw_lizard,
    .lora_sync = bw_lora_sync,
    .lora_release = bw_lora_release,
    .lora_forward = bw_lora_forward,
    .lora_backward = bw_lora_backward,
    .cross_entropy = bw_cross_entropy,
    .copy = bw_copy,
    .to_f32 = bw_to_f32,
    .add = bw_add,
    .sum_squares = bw_sum_squares,
    .adamw = bw_adamw,
    .weight_set = bw_weight_set,
};
