/* test_backward_ops.c - the CPU backward op table (kernels/cpu/backward_ops_cpu.c)
 * as the gradient of the CPU INFERENCE ops (the op table of lz_cpu_backend_create)
 * that training runs forward: each op's loss L = <R, output> for a random R,
 * and along random directions D the backward's <dL/dx, D> against a central
 * difference of L computed through the inference op, in fp32.
 *
 * Why these steps and tolerances: inputs are random multiples of 2^-12,
 * directions multiples of 2^-8 (times a power of two per element), the step h
 * = 2^-7, so every x +- h D, x +- 2h D is exact in fp32 and the difference sees
 * only the forward's rounding. The difference is the fourth-order stencil
 * (8 (L(h) - L(-h)) - (L(2h) - L(-2h))) / 12h: its truncation (h^4 / 30 ~ 1e-10
 * times the fifth derivative) is far below the rounding. Each L carries a
 * rounding error of about kappa 2^-24 sum |R_i y_i| (kappa: the fp32
 * operations an output passes through, tens for the Lizard branch), which the
 * stencil multiplies by 1.5 / h ~ 200. The error is measured relative to
 * sum_i |dL/dx_i D_i|, which for most inputs is of the size of sum |R_i y_i|:
 * an expected error near 200 kappa 6e-8 ~ 1e-4 at kappa = 10, and the runs show
 * 1e-7 to 1e-4 (printed). Tensors that move L little (the Lizard layer's meta
 * logits) come nearest: 5e-4. The tolerance, 2e-3, sits above all of them,
 * while a wrong term (a missing head, a wrong sign, an eps in the wrong place, an
 * overwrite where an add is due) gives errors of order 1e-2 to 1. */
#include <math.h>     // fabs, exp, log, sqrt, pow, isfinite, NAN, powf
#include <stdio.h>    // printf
#include <stdlib.h>   // malloc, calloc, free
#include <string.h>   // memcpy, memcmp, memset
#include <sys/mman.h> // mmap, mprotect, munmap
#include <unistd.h>   // sysconf

#include "backward_ops.h"  // lz_backward_ops
#include "cpu_kernels.h"   // lz_cpu_backward_table
#include "dropout_rule.h"  // lz_dropout_drops
#include "test_util.h"     // CHECK, CHECK_MSG, CHECK_FAILS_WITH
#include "train_kernels.h" // rope_train_f32 (the reference rotation)

static const double tolerance = 2e-3;
static const double step = 0x1p-7;
enum { DIRECTIONS = 3 };

static lz_backend *be;
static const lz_ops *ops;
static const lz_backward_ops *bw;

/* ---- random arrays, poison, sums ------------------------------------------------------------ */

static double urand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (double)(*s >> 8) / (double)(1u << 24);
}

// uniform in [lo, hi], rounded to a multiple of 2^-12
static float qrand(unsigned *s, double lo, double hi) {
    return (float)(nearbyint((lo + (hi - lo) * urand(s)) * 4096.0) / 4096.0);
}

static float *rand_array(size_t n, double lo, double hi, unsigned *seed) {
    float *a = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        a[i] = qrand(seed, lo, hi);
    return a;
}

static float *copy_of(const float *x, size_t n) {
    float *a = malloc(sizeof(float) * (n ? n : 1));
    memcpy(a, x, sizeof(float) * n);
    return a;
}

static double dot_f(const float *a, const float *b, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++)
        acc += (double)a[i] * b[i];
    return acc;
}

// what an added-to output gained: after - before, in double
static double *gained(const float *after, const float *before, size_t n) {
    double *g = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        g[i] = (double)after[i] - before[i];
    return g;
}

static double *widened(const float *x, size_t n) {
    double *g = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        g[i] = x[i];
    return g;
}

static size_t count_nonfinite(const double *g, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isfinite(g[i]);
    return bad;
}

/* ---- the directional check -------------------------------------------------------------------- */

/* L evaluated through the inference ops with the current contents of every input. */
typedef double (*objective)(void *ctx);

/* The worst error, over DIRECTIONS random directions D (scaled per element by `scale`, powers of
 * two, or 1 where NULL), of the backward's <grad, D> against the stencil of L along D. */
static double directional_error(objective L, void *ctx, float *param, size_t n, const double *grad,
                                const float *scale, unsigned *seed) {
    float *saved = copy_of(param, n), *D = malloc(sizeof(float) * n);
    double worst = 0;
    for (int dir = 0; dir < DIRECTIONS; dir++) {
        double analytic = 0, magnitude = 1e-30;
        for (size_t i = 0; i < n; i++) {
            D[i] = (float)(nearbyint((2 * urand(seed) - 1) * 256.0) / 256.0) * (scale ? scale[i] : 1.0f);
            analytic += grad[i] * D[i];
            magnitude += fabs(grad[i] * D[i]);
        }
        double at[4];
        const int mult[4] = {-2, -1, 1, 2};
        for (int s = 0; s < 4; s++) {
            for (size_t i = 0; i < n; i++)
                param[i] = saved[i] + (float)(mult[s] * step) * D[i];
            at[s] = L(ctx);
        }
        memcpy(param, saved, sizeof(float) * n);
        const double numeric = (8 * (at[2] - at[1]) - (at[3] - at[0])) / (12 * step);
        const double err = fabs(numeric - analytic) / magnitude;
        worst = err > worst || !isfinite(err) ? err : worst;
    }
    free(saved);
    free(D);
    return worst;
}

/* Checks one gradient and prints its worst error. */
static void check_gradient(const char *what, objective L, void *ctx, float *param, size_t n, const double *grad,
                           const float *scale, unsigned *seed) {
    const size_t bad = count_nonfinite(grad, n);
    CHECK_MSG(bad == 0, "%s: %zu of %zu gradient elements not finite (unwritten?)", what, bad, n);
    const double err = directional_error(L, ctx, param, n, grad, scale, seed);
    printf("  %-34s worst %.2e\n", what, err);
    CHECK_MSG(err <= tolerance, "%s: directional derivative off by %.3e (tolerance %.1e)", what, err, tolerance);
}

