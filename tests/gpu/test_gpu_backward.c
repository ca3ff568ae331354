/* test_gpu_backward.c - the CUDA backward op table's dense, LoRA and tensor entries
 * (kernels/cuda/backward_dense.cu, backward_lora.cu, backward_tensors.cu) against the CPU f32
 * reference (kernels/cpu/train_kernels.h) and plain loops, on the fp32 and the bf16 backend.
 *
 * Shapes: two sequences per step (rows in order, and a second step whose sequences lie in
 * reverse order), row counts that are not multiples of 8, C = 80 and an odd C wider than a block,
 * head_dim with an odd half, V = 1000, 5000 and 20000 (the cross-entropy's slice bound lowered so
 * that a step takes several slices, the last one short), LoRA ranks 1 and 16, dropout 0 and 0.3.
 * Outputs are poisoned with NaN before each call, so an unwritten element fails; accumulated
 * outputs (+=) start from random values, and what is compared is the increment (result minus start),
 * so an overwrite fails.
 *
 * Bounds (relative L2 error; each is printed with the error measured):
 *   fp32 backend, element-wise and row ops (RMSNorm, SwiGLU, RoPE, the loss): 1e-5. Both sides are
 *     fp32 and differ in summation order over rows of at most a few thousand terms and in the last
 *     bit of rsqrtf, expf, cosf (device: <= 2 ulp): a few 1e-7 expected.
 *   fp32 backend, products (linear, the head's dh, LoRA): 1e-4. Sums of up to V = 20000 terms in
 *     a different order (cuBLAS's tiles against the CPU's loops): the rounding of a sum of K terms of
 *     random sign is ~sqrt(K) 2^-24 relative, ~1e-5 at most here.
 *   bf16 backend: the ops whose inputs are all activations or weights (RMSNorm, SwiGLU, RoPE,
 *     the loss) see the same bf16 values on both sides (the reference takes the device's rounded
 *     inputs) and compute in fp32: the fp32 bounds hold. The products that round an fp32 operand to
 *     bf16 (linear: dy; the head's dh: the logits' gradient; LoRA: x', A, du, and y itself, stored
 *     in bf16) carry one or two roundings of unit roundoff 2^-8 = 3.9e-3 (8 significant bits; rms
 *     ~1.7e-3 relative each, averaging over the sums): 2e-3 to 4e-3 expected (LoRA's y at rank 16,
 *     whose increment is half y's size, nearest), bound 1e-2.
 *   Tensors: copy, to_f32 (bf16 -> fp32 is exact), add (one fp32 rounding on both sides) and
 *     weight_set (round to nearest even on both sides) must match bit for bit; sum_squares (double)
 *     1e-10 against a double loop (a missing element of 10^6 moves it by ~1e-6), and the same bits on
 *     a second call; adamw 1e-6 against the formula in fp32 (one rounding per operation, so the
 *     bits should match: the count is printed) and 1e-6 against it in double.
 * Exit 77 (skip) when no GPU is visible. */
#include <math.h>   // sqrt, fabs, INFINITY, NAN
#include <stdint.h> // uint16_t, uint64_t
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free, abort
#include <string.h> // memcpy, memcmp, memset

#include <cuda_runtime_api.h> // cudaGetDeviceCount

#include "backward_ops.h"       // lz_backward_ops, lz_lora, lz_dropout, lz_adamw_update
#include "cpu/train_kernels.h"  // the reference
#include "cuda/backward_dense.h" // lz_cuda_ce_set_slice_bytes
#include "dropout_rule.h"       // lz_dropout_drops
#include "dtype.h"              // lz_f32_to_bf16, lz_bf16_to_f32
#include "ops.h"                // lz_cuda_backend_create
#include "test_util.h"          // CHECK_MSG, lz_test_finish

static lz_backend *be;
static const lz_ops *ops;
static const lz_backward_ops *bw;
static int bf16;           /* the pass: the bf16 backend */
static const char *pass;   /* "fp32" or "bf16" */
static double ROW, PROD;   /* the pass's bounds: element-wise and row ops; products */
static double worst_row, worst_prod;

#define OK(call) CHECK_MSG((call) == LZ_OK, "%s: %s", #call, lz_error_message())

static unsigned rng = 31415u;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}
static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        abort();
    return p;
}
static float *rand_host(size_t n, float lo, float hi) {
    float *a = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        a[i] = frand(lo, hi);
    return a;
}
static float *copy_host(const float *a, size_t n) {
    float *c = xmalloc(sizeof(float) * n);
    memcpy(c, a, sizeof(float) * n);
    return c;
}

