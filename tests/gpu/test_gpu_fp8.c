/* test_gpu_fp8.c - the CUDA backend's FP8 linear layers (kernels/cuda/fp8_*.cu) against the CPU
 * reference's (kernels/cpu/linear_fp8.c), the same codes and row scales on both, through the two op
 * tables: linear (with and without bias), linear_many (three FP8 layers and a bf16 one-row gate, as a
 * Lizard layer's q, k, v and gate), linear_residual, norm_swiglu and linear_many_rope, at 1 to 8 tokens (the GEMV: 1, 2
 * or 4 warps a row, 1, 4 or 8 tokens a warp) and at 9 to 300 (the activations quantized per token, the
 * product on the FP8 tensor cores through cuBLASLt), layers of few and many rows, tokens of very
 * different magnitudes. Outputs are poisoned (NaN) first.
 *
 * Tolerances (relative error, ||gpu - ref|| / ||ref||): the GEMV reads bf16 activations, so against
 * the CPU's fp32 ones <= 1e-2 (as test_gpu_ops's bf16); the GEMM path quantizes each token's
 * activations to E4M3 (3 mantissa bits: about 2.5% a value), so <= 6e-2 against the CPU, and <= 1e-2
 * against a host model of exactly that quantization (x rounded to bf16, then fp8_rule.h's row rule on
 * each token, products in double). The device quantizer (op quantize_fp8) must give the host rule's
 * codes and scales bit for bit. The GEMM path runs twice: with the scales applied inside cuBLASLt
 * (where it offers that) and with LIZARD_FP8_SCALED=0 (fp32 product, then the epilogue kernel). Exit 77
 * (skip) when no GPU is visible. */
#include <math.h>   // sqrt, NAN, powf
#include <stdint.h> // uint8_t
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free, abort, setenv

#include <cuda_runtime_api.h> // cudaMemcpy (the codes and scales of a quantized weight)

#include "fp8_rule.h"  // lz_fp8_quantize_row, lz_e4m3_to_float
#include "knobs.h"     // lz_knobs_load
#include "ops.h"       // lz_ops
#include "test_util.h" // CHECK

typedef struct {
    const lz_ops *ops;
    lz_backend *be;
} backend;

static unsigned rng = 54321u;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}
static float bf16_round(float v) { return lz_bf16_to_f32(lz_f32_to_bf16(v)); }