static lz_weight weight_of(float *data, int64_t rows, int64_t cols) {
    return (lz_weight){data, LZ_DTYPE_F32, rows, cols, true, 0, NULL};
}

/* A batch of sequences laid one after another, each from position pos[s]. */
typedef struct {
    int32_t slot[4], start[4], len[4], pos[4];
    int32_t *token_pos;
    lz_batch b;
} test_batch;

static void batch_make(test_batch *tb, int n_seqs, const int *len, const int *pos) {
    int rows = 0;
    for (int s = 0; s < n_seqs; s++) {
        tb->slot[s] = s, tb->start[s] = rows, tb->len[s] = len[s], tb->pos[s] = pos ? pos[s] : 0;
        rows += len[s];
    }
    tb->token_pos = malloc(sizeof(int32_t) * (size_t)rows);
    for (int s = 0; s < n_seqs; s++)
        for (int i = 0; i < len[s]; i++)
            tb->token_pos[tb->start[s] + i] = tb->pos[s] + i;
    tb->b = (lz_batch){n_seqs, rows, tb->slot, tb->start, tb->len, tb->pos, tb->token_pos};
}

/* ---- RMSNorm, SwiGLU, linear ------------------------------------------------------------------- */

typedef struct {
    float *x, *g, *u, *R, *y;
    lz_weight w;
    int N, C;
    size_t n;
    float eps;
} small_case;

static double rmsnorm_L(void *ctx) {
    small_case *c = ctx;
    CHECK(ops->rmsnorm(be, c->y, c->x, &c->w, c->N, c->eps) == LZ_OK);
    return dot_f(c->R, c->y, (size_t)c->N * c->C);
}

static double swiglu_L(void *ctx) {
    small_case *c = ctx;
    CHECK(ops->swiglu(be, c->y, c->g, c->u, c->n) == LZ_OK);
    return dot_f(c->R, c->y, c->n);
}

static double linear_L(void *ctx) {
    small_case *c = ctx;
    CHECK(ops->linear(be, c->y, c->x, &c->w, NULL, c->N) == LZ_OK);
    return dot_f(c->R, c->y, (size_t)c->N * c->w.rows);
}

/* Row 0 is tiny (mean square ~ eps), so eps placed otherwise than the inference op places it shows. */
static void check_rmsnorm(unsigned seed) {
    small_case c = {.N = 5, .C = 48, .eps = 1e-5f};
    const size_t n = (size_t)c.N * c.C;
    c.x = rand_array(n, -2, 2, &seed), c.R = rand_array(n, -1, 1, &seed), c.y = lz_test_nan_array(n);
    float *scale = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        scale[i] = i < (size_t)c.C ? 0x1p-9f : 1.0f;
    for (int i = 0; i < c.C; i++)
        c.x[i] *= 0x1p-9f;
    c.w = weight_of(rand_array((size_t)c.C, 0.5, 1.5, &seed), 1, c.C);
    float *dx = rand_array(n, -1, 1, &seed), *before = copy_of(dx, n);
    CHECK(bw->rmsnorm(be, dx, c.R, c.x, &c.w, c.N, c.eps) == LZ_OK);
    double *g = gained(dx, before, n);
    check_gradient("rmsnorm dx (added to)", rmsnorm_L, &c, c.x, n, g, scale, &seed);
    free(c.x), free(c.R), free(c.y), free(c.w.data), free(scale), free(dx), free(before), free(g);
}

static void check_swiglu(unsigned seed) {
    small_case c = {.n = 3 * 37};
    c.g = rand_array(c.n, -4, 4, &seed), c.u = rand_array(c.n, -2, 2, &seed);
    c.R = rand_array(c.n, -1, 1, &seed), c.y = lz_test_nan_array(c.n);
    float *dg = lz_test_nan_array(c.n), *du = lz_test_nan_array(c.n);
    CHECK(bw->swiglu(be, dg, du, c.R, c.g, c.u, c.n) == LZ_OK);
    double *gg = widened(dg, c.n), *gu = widened(du, c.n);
    check_gradient("swiglu dgate", swiglu_L, &c, c.g, c.n, gg, NULL, &seed);
    check_gradient("swiglu dup", swiglu_L, &c, c.u, c.n, gu, NULL, &seed);
    free(c.g), free(c.u), free(c.R), free(c.y), free(dg), free(du), free(gg), free(gu);
}

static void check_linear(bool accumulate, unsigned seed) {
    small_case c = {.N = 4, .C = 40};
    const int rows = 24;
    const size_t nx = (size_t)c.N * c.C, ny = (size_t)c.N * rows;
    c.x = rand_array(nx, -1, 1, &seed), c.R = rand_array(ny, -1, 1, &seed), c.y = lz_test_nan_array(ny);
    c.w = weight_of(rand_array((size_t)rows * c.C, -1, 1, &seed), rows, c.C);
    float *dx = accumulate ? rand_array(nx, -1, 1, &seed) : lz_test_nan_array(nx), *before = copy_of(dx, nx);
    CHECK(bw->linear(be, dx, c.R, &c.w, c.N, accumulate) == LZ_OK);
    double *g = accumulate ? gained(dx, before, nx) : widened(dx, nx);
    check_gradient(accumulate ? "linear dx (accumulate)" : "linear dx (overwrite)", linear_L, &c, c.x, nx, g, NULL,
                   &seed);
    free(c.x), free(c.R), free(c.y), free(c.w.data), free(dx), free(before), free(g);
}

/* ---- RoPE ------------------------------------------------------------------------------------------ */

/* RoPE is a rotation, linear in q and k: the backward is its adjoint, <bw(R), D> = <R, rope(D)> for every
 * R, D, and rope then the backward gives the input back. Sequence 1 starts at position 1000 (token_pos
 * honoured). */