/* Device memory of the pass, freed at its end. */
enum { MAX_ALLOCS = 1024 };
static void *allocs[MAX_ALLOCS];
static int n_allocs;
static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (n_allocs == MAX_ALLOCS || ops->alloc(be, bytes ? bytes : 1, &p) != LZ_OK)
        abort();
    allocs[n_allocs++] = p;
    return p;
}
static void free_allocs(void) {
    for (int i = 0; i < n_allocs; i++)
        ops->free(be, allocs[i]);
    n_allocs = 0;
}

/* fp32 values on the device: a copy of host, or NaN poison (host NULL). */
static float *dput(const float *host, size_t n) {
    float *d = dalloc(sizeof(float) * n), *nan = NULL;
    if (!host) {
        nan = xmalloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++)
            nan[i] = NAN;
    }
    OK(ops->upload_f32(be, d, host ? host : nan, n));
    free(nan);
    return d;
}
static float *dget(const float *d, size_t n) {
    float *h = xmalloc(sizeof(float) * n);
    OK(ops->sync(be));
    OK(ops->copy_to_host(be, h, d, sizeof(float) * n));
    return h;
}
/* Activations on the device from host values, which are replaced by what the device holds (bf16:
 * rounded), so that the reference computes on the same values. */
static void *aput(float *host, size_t n) {
    void *d = dalloc(ops->act_size * n);
    OK(ops->act_from_host(be, d, host, n));
    OK(ops->act_to_host(be, host, d, n));
    return d;
}
static float *aget(const void *d, size_t n) {
    float *h = xmalloc(sizeof(float) * n);
    OK(ops->sync(be));
    OK(ops->act_to_host(be, h, d, n));
    return h;
}
static float round_act(float x) { return bf16 ? lz_bf16_to_f32(lz_f32_to_bf16(x)) : x; }
/* A weight [rows, cols] in the backend's type from host values (rounded in place as the device holds them). */
static lz_weight wput(float *host, int64_t rows, int64_t cols) {
    lz_host_tensor t = {"test weight", LZ_DTYPE_F32, rows * cols, host, false, NULL};
    lz_weight w = {0};
    OK(ops->upload_weight(be, &t, rows, cols, &w));
    for (int64_t i = 0; i < rows * cols; i++)
        host[i] = round_act(host[i]);
    return w;
}

/* ||got - ref|| / ||ref|| over n; with base (the start of an accumulated output), of the increments
 * got - base against ref - base. A NaN (an unwritten element) gives infinity. */
static double rel_err(const float *got, const float *ref, const float *base, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double b = base ? base[i] : 0.0, g = (double)got[i] - b, r = (double)ref[i] - b;
        num += (g - r) * (g - r);
        den += r * r;
    }
    if (num != num)
        return INFINITY;
    return sqrt(num / (den > 0 ? den : 1));
}
static void compare(const char *what, const float *got, const float *ref, const float *base, size_t n,
                    double bound) {
    const double e = rel_err(got, ref, base, n);
    fprintf(stderr, "test_gpu_backward: %s %-44s rel err %.3g (bound %.0e)\n", pass, what, e, bound);
    CHECK_MSG(e <= bound, "%s %s: rel err %.3g > %.3g", pass, what, e, bound);
    double *worst = bound == PROD ? &worst_prod : bound == ROW ? &worst_row : NULL;
    if (worst && e > *worst)
        *worst = e;
}
/* The device's d [n] against ref; frees the download. */
static void compare_dev(const char *what, const float *d, const float *ref, const float *base, size_t n, double bound) {
    float *h = dget(d, n);
    compare(what, h, ref, base, n, bound);
    free(h);
}

/* A step of two sequences, each from position 0; begin_step puts it on the device. */
typedef struct {
    int32_t slot[2], start[2], len[2], pos[2];
    int32_t *token_pos;
    lz_batch b;
} step;
static void step_make(step *s, int len0, int len1, int reversed) {
    s->len[0] = len0, s->len[1] = len1;
    s->start[0] = reversed ? len1 : 0, s->start[1] = reversed ? 0 : len0;
    s->slot[0] = 0, s->slot[1] = 1, s->pos[0] = s->pos[1] = 0;
    const int N = len0 + len1;
    s->token_pos = xmalloc(sizeof(int32_t) * N);
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < s->len[q]; i++)
            s->token_pos[s->start[q] + i] = i;
    s->b = (lz_batch){2, N, s->slot, s->start, s->len, s->pos, s->token_pos};
}
static void step_begin(const step *s) { OK(ops->begin_step(be, NULL, &s->b, NULL, 0)); }