/* Activations [T, C]: token t's values scaled by 10^(t % 3 - 1), so per-token scales matter. */
static float *acts_host(int T, int C) {
    float *a = malloc(sizeof(float) * (size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            a[(size_t)t * C + c] = frand(-1.0f, 1.0f) * (t % 3 == 0 ? 0.1f : t % 3 == 1 ? 1.0f : 10.0f);
    return a;
}
static void *act(backend *b, const float *host, size_t n) { /* NULL: NaN poison */
    void *p;
    float *tmp = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        tmp[i] = host ? host[i] : NAN;
    if (b->ops->alloc(b->be, n * b->ops->act_size + 16, &p) != LZ_OK || b->ops->act_from_host(b->be, p, tmp, n) != LZ_OK)
        abort();
    free(tmp);
    return p;
}
static float *download(backend *b, const void *p, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    CHECK_MSG(b->ops->act_to_host(b->be, h, p, n) == LZ_OK, "%s", lz_error_message());
    return h;
}

/* An FP8 weight: host codes and scales (the rule of fp8_rule.h) uploaded to a backend. */
typedef struct {
    int rows, cols;
    uint8_t *codes;
    float *scales;
} fp8_host;
static fp8_host fp8_make(int rows, int cols) {
    fp8_host h = {rows, cols, malloc((size_t)rows * cols), malloc(sizeof(float) * (size_t)rows)};
    float *w = malloc(sizeof(float) * (size_t)cols);
    for (int r = 0; r < rows; r++) {
        const float mag = r % 5 == 0 ? 3.0f : 0.05f; // rows of different ranges: the scales differ
        for (int c = 0; c < cols; c++)
            w[c] = frand(-mag, mag);
        h.scales[r] = lz_fp8_quantize_row(w, cols, h.codes + (size_t)r * cols);
    }
    free(w);
    return h;
}
static lz_weight fp8_upload(backend *b, const fp8_host *h) {
    const lz_host_tensor t = {"test.fp8", LZ_DTYPE_F8_E4M3, (int64_t)h->rows * h->cols, h->codes, false, h->scales};
    lz_weight w;
    CHECK_MSG(b->ops->upload_weight(b->be, &t, h->rows, h->cols, &w) == LZ_OK, "%s", lz_error_message());
    return w;
}
static lz_weight f32_upload(backend *b, const float *host, int64_t rows, int64_t cols) {
    const lz_host_tensor t = {"test.f32", LZ_DTYPE_F32, rows * cols, host, false, NULL};
    lz_weight w;
    if (b->ops->upload_weight(b->be, &t, rows, cols, &w) != LZ_OK)
        abort();
    return w;
}

static double rel_err(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - ref[i];
        num += d * d, den += ref[i] * ref[i];
    }
    return num != num ? INFINITY : sqrt(num / (den > 0 ? den : 1));
}
static double rel_err_f(const float *a, const float *ref, size_t n) {
    double *r = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        r[i] = ref[i];
    const double e = rel_err(a, r, n);
    free(r);
    return e;
}

/* The GEMM path's product on the host: x rounded to bf16, each token quantized by the row rule,
 * W = s . q, in double; y [T, rows]. */
static void model_gemm(double *y, const float *x, const fp8_host *w, int T) {
    const int C = w->cols;
    float *xb = malloc(sizeof(float) * C);
    uint8_t *xq = malloc((size_t)C);
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < C; c++)
            xb[c] = bf16_round(x[(size_t)t * C + c]);
        const float sx = lz_fp8_quantize_row(xb, C, xq);
        for (int o = 0; o < w->rows; o++) {
            double acc = 0;
            for (int c = 0; c < C; c++)
                acc += (double)lz_e4m3_to_float(xq[c]) * lz_e4m3_to_float(w->codes[(size_t)o * C + c]);
            y[(size_t)t * w->rows + o] = acc * sx * w->scales[o];
        }
    }
    free(xb);
    free(xq);
}

static void check(const char *what, int T, int rows, int cols, backend *cpu, void *c, backend *gpu, void *g,
                  const float *x, const fp8_host *w) {
    const size_t n = (size_t)T * rows;
    float *hc = download(cpu, c, n), *hg = download(gpu, g, n);
    const bool gemm = T > 8;
    const double e = rel_err_f(hg, hc, n), limit = gemm ? 6e-2 : 1e-2;
    CHECK_MSG(e <= limit, "%s T=%d [%d, %d]: rel err %.3g against the CPU > %.3g", what, T, rows, cols, e, limit);
    if (gemm && x && w) {
        double *m = malloc(sizeof(double) * n);
        model_gemm(m, x, w, T);
        const double em = rel_err(hg, m, n);
        CHECK_MSG(em <= 1e-2, "%s T=%d [%d, %d]: rel err %.3g against the quantized model > 1e-2", what, T, rows,
                  cols, em);
        free(m);
    }
    printf("  %-16s T=%3d [%5d, %4d]: rel err %.3g%s\n", what, T, rows, cols, e, gemm ? " (GEMM)" : " (GEMV)");
    free(hc);
    free(hg);
}

