/* test_gpu_train.c - the CUDA training kernels (kernels/cuda/train_cuda.h)
 * against the CPU f32 reference (kernels/cpu/train_kernels.h): every forward
 * piece, every backward, and the whole layer's loss and five gradients, on
 * random shapes: T not a multiple of the 64-token chunk, T < window, one
 * chunk exactly, several sequences per call, GQA / MQA / per-query-head
 * state, shared and per-head maps, softmax and exp maps, with and without
 * the normaliser, no meta logits, gates near 0 and near 1. Outputs are
 * poisoned with NaN before each call, so an unwritten element fails;
 * accumulated outputs (+=) start from random values, so an overwrite fails.
 *
 * Bounds (relative L2 error against the CPU f32 result): 1e-4 for forwards
 * and the loss, 1e-3 for gradients. Both sides are fp32; they differ only in
 * summation order (tiled products, chunk-parallel scans against the CPU's
 * sequential loops), which gives errors of a few 1e-6 per sum of O(100)
 * terms; the gradients go through one or two more such sums and divisions by
 * the GLA normaliser, and the float CPU build itself agrees with the double
 * build only to 1e-3 of the largest entry (docs/distillation.md), so 1e-3
 * is the bound a correct kernel can be held to, while a missing or wrong
 * term moves a gradient by far more (measured: forwards <= 3e-7, gradients
 * <= 3e-6). One exception, the GLA's dphi with gates near 0, where the true
 * value is a near-cancellation: there the bound is 4x the CPU f32 build's own
 * error against its f64 build (printed when it applies).
 * A second pass repeats everything on the bf16 GLA path (bounds 2e-2 / 3e-2,
 * reasoned at the pass). The largest errors are printed. Exit 77 (skip) when
 * no GPU is visible. */
#include <math.h>   // sqrt, INFINITY
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free
#include <string.h> // memcpy

#include <cuda_runtime_api.h> // cudaMalloc, cudaMemcpy, cudaMemset

#include "cpu/train_kernels.h" // the reference
#include "cuda/train_cuda.h"   // what is tested
#include "test_util.h"         // CHECK_MSG, lz_test_finish

static unsigned rng = 2718u;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}
static float *rand_host(size_t n, float lo, float hi) {
    float *a = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        a[i] = frand(lo, hi);
    return a;
}
static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        abort();
    return p;
}

/* Device copy of host floats; NULL: NaN poison (all bits set). */
static float *dev(const float *host, size_t n) {
    float *p;
    if (cudaMalloc((void **)&p, sizeof(float) * (n ? n : 1)) != cudaSuccess)
        abort();
    if (host)
        CHECK(cudaMemcpy(p, host, sizeof(float) * n, cudaMemcpyHostToDevice) == cudaSuccess);
    else
        CHECK(cudaMemset(p, 0xff, sizeof(float) * (n ? n : 1)) == cudaSuccess);
    return p;
}
static float *host_of(const float *d, size_t n) {
    float *h = xmalloc(sizeof(float) * n);
    CHECK_MSG(cudaMemcpy(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    return h;
}
static void poison(float *d, size_t n) { CHECK(cudaMemset(d, 0xff, sizeof(float) * n) == cudaSuccess); }

static double rel_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)a[i] - ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    if (num != num)
        return INFINITY; // a NaN: an unwritten (poisoned) element
    return sqrt(num / (den > 0 ? den : 1));
}

/* The same against a double reference. */
static double rel_err_d(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)a[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}
static double *to_f64(const float *a, size_t n) {
    double *o = xmalloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        o[i] = a[i];
    return o;
}

static double worst_fwd, worst_grad;
static double FWD = 1e-4, GRAD = 1e-3; /* the bounds of the pass (the bf16 GLA pass raises them) */
static const char *shape_name;

/* The device result d against the host reference ref. */
static void compare(const char *what, const float *d, const float *ref, size_t n, double limit) {
    CHECK_MSG(cudaDeviceSynchronize() == cudaSuccess, "%s: %s", what, cudaGetErrorString(cudaGetLastError()));
    float *h = host_of(d, n);
    const double e = rel_err(h, ref, n);
    CHECK_MSG(e <= limit, "%s %s: rel err %.3g > %.3g", shape_name, what, e, limit);
    double *worst = limit <= FWD ? &worst_fwd : &worst_grad;
    if (e > *worst && limit <= GRAD) // a bound raised for conditioning says nothing of the kernels' accuracy
        *worst = e;
    free(h);
}
#define OK(call) CHECK_MSG((call) == LZ_OK, "%s: %s", #call, lz_error_message())