static void check_rope(unsigned seed) {
    const int len[2] = {5, 6}, pos[2] = {0, 1000};
    test_batch tb;
    batch_make(&tb, 2, len, pos);
    const lz_attn_dims dims = {.n_heads = 4, .n_kv_heads = 2, .head_dim = 16};
    const int N = tb.b.n_tokens, d = dims.head_dim;
    const size_t nq = (size_t)N * dims.n_heads * d, nk = (size_t)N * dims.n_kv_heads * d;
    float inv_freq[8];
    for (int j = 0; j < d / 2; j++)
        inv_freq[j] = powf(10000.0f, -2.0f * j / d);
    float *Rq = rand_array(nq, -1, 1, &seed), *Rk = rand_array(nk, -1, 1, &seed);
    float *Dq = rand_array(nq, -1, 1, &seed), *Dk = rand_array(nk, -1, 1, &seed);
    float *gq = copy_of(Rq, nq), *gk = copy_of(Rk, nk), *rq = copy_of(Dq, nq), *rk = copy_of(Dk, nk);
    CHECK(bw->rope(be, gq, gk, inv_freq, &tb.b, &dims) == LZ_OK);
    CHECK(ops->rope(be, rq, rk, inv_freq, &tb.b, &dims) == LZ_OK);
    const double lhs = dot_f(gq, Dq, nq) + dot_f(gk, Dk, nk), rhs = dot_f(Rq, rq, nq) + dot_f(Rk, rk, nk);
    double magnitude = 0;
    for (size_t i = 0; i < nq; i++)
        magnitude += fabs((double)Rq[i] * rq[i]);
    for (size_t i = 0; i < nk; i++)
        magnitude += fabs((double)Rk[i] * rk[i]);
    const double adjoint_err = fabs(lhs - rhs) / magnitude;
    // the round trip: rope, then its backward
    CHECK(bw->rope(be, rq, rk, inv_freq, &tb.b, &dims) == LZ_OK);
    double trip_err = 0;
    for (size_t i = 0; i < nq; i++)
        trip_err = fmax(trip_err, fabs((double)rq[i] - Dq[i]));
    for (size_t i = 0; i < nk; i++)
        trip_err = fmax(trip_err, fabs((double)rk[i] - Dk[i]));
    printf("  %-34s worst %.2e (adjoint), %.2e (round trip, |x| <= 1)\n", "rope", adjoint_err, trip_err);
    CHECK_MSG(adjoint_err < 1e-6, "rope backward is not the adjoint of ops->rope: %.3e", adjoint_err);
    CHECK_MSG(trip_err < 1e-6, "rope backward does not undo ops->rope: %.3e", trip_err);
    // dk NULL: q's rows alone, the same values
    float *q_only = copy_of(Rq, nq);
    CHECK(bw->rope(be, q_only, NULL, inv_freq, &tb.b, &dims) == LZ_OK);
    CHECK(memcmp(q_only, gq, sizeof(float) * nq) == 0);
    // at positions 0..len-1 the rotation is the reference's (rope_train_f32, sign -1), bit for bit
    float *ref = copy_of(Rq, (size_t)len[0] * dims.n_heads * d);
    rope_train_f32(ref, len[0], dims.n_heads, d, inv_freq, -1);
    CHECK(memcmp(ref, gq, sizeof(float) * (size_t)len[0] * dims.n_heads * d) == 0);
    free(Rq), free(Rk), free(Dq), free(Dk), free(gq), free(gk), free(rq), free(rk), free(q_only), free(ref);
    free(tb.token_pos);
}

/* ---- softmax attention --------------------------------------------------------------------------- */

typedef struct {
    float *q, *k, *v, *R, *out;
    lz_layer_state st;
    lz_attn_dims dims;
    test_batch tb;
} attn_case;

static double attention_L(void *ctx) {
    attn_case *c = ctx;
    CHECK(ops->softmax_attention(be, c->out, c->q, c->k, c->v, &c->st, &c->tb.b, &c->dims) == LZ_OK);
    return dot_f(c->R, c->out, (size_t)c->tb.b.n_tokens * c->dims.n_heads * c->dims.head_dim);
}

/* Two sequences of different lengths (one past 64 tokens), GQA 4 over 2. */
static void check_attention(unsigned seed) {
    attn_case c = {.dims = {.n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .kv_capacity = 80}};
    const int len[2] = {37, 70};
    batch_make(&c.tb, 2, len, NULL);
    const int N = c.tb.b.n_tokens;
    const size_t nq = (size_t)N * c.dims.n_heads * c.dims.head_dim;
    const size_t nk = (size_t)N * c.dims.n_kv_heads * c.dims.head_dim;
    const size_t cache = (size_t)2 * c.dims.kv_capacity * c.dims.n_kv_heads * c.dims.head_dim;
    c.st.k_cache = lz_test_nan_array(cache), c.st.v_cache = lz_test_nan_array(cache);
    c.q = rand_array(nq, -1.5, 1.5, &seed), c.k = rand_array(nk, -1.5, 1.5, &seed), c.v = rand_array(nk, -1, 1, &seed);
    c.R = rand_array(nq, -1, 1, &seed), c.out = lz_test_nan_array(nq);
    float *dq = lz_test_nan_array(nq), *dk = lz_test_nan_array(nk), *dv = lz_test_nan_array(nk);
    CHECK(bw->attention(be, dq, dk, dv, c.R, c.q, c.k, c.v, &c.tb.b, &c.dims) == LZ_OK);
    double *gq = widened(dq, nq), *gk = widened(dk, nk), *gv = widened(dv, nk);
    check_gradient("attention dq", attention_L, &c, c.q, nq, gq, NULL, &seed);
    check_gradient("attention dk", attention_L, &c, c.k, nk, gk, NULL, &seed);
    check_gradient("attention dv", attention_L, &c, c.v, nk, gv, NULL, &seed);
    // refused: a sequence that does not start at position 0; one longer than a sliding window
    c.tb.pos[1] = 3;
    CHECK_FAILS_WITH(bw->attention(be, dq, dk, dv, c.R, c.q, c.k, c.v, &c.tb.b, &c.dims), LZ_ERR_INTERNAL,
                     "position 3");
    c.tb.pos[1] = 0;
    c.dims.sliding_window = 64;
    CHECK_FAILS_WITH(bw->attention(be, dq, dk, dv, c.R, c.q, c.k, c.v, &c.tb.b, &c.dims), LZ_ERR_INTERNAL,
                     "sliding window");
    free(c.q), free(c.k), free(c.v), free(c.R), free(c.out), free(c.st.k_cache), free(c.st.v_cache);
    free(dq), free(dk), free(dv), free(gq), free(gk), free(gv), free(c.tb.token_pos);
}

