/* test_gpu_backward_attn.c - fine-tuning's attention backwards on the GPU against the CPU f32
 * reference (kernels/cpu/train_kernels.h):
 *   - the distillation kernels' input gradients alone (kernels/cuda/train_cuda.h: the feature maps'
 *     and the gate's *_input, the GLA's dv of lz_cuda_gla_backward_full, the window's
 *     *_input), launched on a non-blocking stream of their own (lz_cuda_train_set_stream), with the
 *     GLA in fp32 and in bf16;
 *   - the CUDA backward op table's softmax attention entry (backward_attention.cu) against
 *     attention_train_forward + attention_backward per sequence: sequences of different lengths
 *     (one of 1 token, others past one and two 128-query blocks), rows after the last sequence (their
 *     gradients 0), GQA and MHA, head_dim 64 and 128;
 *   - its Lizard layer entry (backward_lizard.cu) against lz_lizard_layer_forward + _backward per
 *     sequence: grad and dx, dq, dk, dv; GQA (Hq 4, Hkv 2), phi_k per kv head and per query head,
 *     shared and per-head maps, softmax and exp maps, normaliser on and off, window below and above T,
 *     no meta logits, T not a multiple of the 64-token chunk, grad NULL; a batch of unequal
 *     sequences refused;
 * both entries on the CUDA backend in fp32 and in bf16 (the step's batch set through begin_step),
 * each run twice: the two runs must give the same bits.
 *
 * Outputs that are overwritten are poisoned with NaN first, so an unwritten element fails; outputs
 * that are added to start from random values, so an overwrite fails. The largest relative L2
 * errors are printed per group.
 *
 * Bounds (relative L2 error), as tests/gpu/test_gpu_train.c reasons them: fp32 on both sides
 * differs only in summation order, a few 1e-6 per sum, a few sums deep: 1e-3 for every gradient
 * (a missing or wrong term moves one by far more). On the bf16 backend the reference is computed
 * from the same bf16-rounded q, k, v and x, so the Lizard entry with the fp32 GLA stays fp32
 * arithmetic throughout: 1e-3 as well. Where the products themselves take bf16 operands (the
 * attention entry on the bf16 backend: dout, P and dS rounded to bf16; the GLA's bf16 path) every
 * product rounds both operands (unit roundoff 2^-9 ~ 2e-3) and a gradient chains two or three
 * products, so ~1e-2 is expected and 3e-2 is the bound (test_gpu_train's for the bf16 GLA).
 * Exit 77 (skip) when no GPU is visible. */
#include <math.h>    // sqrt, INFINITY, log1pf, expf
#include <stdbool.h> // bool
#include <stdint.h>  // int32_t
#include <stdio.h>   // fprintf
#include <stdlib.h>  // malloc, free
#include <string.h>  // memcpy, memcmp

#include <cuda_runtime_api.h> // cudaMalloc, cudaMemcpy, cudaStreamCreateWithFlags

#include "backward_entries.h"  // lz_test_bw_attention, lz_test_bw_lizard*
#include "cpu/train_kernels.h" // the reference
#include "cuda/train_cuda.h"   // the distillation kernels and their input gradients
#include "dtype.h"             // lz_f32_to_bf16, lz_bf16_to_f32
#include "ops.h"               // lz_ops, lz_cuda_backend_create
#include "test_util.h"         // CHECK_MSG, CHECK_FAILS_WITH, lz_test_finish

static unsigned rng = 16180u;
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