typedef struct {
    const char *name;
    lz_lizard_geom g;
    int n_seq, T, C;
    float gate_lo, gate_hi; /* gate logits drawn from here */
} shape;

/* log gamma [N] = log sigmoid of logits in [lo, hi] */
static float *log_gates(size_t N, float lo, float hi) {
    float *lg = rand_host(N, lo, hi);
    for (size_t i = 0; i < N; i++)
        lg[i] = lg[i] >= 0 ? -log1pf(expf(-lg[i])) : lg[i] - log1pf(expf(lg[i]));
    return lg;
}

/* Each op alone, on the same inputs on both sides. */
static void test_ops(const shape *sh) {
    const lz_lizard_geom *g = &sh->g;
    const int T = sh->T, B = sh->n_seq, N = B * T, d = g->d, f = g->f, F = 2 * f, C = sh->C;
    const int chunks = lz_train_chunks(T);
    const size_t nq = (size_t)N * g->Hq * d, nk = (size_t)N * g->Hkv * d, npq = (size_t)N * g->Hq * F,
                 npk = (size_t)N * g->Hs * F, nS = (size_t)B * chunks * g->Hs * F * d,
                 nz = (size_t)B * chunks * g->Hs * F;
    float *q = rand_host(nq, -1, 1), *k = rand_host(nk, -1, 1), *v = rand_host(nk, -1, 1),
          *x = rand_host((size_t)N * C, -1, 1);
    float *wq = rand_host(lz_lizard_wq_numel(g), -0.3f, 0.3f), *wk = rand_host(lz_lizard_wk_numel(g), -0.3f, 0.3f);
    float *wg = rand_host(C, -0.3f, 0.3f), *meta = rand_host(g->m, -1, 1);
    float *dq = dev(q, nq), *dk = dev(k, nk), *dv = dev(v, nk), *dx = dev(x, (size_t)N * C);
    float *dwq = dev(wq, lz_lizard_wq_numel(g)), *dwk = dev(wk, lz_lizard_wk_numel(g)), *dwg = dev(wg, C),
          *dmeta = dev(meta, g->m);

    // feature maps, forward and backward (dW += from a random start)
    float *phi_q = xmalloc(sizeof(float) * npq), *phi_k = xmalloc(sizeof(float) * npk);
    feature_map_train_forward_f32(phi_q, q, wq, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map);
    feature_map_train_forward_f32(phi_k, k, wk, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map);
    float *d_phi_q = dev(NULL, npq), *d_phi_k = dev(NULL, npk);
    OK(lz_cuda_feature_map_train_forward(d_phi_q, dq, dwq, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map));
    OK(lz_cuda_feature_map_train_forward(d_phi_k, dk, dwk, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map));
    compare("phi_q", d_phi_q, phi_q, npq, FWD);
    compare("phi_k", d_phi_k, phi_k, npk, FWD);
    {
        float *dphi = rand_host(npk, -1, 1), *dw = rand_host(lz_lizard_wk_numel(g), -1, 1);
        float *d_dphi = dev(dphi, npk), *d_dw = dev(dw, lz_lizard_wk_numel(g));
        float *scr = dev(NULL, lz_cuda_feature_map_backward_scratch(g->n_wk, N, g->Hs, d, f));
        feature_map_backward_f32(dw, dphi, phi_k, k, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map);
        OK(lz_cuda_feature_map_backward(d_dw, d_dphi, d_phi_k, dk, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map, scr));
        compare("dW_k", d_dw, dw, lz_lizard_wk_numel(g), GRAD);
        cudaFree(scr), cudaFree(d_dphi), cudaFree(d_dw), free(dphi), free(dw);
        dphi = rand_host(npq, -1, 1), dw = rand_host(lz_lizard_wq_numel(g), -1, 1);
        d_dphi = dev(dphi, npq), d_dw = dev(dw, lz_lizard_wq_numel(g));
        scr = dev(NULL, lz_cuda_feature_map_backward_scratch(g->n_wq, N, g->Hq, d, f));
        feature_map_backward_f32(dw, dphi, phi_q, q, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map);
        OK(lz_cuda_feature_map_backward(d_dw, d_dphi, d_phi_q, dq, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map, scr));
        compare("dW_q", d_dw, dw, lz_lizard_wq_numel(g), GRAD);
        cudaFree(scr), cudaFree(d_dphi), cudaFree(d_dw), free(dphi), free(dw);
    }
    // gate
    {
        float *logit = xmalloc(sizeof(float) * N), *lg = xmalloc(sizeof(float) * N);
        float *d_logit = dev(NULL, N), *d_lg = dev(NULL, N);
        gate_train_forward_f32(logit, lg, x, wg, N, C);
        OK(lz_cuda_gate_train_forward(d_logit, d_lg, dx, dwg, N, C));
        compare("gate logit", d_logit, logit, N, FWD);
        compare("log gamma", d_lg, lg, N, FWD);
        float *dlg = rand_host(N, -1, 1), *dw = rand_host(C, -1, 1), *d_dlg = dev(dlg, N), *d_dw = dev(dw, C);
        float *scr = dev(NULL, lz_cuda_gate_backward_scratch(N, C));
        gate_backward_f32(dw, dlg, logit, x, N, C);
        OK(lz_cuda_gate_backward(d_dw, d_dlg, d_logit, dx, N, C, scr));
        compare("dW_gamma", d_dw, dw, C, GRAD);
        cudaFree(scr), cudaFree(d_dlg), cudaFree(d_dw), cudaFree(d_logit), cudaFree(d_lg);
        free(logit), free(lg), free(dlg), free(dw);
    }
    // GLA on the CPU's feature maps and gates drawn from the shape's range
    float *lg = log_gates(N, sh->gate_lo, sh->gate_hi), *d_lg = dev(lg, N);
    float *out = xmalloc(sizeof(float) * nq), *S0 = xmalloc(sizeof(float) * nS), *z0 = xmalloc(sizeof(float) * nz);
    for (int b = 0; b < B; b++) {
        const size_t r = (size_t)b * T;
        gla_train_forward_f32(out + r * g->Hq * d, S0 + (size_t)b * chunks * g->Hs * F * d,
                              z0 + (size_t)b * chunks * g->Hs * F, phi_q + r * g->Hq * F, phi_k + r * g->Hs * F,
                              v + r * g->Hkv * d, lg + r, T, g);
    }
    CHECK(cudaMemcpy(d_phi_q, phi_q, sizeof(float) * npq, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(d_phi_k, phi_k, sizeof(float) * npk, cudaMemcpyHostToDevice) == cudaSuccess);
    float *d_out = dev(NULL, nq), *d_S0 = dev(NULL, nS), *d_z0 = dev(NULL, nz), *d_den = dev(NULL, (size_t)N * g->Hq);
    OK(lz_cuda_gla_train_forward(d_out, d_S0, d_z0, d_den, d_phi_q, d_phi_k, dv, d_lg, B, T, g));
    compare("GLA out", d_out, out, nq, FWD);
    compare("GLA S0", d_S0, S0, nS, FWD);
    compare("GLA z0", d_z0, z0, nz, FWD);
    {
        float *dout = rand_host(nq, -1, 1), *d_dout = dev(dout, nq);
        float *dpq = xmalloc(sizeof(float) * npq), *dpk = xmalloc(sizeof(float) * npk),
              *dlg = xmalloc(sizeof(float) * N);
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T;
            gla_backward_f32(dpq + r * g->Hq * F, dpk + r * g->Hs * F, dlg + r, dout + r * g->Hq * d,
                             out + r * g->Hq * d, S0 + (size_t)b * chunks * g->Hs * F * d,
                             z0 + (size_t)b * chunks * g->Hs * F, phi_q + r * g->Hq * F, phi_k + r * g->Hs * F,
                             v + r * g->Hkv * d, lg + r, T, g);
        }
        float *d_dpq = dev(NULL, npq), *d_dpk = dev(NULL, npk), *d_dlg = dev(NULL, N);
        float *scr = dev(NULL, lz_cuda_gla_backward_scratch(B, T, g));
        OK(lz_cuda_gla_backward(d_dpq, d_dpk, d_dlg, d_dout, d_out, d_S0, d_z0, d_den, d_phi_q, d_phi_k, dv, d_lg, B, T,
                                g, scr));
        /* Where the true gradient is a near-cancellation (gates near 0: out_i ~ v_i, so
         * v_i . dnum_i + dden_i ~ 0) no fp32 result has 1e-3 relative accuracy; there
         * the bound is 4x the CPU f32 build's own error against its f64 build. */
        double *D[10];
        const size_t nn[10] = {npq, npk, nk, N, nq, npq, npk, N, nS, nz};
        const float *src[5] = {phi_q, phi_k, v, lg, dout};
        for (int i = 0; i < 10; i++)
            D[i] = i < 5 ? to_f64(src[i], nn[i]) : xmalloc(sizeof(double) * (nn[i] ? nn[i] : 1));
        double *o64 = xmalloc(sizeof(double) * nq);
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T, so = (size_t)b * chunks * g->Hs * F;
            gla_train_forward_f64(o64 + r * g->Hq * d, D[8] + so * d, D[9] + so, D[0] + r * g->Hq * F,
                                  D[1] + r * g->Hs * F, D[2] + r * g->Hkv * d, D[3] + r, T, g);
            gla_backward_f64(D[5] + r * g->Hq * F, D[6] + r * g->Hs * F, D[7] + r, D[4] + r * g->Hq * d,
                             o64 + r * g->Hq * d, D[8] + so * d, D[9] + so, D[0] + r * g->Hq * F, D[1] + r * g->Hs * F,
                             D[2] + r * g->Hkv * d, D[3] + r, T, g);
        }
        const float *cpu[3] = {dpq, dpk, dlg}, *gpu[3] = {d_dpq, d_dpk, d_dlg};
        const char *what[3] = {"GLA dphi_q", "GLA dphi_k", "GLA dlog_gamma"};
        for (int i = 0; i < 3; i++) {
            const double e_ref = rel_err_d(cpu[i], D[5 + i], nn[5 + i]);
            if (4 * e_ref > 1e-3 && GRAD > 1e-3) { // bf16 rounding through such a cancellation: no bound holds
                fprintf(stderr, "test_gpu_train: %s %s: not checked in bf16 (CPU f32 vs f64 %.3g)\n", shape_name,
                        what[i], e_ref);
                continue;
            }
            if (4 * e_ref > 1e-3)
                fprintf(stderr, "test_gpu_train: %s %s: CPU f32 vs f64 %.3g: bound %.3g\n", shape_name, what[i], e_ref,
                        4 * e_ref);
            compare(what[i], gpu[i], cpu[i], nn[5 + i], 4 * e_ref > 1e-3 ? 4 * e_ref : GRAD);
        }
        for (int i = 0; i < 10; i++)
            free(D[i]);
        free(o64);
        cudaFree(d_dout), cudaFree(d_dpq), cudaFree(d_dpk), cudaFree(d_dlg), cudaFree(scr);
        free(dout), free(dpq), free(dpk), free(dlg);
    }
    // window
    {
        float *win = xmalloc(sizeof(float) * nq), *d_win = dev(NULL, nq), *d_stats = dev(NULL, (size_t)2 * N * g->Hq);
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T;
            window_train_forward_f32(win + r * g->Hq * d, q + r * g->Hq * d, k + r * g->Hkv * d, v + r * g->Hkv * d,
                                     meta, T, g);
        }
        OK(lz_cuda_window_train_forward(d_win, d_stats, dq, dk, dv, dmeta, B, T, g));
        compare("WIN", d_win, win, nq, FWD);
        float *dwin = rand_host(nq, -1, 1), *dm = rand_host(g->m, -1, 1), *d_dwin = dev(dwin, nq),
              *d_dm = dev(dm, g->m);
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T;
            window_backward_f32(dm, dwin + r * g->Hq * d, win + r * g->Hq * d, q + r * g->Hq * d, k + r * g->Hkv * d,
                                meta, T, g);
        }
        float *scr = dev(NULL, lz_cuda_window_backward_scratch(B, T, g));
        OK(lz_cuda_window_backward(d_dm, d_dwin, d_win, d_stats, dmeta, B, T, g, scr));
        if (g->m > 0)
            compare("dmeta", d_dm, dm, g->m, GRAD);
        cudaFree(d_win), cudaFree(d_stats), cudaFree(d_dwin), cudaFree(d_dm), cudaFree(scr);
        free(win), free(dwin), free(dm);
    }
    float *frees[] = {dq, dk, dv, dx, dwq, dwk, dwg, dmeta, d_phi_q, d_phi_k, d_lg, d_out, d_S0, d_z0, d_den};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        cudaFree(frees[i]);
    free(q), free(k), free(v), free(x), free(wq), free(wk), free(wg), free(meta), free(phi_q), free(phi_k), free(lg);
    free(out), free(S0), free(z0);
}