static void test_linear(backend *cpu, backend *gpu, int T, int rows, int cols, bool with_bias) {
    fp8_host h = fp8_make(rows, cols);
    lz_weight wc = fp8_upload(cpu, &h), wg = fp8_upload(gpu, &h);
    float *bias = malloc(sizeof(float) * rows);
    for (int r = 0; r < rows; r++)
        bias[r] = bf16_round(frand(-0.5f, 0.5f));
    lz_weight bc = f32_upload(cpu, bias, 1, rows), bg = f32_upload(gpu, bias, 1, rows);
    float *x = acts_host(T, cols);
    void *xc = act(cpu, x, (size_t)T * cols), *xg = act(gpu, x, (size_t)T * cols);
    void *yc = act(cpu, NULL, (size_t)T * rows), *yg = act(gpu, NULL, (size_t)T * rows);
    CHECK_MSG(cpu->ops->linear(cpu->be, yc, xc, &wc, with_bias ? &bc : NULL, T) == LZ_OK, "%s", lz_error_message());
    CHECK_MSG(gpu->ops->linear(gpu->be, yg, xg, &wg, with_bias ? &bg : NULL, T) == LZ_OK, "%s", lz_error_message());
    check(with_bias ? "linear+bias" : "linear", T, rows, cols, cpu, yc, gpu, yg, with_bias ? NULL : x, &h);

    // linear_residual: y (random) += x . W^T
    float *y0 = acts_host(T, rows);
    void *rc = act(cpu, y0, (size_t)T * rows), *rg = act(gpu, y0, (size_t)T * rows);
    void *tc = act(cpu, NULL, (size_t)T * rows), *tg = act(gpu, NULL, (size_t)T * rows);
    CHECK_MSG(cpu->ops->linear_residual(cpu->be, rc, tc, xc, &wc, NULL, T) == LZ_OK, "%s", lz_error_message());
    CHECK_MSG(gpu->ops->linear_residual(gpu->be, rg, tg, xg, &wg, NULL, T) == LZ_OK, "%s", lz_error_message());
    check("linear_residual", T, rows, cols, cpu, rc, gpu, rg, NULL, NULL);

    cpu->ops->free_weight(cpu->be, &wc), gpu->ops->free_weight(gpu->be, &wg);
    cpu->ops->free_weight(cpu->be, &bc), gpu->ops->free_weight(gpu->be, &bg);
    void *bufs_c[] = {xc, yc, rc, tc}, *bufs_g[] = {xg, yg, rg, tg};
    for (int i = 0; i < 4; i++)
        cpu->ops->free(cpu->be, bufs_c[i]), gpu->ops->free(gpu->be, bufs_g[i]);
    free(h.codes), free(h.scales), free(bias), free(x), free(y0);
}

/* q, k, v in FP8 and a one-row bf16 gate, one linear_many call (a Lizard layer's projections). */
static void test_linear_many(backend *cpu, backend *gpu, int T, int C) {
    const int rows[3] = {C, C / 4, C / 4};
    fp8_host h[3];
    lz_weight wc[4], wg[4];
    for (int i = 0; i < 3; i++) {
        h[i] = fp8_make(rows[i], C);
        wc[i] = fp8_upload(cpu, &h[i]), wg[i] = fp8_upload(gpu, &h[i]);
    }
    float *gate = malloc(sizeof(float) * C);
    for (int c = 0; c < C; c++)
        gate[c] = bf16_round(frand(-0.1f, 0.1f));
    wc[3] = f32_upload(cpu, gate, 1, C), wg[3] = f32_upload(gpu, gate, 1, C);
    float *x = acts_host(T, C);
    void *xc = act(cpu, x, (size_t)T * C), *xg = act(gpu, x, (size_t)T * C);
    void *oc[4], *og[4];
    const lz_weight *pc[4], *pg[4];
    for (int i = 0; i < 4; i++) {
        const int r = i < 3 ? rows[i] : 1;
        oc[i] = act(cpu, NULL, (size_t)T * r), og[i] = act(gpu, NULL, (size_t)T * r);
        pc[i] = &wc[i], pg[i] = &wg[i];
    }
    CHECK_MSG(cpu->ops->linear_many(cpu->be, 4, oc, xc, pc, NULL, T) == LZ_OK, "%s", lz_error_message());
    CHECK_MSG(gpu->ops->linear_many(gpu->be, 4, og, xg, pg, NULL, T) == LZ_OK, "%s", lz_error_message());
    const char *names[3] = {"linear_many q", "linear_many k", "linear_many v"};
    for (int i = 0; i < 3; i++)
        check(names[i], T, rows[i], C, cpu, oc[i], gpu, og[i], x, &h[i]);
    // the gate's outputs are single dot products: their error measured against the size of the
    // products summed (a sum that cancels shows bf16's rounding of x in full relative to itself)
    float *gc = download(cpu, oc[3], (size_t)T), *gg = download(gpu, og[3], (size_t)T);
    double num = 0, den = 0;
    for (int t = 0; t < T; t++) {
        num += ((double)gg[t] - gc[t]) * ((double)gg[t] - gc[t]);
        for (int c = 0; c < C; c++)
            den += (double)x[(size_t)t * C + c] * gate[c] * x[(size_t)t * C + c] * gate[c];
    }
    const double e = num != num ? INFINITY : sqrt(num / den);
    CHECK_MSG(e <= 1e-2, "linear_many's bf16 gate T=%d: rel err %.3g > 1e-2", T, e);
    for (int i = 0; i < 4; i++) {
        cpu->ops->free_weight(cpu->be, &wc[i]), gpu->ops->free_weight(gpu->be, &wg[i]);
        cpu->ops->free(cpu->be, oc[i]), gpu->ops->free(gpu->be, og[i]);
        if (i < 3)
            free(h[i].codes), free(h[i].scales);
    }
    cpu->ops->free(cpu->be, xc), gpu->ops->free(gpu->be, xg);
    free(gc), free(gg), free(gate), free(x);
}