/* Waits for every stream (the backend's and the test's own are non-blocking). */
static void settle(void) {
    const cudaError_t e = cudaDeviceSynchronize();
    CHECK_MSG(e == cudaSuccess, "device: %s", cudaGetErrorString(e));
}
static void upload(float *d, const float *host, size_t n) {
    CHECK(cudaMemcpy(d, host, sizeof(float) * n, cudaMemcpyHostToDevice) == cudaSuccess);
}
static void poison(float *d, size_t n) { CHECK(cudaMemset(d, 0xff, sizeof(float) * (n ? n : 1)) == cudaSuccess); }
/* Device copy of host floats; NULL: NaN poison. */
static float *dev(const float *host, size_t n) {
    float *p;
    if (cudaMalloc((void **)&p, sizeof(float) * (n ? n : 1)) != cudaSuccess)
        abort();
    if (host)
        upload(p, host, n);
    else
        poison(p, n);
    return p;
}
static float *host_of(const float *d, size_t n) {
    float *h = xmalloc(sizeof(float) * n);
    settle();
    CHECK_MSG(cudaMemcpy(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    return h;
}

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

static const char *case_name;
static double worst; /* of the group being run */

/* The device result d against the host reference ref. */
static void compare(const char *what, const float *d, const float *ref, size_t n, double limit) {
    float *h = host_of(d, n);
    const double e = rel_err(h, ref, n);
    CHECK_MSG(e <= limit, "%s %s: rel err %.3g > %.3g", case_name, what, e, limit);
    if (e > worst)
        worst = e;
    free(h);
}
/* The same bits on the device as in `host` (a second run against the first). */
static void same_bits(const char *what, const float *d, const float *host, size_t n) {
    float *h = host_of(d, n);
    CHECK_MSG(memcmp(h, host, sizeof(float) * n) == 0, "%s %s: a second run gave other bits", case_name, what);
    free(h);
}
static void group_done(const char *group, double limit) {
    fprintf(stderr, "test_gpu_backward_attn: %-40s largest rel err %.3g (bound %.0e)\n", group, worst, limit);
    worst = 0;
}
#define OK(call) CHECK_MSG((call) == LZ_OK, "%s: %s", #call, lz_error_message())

/* log gamma [N] = log sigmoid of logits in [lo, hi] */
static float *log_gates(size_t N, float lo, float hi) {
    float *lg = rand_host(N, lo, hi);
    for (size_t i = 0; i < N; i++)
        lg[i] = lg[i] >= 0 ? -log1pf(expf(-lg[i])) : lg[i] - log1pf(expf(lg[i]));
    return lg;
}

typedef struct {
    const char *name;
    lz_lizard_geom g;
    int n_seq, T, C;
    float gate_lo, gate_hi; /* gate logits drawn from here */
    bool grad;              /* false: frozen tensors (grad NULL) */
    int extra_rows;         /* the scratch holds this many rows more than the batch */
} lizard_case;

/* ---- the distillation kernels' input gradients ---------------------------------------------- */

static void test_input_grads(const lizard_case *c, double limit) {
    const lz_lizard_geom *g = &c->g;
    const int B = c->n_seq, T = c->T, N = B * T, d = g->d, f = g->f, F = 2 * f, C = c->C, chunks = lz_train_chunks(T);
    const size_t nq = (size_t)N * g->Hq * d, nk = (size_t)N * g->Hkv * d, npq = (size_t)N * g->Hq * F,
                 npk = (size_t)N * g->Hs * F, nS = (size_t)B * chunks * g->Hs * F * d,
                 nz = (size_t)B * chunks * g->Hs * F;
    float *q = rand_host(nq, -1, 1), *k = rand_host(nk, -1, 1), *v = rand_host(nk, -1, 1);
    float *wq = rand_host(lz_lizard_wq_numel(g), -0.3f, 0.3f), *wk = rand_host(lz_lizard_wk_numel(g), -0.3f, 0.3f);
    float *phi_q = xmalloc(sizeof(float) * npq), *phi_k = xmalloc(sizeof(float) * npk);
    feature_map_train_forward_f32(phi_q, q, wq, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map);
    feature_map_train_forward_f32(phi_k, k, wk, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map);
    float *d_q = dev(q, nq), *d_k = dev(k, nk), *d_v = dev(v, nk), *d_phi_q = dev(phi_q, npq),
          *d_phi_k = dev(phi_k, npk);

    // feature maps: dx += W du, for q (Hx = Hout) and for k (Hout = Hs, several heads may read one)
    for (int which = 0; which < 2; which++) {
        const int Hx = which ? g->Hkv : g->Hq, Hout = which ? g->Hs : g->Hq, n_w = which ? g->n_wk : g->n_wq;
        const float *w = which ? wk : wq, *phi = which ? phi_k : phi_q, *d_phi = which ? d_phi_k : d_phi_q;
        const size_t nx = (size_t)N * Hx * d, nphi = (size_t)N * Hout * F, nw = (size_t)n_w * d * f;
        float *dphi = rand_host(nphi, -1, 1), *dx = rand_host(nx, -1, 1);
        float *d_dphi = dev(dphi, nphi), *d_dx = dev(dx, nx), *d_w = dev(w, nw);
        float *scr = dev(NULL, lz_cuda_feature_map_backward_scratch(n_w, N, Hout, d, f));
        feature_map_backward_input_f32(dx, dphi, phi, w, n_w, N, Hx, Hout, d, f, g->exp_map);
        settle();
        OK(lz_cuda_feature_map_backward_input(d_dx, d_dphi, d_phi, d_w, n_w, N, Hx, Hout, d, f, g->exp_map, scr));
        compare(which ? "feature map dk" : "feature map dq", d_dx, dx, nx, limit);
        cudaFree(d_dphi), cudaFree(d_dx), cudaFree(d_w), cudaFree(scr), free(dphi), free(dx);
    }
    // gate: dx += dl wg
    {
        float *x = rand_host((size_t)N * C, -1, 1), *wg = rand_host(C, -0.3f, 0.3f),
              *logit = xmalloc(sizeof(float) * N), *lg = xmalloc(sizeof(float) * N), *dlg = rand_host(N, -1, 1),
              *dx = rand_host((size_t)N * C, -1, 1);
        gate_train_forward_f32(logit, lg, x, wg, N, C);
        float *d_logit = dev(logit, N), *d_dlg = dev(dlg, N), *d_wg = dev(wg, C), *d_dx = dev(dx, (size_t)N * C);
        gate_backward_input_f32(dx, dlg, logit, wg, N, C);
        settle();
        OK(lz_cuda_gate_backward_input(d_dx, d_dlg, d_logit, d_wg, N, C));
        compare("gate dx", d_dx, dx, (size_t)N * C, limit);
        cudaFree(d_logit), cudaFree(d_dlg), cudaFree(d_wg), cudaFree(d_dx);
        free(x), free(wg), free(logit), free(lg), free(dlg), free(dx);
    }
    // GLA: dv (added to) besides dphi_q, dphi_k, d log gamma, on the CPU's feature maps
    {
        float *lg = log_gates(N, c->gate_lo, c->gate_hi), *dout = rand_host(nq, -1, 1), *dv = rand_host(nk, -1, 1);
        float *out = xmalloc(sizeof(float) * nq), *S0 = xmalloc(sizeof(float) * nS), *z0 = xmalloc(sizeof(float) * nz);
        float *dpq = xmalloc(sizeof(float) * npq), *dpk = xmalloc(sizeof(float) * npk),
              *dlg = xmalloc(sizeof(float) * N);
        float *d_lg = dev(lg, N), *d_dout = dev(dout, nq), *d_dv = dev(dv, nk), *d_out = dev(NULL, nq),
              *d_S0 = dev(NULL, nS), *d_z0 = dev(NULL, nz), *d_den = dev(NULL, (size_t)N * g->Hq),
              *d_dpq = dev(NULL, npq), *d_dpk = dev(NULL, npk), *d_dlg = dev(NULL, N),
              *scr = dev(NULL, lz_cuda_gla_backward_scratch(B, T, g));
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T, so = (size_t)b * chunks * g->Hs * F;
            gla_train_forward_f32(out + r * g->Hq * d, S0 + so * d, z0 + so, phi_q + r * g->Hq * F,
                                  phi_k + r * g->Hs * F, v + r * g->Hkv * d, lg + r, T, g);
            gla_backward_full_f32(dpq + r * g->Hq * F, dpk + r * g->Hs * F, dlg + r, dv + r * g->Hkv * d,
                                  dout + r * g->Hq * d, out + r * g->Hq * d, S0 + so * d, z0 + so,
                                  phi_q + r * g->Hq * F, phi_k + r * g->Hs * F, v + r * g->Hkv * d, lg + r, T, g);
        }
        settle();
        OK(lz_cuda_gla_train_forward(d_out, d_S0, d_z0, d_den, d_phi_q, d_phi_k, d_v, d_lg, B, T, g));
        OK(lz_cuda_gla_backward_full(d_dpq, d_dpk, d_dlg, d_dv, d_dout, d_out, d_S0, d_z0, d_den, d_phi_q, d_phi_k,
                                     d_v, d_lg, B, T, g, scr));
        compare("GLA dv", d_dv, dv, nk, limit);
        compare("GLA dphi_q", d_dpq, dpq, npq, limit);
        compare("GLA dphi_k", d_dpk, dpk, npk, limit);
        compare("GLA dlog_gamma", d_dlg, dlg, N, limit);
        float *frees[] = {d_lg, d_dout, d_dv, d_out, d_S0, d_z0, d_den, d_dpq, d_dpk, d_dlg, scr};
        for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
            cudaFree(frees[i]);
        free(lg), free(dout), free(dv), free(out), free(S0), free(z0), free(dpq), free(dpk), free(dlg);
    }
    // window: dq, dk, dv (added to) from dwin and the forward's stats
    {
        float *meta = rand_host(g->m, -1, 1), *win = xmalloc(sizeof(float) * nq), *dwin = rand_host(nq, -1, 1);
        float *dq = rand_host(nq, -1, 1), *dk = rand_host(nk, -1, 1), *dv = rand_host(nk, -1, 1);
        float *d_meta = dev(meta, g->m), *d_win = dev(NULL, nq), *d_stats = dev(NULL, (size_t)2 * N * g->Hq),
              *d_dwin = dev(dwin, nq), *d_dq = dev(dq, nq), *d_dk = dev(dk, nk), *d_dv = dev(dv, nk),
              *scr = dev(NULL, lz_cuda_window_backward_scratch(B, T, g));
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T, rq = r * g->Hq * d, rk = r * g->Hkv * d;
            window_train_forward_f32(win + rq, q + rq, k + rk, v + rk, meta, T, g);
            window_backward_input_f32(dq + rq, dk + rk, dv + rk, dwin + rq, win + rq, q + rq, k + rk, v + rk, meta, T,
                                      g);
        }
        settle();
        OK(lz_cuda_window_train_forward(d_win, d_stats, d_q, d_k, d_v, d_meta, B, T, g));
        OK(lz_cuda_window_backward_input(d_dq, d_dk, d_dv, d_dwin, d_win, d_stats, d_q, d_k, d_v, B, T, g, scr));
        compare("window dq", d_dq, dq, nq, limit);
        compare("window dk", d_dk, dk, nk, limit);
        compare("window dv", d_dv, dv, nk, limit);
        float *frees[] = {d_meta, d_win, d_stats, d_dwin, d_dq, d_dk, d_dv, scr};
        for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
            cudaFree(frees[i]);
        free(meta), free(win), free(dwin), free(dq), free(dk), free(dv);
    }
    cudaFree(d_q), cudaFree(d_k), cudaFree(d_v), cudaFree(d_phi_q), cudaFree(d_phi_k);
    free(q), free(k), free(v), free(wq), free(wk), free(phi_q), free(phi_k);
}