// Dense ops --------------------------------------------------------------------------------------

static void test_rmsnorm(const step *s, int C) {
    const int N = s->b.n_tokens;
    const size_t n = (size_t)N * C;
    const float eps = 1e-5f;
    float *x = rand_host(n, -2, 2), *w = rand_host(C, 0.5f, 1.5f), *dy = rand_host(n, -1, 1),
          *dx0 = rand_host(n, -0.5f, 0.5f);
    void *d_x = aput(x, n);
    lz_weight W = wput(w, 1, C);
    float *d_dy = dput(dy, n), *d_dx = dput(dx0, n);
    OK(bw->rmsnorm(be, d_dx, d_dy, d_x, &W, N, eps));
    float *y = xmalloc(sizeof(float) * n), *rinv = xmalloc(sizeof(float) * N), *ref = copy_host(dx0, n);
    rmsnorm_train_forward_f32(y, rinv, x, w, N, C, eps);
    rmsnorm_backward_f32(ref, dy, x, w, rinv, N, C);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm N=%d C=%d (dx +=)", N, C);
    compare_dev(what, d_dx, ref, dx0, n, ROW);
    ops->free_weight(be, &W);
    free(x), free(w), free(dy), free(dx0), free(y), free(rinv), free(ref);
}

static void test_swiglu(size_t n) {
    float *g = rand_host(n, -6, 6), *u = rand_host(n, -2, 2), *dh = rand_host(n, -1, 1);
    void *d_g = aput(g, n), *d_u = aput(u, n);
    float *d_dh = dput(dh, n), *d_dg = dput(NULL, n), *d_du = dput(NULL, n);
    OK(bw->swiglu(be, d_dg, d_du, d_dh, d_g, d_u, n));
    float *dg = xmalloc(sizeof(float) * n), *du = xmalloc(sizeof(float) * n);
    swiglu_backward_f32(dg, du, dh, g, u, n);
    char what[96];
    snprintf(what, sizeof what, "swiglu n=%zu dg", n);
    compare_dev(what, d_dg, dg, NULL, n, ROW);
    snprintf(what, sizeof what, "swiglu n=%zu du", n);
    compare_dev(what, d_du, du, NULL, n, ROW);
    free(g), free(u), free(dh), free(dg), free(du);
}

static void test_linear(int N, int rows, int cols, int accumulate) {
    const size_t nw = (size_t)rows * cols, ny = (size_t)N * rows, nx = (size_t)N * cols;
    float *w = rand_host(nw, -1, 1), *dy = rand_host(ny, -1, 1);
    float *dx0 = accumulate ? rand_host(nx, -5, 5) : NULL;
    lz_weight W = wput(w, rows, cols);
    float *d_dy = dput(dy, ny), *d_dx = dput(dx0, nx);
    OK(bw->linear(be, d_dx, d_dy, &W, N, accumulate != 0));
    float *ref = accumulate ? copy_host(dx0, nx) : xmalloc(sizeof(float) * nx);
    if (!accumulate)
        memset(ref, 0, sizeof(float) * nx);
    linear_backward_input_f32(ref, dy, w, N, cols, rows);
    char what[96];
    snprintf(what, sizeof what, "linear N=%d W [%d, %d] (dx %s)", N, rows, cols, accumulate ? "+=" : "=");
    compare_dev(what, d_dx, ref, dx0, nx, PROD);
    ops->free_weight(be, &W);
    free(w), free(dy), free(dx0), free(ref);
}

static void test_rope(const step *s, int Hq, int Hkv, int d, int with_dk) {
    const int N = s->b.n_tokens, half = d / 2;
    const size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hkv * d;
    float *inv = xmalloc(sizeof(float) * half);
    for (int j = 0; j < half; j++)
        inv[j] = (float)pow(10000.0, -2.0 * j / d);
    float *dq = rand_host(nq, -1, 1), *dk = rand_host(nk, -1, 1);
    float *d_inv = dput(inv, half), *d_dq = dput(dq, nq), *d_dk = dput(dk, nk);
    const lz_attn_dims dims = {.n_heads = Hq, .n_kv_heads = Hkv, .head_dim = d};
    OK(bw->rope(be, d_dq, with_dk ? d_dk : NULL, d_inv, &s->b, &dims));
    float *rq = copy_host(dq, nq), *rk = copy_host(dk, nk);
    for (int q = 0; q < 2; q++) {
        rope_train_f32(rq + (size_t)s->start[q] * Hq * d, s->len[q], Hq, d, inv, -1.0f);
        if (with_dk)
            rope_train_f32(rk + (size_t)s->start[q] * Hkv * d, s->len[q], Hkv, d, inv, -1.0f);
    }
    char what[96];
    snprintf(what, sizeof what, "rope N=%d Hq=%d Hkv=%d d=%d dq", N, Hq, Hkv, d);
    compare_dev(what, d_dq, rq, NULL, nq, ROW);
    snprintf(what, sizeof what, "rope N=%d Hq=%d Hkv=%d d=%d dk%s", N, Hq, Hkv, d, with_dk ? "" : " (NULL: untouched)");
    if (with_dk) {
        compare_dev(what, d_dk, rk, NULL, nk, ROW);
    } else {
        float *h = dget(d_dk, nk);
        CHECK_MSG(memcmp(h, dk, sizeof(float) * nk) == 0, "%s %s", pass, what);
        free(h);
    }
    free(inv), free(dq), free(dk), free(rq), free(rk);
}