/* ---- the Lizard branch ----------------------------------------------------------------------------- */

typedef struct {
    lz_lizard_geom g;
    lz_attn_dims dims;
    lz_lizard_params_f32 p;
    lz_weight fmap_q, fmap_k, gate, meta;
    lz_layer_state st;
    size_t n_S, n_z, n_ring;
    float *x, *q, *k, *v, *R, *out, *win, *gate_logit, *log_gamma, *phi_q, *phi_k;
    test_batch tb;
    int C;
} lizard_case;

/* decoder_layer.c's lizard_attention for prompts: the gate's logit by ops->linear, log_sigmoid, the two
 * feature maps, gla_chunked from zeroed slots, then the window branch added. The window branch adds into
 * a zeroed buffer of its own and L sums the two branches in double: the fp32 sum, rounded at the GLA's
 * magnitude (large without the normaliser), would otherwise hide the small gradients of the meta logits
 * and alpha under its rounding. */
static double lizard_L(void *ctx) {
    lizard_case *c = ctx;
    const int N = c->tb.b.n_tokens, d = c->g.d, f = c->g.f;
    memset(c->st.S, 0, sizeof(float) * c->n_S);
    memset(c->st.z, 0, sizeof(float) * c->n_z);
    memset(c->st.ring_k, 0, sizeof(float) * c->n_ring);
    memset(c->st.ring_v, 0, sizeof(float) * c->n_ring);
    CHECK(ops->linear(be, c->gate_logit, c->x, &c->gate, NULL, N) == LZ_OK);
    CHECK(ops->log_sigmoid(be, c->log_gamma, c->gate_logit, N) == LZ_OK);
    CHECK(ops->feature_map(be, c->phi_q, c->q, &c->fmap_q, N, c->g.Hq, c->g.Hq, d, f, c->g.exp_map) == LZ_OK);
    CHECK(ops->feature_map(be, c->phi_k, c->k, &c->fmap_k, N, c->g.Hkv, c->g.Hs, d, f, c->g.exp_map) == LZ_OK);
    CHECK(ops->gla_chunked(be, c->out, c->phi_q, c->phi_k, c->v, c->log_gamma, &c->st, &c->tb.b, &c->dims) == LZ_OK);
    memset(c->win, 0, sizeof(float) * (size_t)N * c->g.Hq * d);
    CHECK(ops->window_attention(be, c->win, c->q, c->k, c->v, &c->meta, c->p.alpha[0], &c->st, &c->tb.b, &c->dims) ==
          LZ_OK);
    return dot_f(c->R, c->out, (size_t)N * c->g.Hq * d) + dot_f(c->R, c->win, (size_t)N * c->g.Hq * d);
}

typedef struct {
    const char *name;
    int n_wq, n_wk, Hs;
    bool normalize, exp_map;
} lizard_shape;

/* Hq 4 over Hkv 2, d 8, f 4, window 24, 3 meta logits, C 12; sequences of 45 and 70 tokens (the second
 * spans two GLA chunks and starts at row 45). Every gradient the op gives, each against the inference
 * composition; the gradients start from random values (added to); with grad NULL (frozen) the input
 * gradients are the same. */