/* ---- the backward op table's entries on the CUDA backend -------------------------------------- */

typedef struct {
    const lz_ops *ops;
    lz_backend *be;
    lz_dtype dt;
} backend;

/* Host values as the backend holds its activations (bf16: rounded to nearest even). */
static void round_like(const backend *bk, float *a, size_t n) {
    for (size_t i = 0; bk->dt == LZ_DTYPE_BF16 && i < n; i++)
        a[i] = lz_bf16_to_f32(lz_f32_to_bf16(a[i]));
}
/* An activation buffer from host floats. */
static void *act(const backend *bk, const float *host, size_t n) {
    void *p = NULL;
    OK(bk->ops->alloc(bk->be, n * bk->ops->act_size + 16, &p));
    OK(bk->ops->act_from_host(bk->be, p, host, n));
    return p;
}

enum { MAX_SEQS = 4 };
typedef struct {
    lz_batch b;
    int32_t slot[MAX_SEQS], start[MAX_SEQS], len[MAX_SEQS], pos[MAX_SEQS];
    int32_t *token_pos, *ids;
} batch_buf;

/* Sequences of the given lengths one after the other, each from position 0, then `pad` rows of no
 * sequence, set on the backend. */
static void set_batch(const backend *bk, batch_buf *bb, int n_seq, const int *len, int pad) {
    int n = 0;
    for (int s = 0; s < n_seq; s++)
        bb->slot[s] = s, bb->start[s] = n, bb->len[s] = len[s], bb->pos[s] = 0, n += len[s];
    n += pad;
    bb->token_pos = calloc((size_t)n + 1, sizeof(int32_t)); // (the pad rows at position 0)
    bb->ids = calloc((size_t)n + 1, sizeof(int32_t));
    if (!bb->token_pos || !bb->ids)
        abort();
    for (int s = 0; s < n_seq; s++)
        for (int t = 0; t < len[s]; t++)
            bb->token_pos[bb->start[s] + t] = t, bb->ids[bb->start[s] + t] = 0;
    bb->b = (lz_batch){.n_seqs = n_seq, .n_tokens = n, .slot = bb->slot, .start = bb->start, .len = bb->len,
                       .pos = bb->pos, .token_pos = bb->token_pos};
    OK(bk->ops->begin_step(bk->be, bb->ids, &bb->b, NULL, 0));
}
static void batch_free(batch_buf *bb) { free(bb->token_pos), free(bb->ids); }

