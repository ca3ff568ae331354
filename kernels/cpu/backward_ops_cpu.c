/* backward_ops_cpu.c - the backward op table of the CPU backend
 * (backward_ops.h): fp32 activations and gradients in host memory. The
 * products go through cpu_gemm.h, softmax attention's too (attention_grad.c);
 * the Lizard layers run the f32 build of the training kernels
 * (train_kernels.h), one sequence from position 0 per call, the sequences of a
 * batch on the threads at once. Gradients that
 * sum over sequences are summed per sequence, then added in the sequences'
 * order: the same bits whatever the threads and however a batch is cut into
 * micro-batches. */
#include <math.h>   // sqrt, sqrtf, cosf, sinf
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy, memset

#include "backward_ops.h"
#include "cpu_gemm.h"    // lz_gemm
#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads
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

typedef struct {
    float *dx;
    const float *dy, *x, *w;
    int C;
    float eps;
} rmsnorm_job;

static void rmsnorm_rows(void *ctx, size_t begin, size_t end, int worker) {
    const rmsnorm_job *j = ctx;
    const int C = j->C;
    for (size_t t = begin; t < end; t++) {
        const float *xt = j->x + t * C;
        const float rinv = rmsnorm_inv_rms(xt, C, j->eps);
        rmsnorm_backward_f32(j->dx + t * C, j->dy + t * C, xt, j->w, &rinv, 1, C);
    }
}

/* rinv of each row recomputed from x with the inference op's arithmetic (basic.c: the sum of
 * squares in fp32, 1 / sqrt(ss / C + eps)), then the reference backward one row at a time. */
static lz_status bw_rmsnorm(lz_backend *be, float *dx, const float *dy, const void *x, const lz_weight *w, int N,
                            float eps) {
    LZ_TRY(check_f32_weight(w, "rmsnorm"));
    const int C = (int)w->cols;
    rmsnorm_job j = {dx, dy, x, w->data, C, eps};
    lz_cpu_parallel((size_t)N, lz_cpu_threads_for((size_t)N, (size_t)N * C, LZ_GRAIN_LIGHT), rmsnorm_rows, &j);
    return LZ_OK;
}

typedef struct {
    float *dg, *du;
    const float *dh, *g, *u;
} swiglu_job;

static void swiglu_elements(void *ctx, size_t begin, size_t end, int worker) {
    const swiglu_job *j = ctx;
    swiglu_backward_f32(j->dg + begin, j->du + begin, j->dh + begin, j->g + begin, j->u + begin, end - begin);
}

static lz_status bw_swiglu(lz_backend *be, float *dg, float *du, const float *dh, const void *g, const void *u,
                           size_t n) {
    swiglu_job j = {dg, du, dh, g, u};
    lz_cpu_parallel(n, lz_cpu_threads_for(n, n, LZ_GRAIN_EXP), swiglu_elements, &j);
    return LZ_OK;
}