static void check_lizard(const lizard_shape *sh, unsigned seed) {
    lizard_case c = {.C = 12};
    c.g = (lz_lizard_geom){.Hq = 4, .Hkv = 2, .Hs = sh->Hs, .n_wq = sh->n_wq, .n_wk = sh->n_wk, .d = 8, .f = 4,
                           .w = 24, .m = 3, .normalize = sh->normalize, .exp_map = sh->exp_map};
    c.dims = (lz_attn_dims){.n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .n_state_heads = sh->Hs, .feature_dim = 4,
                            .window = 24, .n_meta = 3, .gla_normalize = sh->normalize};
    const int len[2] = {45, 70};
    batch_make(&c.tb, 2, len, NULL);
    const int N = c.tb.b.n_tokens, d = c.g.d, F = 2 * c.g.f;
    const size_t nx = (size_t)N * c.C, nq = (size_t)N * c.g.Hq * d, nk = (size_t)N * c.g.Hkv * d;
    const size_t n_wq = lz_lizard_wq_numel(&c.g), n_wk = lz_lizard_wk_numel(&c.g);
    c.n_S = (size_t)2 * c.g.Hs * F * d, c.n_z = (size_t)2 * c.g.Hs * F, c.n_ring = (size_t)2 * c.g.w * c.g.Hkv * d;
    c.st.S = lz_test_nan_array(c.n_S), c.st.z = lz_test_nan_array(c.n_z), c.st.ring_k = lz_test_nan_array(c.n_ring);
    c.st.ring_v = lz_test_nan_array(c.n_ring);
    c.x = rand_array(nx, -1, 1, &seed), c.q = rand_array(nq, -1, 1, &seed), c.k = rand_array(nk, -1, 1, &seed);
    c.v = rand_array(nk, -1, 1, &seed), c.R = rand_array(nq, -1, 1, &seed);
    c.out = lz_test_nan_array(nq), c.win = lz_test_nan_array(nq);
    c.gate_logit = lz_test_nan_array((size_t)N), c.log_gamma = lz_test_nan_array((size_t)N);
    c.phi_q = lz_test_nan_array((size_t)N * c.g.Hq * F), c.phi_k = lz_test_nan_array((size_t)N * c.g.Hs * F);
    const double wr = sh->exp_map ? 0.3 : 0.8;
    c.p.wq = rand_array(n_wq, -wr, wr, &seed), c.p.wk = rand_array(n_wk, -wr, wr, &seed);
    c.p.wg = rand_array((size_t)c.C, -0.5, 0.5, &seed), c.p.meta = rand_array((size_t)c.g.m, -1, 1, &seed);
    c.p.alpha = rand_array(1, 0.5, 1, &seed);
    c.fmap_q = weight_of(c.p.wq, c.g.n_wq, (int64_t)d * c.g.f);
    c.fmap_k = weight_of(c.p.wk, c.g.n_wk, (int64_t)d * c.g.f);
    c.gate = weight_of(c.p.wg, 1, c.C), c.meta = weight_of(c.p.meta, 1, c.g.m);

    lz_lizard_params_f32 grad = {rand_array(n_wq, -1, 1, &seed), rand_array(n_wk, -1, 1, &seed),
                                 rand_array((size_t)c.C, -1, 1, &seed), rand_array((size_t)c.g.m, -1, 1, &seed),
                                 rand_array(1, -1, 1, &seed)};
    lz_lizard_params_f32 g0 = {copy_of(grad.wq, n_wq), copy_of(grad.wk, n_wk), copy_of(grad.wg, (size_t)c.C),
                               copy_of(grad.meta, (size_t)c.g.m), copy_of(grad.alpha, 1)};
    float *dx = rand_array(nx, -1, 1, &seed), *dq = rand_array(nq, -1, 1, &seed), *dk = rand_array(nk, -1, 1, &seed);
    float *dv = rand_array(nk, -1, 1, &seed);
    float *dx0 = copy_of(dx, nx), *dq0 = copy_of(dq, nq), *dk0 = copy_of(dk, nk), *dv0 = copy_of(dv, nk);
    void *scratch = NULL;
    CHECK(bw->lizard_scratch_create(be, &scratch, &c.g, 70, c.C) == LZ_OK);
    CHECK(bw->lizard(be, scratch, &grad, dx, dq, dk, dv, c.R, &c.p, c.x, c.q, c.k, c.v, &c.tb.b, &c.g, c.C) == LZ_OK);

    printf(" lizard, %s:\n", sh->name);
    /* The meta logits and alpha move L little (their gradients are sums of many row terms of either
     * sign): steps 8 times longer (2^-4) lift the difference above L's rounding, and the stencil's
     * truncation, h^4 / 30 times derivatives of exponentials of O(1) arguments, stays near 1e-6. */
    const float long_step[3] = {8, 8, 8}; /* m = 3 */
    struct {
        const char *what;
        float *param, *after, *before;
        size_t n;
        const float *scale;
    } cases[] = {
        {"lizard dx", c.x, dx, dx0, nx, NULL},
        {"lizard dq", c.q, dq, dq0, nq, NULL},
        {"lizard dk", c.k, dk, dk0, nk, NULL},
        {"lizard dv", c.v, dv, dv0, nk, NULL},
        {"lizard d phi_q weights", c.p.wq, grad.wq, g0.wq, n_wq, NULL},
        {"lizard d phi_k weights", c.p.wk, grad.wk, g0.wk, n_wk, NULL},
        {"lizard d gate weights", c.p.wg, grad.wg, g0.wg, (size_t)c.C, NULL},
        {"lizard d meta logits", c.p.meta, grad.meta, g0.meta, (size_t)c.g.m, long_step},
        {"lizard d alpha", c.p.alpha, grad.alpha, g0.alpha, 1, long_step},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double *g = gained(cases[i].after, cases[i].before, cases[i].n);
        check_gradient(cases[i].what, lizard_L, &c, cases[i].param, cases[i].n, g, cases[i].scale, &seed);
        free(g);
    }

    // frozen tensors (grad NULL): the same input gradients
    float *fx = copy_of(dx0, nx), *fq = copy_of(dq0, nq), *fk = copy_of(dk0, nk), *fv = copy_of(dv0, nk);
    CHECK(bw->lizard(be, scratch, NULL, fx, fq, fk, fv, c.R, &c.p, c.x, c.q, c.k, c.v, &c.tb.b, &c.g, c.C) == LZ_OK);
    CHECK(memcmp(fx, dx, sizeof(float) * nx) == 0 && memcmp(fq, dq, sizeof(float) * nq) == 0);
    CHECK(memcmp(fk, dk, sizeof(float) * nk) == 0 && memcmp(fv, dv, sizeof(float) * nk) == 0);
    // refused: a sequence past the scratch, one not from position 0
    c.tb.len[1] = 71, c.tb.b.n_tokens = N + 1;
    CHECK_FAILS_WITH(bw->lizard(be, scratch, NULL, fx, fq, fk, fv, c.R, &c.p, c.x, c.q, c.k, c.v, &c.tb.b, &c.g, c.C),
                     LZ_ERR_INTERNAL, "scratch");
    c.tb.len[1] = 70, c.tb.b.n_tokens = N, c.tb.pos[0] = 2;
    CHECK_FAILS_WITH(bw->lizard(be, scratch, NULL, fx, fq, fk, fv, c.R, &c.p, c.x, c.q, c.k, c.v, &c.tb.b, &c.g, c.C),
                     LZ_ERR_INTERNAL, "position 2");
    bw->lizard_scratch_free(be, scratch);

    float *bufs[] = {c.st.S, c.st.z, c.st.ring_k, c.st.ring_v, c.x, c.q, c.k, c.v, c.R, c.out, c.win, c.gate_logit,
                     c.log_gamma, c.phi_q, c.phi_k, c.p.wq, c.p.wk, c.p.wg, c.p.meta, c.p.alpha, grad.wq, grad.wk,
                     grad.wg, grad.meta, grad.alpha, g0.wq, g0.wk, g0.wg, g0.meta, g0.alpha, dx, dq, dk, dv, dx0,
                     dq0, dk0, dv0, fx, fq, fk, fv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c.tb.token_pos);
}

/* ---- LoRA ------------------------------------------------------------------------------------------ */

typedef struct {
    lz_lora l;
    lz_dropout drop;
    test_batch tb;
    float *x, *R, *y, *u;
} lora_case;

static double lora_L(void *ctx) {
    lora_case *c = ctx;
    const size_t ny = (size_t)c->tb.b.n_tokens * c->l.out;
    memset(c->y, 0, sizeof(float) * ny);
    CHECK(bw->lora_forward(be, c->y, c->u, c->x, &c->l, &c->drop, &c->tb.b) == LZ_OK);
    return dot_f(c->R, c->y, ny);
}

/* The forward against y0 + scale x~ (B A)^T in double, x~ = x with the dropout rule's mask built here
 * (element (t - start[s]) * in + c of sequence s's stream); u against x~ A^T. */