typedef struct {
    const char *name;
    int Hq, Hkv, d, n_seq, len[MAX_SEQS];
    int pad; /* rows after the last sequence, in none: their gradients are 0 (overwritten) */
} attn_case;

static void test_attention(const backend *bk, const attn_case *c, double limit) {
    batch_buf bb;
    set_batch(bk, &bb, c->n_seq, c->len, c->pad);
    const int N = bb.b.n_tokens, Hq = c->Hq, Hkv = c->Hkv, d = c->d;
    const size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hkv * d;
    float *q = rand_host(nq, -2, 2), *k = rand_host(nk, -2, 2), *v = rand_host(nk, -1, 1), *dout = rand_host(nq, -1, 1);
    round_like(bk, q, nq), round_like(bk, k, nk), round_like(bk, v, nk);
    float *out = xmalloc(sizeof(float) * nq), *lse = xmalloc(sizeof(float) * N * Hq);
    float *dq = calloc(nq, sizeof(float)), *dk = calloc(nk, sizeof(float)), *dv = calloc(nk, sizeof(float));
    if (!dq || !dk || !dv)
        abort();
    for (int s = 0; s < c->n_seq; s++) {
        const size_t r = (size_t)bb.start[s], rq = r * Hq * d, rk = r * Hkv * d;
        attention_train_forward_f32(out + rq, lse + r * Hq, q + rq, k + rk, v + rk, c->len[s], Hq, Hkv, d);
        attention_backward_f32(dq + rq, dk + rk, dv + rk, dout + rq, out + rq, lse + r * Hq, q + rq, k + rk, v + rk,
                               c->len[s], Hq, Hkv, d);
    }
    void *aq = act(bk, q, nq), *ak = act(bk, k, nk), *av = act(bk, v, nk);
    float *d_dout = dev(dout, nq), *d_dq = dev(NULL, nq), *d_dk = dev(NULL, nk), *d_dv = dev(NULL, nk);
    const lz_attn_dims dims = {.n_heads = Hq, .n_kv_heads = Hkv, .head_dim = d};
    settle();
    OK(lz_test_bw_attention(bk->be, d_dq, d_dk, d_dv, d_dout, aq, ak, av, &bb.b, &dims));
    compare("attention dq", d_dq, dq, nq, limit);
    compare("attention dk", d_dk, dk, nk, limit);
    compare("attention dv", d_dv, dv, nk, limit);
    // again into poisoned outputs: the same bits
    float *h_dq = host_of(d_dq, nq), *h_dk = host_of(d_dk, nk), *h_dv = host_of(d_dv, nk);
    poison(d_dq, nq), poison(d_dk, nk), poison(d_dv, nk);
    settle();
    OK(lz_test_bw_attention(bk->be, d_dq, d_dk, d_dv, d_dout, aq, ak, av, &bb.b, &dims));
    same_bits("attention dq", d_dq, h_dq, nq);
    same_bits("attention dk", d_dk, h_dk, nk);
    same_bits("attention dv", d_dv, h_dv, nk);
    // a sequence past position 0 (a cached prefix) is refused
    bb.pos[c->n_seq - 1] = 5;
    CHECK_FAILS_WITH(lz_test_bw_attention(bk->be, d_dq, d_dk, d_dv, d_dout, aq, ak, av, &bb.b, &dims), LZ_ERR_INPUT,
                     "position 5");
    bb.pos[c->n_seq - 1] = 0;
    bk->ops->free(bk->be, aq), bk->ops->free(bk->be, ak), bk->ops->free(bk->be, av);
    cudaFree(d_dout), cudaFree(d_dq), cudaFree(d_dk), cudaFree(d_dv);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(h_dq), free(h_dk),
        free(h_dv);
    batch_free(&bb);
}