/* The whole layer: loss and the five gradients. Column 0 of x is 1 and
 * W_gamma[0] a bias drawn from the shape's gate range, so the gates sit there. */
static void test_layer(const shape *sh) {
    const lz_lizard_geom *g = &sh->g;
    const int T = sh->T, B = sh->n_seq, N = B * T, C = sh->C;
    const size_t nq = (size_t)N * g->Hq * g->d, nk = (size_t)N * g->Hkv * g->d;
    const size_t numel[5] = {lz_lizard_wq_numel(g), lz_lizard_wk_numel(g), (size_t)C, (size_t)g->m, 1};
    float *q = rand_host(nq, -1, 1), *k = rand_host(nk, -1, 1), *v = rand_host(nk, -1, 1), *tg = rand_host(nq, -1, 1);
    float *x = rand_host((size_t)N * C, -0.2f, 0.2f);
    for (int t = 0; t < N; t++)
        x[(size_t)t * C] = 1;
    float *hp[5], *hg[5], *dp[5], *dg[5];
    const float lo[5] = {-0.3f, -0.3f, -0.1f, -1, 0.5f}, hi[5] = {0.3f, 0.3f, 0.1f, 1, 1.5f};
    for (int i = 0; i < 5; i++) {
        hp[i] = rand_host(numel[i], lo[i], hi[i]);
        hg[i] = rand_host(numel[i], -1e-3f, 1e-3f); // accumulated into
        dp[i] = dev(hp[i], numel[i]);
        dg[i] = dev(hg[i], numel[i]);
    }
    hp[2][0] = frand(sh->gate_lo, sh->gate_hi);
    CHECK(cudaMemcpy(dp[2], hp[2], sizeof(float) * C, cudaMemcpyHostToDevice) == cudaSuccess);
    const lz_lizard_params_f32 p = {hp[0], hp[1], hp[2], hp[3], hp[4]}, pd = {dp[0], dp[1], dp[2], dp[3], dp[4]};
    lz_lizard_params_f32 gr = {hg[0], hg[1], hg[2], hg[3], hg[4]}, gd = {dg[0], dg[1], dg[2], dg[3], dg[4]};
    const float scale = (float)(1.0 / (double)nq);
    lz_lizard_scratch_f32 cs;
    CHECK(lz_lizard_scratch_create_f32(&cs, g, T, C) == 0);
    double sse = 0;
    for (int b = 0; b < B; b++) {
        const size_t r = (size_t)b * T;
        sse += lz_lizard_layer_sse_f32(&p, &gr, scale, x + r * C, q + r * g->Hq * g->d, k + r * g->Hkv * g->d,
                                       v + r * g->Hkv * g->d, tg + r * g->Hq * g->d, T, g, &cs);
    }
    lz_lizard_scratch_free_f32(&cs);
    float *dx = dev(x, (size_t)N * C), *dq = dev(q, nq), *dk = dev(k, nk), *dv = dev(v, nk), *dt = dev(tg, nq);
    lz_lizard_cuda_scratch s;
    OK(lz_lizard_cuda_scratch_create(&s, g, B, T, C));
    // poison every intermediate: the layer must write what it reads
    float *inter[] = {s.phi_q, s.phi_k, s.logit, s.lg, s.gla, s.win, s.dy, s.dphi_q, s.dphi_k, s.dlg, s.dwin};
    const size_t inter_n[] = {(size_t)N * g->Hq * 2 * g->f, (size_t)N * g->Hs * 2 * g->f, N, N, nq, nq, nq,
                              (size_t)N * g->Hq * 2 * g->f, (size_t)N * g->Hs * 2 * g->f, N, nq};
    for (size_t i = 0; i < sizeof inter / sizeof inter[0]; i++)
        poison(inter[i], inter_n[i]);
    double sse_gpu = -1, energy = -1, energy_ref = 0;
    for (size_t e = 0; e < nq; e++)
        energy_ref += (double)tg[e] * tg[e];
    OK(lz_lizard_layer_sse_cuda(&sse_gpu, &energy, &pd, &gd, scale, dx, dq, dk, dv, dt, B, T, g, &s));
    CHECK_MSG(fabs(energy - energy_ref) <= 1e-9 * energy_ref, "%s sum of target^2 %.12g vs %.12g", shape_name, energy,
              energy_ref);
    CHECK_MSG(fabs(sse_gpu - sse) <= FWD * fabs(sse), "%s layer SSE %.9g vs CPU %.9g", shape_name, sse_gpu, sse);
    const char *names[5] = {"layer dW_q", "layer dW_k", "layer dW_gamma", "layer dmeta", "layer dalpha"};
    for (int i = 0; i < 5; i++)
        if (numel[i] > 0)
            compare(names[i], dg[i], hg[i], numel[i], GRAD);
    // the loss alone (no gradient) gives the same SSE
    double sse_only = -1;
    OK(lz_lizard_layer_sse_cuda(&sse_only, NULL, &pd, NULL, scale, dx, dq, dk, dv, dt, B, T, g, &s));
    CHECK_MSG(sse_only == sse_gpu, "%s SSE without gradient %.9g vs %.9g", shape_name, sse_only, sse_gpu);
    lz_lizard_cuda_scratch_free(&s);
    for (int i = 0; i < 5; i++)
        cudaFree(dp[i]), cudaFree(dg[i]), free(hp[i]), free(hg[i]);
    cudaFree(dx), cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dt);
    free(q), free(k), free(v), free(tg), free(x);
}