/* slice_rows: the bound on the logits in rows (0: the default bound) */
static void test_cross_entropy(int N, int C, int V, int slice_rows) {
    const size_t nh = (size_t)N * C, nw = (size_t)V * C;
    const float grad_scale = 0.37f;
    float *h = rand_host(nh, -1, 1), *w = rand_host(nw, -1, 1);
    int32_t *targets = xmalloc(sizeof(int32_t) * N);
    for (int t = 0; t < N; t++)
        targets[t] = t % 5 == 3 ? -1 : (int32_t)(frand(0, 1) * (float)V) % V;
    targets[0] = V - 1, targets[N - 1] = 0;
    void *d_h = aput(h, nh);
    lz_weight W = wput(w, V, C);
    float *d_dh = dput(NULL, nh);
    lz_cuda_ce_set_slice_bytes((size_t)slice_rows * V * sizeof(float));
    double loss = NAN, again = NAN, alone = NAN;
    OK(bw->cross_entropy(be, &loss, d_dh, d_h, &W, targets, N, grad_scale));
    float *dh = xmalloc(sizeof(float) * nh);
    const double ref = lm_head_cross_entropy_f32(dh, h, w, targets, N, C, V, grad_scale);
    char what[128];
    snprintf(what, sizeof what, "cross_entropy N=%d C=%d V=%d slice %d rows: dh", N, C, V, slice_rows);
    compare_dev(what, d_dh, dh, NULL, nh, PROD);
    const double e = fabs(loss - ref) / fabs(ref);
    fprintf(stderr,
            "test_gpu_backward: %s cross_entropy N=%d V=%d slice %d rows: loss %.9g, reference %.9g, rel err %.3g "
            "(bound %.0e)\n",
            pass, N, V, slice_rows, loss, ref, e, ROW);
    CHECK_MSG(e <= ROW, "%s cross_entropy V=%d: loss %.9g against %.9g", pass, V, loss, ref);
    if (e > worst_row)
        worst_row = e;
    // the same bits again, and without dh
    OK(bw->cross_entropy(be, &again, d_dh, d_h, &W, targets, N, grad_scale));
    OK(bw->cross_entropy(be, &alone, NULL, d_h, &W, targets, N, grad_scale));
    CHECK_MSG(memcmp(&loss, &again, sizeof loss) == 0, "%s cross_entropy: %.17g, then %.17g", pass, loss, again);
    CHECK_MSG(memcmp(&loss, &alone, sizeof loss) == 0, "%s cross_entropy: %.17g with dh, %.17g without", pass, loss,
              alone);
    // a target outside the vocabulary is refused, naming the row
    const int32_t keep = targets[1];
    targets[1] = V;
    CHECK_FAILS_WITH(bw->cross_entropy(be, &loss, d_dh, d_h, &W, targets, N, grad_scale), LZ_ERR_INPUT, "row 1");
    targets[1] = keep;
    lz_cuda_ce_set_slice_bytes(0);
    ops->free_weight(be, &W);
    free(h), free(w), free(targets), free(dh);
}

// LoRA -------------------------------------------------------------------------------------------

/* mask [N, in] of the dropout rule (NULL for p = 0) */
static float *lora_mask(const step *s, const uint64_t *streams, int in, double p) {
    if (p <= 0)
        return NULL;
    const int N = s->b.n_tokens;
    float *mask = xmalloc(sizeof(float) * (size_t)N * in);
    const float keep = (float)(1.0 / (1.0 - p));
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < s->len[q]; i++)
            for (int c = 0; c < in; c++)
                mask[(size_t)(s->start[q] + i) * in + c] =
                    lz_dropout_drops(streams[q], (uint64_t)i * in + c, p) ? 0.0f : keep;
    return mask;
}