/* The layer: grad (or none) and dx, dq, dk, dv from dout. Column 0 of x is 1 and W_gamma[0] a bias
 * drawn from the case's gate range, so the gates sit there. */
static void test_lizard(const backend *bk, const lizard_case *c, double limit) {
    const lz_lizard_geom *g = &c->g;
    const int B = c->n_seq, T = c->T, N = B * T, C = c->C, d = g->d;
    const size_t nq = (size_t)N * g->Hq * d, nk = (size_t)N * g->Hkv * d, nx = (size_t)N * C;
    const size_t numel[5] = {lz_lizard_wq_numel(g), lz_lizard_wk_numel(g), (size_t)C, (size_t)g->m, 1};
    float *q = rand_host(nq, -1, 1), *k = rand_host(nk, -1, 1), *v = rand_host(nk, -1, 1),
          *x = rand_host(nx, -0.2f, 0.2f);
    for (int t = 0; t < N; t++)
        x[(size_t)t * C] = 1;
    round_like(bk, q, nq), round_like(bk, k, nk), round_like(bk, v, nk), round_like(bk, x, nx);
    float *hp[5], *hg[5], *g0[5], *dp[5], *dg[5];
    const float lo[5] = {-0.3f, -0.3f, -0.1f, -1, 0.5f}, hi[5] = {0.3f, 0.3f, 0.1f, 1, 1.5f};
    for (int i = 0; i < 5; i++) {
        hp[i] = rand_host(numel[i], lo[i], hi[i]);
        g0[i] = rand_host(numel[i], -1e-3f, 1e-3f); // accumulated into
        hg[i] = copy_host(g0[i], numel[i]);
    }
    hp[2][0] = frand(c->gate_lo, c->gate_hi);
    for (int i = 0; i < 5; i++) {
        dp[i] = dev(hp[i], numel[i]);
        dg[i] = dev(g0[i], numel[i]);
    }
    const lz_lizard_params_f32 p = {hp[0], hp[1], hp[2], hp[3], hp[4]}, pd = {dp[0], dp[1], dp[2], dp[3], dp[4]};
    lz_lizard_params_f32 gr = {hg[0], hg[1], hg[2], hg[3], hg[4]}, gd = {dg[0], dg[1], dg[2], dg[3], dg[4]};
    float *dout = rand_host(nq, -1, 1);
    float *sdx = rand_host(nx, -1, 1), *sdq = rand_host(nq, -1, 1), *sdk = rand_host(nk, -1, 1),
          *sdv = rand_host(nk, -1, 1); // the starts of the input gradients
    float *rdx = copy_host(sdx, nx), *rdq = copy_host(sdq, nq), *rdk = copy_host(sdk, nk), *rdv = copy_host(sdv, nk);
    lz_lizard_scratch_f32 cs;
    CHECK(lz_lizard_scratch_create_f32(&cs, g, T, C) == 0);
    for (int b = 0; b < B; b++) {
        const size_t r = (size_t)b * T, rq = r * g->Hq * d, rk = r * g->Hkv * d;
        lz_lizard_layer_forward_f32(NULL, &p, x + r * C, q + rq, k + rk, v + rk, T, g, &cs);
        lz_lizard_layer_backward_f32(c->grad ? &gr : NULL, rdx + r * C, rdq + rq, rdk + rk, rdv + rk, dout + rq, &p,
                                     x + r * C, q + rq, k + rk, v + rk, T, g, &cs);
    }
    lz_lizard_scratch_free_f32(&cs);

    batch_buf bb;
    int lens[MAX_SEQS];
    for (int s = 0; s < B; s++)
        lens[s] = T;
    set_batch(bk, &bb, B, lens, 0);
    void *ax = act(bk, x, nx), *aq = act(bk, q, nq), *ak = act(bk, k, nk), *av = act(bk, v, nk);
    float *d_dout = dev(dout, nq), *d_dx = dev(sdx, nx), *d_dq = dev(sdq, nq), *d_dk = dev(sdk, nk),
          *d_dv = dev(sdv, nk);
    void *scr = NULL;
    OK(lz_test_bw_lizard_scratch_create(bk->be, &scr, g, N + c->extra_rows, C));
    settle();
    OK(lz_test_bw_lizard(bk->be, scr, c->grad ? &gd : NULL, d_dx, d_dq, d_dk, d_dv, d_dout, &pd, ax, aq, ak, av, &bb.b,
                         g, C));
    compare("layer dx", d_dx, rdx, nx, limit);
    compare("layer dq", d_dq, rdq, nq, limit);
    compare("layer dk", d_dk, rdk, nk, limit);
    compare("layer dv", d_dv, rdv, nk, limit);
    const char *names[5] = {"layer dW_q", "layer dW_k", "layer dW_gamma", "layer dmeta", "layer dalpha"};
    for (int i = 0; i < 5; i++)
        if (numel[i] > 0) {
            if (c->grad)
                compare(names[i], dg[i], hg[i], numel[i], limit);
            else
                same_bits(names[i], dg[i], g0[i], numel[i]); // frozen: untouched
        }
    // again from the same starts: the same bits
    float *h1[4] = {host_of(d_dx, nx), host_of(d_dq, nq), host_of(d_dk, nk), host_of(d_dv, nk)};
    float *hg1[5];
    for (int i = 0; i < 5; i++) {
        hg1[i] = host_of(dg[i], numel[i]);
        upload(dg[i], g0[i], numel[i]);
    }
    upload(d_dx, sdx, nx), upload(d_dq, sdq, nq), upload(d_dk, sdk, nk), upload(d_dv, sdv, nk);
    settle();
    OK(lz_test_bw_lizard(bk->be, scr, c->grad ? &gd : NULL, d_dx, d_dq, d_dk, d_dv, d_dout, &pd, ax, aq, ak, av, &bb.b,
                         g, C));
    same_bits("layer dx", d_dx, h1[0], nx);
    same_bits("layer dq", d_dq, h1[1], nq);
    same_bits("layer dk", d_dk, h1[2], nk);
    same_bits("layer dv", d_dv, h1[3], nk);
    for (int i = 0; i < 5; i++)
        same_bits(names[i], dg[i], hg1[i], numel[i]);
    // a batch the distillation kernels cannot take: the second sequence one token shorter
    if (B > 1) {
        batch_buf odd;
        lens[1] = T - 1;
        set_batch(bk, &odd, 2, lens, 0);
        CHECK_FAILS_WITH(lz_test_bw_lizard(bk->be, scr, NULL, d_dx, d_dq, d_dk, d_dv, d_dout, &pd, ax, aq, ak, av,
                                           &odd.b, g, C),
                         LZ_ERR_INPUT, "sequence 1");
        batch_free(&odd);
    }
    settle();
    lz_test_bw_lizard_scratch_free(bk->be, scr);
    bk->ops->free(bk->be, ax), bk->ops->free(bk->be, aq), bk->ops->free(bk->be, ak), bk->ops->free(bk->be, av);
    cudaFree(d_dout), cudaFree(d_dx), cudaFree(d_dq), cudaFree(d_dk), cudaFree(d_dv);
    for (int i = 0; i < 5; i++)
        cudaFree(dp[i]), cudaFree(dg[i]), free(hp[i]), free(hg[i]), free(g0[i]), free(hg1[i]);
    for (int i = 0; i < 4; i++)
        free(h1[i]);
    free(q), free(k), free(v), free(x), free(dout), free(sdx), free(sdq), free(sdk), free(sdv), free(rdx), free(rdq),
        free(rdk), free(rdv);
    batch_free(&bb);
}