static void check_lora_forward(lora_case *c, unsigned *seed, size_t *dropped) {
    const lz_lora *l = &c->l;
    const int N = c->tb.b.n_tokens;
    const size_t ny = (size_t)N * l->out, nu = (size_t)N * l->r;
    float *y = rand_array(ny, -1, 1, seed), *y0 = copy_of(y, ny), *u = lz_test_nan_array(nu);
    CHECK(bw->lora_forward(be, y, u, c->x, l, &c->drop, &c->tb.b) == LZ_OK);
    double worst_y = 0, worst_u = 0;
    double *xt = malloc(sizeof(double) * l->in);
    for (int s = 0; s < c->tb.b.n_seqs; s++)
        for (int t = c->tb.start[s]; t < c->tb.start[s] + c->tb.len[s]; t++) {
            for (int i = 0; i < l->in; i++) {
                const uint64_t e = (uint64_t)(t - c->tb.start[s]) * l->in + i;
                const bool drop = c->drop.p > 0 && lz_dropout_drops(c->drop.streams[s], e, c->drop.p);
                *dropped += drop;
                xt[i] = drop ? 0 : c->x[(size_t)t * l->in + i] / (1 - c->drop.p);
            }
            for (int a = 0; a < l->r; a++) {
                double ua = 0;
                for (int i = 0; i < l->in; i++)
                    ua += xt[i] * l->A[(size_t)a * l->in + i];
                worst_u = fmax(worst_u, fabs(ua - u[(size_t)t * l->r + a]));
            }
            for (int o = 0; o < l->out; o++) {
                double acc = 0;
                for (int a = 0; a < l->r; a++) {
                    double ba = 0;
                    for (int i = 0; i < l->in; i++)
                        ba += (double)l->B[(size_t)o * l->r + a] * l->A[(size_t)a * l->in + i] * xt[i];
                    acc += ba;
                }
                const size_t e = (size_t)t * l->out + o;
                worst_y = fmax(worst_y, fabs(y0[e] + l->scale * acc - y[e]));
            }
        }
    // |x~| <= 4/3, |A|, |B| <= 1, in 24, r 4: sums of ~100 terms of size ~1 in fp32
    printf("  %-34s worst %.2e (y), %.2e (u), absolute\n",
           c->drop.p > 0 ? "lora forward (dropout 0.25)" : "lora forward", worst_y, worst_u);
    CHECK_MSG(worst_y < 1e-4 && worst_u < 1e-5, "lora forward off the dense product: %.3e, u %.3e", worst_y, worst_u);
    free(y), free(y0), free(u), free(xt);
}

static void check_lora(double p, unsigned seed) {
    lora_case c = {.l = {.r = 4, .in = 24, .out = 20, .scale = 0.5f}};
    const uint64_t streams[2] = {0x1234567ULL, 0xfedcba987ULL};
    c.drop = (lz_dropout){p, streams};
    const int len[2] = {5, 7};
    batch_make(&c.tb, 2, len, NULL);
    const int N = c.tb.b.n_tokens;
    const size_t nx = (size_t)N * c.l.in, ny = (size_t)N * c.l.out, nA = (size_t)c.l.r * c.l.in;
    const size_t nB = (size_t)c.l.out * c.l.r;
    c.l.A = rand_array(nA, -1, 1, &seed), c.l.B = rand_array(nB, -1, 1, &seed);
    c.l.dA = rand_array(nA, -1, 1, &seed), c.l.dB = rand_array(nB, -1, 1, &seed);
    c.x = rand_array(nx, -1, 1, &seed), c.R = rand_array(ny, -1, 1, &seed);
    c.y = lz_test_nan_array(ny), c.u = lz_test_nan_array((size_t)N * c.l.r);
    CHECK(bw->lora_sync(be, &c.l) == LZ_OK && c.l.shadow == NULL);

    size_t dropped = 0;
    check_lora_forward(&c, &seed, &dropped);
    if (p > 0) { // about p of the 288 elements, and a different set for each sequence
        printf("  dropped %zu of %zu elements at p = %.2f\n", dropped, nx, p);
        CHECK_MSG(dropped > nx / 8 && dropped < nx * 3 / 8, "dropout dropped %zu of %zu", dropped, nx);
    } else {
        lz_dropout none = {0, NULL}; // p = 0 and NULL: the same
        float *y1 = rand_array(ny, -1, 1, &seed), *y2 = copy_of(y1, ny), *u1 = lz_test_nan_array((size_t)N * c.l.r);
        CHECK(bw->lora_forward(be, y1, u1, c.x, &c.l, &none, &c.tb.b) == LZ_OK);
        CHECK(bw->lora_forward(be, y2, u1, c.x, &c.l, NULL, &c.tb.b) == LZ_OK);
        CHECK(memcmp(y1, y2, sizeof(float) * ny) == 0);
        free(y1), free(y2), free(u1);
    }

    lora_L(&c); // u of this x for the backward
    float *dx = rand_array(nx, -1, 1, &seed), *dx0 = copy_of(dx, nx);
    float *dA0 = copy_of(c.l.dA, nA), *dB0 = copy_of(c.l.dB, nB);
    CHECK(bw->lora_backward(be, &c.l, dx, c.R, c.x, c.u, &c.drop, &c.tb.b) == LZ_OK);
    double *gx = gained(dx, dx0, nx), *gA = gained(c.l.dA, dA0, nA), *gB = gained(c.l.dB, dB0, nB);
    const bool dropping = p > 0;
    check_gradient(dropping ? "lora dx (dropout 0.25)" : "lora dx", lora_L, &c, c.x, nx, gx, NULL, &seed);
    check_gradient(dropping ? "lora dA (dropout 0.25)" : "lora dA", lora_L, &c, c.l.A, nA, gA, NULL, &seed);
    check_gradient(dropping ? "lora dB (dropout 0.25)" : "lora dB", lora_L, &c, c.l.B, nB, gB, NULL, &seed);
    // dx NULL: dA and dB gain the same
    lora_L(&c);
    memcpy(c.l.dA, dA0, sizeof(float) * nA), memcpy(c.l.dB, dB0, sizeof(float) * nB);
    float *dA1 = copy_of(dA0, nA);
    CHECK(bw->lora_backward(be, &c.l, dx0, c.R, c.x, c.u, &c.drop, &c.tb.b) == LZ_OK);
    memcpy(dA1, c.l.dA, sizeof(float) * nA);
    memcpy(c.l.dA, dA0, sizeof(float) * nA), memcpy(c.l.dB, dB0, sizeof(float) * nB);
    CHECK(bw->lora_backward(be, &c.l, NULL, c.R, c.x, c.u, &c.drop, &c.tb.b) == LZ_OK);
    CHECK(memcmp(dA1, c.l.dA, sizeof(float) * nA) == 0);
    // refused: dropout of 1
    lz_dropout all = {1.0, streams};
    CHECK_FAILS_WITH(bw->lora_forward(be, c.y, c.u, c.x, &c.l, &all, &c.tb.b), LZ_ERR_INTERNAL, "dropout");
    bw->lora_release(be, &c.l);
    free(c.l.A), free(c.l.B), free(c.l.dA), free(c.l.dB), free(c.x), free(c.R), free(c.y), free(c.u);
    free(dx), free(dx0), free(dA0), free(dB0), free(dA1), free(gx), free(gA), free(gB), free(c.tb.token_pos);
}

