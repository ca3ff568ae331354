/* test_train_kernels.c - the training kernels of a Lizard layer:
 *  1. every backward against central finite differences of its own forward,
 *     in double (the _f64 build of the same source): feature maps (softmax and
 *     exp, shared and per-head W, repeated keys), gate, chunked GLA (normalised
 *     or not, state heads = kv heads or query heads, T across chunk borders,
 *     gates near 0 and 1), window branch (meta logits), the whole layer (SSE
 *     against a target, all five trainable tensors);
 *  2. the float build's layer gradients against the double build's (1e-3);
 *  3. the float training forward against the inference kernels (the op table's
 *     CPU functions), so training fits what `generate` runs. */
#include <math.h>   // fabs
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy

#include "cpu_kernels.h"   // the inference kernels
#include "grad_check.h"    // rnd, dot, gradient_error
#include "test_util.h"     // CHECK
#include "train_kernels.h" // the kernels under test

static const double tolerance = 1e-6;

/* ---- feature map -------------------------------------------------------------- */

typedef struct {
    double *x, *w, *R, *phi;
    int n_w, T, Hx, Hout, d, f;
    bool exp_map;
} fm_case;

static double fm_loss(void *ctx) {
    fm_case *c = ctx;
    feature_map_train_forward_f64(c->phi, c->x, c->w, c->n_w, c->T, c->Hx, c->Hout, c->d, c->f, c->exp_map);
    return dot(c->R, c->phi, (size_t)c->T * c->Hout * 2 * c->f);
}

static void check_feature_map(int n_w, int Hx, int Hout, bool exp_map, unsigned seed) {
    fm_case c = {.n_w = n_w, .T = 5, .Hx = Hx, .Hout = Hout, .d = 6, .f = 4, .exp_map = exp_map};
    const size_t nphi = (size_t)c.T * Hout * 2 * c.f, nw = (size_t)n_w * c.d * c.f;
    c.x = rnd((size_t)c.T * Hx * c.d, -1, 1, &seed);
    c.w = rnd(nw, -0.8, 0.8, &seed);
    c.R = rnd(nphi, -1, 1, &seed);
    c.phi = malloc(sizeof(double) * nphi);
    double *dw = calloc(nw, sizeof(double));
    fm_loss(&c);
    feature_map_backward_f64(dw, c.R, c.phi, c.x, n_w, c.T, Hx, Hout, c.d, c.f, exp_map);
    double err = gradient_error(fm_loss, &c, c.w, dw, nw);
    CHECK_MSG(err < tolerance, "feature map (n_w %d, Hx %d, Hout %d, %s): error %g", n_w, Hx, Hout,
              exp_map ? "exp" : "softmax", err);
    free(c.x), free(c.w), free(c.R), free(c.phi), free(dw);
}

/* ---- gate ------------------------------------------------------------------------ */

typedef struct {
    double *x, *wg, *R, *logit, *lg;
    int T, C;
} gate_case;

static double gate_loss(void *ctx) {
    gate_case *c = ctx;
    gate_train_forward_f64(c->logit, c->lg, c->x, c->wg, c->T, c->C);
    return dot(c->R, c->lg, (size_t)c->T);
}

static void check_gate(unsigned seed) {
    gate_case c = {.T = 9, .C = 7};
    c.x = rnd((size_t)c.T * c.C, -2, 2, &seed);
    c.wg = rnd((size_t)c.C, -2, 2, &seed); // logits over a wide range: both branches of log-sigmoid
    c.R = rnd((size_t)c.T, -1, 1, &seed);
    c.logit = malloc(sizeof(double) * c.T);
    c.lg = malloc(sizeof(double) * c.T);
    double *dwg = calloc((size_t)c.C, sizeof(double));
    gate_loss(&c);
    gate_backward_f64(dwg, c.R, c.logit, c.x, c.T, c.C);
    double err = gradient_error(gate_loss, &c, c.wg, dwg, (size_t)c.C);
    CHECK_MSG(err < tolerance, "gate: error %g", err);
    free(c.x), free(c.wg), free(c.R), free(c.logit), free(c.lg), free(dwg);
}