int main(void) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "test_gpu_backward_attn: skipped: no CUDA device\n");
        return 77;
    }
    //                         Hq Hkv Hs n_wq n_wk  d    f    w    m  norm   exp   n_seq T   C  gate logits  grad extra
    const lizard_case lizard[] = {
        {"gqa-kv-maps", {4, 2, 2, 4, 2, 32, 16, 40, 3, true, false}, 2, 150, 40, -3, 3, true, 0},
        {"qhead-state-shared-exp", {4, 2, 4, 1, 1, 32, 8, 16, 2, true, true}, 2, 100, 33, -3, 3, true, 20},
        {"qhead-state-w>T-nonorm", {4, 2, 4, 4, 4, 64, 16, 200, 0, false, false}, 1, 130, 24, -3, 3, true, 0},
        {"gqa-frozen", {4, 2, 2, 1, 2, 16, 8, 8, 2, true, false}, 3, 70, 16, -3, 3, false, 5},
        {"llama-head", {8, 4, 4, 8, 4, 128, 32, 64, 4, true, false}, 2, 129, 64, 1, 5, true, 0},
        {"mha-short-exp", {2, 2, 2, 2, 2, 16, 8, 4, 1, true, true}, 2, 5, 8, -3, 3, true, 0},
    };
    const attn_case attn[] = {
        {"gqa-d64", 4, 2, 64, 2, {100, 157}, 0},
        {"mha-d128", 2, 2, 128, 2, {300, 70}, 0},
        {"gqa4-d128", 8, 2, 128, 3, {129, 1, 256}, 0},
        {"mqa-d64-pad", 4, 1, 64, 2, {65, 200}, 3},
    };
    const size_t n_lizard = sizeof lizard / sizeof lizard[0], n_attn = sizeof attn / sizeof attn[0];

    // the distillation kernels' input gradients, on a non-blocking stream of their own
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    lz_cuda_train_set_stream(stream);
    for (int pass = 0; pass < 2; pass++) {
        lz_cuda_train_set_gla_precision(pass ? LZ_GLA_BF16 : LZ_GLA_FP32);
        const double limit = pass ? 3e-2 : 1e-3;
        for (size_t i = 0; i < n_lizard; i++) {
            case_name = lizard[i].name;
            test_input_grads(&lizard[i], limit);
        }
        group_done(pass ? "input gradients, bf16 GLA" : "input gradients, fp32 GLA", limit);
    }
    lz_cuda_train_set_stream(NULL);
    lz_cuda_train_set_gla_precision(LZ_GLA_FP32);
    settle();
    CHECK(cudaStreamDestroy(stream) == cudaSuccess);

    const lz_dtype dtypes[2] = {LZ_DTYPE_F32, LZ_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        backend bk = {NULL, NULL, dtypes[di]};
        const bool bf16 = dtypes[di] == LZ_DTYPE_BF16;
        if (lz_cuda_backend_create(dtypes[di], &bk.be, &bk.ops) != LZ_OK) {
            CHECK_MSG(0, "lz_cuda_backend_create: %s", lz_error_message());
            continue;
        }
        const double attn_limit = bf16 ? 3e-2 : 1e-3;
        for (size_t i = 0; i < n_attn; i++) {
            case_name = attn[i].name;
            test_attention(&bk, &attn[i], attn_limit);
        }
        group_done(bf16 ? "attention, bf16 backend" : "attention, fp32 backend", attn_limit);
        for (size_t i = 0; i < n_lizard; i++) {
            case_name = lizard[i].name;
            test_lizard(&bk, &lizard[i], 1e-3);
        }
        group_done(bf16 ? "Lizard layer, bf16 backend, fp32 GLA" : "Lizard layer, fp32 backend", 1e-3);
        if (bf16) {
            lz_cuda_train_set_gla_precision(LZ_GLA_BF16);
            for (size_t i = 0; i < n_lizard; i++) {
                case_name = lizard[i].name;
                test_lizard(&bk, &lizard[i], 3e-2);
            }
            group_done("Lizard layer, bf16 backend, bf16 GLA", 3e-2);
            lz_cuda_train_set_gla_precision(LZ_GLA_FP32);
        }
        bk.ops->destroy(bk.be);
    }
    return lz_test_finish("test_gpu_backward_attn");
}