static void test_lora(const step *s, int in, int out, int r, double p, int with_dx) {
    const int N = s->b.n_tokens;
    const size_t nA = (size_t)r * in, nB = (size_t)out * r, nx = (size_t)N * in, ny = (size_t)N * out,
                 nu = (size_t)N * r;
    const float scale = 8.0f / (float)r;
    const uint64_t streams[2] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull};
    uint64_t scribble[2]; /* what the op is given: overwritten as soon as each call returns */
    float *A = rand_host(nA, -0.3f, 0.3f), *B = rand_host(nB, -0.3f, 0.3f), *dA0 = rand_host(nA, -1, 1),
          *dB0 = rand_host(nB, -1, 1);
    lz_lora l = {r, in, out, scale, dput(A, nA), dput(B, nB), dput(dA0, nA), dput(dB0, nB), NULL};
    OK(bw->lora_sync(be, &l));
    CHECK_MSG(bf16 ? l.shadow != NULL : l.shadow == NULL, "%s lora_sync: shadow %p", pass, l.shadow);
    float *x = rand_host(nx, -1, 1), *y0 = rand_host(ny, -1, 1);
    void *d_x = aput(x, nx), *d_y = aput(y0, ny);
    float *d_u = dput(NULL, nu);
    memcpy(scribble, streams, sizeof streams);
    const lz_dropout drop = {p, scribble};
    OK(bw->lora_forward(be, d_y, d_u, d_x, &l, &drop, &s->b));
    memset(scribble, 0x5a, sizeof scribble);
    float *mask = lora_mask(s, streams, in, p);
    float *yref = copy_host(y0, ny), *uref = xmalloc(sizeof(float) * nu);
    lora_train_forward_f32(yref, uref, x, A, B, mask, scale, N, in, out, r);
    char what[128];
    snprintf(what, sizeof what, "lora N=%d %d->%d r=%d p=%.1f: u", N, in, out, r, p);
    compare_dev(what, d_u, uref, NULL, nu, PROD);
    float *y = aget(d_y, ny);
    snprintf(what, sizeof what, "lora N=%d %d->%d r=%d p=%.1f: y (+=)", N, in, out, r, p);
    compare(what, y, yref, y0, ny, PROD);

    float *dy = rand_host(ny, -1, 1), *dx0 = with_dx ? rand_host(nx, -1, 1) : NULL;
    float *d_dy = dput(dy, ny), *d_dx = with_dx ? dput(dx0, nx) : NULL;
    memcpy(scribble, streams, sizeof streams);
    OK(bw->lora_backward(be, &l, d_dx, d_dy, d_x, d_u, &drop, &s->b));
    memset(scribble, 0xa5, sizeof scribble);
    float *dA = copy_host(dA0, nA), *dB = copy_host(dB0, nB), *dx = with_dx ? copy_host(dx0, nx) : NULL;
    lora_backward_f32(dA, dB, dx, dy, x, uref, A, B, mask, scale, N, in, out, r);
    snprintf(what, sizeof what, "lora N=%d %d->%d r=%d p=%.1f: dA (+=)", N, in, out, r, p);
    compare_dev(what, l.dA, dA, dA0, nA, PROD);
    snprintf(what, sizeof what, "lora N=%d %d->%d r=%d p=%.1f: dB (+=)", N, in, out, r, p);
    compare_dev(what, l.dB, dB, dB0, nB, PROD);
    if (with_dx) {
        snprintf(what, sizeof what, "lora N=%d %d->%d r=%d p=%.1f: dx (+=)", N, in, out, r, p);
        compare_dev(what, d_dx, dx, dx0, nx, PROD);
    }

    // new values of A reach the products through lora_sync
    for (size_t i = 0; i < nA; i++)
        A[i] = frand(-0.3f, 0.3f);
    OK(ops->upload_f32(be, l.A, A, nA));
    OK(bw->lora_sync(be, &l));
    OK(ops->act_from_host(be, d_y, y0, ny));
    memcpy(scribble, streams, sizeof streams);
    OK(bw->lora_forward(be, d_y, d_u, d_x, &l, &drop, &s->b));
    memcpy(yref, y0, sizeof(float) * ny);
    lora_train_forward_f32(yref, uref, x, A, B, mask, scale, N, in, out, r);
    snprintf(what, sizeof what, "lora N=%d %d->%d r=%d p=%.1f: u after A changed", N, in, out, r, p);
    compare_dev(what, d_u, uref, NULL, nu, PROD);

    bw->lora_release(be, &l);
    CHECK(l.shadow == NULL);
    free(A), free(B), free(dA0), free(dB0), free(x), free(y0), free(mask), free(yref), free(uref), free(y);
    free(dy), free(dx0), free(dA), free(dB), free(dx);
}