/* out = silu(rmsnorm(x) . Wg^T) * (rmsnorm(x) . Wu^T), both FP8. */
static void test_norm_swiglu(backend *cpu, backend *gpu, int T, int C, int I) {
    fp8_host hg = fp8_make(I, C), hu = fp8_make(I, C);
    lz_weight gc = fp8_upload(cpu, &hg), gg = fp8_upload(gpu, &hg), uc = fp8_upload(cpu, &hu), ug = fp8_upload(gpu, &hu);
    float *norm = malloc(sizeof(float) * C);
    for (int c = 0; c < C; c++)
        norm[c] = bf16_round(frand(0.5f, 1.5f));
    lz_weight nc = f32_upload(cpu, norm, 1, C), ng = f32_upload(gpu, norm, 1, C);
    float *x = acts_host(T, C);
    void *xc = act(cpu, x, (size_t)T * C), *xg = act(gpu, x, (size_t)T * C);
    void *xnc = act(cpu, NULL, (size_t)T * C), *xng = act(gpu, NULL, (size_t)T * C);
    void *upc = act(cpu, NULL, (size_t)T * I), *upg = act(gpu, NULL, (size_t)T * I);
    void *oc = act(cpu, NULL, (size_t)T * I), *og = act(gpu, NULL, (size_t)T * I);
    CHECK_MSG(cpu->ops->norm_swiglu(cpu->be, oc, xnc, upc, xc, &nc, 1e-5f, &gc, NULL, &uc, NULL, T) == LZ_OK, "%s",
              lz_error_message());
    CHECK_MSG(gpu->ops->norm_swiglu(gpu->be, og, xng, upg, xg, &ng, 1e-5f, &gg, NULL, &ug, NULL, T) == LZ_OK, "%s",
              lz_error_message());
    check("norm_swiglu", T, I, C, cpu, oc, gpu, og, NULL, NULL);
    lz_weight *ws[6] = {&gc, &uc, &nc, &gg, &ug, &ng};
    for (int i = 0; i < 6; i++)
        (i < 3 ? cpu : gpu)->ops->free_weight((i < 3 ? cpu : gpu)->be, ws[i]);
    void *bufs_c[] = {xc, xnc, upc, oc}, *bufs_g[] = {xg, xng, upg, og};
    for (int i = 0; i < 4; i++)
        cpu->ops->free(cpu->be, bufs_c[i]), gpu->ops->free(gpu->be, bufs_g[i]);
    free(hg.codes), free(hg.scales), free(hu.codes), free(hu.scales), free(norm), free(x);
}

/* A softmax layer's FP8 q, k, v with RoPE (linear_many_rope): at one token the RoPE epilogue of the FP8
 * GEMV, at 3 tokens (three sequences) and 20 (one prompt) the products then the rope op; against the
 * CPU's products then its rope. */