static lz_status bw_linear(lz_backend *be, float *dx, const float *dy, const lz_weight *w, int N, bool accumulate) {
    LZ_TRY(check_f32_weight(w, "linear"));
    const int in = (int)w->cols, out = (int)w->rows;
    lz_gemm(false, false, N, in, out, 1.0f, dy, out, w->data, in, accumulate ? 1.0f : 0.0f, dx, in);
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

typedef struct {
    float *dq, *dk;
    const float *inv_freq;
    const lz_batch *b;
    const lz_attn_dims *dims;
} rope_job;

static void rope_rows(void *ctx, size_t begin, size_t end, int worker) {
    const rope_job *j = ctx;
    const int d = j->dims->head_dim, half = d / 2;
    float cs[LZ_TRAIN_MAX_D / 2], sn[LZ_TRAIN_MAX_D / 2];
    for (size_t t = begin; t < end; t++) {
        const float p = (float)j->b->token_pos[t];
        for (int i = 0; i < half; i++) {
            const float angle = p * j->inv_freq[i];
            cs[i] = cosf(angle);
            sn[i] = -sinf(angle);
        }
        rotate_back(j->dq + t * j->dims->n_heads * d, j->dims->n_heads, d, cs, sn);
        if (j->dk)
            rotate_back(j->dk + t * j->dims->n_kv_heads * d, j->dims->n_kv_heads, d, cs, sn);
    }
}

static lz_status bw_rope(lz_backend *be, float *dq, float *dk, const float *inv_freq, const lz_batch *b,
                         const lz_attn_dims *dims) {
    const int d = dims->head_dim;
    if (d > LZ_TRAIN_MAX_D)
        return lz_fail(LZ_ERR_INTERNAL, "rope backward: head_dim %d past %d", d, LZ_TRAIN_MAX_D);
    rope_job j = {dq, dk, inv_freq, b, dims};
    const size_t T = (size_t)b->n_tokens;
    lz_cpu_parallel(T, lz_cpu_threads_for(T, T * (dims->n_heads + dims->n_kv_heads) * d, LZ_GRAIN_LIGHT), rope_rows,
                    &j);
    return LZ_OK;
}

/* ---- softmax attention --------------------------------------------------------------------- */

typedef struct {
    float *dq, *dk, *dv;
    const float *dout, *q, *k, *v;
    float *scratch; /* LZ_ATTN_GRAD_SCRATCH(longest, d) floats per worker */
    const lz_batch *b;
    int Hq, Hkv, d, longest;
} attention_job;

// items: (sequence, kv head) pairs, sequence-major; each writes rows and heads of its own only
static void attention_groups(void *ctx, size_t begin, size_t end, int worker) {
    const attention_job *j = ctx;
    const size_t qrow = (size_t)j->Hq * j->d, krow = (size_t)j->Hkv * j->d;
    float *scratch = j->scratch + (size_t)worker * LZ_ATTN_GRAD_SCRATCH(j->longest, j->d);
    for (size_t i = begin; i < end; i++) {
        const size_t s = i / (size_t)j->Hkv, r0 = (size_t)j->b->start[s];
        attention_grad_group(j->dq + r0 * qrow, j->dk + r0 * krow, j->dv + r0 * krow, j->dout + r0 * qrow,
                             j->q + r0 * qrow, j->k + r0 * krow, j->v + r0 * krow, j->b->len[s], j->Hq, j->Hkv, j->d,
                             (int)(i % (size_t)j->Hkv), scratch);
    }
}

/* Per sequence and kv head, the probabilities again from q and k, then the gradients (attention_grad.c).
 * Rows of no sequence get zero gradients. */
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
    // (multiply-adds: six products of about T^2 d / 2 per query head)
    const size_t groups = (size_t)b->n_seqs * Hkv;
    const int threads = lz_cpu_threads_for(groups, (size_t)3 * b->n_seqs * longest * longest * qrow, LZ_GRAIN_GEMM);
    float *scratch = NULL;
    LZ_TRY(host_buffer(&scratch, (size_t)threads * LZ_ATTN_GRAD_SCRATCH(longest, d), "attention gradients"));
    attention_job j = {dq, dk, dv, dout, q, k, v, scratch, b, Hq, Hkv, d, longest};
    lz_cpu_parallel(groups, threads, attention_groups, &j);
    free(scratch);
    return LZ_OK;
}

/* ---- the Lizard layer's attention ---------------------------------------------------------- */