// Tensors ----------------------------------------------------------------------------------------

static void test_copy_convert_add(void) {
    // copy: exactly the bytes asked for
    unsigned char src[1001], got[1008];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(frand(0, 256));
    unsigned char *d_src = dalloc(sizeof src), *d_dst = dalloc(sizeof got);
    memset(got, 0xee, sizeof got);
    OK(ops->copy_from_host(be, d_src, src, sizeof src));
    OK(ops->copy_from_host(be, d_dst, got, sizeof got));
    OK(bw->copy(be, d_dst, d_src, sizeof src));
    OK(ops->sync(be));
    OK(ops->copy_to_host(be, got, d_dst, sizeof got));
    int tail_ok = 1;
    for (size_t i = sizeof src; i < sizeof got; i++)
        tail_ok &= got[i] == 0xee;
    CHECK_MSG(memcmp(got, src, sizeof src) == 0 && tail_ok, "%s copy of 1001 bytes", pass);

    // to_f32: the activations' exact values
    const size_t n = 1003;
    float *a = rand_host(n, -100, 100);
    void *d_a = aput(a, n);
    float *d_f = dput(NULL, n);
    OK(bw->to_f32(be, d_f, d_a, n));
    float *f = dget(d_f, n);
    CHECK_MSG(memcmp(f, a, sizeof(float) * n) == 0, "%s to_f32 of %zu activations", pass, n);

    // add: y += x, one fp32 rounding per element as on the host
    float *y = rand_host(n, -1, 1), *x = rand_host(n, -1, 1);
    float *d_y = dput(y, n), *d_x = dput(x, n);
    OK(bw->add(be, d_y, d_x, n));
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
    float *got_y = dget(d_y, n);
    CHECK_MSG(memcmp(got_y, y, sizeof(float) * n) == 0, "%s add of %zu", pass, n);
    free(a), free(f), free(y), free(x), free(got_y);
}

static void test_sum_squares(size_t n) {
    float *x = rand_host(n, -3, 3);
    float *d_x = dput(x, n);
    double ref = 0;
    for (size_t i = 0; i < n; i++)
        ref += (double)x[i] * x[i];
    double s1 = NAN, s2 = NAN;
    const float *xs[1] = {d_x};
    OK(bw->sum_squares(be, &s1, xs, &n, 1));
    OK(bw->sum_squares(be, &s2, xs, &n, 1));
    const double e = n ? fabs(s1 - ref) / ref : fabs(s1);
    fprintf(stderr, "test_gpu_backward: %s sum_squares n=%-10zu %.17g, double loop %.17g, rel err %.3g (bound 1e-10)\n",
            pass, n, s1, ref, e);
    CHECK_MSG(e <= 1e-10, "%s sum_squares n=%zu: %.17g against %.17g", pass, n, s1, ref);
    CHECK_MSG(memcmp(&s1, &s2, sizeof s1) == 0, "%s sum_squares n=%zu: %.17g, then %.17g", pass, n, s1, s2);
    free(x);
}

/* Several tensors in one call: each sum has the bits of that tensor's call alone. */
static void test_sum_squares_many(void) {
    enum { COUNT = 5 };
    const size_t n[COUNT] = {2048, 0, 1000003, 7, 131072};
    float *host[COUNT];
    const float *dev[COUNT];
    double together[COUNT], alone[COUNT];
    for (int t = 0; t < COUNT; t++)
        host[t] = rand_host(n[t], -2, 2), dev[t] = dput(host[t], n[t]);
    OK(bw->sum_squares(be, together, dev, n, COUNT));
    for (int t = 0; t < COUNT; t++)
        OK(bw->sum_squares(be, &alone[t], &dev[t], &n[t], 1));
    for (int t = 0; t < COUNT; t++) {
        CHECK_MSG(memcmp(&together[t], &alone[t], sizeof(double)) == 0, "%s sum_squares of %d tensors: tensor %d "
                  "(n=%zu) %.17g, alone %.17g", pass, COUNT, t, n[t], together[t], alone[t]);
        free(host[t]);
    }
    fprintf(stderr, "test_gpu_backward: %s sum_squares of %d tensors in one call, each as alone\n", pass, COUNT);
}