int main(void) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "test_gpu_train: skipped: no CUDA device\n");
        return 77;
    }
    //                       Hq Hkv Hs n_wq n_wk  d    f    w   m  norm   exp  n_seq  T    C  gate logits
    const shape shapes[] = {
        {"gqa-3chunks", {4, 2, 2, 4, 2, 16, 8, 4, 3, true, false}, 2, 150, 40, -3, 3},
        {"one-chunk-exp-shared", {8, 2, 8, 1, 1, 32, 16, 16, 2, true, true}, 1, 64, 33, -3, 3},
        {"mqa-T<w-nonorm", {4, 1, 1, 4, 1, 64, 32, 130, 0, false, false}, 2, 100, 64, -3, 3},
        {"llama-head-gates~1", {8, 4, 4, 8, 4, 128, 64, 8, 4, true, false}, 2, 129, 96, 8, 12},
        {"gates~0", {2, 2, 2, 2, 2, 16, 8, 4, 1, true, false}, 3, 70, 24, -14, -9},
        {"keys-per-qhead", {4, 2, 4, 4, 4, 32, 16, 32, 2, true, false}, 1, 200, 32, -2, 4},
        {"short", {2, 1, 1, 1, 1, 16, 8, 64, 1, true, false}, 2, 5, 16, -3, 3},
    };
    for (int pass = 0; pass < 2; pass++) {
        /* pass 1: the bf16 GLA path (train_cuda.h). bf16 keeps 8 significant bits (unit roundoff
         * 2^-9 ~ 2e-3); every product rounds both operands, and the backward chains up to three
         * products (v . dnum, then g_it phi, then the feature map's), so ~1e-2 is expected and
         * 3e-2 is the bound (2e-2 for forwards, as the bf16 inference ops in test_gpu_ops). */
        lz_cuda_train_set_gla_precision(pass ? LZ_GLA_BF16 : LZ_GLA_FP32);
        FWD = pass ? 2e-2 : 1e-4, GRAD = pass ? 3e-2 : 1e-3;
        worst_fwd = worst_grad = 0;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            shape_name = shapes[i].name;
            test_ops(&shapes[i]);
            test_layer(&shapes[i]);
            fprintf(stderr, "test_gpu_train: %s %-22s done (%d checks, %d failed so far)\n", pass ? "bf16" : "fp32",
                    shape_name, lz_test_checks, lz_test_failures);
        }
        fprintf(stderr,
                "test_gpu_train: %s GLA: largest rel err: forwards %.3g (bound %.0e), gradients %.3g (bound %.0e)\n",
                pass ? "bf16" : "fp32", worst_fwd, FWD, worst_grad, GRAD);
    }
    return lz_test_finish("test_gpu_train");
}