/* ---- the head's cross-entropy ---------------------------------------------------------------------- */

typedef struct {
    float *h, *logits;
    lz_weight w;
    const int32_t *targets;
    int N;
    double grad_scale;
} ce_case;

/* grad_scale x the loss from ops->linear's whole logits, log-softmax in double. */
static double ce_L(void *ctx) {
    ce_case *c = ctx;
    const int V = (int)c->w.rows;
    CHECK(ops->linear(be, c->logits, c->h, &c->w, NULL, c->N) == LZ_OK);
    double loss = 0;
    for (int t = 0; t < c->N; t++) {
        if (c->targets[t] < 0)
            continue;
        const float *z = c->logits + (size_t)t * V;
        double m = z[0], sum = 0;
        for (int v = 1; v < V; v++)
            m = z[v] > m ? z[v] : m;
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - m);
        loss += m + log(sum) - z[c->targets[t]];
    }
    return c->grad_scale * loss;
}

/* V = LZ_CE_CHUNK + 37: the last slice is partial; targets on both sides of the border, one row skipped. */
static void check_cross_entropy(unsigned seed) {
    const int C = 16, V = LZ_CE_CHUNK + 37;
    const int32_t targets[6] = {5, LZ_CE_CHUNK - 1, -1, LZ_CE_CHUNK, V - 1, 700};
    ce_case c = {.N = 6, .targets = targets, .grad_scale = 0.5};
    const size_t nh = (size_t)c.N * C;
    c.h = rand_array(nh, -1, 1, &seed), c.logits = lz_test_nan_array((size_t)c.N * V);
    c.w = weight_of(rand_array((size_t)V * C, -1, 1, &seed), V, C);
    float *dh = lz_test_nan_array(nh);
    double loss = NAN, loss_only = NAN;
    CHECK(bw->cross_entropy(be, &loss, dh, c.h, &c.w, targets, c.N, (float)c.grad_scale) == LZ_OK);
    CHECK(bw->cross_entropy(be, &loss_only, NULL, c.h, &c.w, targets, c.N, (float)c.grad_scale) == LZ_OK);
    const double direct = ce_L(&c) / c.grad_scale, loss_err = fabs(loss - direct) / direct;
    printf("  %-34s worst %.2e (loss against whole logits, relative)\n", "cross_entropy", loss_err);
    CHECK_MSG(loss_err < 1e-5, "cross_entropy loss %.9g vs %.9g from whole logits", loss, direct);
    CHECK(loss_only == loss);
    bool skipped_zero = true;
    for (int i = 0; i < C; i++)
        skipped_zero &= dh[2 * C + i] == 0.0f;
    CHECK_MSG(skipped_zero, "cross_entropy: the row of target -1 has a gradient");
    double *g = widened(dh, nh);
    check_gradient("cross_entropy dh", ce_L, &c, c.h, nh, g, NULL, &seed);
    const int32_t past[6] = {5, V, -1, 0, 0, 0};
    CHECK_FAILS_WITH(bw->cross_entropy(be, &loss, dh, c.h, &c.w, past, c.N, 1), LZ_ERR_INPUT, "target");
    free(c.h), free(c.logits), free(c.w.data), free(dh), free(g);
}

/* ---- AdamW, weight_set, the tensor ops -------------------------------------------------------------- */

/* The update of backward_ops.h written out in double from the fp32 inputs. */
static void check_adamw(float grad_scale, double weight_decay, unsigned seed) {
    const size_t n = 1000;
    const int t = 3;
    const lz_adamw_update u = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = weight_decay,
                               .bias1 = 1 - pow(0.9, t), .bias2 = 1 - pow(0.999, t), .grad_scale = grad_scale};
    float *p = rand_array(n, -1, 1, &seed), *m = rand_array(n, -0.1, 0.1, &seed), *v = rand_array(n, 0, 0.01, &seed);
    float *g = rand_array(n, -1, 1, &seed);
    v[0] = 0, g[0] = 0; // a tensor element that never had a gradient
    float *p0 = copy_of(p, n), *m0 = copy_of(m, n), *v0 = copy_of(v, n);
    CHECK(bw->adamw(be, p, m, v, g, n, &u) == LZ_OK);
    double worst_m = 0, worst_v = 0, worst_p = 0;
    for (size_t e = 0; e < n; e++) {
        const double gs = (double)g[e] * grad_scale;
        const double me = u.beta1 * m0[e] + (1 - u.beta1) * gs, ve = u.beta2 * v0[e] + (1 - u.beta2) * gs * gs;
        const double pe = p0[e] - u.lr * (u.weight_decay * p0[e] + (me / u.bias1) / (sqrt(ve / u.bias2) + u.eps));
        // relative to the size of the terms (m's two may cancel)
        worst_m = fmax(worst_m, fabs(m[e] - me) / (fabs(u.beta1 * m0[e]) + fabs((1 - u.beta1) * gs) + 1e-30));
        worst_v = fmax(worst_v, fabs(v[e] - ve) / (fabs(ve) + 1e-30));
        worst_p = fmax(worst_p, fabs(p[e] - pe) / (fabs(pe) + u.lr));
    }
    printf("  %-34s worst %.2e (m), %.2e (v), %.2e (p), relative\n", "adamw", worst_m, worst_v, worst_p);
    // fp32 storage of m, v and p: a few 2^-24
    CHECK_MSG(worst_m < 1e-6 && worst_v < 1e-6 && worst_p < 1e-6, "adamw: m %.3e, v %.3e, p %.3e", worst_m, worst_v,
              worst_p);
    free(p), free(m), free(v), free(g), free(p0), free(m0), free(v0);
}