static void test_linear_rope(backend *cpu, backend *gpu, int Hq, int Hkv, int d, int C, int n_seqs, int len) {
    enum { MAX_SEQS = 4 };
    int32_t slot[MAX_SEQS], start[MAX_SEQS], lens[MAX_SEQS], pos[MAX_SEQS], token_pos[64], rows[64], ids[64] = {0};
    int T = 0;
    for (int s = 0; s < n_seqs; s++) {
        slot[s] = s, start[s] = T, lens[s] = len, pos[s] = 37 * s + 5 * (s == 0 ? 1000 : 1);
        for (int i = 0; i < len; i++, T++)
            token_pos[T] = pos[s] + i, rows[T] = T;
    }
    const lz_batch b = {n_seqs, T, slot, start, lens, pos, token_pos};
    CHECK_MSG(cpu->ops->begin_step(cpu->be, ids, &b, rows, T) == LZ_OK, "%s", lz_error_message());
    CHECK_MSG(gpu->ops->begin_step(gpu->be, ids, &b, rows, T) == LZ_OK, "%s", lz_error_message());
    lz_attn_dims dims = {Hq, Hkv, d, 1, 0, Hkv, 8, 4, 0, true};
    float freq[128];
    for (int j = 0; j < d / 2; j++)
        freq[j] = 1.0f / powf(500000.0f, 2.0f * j / d);
    void *cf, *gf;
    if (cpu->ops->alloc(cpu->be, sizeof freq, &cf) != LZ_OK || cpu->ops->upload_f32(cpu->be, cf, freq, d / 2) != LZ_OK ||
        gpu->ops->alloc(gpu->be, sizeof freq, &gf) != LZ_OK || gpu->ops->upload_f32(gpu->be, gf, freq, d / 2) != LZ_OK)
        abort();
    const int r[3] = {Hq * d, Hkv * d, Hkv * d};
    fp8_host h[3];
    lz_weight wc[3], wg[3];
    void *oc[3], *og[3];
    const lz_weight *pc[3], *pg[3];
    for (int i = 0; i < 3; i++) {
        h[i] = fp8_make(r[i], C);
        wc[i] = fp8_upload(cpu, &h[i]), wg[i] = fp8_upload(gpu, &h[i]);
        oc[i] = act(cpu, NULL, (size_t)T * r[i]), og[i] = act(gpu, NULL, (size_t)T * r[i]);
        pc[i] = &wc[i], pg[i] = &wg[i];
    }
    float *x = acts_host(T, C);
    void *xc = act(cpu, x, (size_t)T * C), *xg = act(gpu, x, (size_t)T * C);
    CHECK_MSG(cpu->ops->linear_many(cpu->be, 3, oc, xc, pc, NULL, T) == LZ_OK, "%s", lz_error_message());
    CHECK_MSG(cpu->ops->rope(cpu->be, oc[0], oc[1], cf, &b, &dims) == LZ_OK, "%s", lz_error_message());
    CHECK_MSG(gpu->ops->linear_many_rope(gpu->be, 3, og, xg, pg, NULL, T, gf, &b, &dims) == LZ_OK, "%s",
              lz_error_message());
    const char *names[3] = {"rope q", "rope k", "rope v"};
    for (int i = 0; i < 3; i++)
        check(names[i], T, r[i], C, cpu, oc[i], gpu, og[i], NULL, NULL);
    for (int i = 0; i < 3; i++) {
        cpu->ops->free_weight(cpu->be, &wc[i]), gpu->ops->free_weight(gpu->be, &wg[i]);
        cpu->ops->free(cpu->be, oc[i]), gpu->ops->free(gpu->be, og[i]);
        free(h[i].codes), free(h[i].scales);
    }
    cpu->ops->free(cpu->be, xc), gpu->ops->free(gpu->be, xg), cpu->ops->free(cpu->be, cf), gpu->ops->free(gpu->be, gf);
    free(x);
}