/* ---- GLA ---------------------------------------------------------------------------- */

typedef struct {
    lz_lizard_geom g;
    int T;
    double *pq, *pk, *v, *lg, *R, *out, *S0, *z0;
} gla_case;

static double gla_loss(void *ctx) {
    gla_case *c = ctx;
    gla_train_forward_f64(c->out, c->S0, c->z0, c->pq, c->pk, c->v, c->lg, c->T, &c->g);
    return dot(c->R, c->out, (size_t)c->T * c->g.Hq * c->g.d);
}

static void check_gla(int Hq, int Hkv, int Hs, bool normalize, int T, double lg_lo, double lg_hi, unsigned seed) {
    gla_case c = {.g = {.Hq = Hq, .Hkv = Hkv, .Hs = Hs, .d = 3, .f = 2, .normalize = normalize}, .T = T};
    const int F = 4;
    const size_t nq = (size_t)T * Hq * F, nk = (size_t)T * Hs * F, no = (size_t)T * Hq * c.g.d;
    c.pq = rnd(nq, 0.1, 1, &seed); // positive, as the feature maps make them
    c.pk = rnd(nk, 0.1, 1, &seed);
    c.v = rnd((size_t)T * Hkv * c.g.d, -1, 1, &seed);
    c.lg = rnd((size_t)T, lg_lo, lg_hi, &seed);
    c.R = rnd(no, -1, 1, &seed);
    c.out = malloc(sizeof(double) * no);
    c.S0 = malloc(sizeof(double) * lz_train_chunks(T) * Hs * F * c.g.d);
    c.z0 = malloc(sizeof(double) * lz_train_chunks(T) * Hs * F);
    double *dq = malloc(sizeof(double) * nq), *dk = malloc(sizeof(double) * nk), *dlg = malloc(sizeof(double) * T);
    gla_loss(&c);
    gla_backward_f64(dq, dk, dlg, c.R, c.out, c.S0, c.z0, c.pq, c.pk, c.v, c.lg, T, &c.g);
    double eq = gradient_error(gla_loss, &c, c.pq, dq, nq), ek = gradient_error(gla_loss, &c, c.pk, dk, nk);
    double eg = gradient_error(gla_loss, &c, c.lg, dlg, (size_t)T);
    CHECK_MSG(eq < tolerance && ek < tolerance && eg < tolerance,
              "GLA (Hq %d Hkv %d Hs %d T %d normalize %d): errors phi_q %g phi_k %g log_gamma %g", Hq, Hkv, Hs, T,
              normalize, eq, ek, eg);
    free(c.pq), free(c.pk), free(c.v), free(c.lg), free(c.R), free(c.out), free(c.S0), free(c.z0);
    free(dq), free(dk), free(dlg);
}

/* ---- window ------------------------------------------------------------------------- */

typedef struct {
    lz_lizard_geom g;
    int T;
    double *q, *k, *v, *meta, *R, *win;
} win_case;

static double win_loss(void *ctx) {
    win_case *c = ctx;
    window_train_forward_f64(c->win, c->q, c->k, c->v, c->meta, c->T, &c->g);
    return dot(c->R, c->win, (size_t)c->T * c->g.Hq * c->g.d);
}