/* An owned weight keeps its memory; a zero-copy weight whose values lie in read-only memory (a
 * checkpoint's mapping) gets memory of its own, which free_weight then frees (the leak checker sees
 * it), and the mapping stays as it was. */
static void check_weight_set(unsigned seed) {
    const int rows = 7, cols = 9;
    const size_t n = (size_t)rows * cols;
    float *src = rand_array(n, -1, 1, &seed);
    lz_weight owned;
    CHECK(ops->random_weight(be, rows, cols, 0, 1, 42, &owned) == LZ_OK);
    void *was = owned.data;
    CHECK(bw->weight_set(be, &owned, src) == LZ_OK);
    CHECK(owned.data == was && owned.owned && memcmp(owned.data, src, sizeof(float) * n) == 0);
    ops->free_weight(be, &owned);

    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    float *mapped = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mapped != MAP_FAILED);
    if (mapped == MAP_FAILED)
        return;
    for (size_t i = 0; i < n; i++)
        mapped[i] = (float)i;
    CHECK(mprotect(mapped, page, PROT_READ) == 0);
    const lz_host_tensor t = {"read_only.weight", LZ_DTYPE_F32, (int64_t)n, mapped, true, NULL};
    lz_weight zero_copy;
    CHECK(ops->upload_weight(be, &t, rows, cols, &zero_copy) == LZ_OK);
    CHECK(zero_copy.data == mapped && !zero_copy.owned);
    CHECK(bw->weight_set(be, &zero_copy, src) == LZ_OK);
    CHECK(zero_copy.data != mapped && zero_copy.owned && memcmp(zero_copy.data, src, sizeof(float) * n) == 0);
    bool untouched = true;
    for (size_t i = 0; i < n; i++)
        untouched &= mapped[i] == (float)i;
    CHECK(untouched);
    ops->free_weight(be, &zero_copy);
    munmap(mapped, page);
    free(src);
}

static void check_tensor_ops(unsigned seed) {
    const size_t n = 1001;
    float *x = rand_array(n, -3, 3, &seed), *y = rand_array(n, -1, 1, &seed), *y0 = copy_of(y, n);
    float *dst = lz_test_nan_array(n);
    CHECK(bw->copy(be, dst, x, sizeof(float) * n) == LZ_OK && memcmp(dst, x, sizeof(float) * n) == 0);
    for (size_t i = 0; i < n; i++)
        dst[i] = NAN;
    CHECK(bw->to_f32(be, dst, x, n) == LZ_OK && memcmp(dst, x, sizeof(float) * n) == 0);
    CHECK(bw->add(be, y, x, n) == LZ_OK);
    bool sums = true;
    for (size_t i = 0; i < n; i++)
        sums &= y[i] == y0[i] + x[i];
    CHECK_MSG(sums, "add: y != y0 + x");
    double ss = NAN, again = NAN, direct = 0;
    for (size_t i = 0; i < n; i++)
        direct += (double)x[i] * x[i];
    const float *xs[2] = {x, y};
    const size_t ns[2] = {n, n};
    double both[2] = {NAN, NAN}, of_y = NAN;
    CHECK(bw->sum_squares(be, &ss, xs, ns, 1) == LZ_OK && bw->sum_squares(be, &again, xs, ns, 1) == LZ_OK);
    CHECK_MSG(fabs(ss - direct) <= 1e-12 * direct && ss == again, "sum_squares %.17g, again %.17g, direct %.17g", ss,
              again, direct);
    CHECK(bw->sum_squares(be, both, xs, ns, 2) == LZ_OK && bw->sum_squares(be, &of_y, xs + 1, ns + 1, 1) == LZ_OK);
    CHECK_MSG(both[0] == ss && both[1] == of_y, "sum_squares of two tensors: %.17g %.17g, alone %.17g %.17g",
              both[0], both[1], ss, of_y);
    free(x), free(y), free(y0), free(dst);
}

int main(void) {
    CHECK(lz_cpu_backend_create(&be, &ops) == LZ_OK);
    bw = ops->backward;
    CHECK(bw == &lz_cpu_backward_table);
    if (!bw)
        return lz_test_finish("test_backward_ops");
    CHECK(bw->rmsnorm && bw->swiglu && bw->linear && bw->rope && bw->attention && bw->lizard_scratch_create &&
          bw->lizard_scratch_free && bw->lizard && bw->lora_sync && bw->lora_release && bw->lora_forward &&
          bw->lora_backward && bw->cross_entropy && bw->copy && bw->to_f32 && bw->add && bw->sum_squares &&
          bw->adamw && bw->weight_set);
    printf("backward ops against the inference ops (tolerance %.0e of sum |grad_i D_i|):\n", tolerance);
    check_rmsnorm(11);
    check_swiglu(12);
    check_linear(false, 13);
    check_linear(true, 14);
    check_rope(15);
    check_attention(16);
    const lizard_shape shapes[] = {
        {"softmax map, phi_q per head, phi_k per kv head, normalised", 4, 2, 2, true, false},
        {"exp map, shared phi_q and phi_k, not normalised", 1, 1, 2, false, true},
        {"softmax map, phi_k per query head (state per query head)", 4, 4, 4, true, false},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_lizard(&shapes[i], 17 + (unsigned)i);
    check_lora(0, 21);
    check_lora(0.25, 22);
    check_cross_entropy(23);
    check_adamw(0.7f, 0.1, 24);
    check_adamw(1.0f, 0, 25);
    check_weight_set(26);
    check_tensor_ops(27);
    ops->destroy(be);
    return lz_test_finish("test_backward_ops");
}