static void test_adamw(size_t n) {
    const long t = 3;
    const double b1 = 0.9, b2 = 0.999;
    const lz_adamw_update u = {1e-3, b1, b2, 1e-8, 0.01, 1 - pow(b1, (double)t), 1 - pow(b2, (double)t), 0.5f};
    float *p = rand_host(n, -1, 1), *m = rand_host(n, -0.1f, 0.1f), *v = rand_host(n, 0, 0.01f),
          *g = rand_host(n, -1, 1);
    float *d_p = dput(p, n), *d_m = dput(m, n), *d_v = dput(v, n), *d_g = dput(g, n);
    OK(bw->adamw(be, d_p, d_m, d_v, d_g, n, &u));
    // the formula in fp32, one rounding per operation, and in double
    const float gs = u.grad_scale, fb1 = (float)b1, fb1c = (float)(1 - b1), fb2 = (float)b2, fb2c = (float)(1 - b2),
                bias1 = (float)u.bias1, bias2 = (float)u.bias2, eps = (float)u.eps, lr = (float)u.lr,
                wd = (float)u.weight_decay;
    float *p32 = xmalloc(sizeof(float) * n), *m32 = xmalloc(sizeof(float) * n), *v32 = xmalloc(sizeof(float) * n);
    float *p64 = xmalloc(sizeof(float) * n), *m64 = xmalloc(sizeof(float) * n), *v64 = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * gs;
        const float mb = fb1 * m[i], mg = fb1c * gi;
        m32[i] = mb + mg;
        const float vb = fb2 * v[i], vg = fb2c * gi, vgg = vg * gi;
        v32[i] = vb + vgg;
        const float mh = m32[i] / bias1, vh = v32[i] / bias2, den = sqrtf(vh) + eps, upd = mh / den;
        const float dec = wd * p[i], change = lr * (dec + upd);
        p32[i] = p[i] - change;
        const double gd = (double)g[i] * u.grad_scale;
        const double md = b1 * m[i] + (1 - b1) * gd, vd = b2 * v[i] + (1 - b2) * gd * gd;
        m64[i] = (float)md, v64[i] = (float)vd;
        p64[i] = (float)(p[i] - u.lr * (u.weight_decay * p[i] + (md / u.bias1) / (sqrt(vd / u.bias2) + u.eps)));
    }
    float *gp = dget(d_p, n), *gm = dget(d_m, n), *gv = dget(d_v, n);
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += memcmp(&gp[i], &p32[i], 4) == 0 && memcmp(&gm[i], &m32[i], 4) == 0 && memcmp(&gv[i], &v32[i], 4) == 0;
    fprintf(stderr, "test_gpu_backward: %s adamw n=%zu: %zu of %zu elements (p, m, v) bit for bit as the fp32 "
            "formula\n",
            pass, n, same, n);
    compare("adamw p against the fp32 formula", gp, p32, NULL, n, 1e-6);
    compare("adamw m against the fp32 formula", gm, m32, NULL, n, 1e-6);
    compare("adamw v against the fp32 formula", gv, v32, NULL, n, 1e-6);
    compare("adamw p against the double formula", gp, p64, NULL, n, 1e-6);
    compare("adamw m against the double formula", gm, m64, NULL, n, 1e-6);
    compare("adamw v against the double formula", gv, v64, NULL, n, 1e-6);
    free(p), free(m), free(v), free(g), free(p32), free(m32), free(v32), free(p64), free(m64), free(v64);
    free(gp), free(gm), free(gv);
}

/* A weight's raw elements, each as fp32. */
static float *weight_values(const void *data, size_t n) {
    const size_t es = bf16 ? 2 : 4;
    unsigned char *raw = xmalloc(es * n);
    OK(ops->sync(be));
    OK(ops->copy_to_host(be, raw, data, es * n));
    float *v = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        if (bf16) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            v[i] = lz_bf16_to_f32(h);
        } else {
            memcpy(&v[i], raw + 4 * i, 4);
        }
    }
    free(raw);
    return v;
}