static void check_window(int w, int m, unsigned seed) {
    win_case c = {.g = {.Hq = 4, .Hkv = 2, .Hs = 2, .d = 5, .f = 2, .w = w, .m = m}, .T = 11};
    const size_t nq = (size_t)c.T * 4 * 5, nk = (size_t)c.T * 2 * 5;
    c.q = rnd(nq, -1.5, 1.5, &seed);
    c.k = rnd(nk, -1.5, 1.5, &seed);
    c.v = rnd(nk, -1, 1, &seed);
    c.meta = rnd((size_t)m, -1, 2, &seed);
    c.R = rnd(nq, -1, 1, &seed);
    c.win = malloc(sizeof(double) * nq);
    double *dmeta = calloc((size_t)m, sizeof(double));
    win_loss(&c);
    window_backward_f64(dmeta, c.R, c.win, c.q, c.k, c.meta, c.T, &c.g);
    double err = gradient_error(win_loss, &c, c.meta, dmeta, (size_t)m);
    CHECK_MSG(err < tolerance, "window (w %d, m %d): error %g", w, m, err);
    free(c.q), free(c.k), free(c.v), free(c.meta), free(c.R), free(c.win), free(dmeta);
}

/* ---- the whole layer -------------------------------------------------------------------- */

static float *to_float(const double *a, size_t n) {
    float *f = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        f[i] = (float)a[i];
    return f;
}

typedef struct {
    lz_lizard_geom g;
    int T, C;
    double *x, *q, *k, *v, *target;
    lz_lizard_params_f64 p;
    lz_lizard_scratch_f64 s;
} layer_case;

static double layer_loss(void *ctx) {
    layer_case *c = ctx;
    return lz_lizard_layer_sse_f64(&c->p, NULL, 1, c->x, c->q, c->k, c->v, c->target, c->T, &c->g, &c->s);
}

static void check_layer(int n_wq, int n_wk, bool exp_map, bool normalize, unsigned seed) {
    layer_case c = {.g = {.Hq = 4, .Hkv = 2, .n_wq = n_wq, .n_wk = n_wk, .d = 4, .f = 3, .w = 5, .m = 3,
                          .normalize = normalize, .exp_map = exp_map},
                    .T = 70, .C = 6};
    c.g.Hs = n_wk == c.g.Hq ? c.g.Hq : c.g.Hkv;
    const size_t nq = (size_t)c.T * 4 * 4, nk = (size_t)c.T * 2 * 4;
    const size_t sizes[5] = {lz_lizard_wq_numel(&c.g), lz_lizard_wk_numel(&c.g), (size_t)c.C, 3, 1};
    c.x = rnd((size_t)c.T * c.C, -1, 1, &seed);
    c.q = rnd(nq, -1, 1, &seed);
    c.k = rnd(nk, -1, 1, &seed);
    c.v = rnd(nk, -1, 1, &seed);
    c.target = rnd(nq, -0.5, 0.5, &seed);
    double *params[5], *grads[5];
    for (int i = 0; i < 5; i++) {
        params[i] = rnd(sizes[i], -0.7, 0.7, &seed);
        grads[i] = calloc(sizes[i], sizeof(double));
    }
    c.p = (lz_lizard_params_f64){params[0], params[1], params[2], params[3], params[4]};
    lz_lizard_params_f64 grad = {grads[0], grads[1], grads[2], grads[3], grads[4]};
    CHECK(lz_lizard_scratch_create_f64(&c.s, &c.g, c.T, c.C) == 0);
    lz_lizard_layer_sse_f64(&c.p, &grad, 1, c.x, c.q, c.k, c.v, c.target, c.T, &c.g, &c.s);
    static const char *names[5] = {"feature_map_q", "feature_map_k", "gate", "meta_logits", "window_alpha"};
    for (int i = 0; i < 5; i++) {
        double err = gradient_error(layer_loss, &c, params[i], grads[i], sizes[i]);
        CHECK_MSG(err < tolerance, "layer (n_wq %d n_wk %d %s normalize %d): %s error %g", n_wq, n_wk,
                  exp_map ? "exp" : "softmax", normalize, names[i], err);
    }
    // the float build (what training runs) agrees with the checked double one
    const size_t nq32 = nq, nk32 = nk;
    float *x = to_float(c.x, (size_t)c.T * c.C), *q = to_float(c.q, nq32), *k = to_float(c.k, nk32);
    float *v = to_float(c.v, nk32), *target = to_float(c.target, nq32), *p32[5], *g32[5];
    for (int i = 0; i < 5; i++) {
        p32[i] = to_float(params[i], sizes[i]);
        g32[i] = calloc(sizes[i], sizeof(float));
    }
    lz_lizard_params_f32 p = {p32[0], p32[1], p32[2], p32[3], p32[4]}, g = {g32[0], g32[1], g32[2], g32[3], g32[4]};
    lz_lizard_scratch_f32 s32;
    CHECK(lz_lizard_scratch_create_f32(&s32, &c.g, c.T, c.C) == 0);
    lz_lizard_layer_sse_f32(&p, &g, 1, x, q, k, v, target, c.T, &c.g, &s32);
    for (int i = 0; i < 5; i++) {
        double worst = 0, scale = 1e-12;
        for (size_t e = 0; e < sizes[i]; e++) {
            worst = fmax(worst, fabs(g32[i][e] - grads[i][e]));
            scale = fmax(scale, fabs(grads[i][e]));
        }
        CHECK_MSG(worst <= 1e-3 * scale, "float vs double gradient of %s: %g of %g", names[i], worst, scale);
        free(p32[i]), free(g32[i]);
    }
    lz_lizard_scratch_free_f32(&s32);
    free(x), free(q), free(k), free(v), free(target);
    lz_lizard_scratch_free_f64(&c.s);
    for (int i = 0; i < 5; i++)
        free(params[i]), free(grads[i]);
    free(c.x), free(c.q), free(c.k), free(c.v), free(c.target);
}