/* The device's quantizer (random weights of a shape) against the host rule, bit for bit. */
static void test_quantize_op(backend *gpu, int rows, int cols) {
    float *w = malloc(sizeof(float) * (size_t)rows * cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++) // bf16 values, as the device holds them
        w[i] = bf16_round(frand(-1.0f, 1.0f) * ((i / cols) % 7 == 0 ? 1e-3f : 1.0f));
    for (int c = 0; c < cols; c++)
        w[(size_t)2 * cols + c] = 0.0f; // a zero row: scale 1
    lz_weight d = f32_upload(gpu, w, rows, cols);
    CHECK_MSG(gpu->ops->quantize_fp8 && gpu->ops->quantize_fp8(gpu->be, &d) == LZ_OK, "%s", lz_error_message());
    CHECK(d.dtype == LZ_DTYPE_F8_E4M3 && d.scale);
    uint8_t *codes = malloc((size_t)rows * cols), *ref = malloc((size_t)cols);
    float *scales = malloc(sizeof(float) * rows);
    CHECK(gpu->ops->sync(gpu->be) == LZ_OK);
    CHECK(cudaMemcpy(codes, d.data, (size_t)rows * cols, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(scales, d.scale, sizeof(float) * rows, cudaMemcpyDeviceToHost) == cudaSuccess);
    long bad = 0;
    for (int r = 0; r < rows; r++) {
        const float s = lz_fp8_quantize_row(w + (size_t)r * cols, cols, ref);
        bad += s != scales[r];
        for (int c = 0; c < cols; c++)
            bad += ref[c] != codes[(size_t)r * cols + c];
    }
    CHECK_MSG(bad == 0, "quantize_fp8 [%d, %d]: %ld codes or scales differ from the host rule", rows, cols, bad);
    printf("  quantize_fp8     [%5d, %4d]: %ld differences from the host rule\n", rows, cols, bad);
    gpu->ops->free_weight(gpu->be, &d);
    free(w), free(codes), free(ref), free(scales);
}

/* The linear ops at every step size and shape in `tokens`. */
static void run_ops(backend *cpu, backend *gpu, const int *tokens, int n_tokens) {
    const int shapes[][2] = {{64, 64}, {160, 64}, {64, 160}, {1024, 256}, {3000, 512}, {6000, 256}, {32, 4096}};
    for (int t = 0; t < n_tokens; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            test_linear(cpu, gpu, tokens[t], shapes[s][0], shapes[s][1], (t + s) % 3 == 0);
    for (int t = 0; t < n_tokens; t++) {
        test_linear_many(cpu, gpu, tokens[t], 256);
        test_norm_swiglu(cpu, gpu, tokens[t], 256, 768);
    }
}

int main(void) {
    backend cpu, gpu;
    setvbuf(stdout, NULL, _IOLBF, 0); // (the failures on stderr land between the lines they follow)
    CHECK(lz_cpu_backend_create(&cpu.be, &cpu.ops) == LZ_OK);
    CHECK_MSG(lz_knobs_load() == LZ_OK, "%s", lz_error_message());
    lz_error_clear();
    if (lz_cuda_backend_create(LZ_DTYPE_BF16, &gpu.be, &gpu.ops) != LZ_OK) {
        fprintf(stderr, "test_gpu_fp8: skipped: %s\n", lz_error_message());
        return 77;
    }
    const int tokens[] = {1, 2, 3, 4, 5, 8, 9, 64, 300}, gemm_tokens[] = {9, 64, 300};
    printf("FP8 products scaled inside cuBLASLt where it offers that (LIZARD_FP8_SCALED=1):\n");
    run_ops(&cpu, &gpu, tokens, (int)(sizeof tokens / sizeof tokens[0]));
    test_norm_swiglu(&cpu, &gpu, 1, 4096, 14336); // LLaMA-3-8B's MLP at one token
    test_linear_rope(&cpu, &gpu, 8, 2, 128, 256, 1, 1);  // one token: the RoPE epilogue (LLaMA's head_dim)
    test_linear_rope(&cpu, &gpu, 4, 4, 64, 1024, 1, 1);  // group 1, a long row
    test_linear_rope(&cpu, &gpu, 3, 1, 32, 64, 3, 1);    // three sequences: the GEMV, then rope
    test_linear_rope(&cpu, &gpu, 4, 2, 64, 128, 1, 20);  // a prompt: the GEMM path, then rope
    test_quantize_op(&gpu, 37, 4096);
    test_quantize_op(&gpu, 300, 160);
    gpu.ops->destroy(gpu.be);
    // the other path of the prompt-sized products: fp32 out of cuBLASLt, the scales in a pass of their own
    setenv("LIZARD_FP8_SCALED", "0", 1);
    CHECK_MSG(lz_knobs_load() == LZ_OK && lz_cuda_backend_create(LZ_DTYPE_BF16, &gpu.be, &gpu.ops) == LZ_OK, "%s",
              lz_error_message());
    printf("FP8 products in fp32, then the epilogue kernel (LIZARD_FP8_SCALED=0):\n");
    run_ops(&cpu, &gpu, gemm_tokens, (int)(sizeof gemm_tokens / sizeof gemm_tokens[0]));
    gpu.ops->destroy(gpu.be);
    cpu.ops->destroy(cpu.be);
    printf("test_gpu_fp8: %d checks, %d failed\n", lz_test_checks, lz_test_failures);
    return lz_test_failures ? 1 : 0;
}