static void test_weight_set(void) {
    // a weight of its own, of odd shape
    float *w = rand_host(5 * 13, -1, 1), *src = rand_host(5 * 13, -1, 1);
    lz_weight W = wput(w, 5, 13);
    float *d_src = dput(src, 5 * 13);
    OK(bw->weight_set(be, &W, d_src));
    float *got = weight_values(W.data, 5 * 13);
    for (int i = 0; i < 5 * 13; i++)
        src[i] = round_act(src[i]);
    CHECK_MSG(memcmp(got, src, sizeof(float) * 5 * 13) == 0, "%s weight_set [5, 13]", pass);
    ops->free_weight(be, &W);
    free(w), free(src), free(got);

    // the second of two joined weights: its rows change, the first's and the block's padding do not
    float *w1 = rand_host(8 * 16, -1, 1), *w2 = rand_host(3 * 16, -1, 1), *src2 = rand_host(3 * 16, -1, 1);
    lz_weight W1 = wput(w1, 8, 16), W2 = wput(w2, 3, 16);
    lz_weight *pair[2] = {&W1, &W2};
    OK(ops->join_weights(be, 2, pair));
    CHECK_MSG(!W2.owned && W1.block_rows >= 11,
              "%s join_weights did not join [8, 16] and [3, 16] (LIZARD_JOIN_TOKENS?)", pass);
    if (!W2.owned && W1.block_rows >= 11) {
        const size_t block = (size_t)W1.block_rows * 16;
        float *d_src2 = dput(src2, 3 * 16);
        OK(bw->weight_set(be, &W2, d_src2));
        float *all = weight_values(W1.data, block);
        int ok = memcmp(all, w1, sizeof(float) * 8 * 16) == 0;
        for (int i = 0; i < 3 * 16; i++)
            ok &= all[8 * 16 + i] == round_act(src2[i]);
        for (size_t i = 11 * 16; i < block; i++)
            ok &= all[i] == 0.0f;
        CHECK_MSG(ok, "%s weight_set of a joined weight wrote outside its rows, or not all of them", pass);
        free(all);
    }
    ops->free_weight(be, &W2);
    ops->free_weight(be, &W1);
    free(w1), free(w2), free(src2);
}

static void run_pass(lz_dtype dtype) {
    bf16 = dtype == LZ_DTYPE_BF16;
    pass = bf16 ? "bf16" : "fp32";
    ROW = 1e-5;
    PROD = bf16 ? 1e-2 : 1e-4;
    worst_row = worst_prod = 0;
    lz_status st = lz_cuda_backend_create(dtype, &be, &ops);
    CHECK_MSG(st == LZ_OK, "lz_cuda_backend_create(%s): %s", pass, lz_error_message());
    if (st != LZ_OK)
        return;
    bw = ops->backward;
    CHECK_MSG(bw != NULL, "%s: the CUDA op table has no backward table", pass);
    if (!bw) {
        ops->destroy(be);
        return;
    }
    step in_order, reversed;
    step_make(&in_order, 20, 17, 0);  /* N = 37 */
    step_make(&reversed, 150, 7, 1); /* N = 157: sequence 0 at rows 7 .. 156, sequence 1 at rows 0 .. 6 */
    const step *steps[2] = {&in_order, &reversed};
    for (int i = 0; i < 2; i++) {
        const step *s = steps[i];
        const int N = s->b.n_tokens;
        step_begin(s);
        test_rmsnorm(s, 80);
        test_rmsnorm(s, 3001);
        test_swiglu((size_t)N * 77);
        test_linear(N, 48, 80, 0);
        test_linear(N, 333, 80, 1);
        test_linear(N, 80, 1, 1);
        test_rope(s, 4, 2, 16, 1);
        test_rope(s, 3, 1, 10, 0);
        test_cross_entropy(N, 80, 1000, 7);
        test_cross_entropy(N, 80, 5000, 3);
        test_cross_entropy(N, 80, 5000, 0);
        test_cross_entropy(N, 16, 20000, 64);
        for (int r = 1; r <= 16; r += 15)
            for (int k = 0; k < 2; k++)
                test_lora(s, 80, 48, r, k ? 0.3 : 0.0, 1);
        test_lora(s, 80, 48, 16, 0.3, 0);
        fprintf(stderr, "test_gpu_backward: %s step of %d rows done (%d checks, %d failed so far)\n", pass, N,
                lz_test_checks, lz_test_failures);
    }
    test_copy_convert_add();
    test_sum_squares(0);
    test_sum_squares(1);
    test_sum_squares(1000003);
    test_sum_squares_many();
    test_adamw(10007);
    test_weight_set();
    fprintf(stderr, "test_gpu_backward: %s largest rel err: row ops %.3g (bound %.0e), products %.3g (bound %.0e)\n",
            pass, worst_row, ROW, worst_prod, PROD);
    free(in_order.token_pos), free(reversed.token_pos);
    free_allocs();
    ops->destroy(be);
}

int main(void) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "test_gpu_backward: skipped: no CUDA device\n");
        return 77;
    }
    run_pass(LZ_DTYPE_F32);
    run_pass(LZ_DTYPE_BF16);
    return lz_test_finish("test_gpu_backward");
}