/* ---- float training forward == inference kernels -------------------------------------------- */

static void check_forward_matches_inference(int n_wk, bool normalize, unsigned seed) {
    lz_lizard_geom g = {.Hq = 4, .Hkv = 2, .n_wq = 1, .n_wk = n_wk, .d = 8, .f = 4, .w = 16, .m = 4,
                        .normalize = normalize};
    g.Hs = n_wk == g.Hq ? g.Hq : g.Hkv;
    const int T = 150, C = 12; // three chunks, the last one partial
    const size_t nq = (size_t)T * g.Hq * g.d, nk = (size_t)T * g.Hkv * g.d;
    double *xd = rnd((size_t)T * C, -1, 1, &seed), *qd = rnd(nq, -1, 1, &seed), *kd = rnd(nk, -1, 1, &seed);
    double *vd = rnd(nk, -1, 1, &seed), *wqd = rnd(lz_lizard_wq_numel(&g), -0.5, 0.5, &seed);
    double *wkd = rnd(lz_lizard_wk_numel(&g), -0.5, 0.5, &seed), *wgd = rnd((size_t)C, -0.3, 0.6, &seed);
    double *metad = rnd(4, -1, 1, &seed);
    float *x = to_float(xd, (size_t)T * C), *q = to_float(qd, nq), *k = to_float(kd, nk), *v = to_float(vd, nk);
    float *wq = to_float(wqd, lz_lizard_wq_numel(&g)), *wk = to_float(wkd, lz_lizard_wk_numel(&g));
    float *wg = to_float(wgd, (size_t)C), *meta = to_float(metad, 4), alpha = 0.7f;
    // training path
    lz_lizard_scratch_f32 s;
    CHECK(lz_lizard_scratch_create_f32(&s, &g, T, C) == 0);
    float *target = calloc(nq, sizeof(float));
    lz_lizard_params_f32 p = {wq, wk, wg, meta, &alpha};
    lz_lizard_layer_sse_f32(&p, NULL, 1, x, q, k, v, target, T, &g, &s);
    // inference path: the same ops decoder_layer.c calls
    const size_t F = 2 * (size_t)g.f;
    float *logit = malloc(sizeof(float) * T), *lg = malloc(sizeof(float) * T);
    float *pq = malloc(sizeof(float) * T * g.Hq * F), *pk = malloc(sizeof(float) * T * g.Hs * F);
    float *out = calloc(nq, sizeof(float)), *S = calloc((size_t)g.Hs * F * g.d, sizeof(float));
    float *z = calloc((size_t)g.Hs * F, sizeof(float));
    float *ring_k = calloc((size_t)g.w * g.Hkv * g.d, sizeof(float)), *ring_v = calloc((size_t)g.w * g.Hkv * g.d, 4);
    linear_forward(logit, x, wg, NULL, T, C, 1);
    log_sigmoid_forward(lg, logit, T);
    feature_map_forward(pq, q, wq, 1, T, g.Hq, g.Hq, g.d, g.f, false);
    feature_map_forward(pk, k, wk, n_wk, T, g.Hkv, g.Hs, g.d, g.f, false);
    lz_attn_dims dims = {.n_heads = g.Hq, .n_kv_heads = g.Hkv, .head_dim = g.d, .n_state_heads = g.Hs,
                         .feature_dim = g.f, .window = g.w, .n_meta = g.m, .gla_normalize = normalize};
    lz_layer_state st = {.S = S, .z = z, .ring_k = ring_k, .ring_v = ring_v};
    int32_t slot = 0, start = 0, len = T, pos = 0;
    lz_batch b = {1, T, &slot, &start, &len, &pos, NULL};
    gla_chunked_forward(out, pq, pk, v, lg, &st, &b, &dims);
    window_attention_forward(out, q, k, v, meta, alpha, &st, &b, &dims);
    double worst = 0, scale = 0;
    for (size_t e = 0; e < nq; e++) {
        const double y = (double)s.gla[e] + (double)alpha * s.win[e];
        worst = fmax(worst, fabs(y - out[e]));
        scale = fmax(scale, fabs(out[e]));
    }
    CHECK_MSG(scale > 0.01 && worst <= 1e-5 * scale, "training forward vs inference (n_wk %d, normalize %d): %g of %g",
              n_wk, normalize, worst, scale);
    for (size_t e = 0; e < (size_t)T * g.Hq * F; e++)
        worst = fmax(worst, fabs(pq[e] - s.phi_q[e]));
    for (int t = 0; t < T; t++)
        worst = fmax(worst, fabs(lg[t] - s.lg[t]));
    CHECK_MSG(worst <= 1e-5 * scale, "feature map / gate differ from inference: %g", worst);
    lz_lizard_scratch_free_f32(&s);
    free(xd), free(qd), free(kd), free(vd), free(wqd), free(wkd), free(wgd), free(metad);
    free(x), free(q), free(k), free(v), free(wq), free(wk), free(wg), free(meta), free(target);
    free(logit), free(lg), free(pq), free(pk), free(out), free(S), free(z), free(ring_k), free(ring_v);
}

int main(void) {
    check_feature_map(1, 2, 4, false, 1);  // shared W, repeated heads
    check_feature_map(4, 2, 4, false, 2);  // W per output head
    check_feature_map(2, 2, 2, true, 3);   // exp map
    check_gate(4);
    check_gla(4, 2, 2, true, 70, -0.7, -0.01, 5);   // GQA state heads, two chunks
    check_gla(4, 2, 4, true, 70, -0.7, -0.01, 6);   // a state per query head
    check_gla(2, 2, 2, false, 70, -0.7, -0.01, 7);  // no normaliser
    check_gla(2, 1, 1, true, 130, -6, -3, 8);       // gates near 0, three chunks
    check_gla(2, 1, 1, true, 66, -1e-3, -1e-5, 9);  // gates near 1
    check_window(4, 3, 10);
    check_window(16, 1, 11); // window longer than the sequence
    check_layer(1, 2, false, true, 12);
    check_layer(4, 4, false, true, 13);
    check_layer(1, 1, true, false, 14);
    check_forward_matches_inference(2, true, 15);
    check_forward_matches_inference(4, false, 16);
    return lz_test_finish("test_train_kernels");
}