static void add_into(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

typedef struct {
    lz_lizard_geom g; /* the shape its buffers were sized for */
    int n;            /* threads: a scratch each */
    lz_lizard_scratch_f32 s[];
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

static void bw_lizard_scratch_free(lz_backend *be, void *scratch);

static lz_status bw_lizard_scratch_create(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens,
                                          int C) {
    *out = NULL;
    LZ_TRY(check_lizard_geom(g));
    const int n = lz_cpu_threads();
    cpu_lizard_scratch *s = calloc(1, sizeof *s + sizeof(s->s[0]) * (size_t)n);
    if (!s)
        return lz_fail(LZ_ERR_NOMEM, "lizard backward: out of memory for the scratch of %d tokens", max_tokens);
    s->g = *g;
    for (; s->n < n; s->n++)
        if (lz_lizard_scratch_create_f32(&s->s[s->n], g, max_tokens > 0 ? max_tokens : 1, C)) {
            bw_lizard_scratch_free(be, s);
            return lz_fail(LZ_ERR_NOMEM, "lizard backward: out of memory for the scratch of %d tokens", max_tokens);
        }
    *out = s;
    return LZ_OK;
}

static void bw_lizard_scratch_free(lz_backend *be, void *scratch) {
    cpu_lizard_scratch *s = scratch;
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        lz_lizard_scratch_free_f32(&s->s[i]);
    free(s);
}

typedef struct {
    cpu_lizard_scratch *s;
    float *seq_grads; /* [n_seqs, per_seq] or NULL: frozen */
    size_t per_seq;
    float *dx, *dq, *dk, *dv;
    const float *dout;
    const lz_lizard_params_f32 *p;
    const float *x, *q, *k, *v;
    const lz_batch *b;
    const lz_lizard_geom *g;
    int C;
} lizard_job;

static void lizard_sequences(void *ctx, size_t begin, size_t end, int worker) {
    const lizard_job *j = ctx;
    const lz_lizard_geom *g = j->g;
    const size_t qrow = (size_t)g->Hq * g->d, krow = (size_t)g->Hkv * g->d, C = (size_t)j->C;
    const size_t nq = lz_lizard_wq_numel(g), nk = lz_lizard_wk_numel(g);
    lz_lizard_scratch_f32 *sc = &j->s->s[worker];
    for (size_t i = begin; i < end; i++) {
        const size_t r0 = (size_t)j->b->start[i];
        const int T = j->b->len[i];
        if (T == 0)
            continue;
        float *gi = j->seq_grads ? j->seq_grads + i * j->per_seq : NULL;
        lz_lizard_params_f32 mine = {gi, gi ? gi + nq : NULL, gi ? gi + nq + nk : NULL, gi ? gi + nq + nk + C : NULL,
                                     gi ? gi + nq + nk + C + g->m : NULL};
        lz_lizard_layer_forward_f32(NULL, j->p, j->x + r0 * C, j->q + r0 * qrow, j->k + r0 * krow, j->v + r0 * krow, T,
                                    g, sc);
        lz_lizard_layer_backward_f32(gi ? &mine : NULL, j->dx + r0 * C, j->dq + r0 * qrow, j->dk + r0 * krow,
                                     j->dv + r0 * krow, j->dout + r0 * qrow, j->p, j->x + r0 * C, j->q + r0 * qrow,
                                     j->k + r0 * krow, j->v + r0 * krow, T, g, sc);
    }
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
    if (g->Hq != s->g.Hq || g->Hs != s->g.Hs || g->d != s->g.d || g->f != s->g.f || C != s->s[0].C)
        return lz_fail(LZ_ERR_INTERNAL,
                       "lizard backward: a layer of Hq %d, state heads %d, head_dim %d, f %d, C %d on a scratch made "
                       "for %d, %d, %d, %d, %d",
                       g->Hq, g->Hs, g->d, g->f, C, s->g.Hq, s->g.Hs, s->g.d, s->g.f, s->s[0].C);
    if (longest > s->s[0].max_T)
        return lz_fail(LZ_ERR_INTERNAL, "lizard backward: a sequence of %d tokens past its scratch's %d", longest,
                       s->s[0].max_T);
    if (!dx || !dq || !dk || !dv)
        return lz_fail(LZ_ERR_INTERNAL, "lizard backward: dx, dq, dk and dv are all required");
    // each sequence's tensor gradients from zero (NULL grad: none), added to grad in order below
    const size_t nq = lz_lizard_wq_numel(g), nk = lz_lizard_wk_numel(g), per_seq = nq + nk + (size_t)C + g->m + 1;
    float *seq_grads = NULL;
    if (grad && !(seq_grads = calloc((size_t)b->n_seqs * per_seq + 1, sizeof(float))))
        return lz_fail(LZ_ERR_NOMEM, "lizard backward: out of memory for %d sequences' gradients", b->n_seqs);
    // (the GLA's products of a chunk, forward and backward, dominate: about 8 T Hq 2f (d + chunk) a sequence)
    int threads = lz_cpu_threads_for((size_t)b->n_seqs,
                                     (size_t)8 * b->n_tokens * g->Hq * 2 * g->f * (g->d + LZ_TRAIN_CHUNK), LZ_GRAIN_LOOP);
    threads = threads < s->n ? threads : s->n;
    lizard_job j = {s, seq_grads, per_seq, dx, dq, dk, dv, dout, p, x, q, k, v, b, g, C};
    lz_cpu_parallel((size_t)b->n_seqs, threads, lizard_sequences, &j);
    for (int i = 0; seq_grads && i < b->n_seqs; i++) {
        const float *gi = seq_grads + (size_t)i * per_seq;
        add_into(grad->wq, gi, nq);
        add_into(grad->wk, gi + nq, nk);
        add_into(grad->wg, gi + nq + nk, (size_t)C);
        add_into(grad->meta, gi + nq + nk + C, (size_t)g->m);
        add_into(grad->alpha, gi + nq + nk + C + g->m, 1);
    }
    free(seq_grads);
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

/* x~ [T, in] of one sequence: x where the rule keeps, times 1 / (1 - p), 0 where it drops (the
 * reference's x * mask); mask [T, in] (NULL: not kept) = those factors. */
typedef struct {
    float *xm, *mask;
    const float *x;
    uint64_t stream;
    double p;
} dropout_job;

static void dropout_elements(void *ctx, size_t begin, size_t end, int worker) {
    const dropout_job *j = ctx;
    const float keep = (float)(1.0 / (1.0 - j->p));
    for (size_t e = begin; e < end; e++) {
        const float factor = lz_dropout_drops(j->stream, e, j->p) ? 0.0f : keep;
        j->xm[e] = j->x[e] * factor;
        if (j->mask)
            j->mask[e] = factor;
    }
}

static void dropped_input(float *xm, float *mask, const float *x, uint64_t stream, double p, int T, int in) {
    dropout_job j = {xm, mask, x, stream, p};
    const size_t n = (size_t)T * in;
    lz_cpu_parallel(n, lz_cpu_threads_for(n, n, LZ_GRAIN_EXP), dropout_elements, &j);
}

typedef struct {
    float *y;
    const float *x, *mask; /* mask NULL: y += x */
} add_job;

static void add_elements(void *ctx, size_t begin, size_t end, int worker) {
    const add_job *j = ctx;
    for (size_t i = begin; i < end; i++)
        j->y[i] += j->mask ? j->x[i] * j->mask[i] : j->x[i];
}

// y [n] += x (* mask)
static void add_masked(float *y, const float *x, const float *mask, size_t n) {
    add_job j = {y, x, mask};
    lz_cpu_parallel(n, lz_cpu_threads_for(n, n, LZ_GRAIN_LIGHT), add_elements, &j);
}

/* Per sequence (the reference's equations, linear_backward.inc): u = x~ A^T, y += scale u B^T. */
static lz_status bw_lora_forward(lz_backend *be, void *y, float *u, const void *x, const lz_lora *l,
                                 const lz_dropout *drop, const lz_batch *b) {
    int longest;
    LZ_TRY(check_lora(l, drop, b, "lora forward", &longest));
    float *xm = NULL;
    if (dropping(drop))
        LZ_TRY(host_buffer(&xm, (size_t)longest * l->in, "the LoRA input after dropout"));
    float *ys = y;
    const float *xs = x;
    for (int s = 0; s < b->n_seqs; s++) {
        const size_t r0 = (size_t)b->start[s];
        const int T = b->len[s];
        const float *xt = xs + r0 * l->in;
        if (xm) {
            dropped_input(xm, NULL, xt, drop->streams[s], drop->p, T, l->in);
            xt = xm;
        }
        lz_gemm(false, true, T, l->r, l->in, 1.0f, xt, l->in, l->A, l->in, 0.0f, u + r0 * l->r, l->r);
        lz_gemm(false, true, T, l->out, l->r, l->scale, u + r0 * l->r, l->r, l->B, l->r, 1.0f, ys + r0 * l->out,
                l->out);
    }
    free(xm);
    return LZ_OK;
}

/* Per sequence, in order: du = scale dy B, dB += scale dy^T u, dA += du^T x~, dx += (du A) * mask. */
static lz_status bw_lora_backward(lz_backend *be, lz_lora *l, float *dx, const float *dy, const void *x,
                                  const float *u, const lz_dropout *drop, const lz_batch *b) {
    int longest;
    LZ_TRY(check_lora(l, drop, b, "lora backward", &longest));
    const bool drops = dropping(drop);
    float *du = NULL, *xm = NULL, *mask = NULL, *dxm = NULL;
    lz_status st = host_buffer(&du, (size_t)longest * l->r, "the LoRA gradient of u");
    if (st == LZ_OK && drops)
        st = host_buffer(&xm, (size_t)longest * l->in, "the LoRA input after dropout");
    if (st == LZ_OK && drops && dx)
        st = host_buffer(&mask, (size_t)longest * l->in, "the LoRA dropout mask");
    if (st == LZ_OK && drops && dx)
        st = host_buffer(&dxm, (size_t)longest * l->in, "the LoRA input gradient before dropout");
    const float *xs = x;
    for (int s = 0; st == LZ_OK && s < b->n_seqs; s++) {
        const size_t r0 = (size_t)b->start[s];
        const int T = b->len[s];
        const float *xt = xs + r0 * l->in, *gt = dy + r0 * l->out, *ut = u + r0 * l->r;
        if (drops) {
            dropped_input(xm, mask, xt, drop->streams[s], drop->p, T, l->in);
            xt = xm;
        }
        lz_gemm(false, false, T, l->r, l->out, l->scale, gt, l->out, l->B, l->r, 0.0f, du, l->r);
        lz_gemm(true, false, l->out, l->r, T, l->scale, gt, l->out, ut, l->r, 1.0f, l->dB, l->r);
        lz_gemm(true, false, l->r, l->in, T, 1.0f, du, l->r, xt, l->in, 1.0f, l->dA, l->in);
        if (!dx)
            continue;
        float *dxt = dx + r0 * l->in;
        if (!drops) {
            lz_gemm(false, false, T, l->in, l->r, 1.0f, du, l->r, l->A, l->in, 1.0f, dxt, l->in);
            continue;
        }
        lz_gemm(false, false, T, l->in, l->r, 1.0f, du, l->r, l->A, l->in, 0.0f, dxm, l->in);
        add_masked(dxt, dxm, mask, (size_t)T * l->in);
    }
    free(du);
    free(xm);
    free(mask);
    free(dxm);
    return st;
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
    return lm_head_loss(loss, dh, h, w->data, targets, N, (int)w->cols, V, grad_scale);
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
    add_masked(y, x, NULL, n);
    return LZ_OK;
}

static lz_status bw_sum_squares(lz_backend *be, double *out, const float *const *x, const size_t *n, int count) {
    for (int t = 0; t < count; t++) {
        double acc = 0;
        for (size_t i = 0; i < n[t]; i++)
            acc += (double)x[t][i] * x[t][i];
        out[t] = acc;
    }
    return LZ_OK;
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    const lz_adamw_update *u;
} adamw_job;

static void adamw_elements(void *ctx, size_t begin, size_t end, int worker) {
    const adamw_job *j = ctx;
    const lz_adamw_update *u = j->u;
    float *p = j->p, *m = j->m, *v = j->v;
    for (size_t e = begin; e < end; e++) {
        const float gs = j->g[e] * u->grad_scale;
        m[e] = (float)(u->beta1 * m[e] + (1 - u->beta1) * gs);
        v[e] = (float)(u->beta2 * v[e] + (1 - u->beta2) * (double)gs * gs);
        const double update = (m[e] / u->bias1) / (sqrt(v[e] / u->bias2) + u->eps);
        p[e] = (float)(p[e] - u->lr * (update + u->weight_decay * p[e]));
    }
}

/* The moments stored in fp32, the rest in double, as runtime/train's lz_adamw_tensor. */
static lz_status bw_adamw(lz_backend *be, float *p, float *m, float *v, const float *g, size_t n,
                          const lz_adamw_update *u) {
    adamw_job j = {p, m, v, g, u};
    lz_cpu_parallel(n, lz_cpu_threads_for(n, n, LZ_GRAIN_EXP), adamw_elements, &j);
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
