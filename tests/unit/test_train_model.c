/* test_train_model.c - the CPU backward of every op fine-tuning runs, each
 * against central finite differences of its own forward in double (the _f64
 * build of kernels/cpu/backward/): RMSNorm, SwiGLU, embedding, RoPE, causal
 * softmax attention with GQA, linear + LoRA with dropout, the LM head's
 * chunked cross-entropy (vocabulary across chunk borders; its loss against
 * whole logits), and the Lizard layer's gradients for its inputs x, q, k, v
 * and its tensors. Each loss is sum(R * output) for a random R. */
#include <math.h>   // fabs, exp, log
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy

#include "grad_check.h"    // rnd, dot, gradient_error
#include "test_util.h"     // CHECK_MSG
#include "train_kernels.h" // the kernels under test

static const double tolerance = 1e-6;

#define CHECK_GRAD(loss, ctx, param, grad, n, what)                                                                    \
    do {                                                                                                               \
        const double err_ = gradient_error(loss, ctx, param, grad, n);                                                 \
        CHECK_MSG(err_ < tolerance, "%s: error %g", what, err_);                                                       \
    } while (0)

/* ---- RMSNorm, SwiGLU, embedding ---------------------------------------------------------- */

typedef struct {
    double *x, *w, *R, *y, *r, *g, *u, *E;
    int32_t ids[6];
    int T, C;
} small_case;

static double rms_loss(void *ctx) {
    small_case *c = ctx;
    rmsnorm_train_forward_f64(c->y, c->r, c->x, c->w, c->T, c->C, 1e-5);
    return dot(c->R, c->y, (size_t)c->T * c->C);
}

static double swiglu_loss(void *ctx) {
    small_case *c = ctx;
    swiglu_train_forward_f64(c->y, c->g, c->u, (size_t)c->T * c->C);
    return dot(c->R, c->y, (size_t)c->T * c->C);
}

static double embed_loss(void *ctx) {
    small_case *c = ctx;
    embedding_train_forward_f64(c->y, c->E, c->ids, c->T, c->C);
    return dot(c->R, c->y, (size_t)c->T * c->C);
}

static void check_small(unsigned seed) {
    small_case c = {.T = 6, .C = 7, .ids = {3, 0, 3, 4, 1, 3}};
    const size_t n = (size_t)c.T * c.C;
    c.x = rnd(n, -2, 2, &seed), c.w = rnd((size_t)c.C, 0.5, 1.5, &seed), c.R = rnd(n, -1, 1, &seed);
    c.g = rnd(n, -4, 4, &seed), c.u = rnd(n, -2, 2, &seed), c.E = rnd(5 * (size_t)c.C, -1, 1, &seed);
    c.y = malloc(sizeof(double) * n), c.r = malloc(sizeof(double) * c.T);
    double *dx = calloc(n, sizeof(double)), *dg = malloc(sizeof(double) * n), *du = malloc(sizeof(double) * n);
    double *dE = calloc(5 * (size_t)c.C, sizeof(double));
    rms_loss(&c);
    rmsnorm_backward_f64(dx, c.R, c.x, c.w, c.r, c.T, c.C);
    CHECK_GRAD(rms_loss, &c, c.x, dx, n, "rmsnorm dx");
    swiglu_backward_f64(dg, du, c.R, c.g, c.u, n);
    CHECK_GRAD(swiglu_loss, &c, c.g, dg, n, "swiglu dgate");
    CHECK_GRAD(swiglu_loss, &c, c.u, du, n, "swiglu dup");
    embedding_backward_f64(dE, c.R, c.ids, c.T, c.C);
    CHECK_GRAD(embed_loss, &c, c.E, dE, 5 * (size_t)c.C, "embedding dE");
    free(c.x), free(c.w), free(c.R), free(c.g), free(c.u), free(c.E), free(c.y), free(c.r);
    free(dx), free(dg), free(du), free(dE);
}

/* ---- RoPE and attention ------------------------------------------------------------------- */

typedef struct {
    double *q, *k, *v, *R, *out, *lse, *work;
    float inv_freq[4];
    int T, Hq, Hkv, d;
} attn_case;

static double rope_loss(void *ctx) {
    attn_case *c = ctx;
    const size_t n = (size_t)c->T * c->Hq * c->d;
    memcpy(c->work, c->q, sizeof(double) * n);
    rope_train_f64(c->work, c->T, c->Hq, c->d, c->inv_freq, 1);
    return dot(c->R, c->work, n);
}

static double attn_loss(void *ctx) {
    attn_case *c = ctx;
    attention_train_forward_f64(c->out, c->lse, c->q, c->k, c->v, c->T, c->Hq, c->Hkv, c->d);
    return dot(c->R, c->out, (size_t)c->T * c->Hq * c->d);
}

static void check_attention(int Hq, int Hkv, unsigned seed) {
    attn_case c = {.T = 7, .Hq = Hq, .Hkv = Hkv, .d = 8, .inv_freq = {1.0f, 0.3f, 0.05f, 0.01f}};
    const size_t nq = (size_t)c.T * Hq * c.d, nk = (size_t)c.T * Hkv * c.d;
    c.q = rnd(nq, -1.5, 1.5, &seed), c.k = rnd(nk, -1.5, 1.5, &seed), c.v = rnd(nk, -1, 1, &seed);
    c.R = rnd(nq, -1, 1, &seed);
    c.out = malloc(sizeof(double) * nq), c.lse = malloc(sizeof(double) * c.T * Hq);
    c.work = malloc(sizeof(double) * nq);
    double *dq = malloc(sizeof(double) * nq), *dk = malloc(sizeof(double) * nk), *dv = malloc(sizeof(double) * nk);
    // RoPE: the backward is the inverse rotation of the output's gradient
    memcpy(dq, c.R, sizeof(double) * nq);
    rope_train_f64(dq, c.T, Hq, c.d, c.inv_freq, -1);
    CHECK_GRAD(rope_loss, &c, c.q, dq, nq, "rope");
    attn_loss(&c);
    attention_backward_f64(dq, dk, dv, c.R, c.out, c.lse, c.q, c.k, c.v, c.T, Hq, Hkv, c.d);
    CHECK_GRAD(attn_loss, &c, c.q, dq, nq, "attention dq");
    CHECK_GRAD(attn_loss, &c, c.k, dk, nk, "attention dk");
    CHECK_GRAD(attn_loss, &c, c.v, dv, nk, "attention dv");
    free(c.q), free(c.k), free(c.v), free(c.R), free(c.out), free(c.lse), free(c.work), free(dq), free(dk), free(dv);
}

/* ---- linear + LoRA -------------------------------------------------------------------------- */

typedef struct {
    double *x, *W, *A, *B, *mask, *R, *y, *u;
    int T, in, out, r;
    double scale;
} lora_case;

static double lora_loss(void *ctx) {
    lora_case *c = ctx;
    linear_train_forward_f64(c->y, c->x, c->W, c->T, c->in, c->out);
    lora_train_forward_f64(c->y, c->u, c->x, c->A, c->B, c->mask, c->scale, c->T, c->in, c->out, c->r);
    return dot(c->R, c->y, (size_t)c->T * c->out);
}

static void check_lora(bool dropout, unsigned seed) {
    lora_case c = {.T = 5, .in = 9, .out = 6, .r = 3, .scale = 16.0 / 3};
    c.x = rnd((size_t)c.T * c.in, -1, 1, &seed), c.W = rnd((size_t)c.out * c.in, -1, 1, &seed);
    c.A = rnd((size_t)c.r * c.in, -1, 1, &seed), c.B = rnd((size_t)c.out * c.r, -1, 1, &seed);
    c.R = rnd((size_t)c.T * c.out, -1, 1, &seed);
    if (dropout) { // p = 0.25: kept elements scaled by 1 / 0.75
        c.mask = rnd((size_t)c.T * c.in, 0, 1, &seed);
        for (int e = 0; e < c.T * c.in; e++)
            c.mask[e] = c.mask[e] < 0.25 ? 0 : 1 / 0.75;
    }
    c.y = malloc(sizeof(double) * c.T * c.out), c.u = malloc(sizeof(double) * c.T * c.r);
    double *dx = calloc((size_t)c.T * c.in, sizeof(double)), *dA = calloc((size_t)c.r * c.in, sizeof(double));
    double *dB = calloc((size_t)c.out * c.r, sizeof(double));
    lora_loss(&c);
    linear_backward_input_f64(dx, c.R, c.W, c.T, c.in, c.out);
    lora_backward_f64(dA, dB, dx, c.R, c.x, c.u, c.A, c.B, c.mask, c.scale, c.T, c.in, c.out, c.r);
    CHECK_GRAD(lora_loss, &c, c.x, dx, (size_t)c.T * c.in, dropout ? "linear+lora dx (dropout)" : "linear+lora dx");
    CHECK_GRAD(lora_loss, &c, c.A, dA, (size_t)c.r * c.in, "lora dA");
    CHECK_GRAD(lora_loss, &c, c.B, dB, (size_t)c.out * c.r, "lora dB");
    free(c.x), free(c.W), free(c.A), free(c.B), free(c.mask), free(c.R), free(c.y), free(c.u);
    free(dx), free(dA), free(dB);
}

/* ---- LM head + cross-entropy ------------------------------------------------------------------ */

typedef struct {
    double *h, *W;
    int32_t targets[4];
    int T, C, V;
} ce_case;

static double ce_loss(void *ctx) {
    ce_case *c = ctx;
    return lm_head_cross_entropy_f64(NULL, c->h, c->W, c->targets, c->T, c->C, c->V, 1);
}

static void check_cross_entropy(unsigned seed) {
    ce_case c = {.T = 4, .C = 5, .V = 2 * LZ_CE_CHUNK + 37, .targets = {7, -1, LZ_CE_CHUNK + 3, 2 * LZ_CE_CHUNK + 36}};
    c.h = rnd((size_t)c.T * c.C, -2, 2, &seed), c.W = rnd((size_t)c.V * c.C, -1, 1, &seed);
    double *dh = malloc(sizeof(double) * c.T * c.C), *z = malloc(sizeof(double) * c.V);
    const double loss = lm_head_cross_entropy_f64(dh, c.h, c.W, c.targets, c.T, c.C, c.V, 1);
    CHECK_GRAD(ce_loss, &c, c.h, dh, (size_t)c.T * c.C, "lm head cross-entropy dh");
    double whole = 0; // the same loss from every logit at once
    for (int t = 0; t < c.T; t++) {
        if (c.targets[t] < 0)
            continue;
        double m = -1e300, sum = 0;
        for (int v = 0; v < c.V; v++)
            z[v] = dot(c.h + (size_t)t * c.C, c.W + (size_t)v * c.C, (size_t)c.C), m = z[v] > m ? z[v] : m;
        for (int v = 0; v < c.V; v++)
            sum += exp(z[v] - m);
        whole += m + log(sum) - z[c.targets[t]];
    }
    CHECK_MSG(fabs(loss - whole) < 1e-9 * whole, "chunked CE %.12g vs whole logits %.12g", loss, whole);
    free(c.h), free(c.W), free(dh), free(z);
}

/* ---- the Lizard layer's input gradients --------------------------------------------------------- */

typedef struct {
    lz_lizard_geom g;
    lz_lizard_params_f64 p;
    lz_lizard_scratch_f64 s;
    double *x, *q, *k, *v, *R, *y;
    int T, C;
} lizard_case;

static double lizard_loss(void *ctx) {
    lizard_case *c = ctx;
    lz_lizard_layer_forward_f64(c->y, &c->p, c->x, c->q, c->k, c->v, c->T, &c->g, &c->s);
    return dot(c->R, c->y, (size_t)c->T * c->g.Hq * c->g.d);
}

static void check_lizard(int n_wk, int Hs, bool normalize, unsigned seed) {
    lizard_case c = {.T = 70, .C = 6}; // 70 tokens: two GLA chunks
    c.g = (lz_lizard_geom){.Hq = 4, .Hkv = 2, .Hs = Hs, .n_wq = 1, .n_wk = n_wk, .d = 4, .f = 3, .w = 5, .m = 2,
                           .normalize = normalize};
    const size_t nq = (size_t)c.T * c.g.Hq * c.g.d, nk = (size_t)c.T * c.g.Hkv * c.g.d, nx = (size_t)c.T * c.C;
    const size_t nwq = lz_lizard_wq_numel(&c.g), nwk = lz_lizard_wk_numel(&c.g);
    c.x = rnd(nx, -1, 1, &seed), c.q = rnd(nq, -1, 1, &seed), c.k = rnd(nk, -1, 1, &seed);
    c.v = rnd(nk, -1, 1, &seed), c.R = rnd(nq, -1, 1, &seed), c.y = malloc(sizeof(double) * nq);
    c.p = (lz_lizard_params_f64){rnd(nwq, -0.5, 0.5, &seed), rnd(nwk, -0.5, 0.5, &seed), rnd((size_t)c.C, 0, 1, &seed),
                                 rnd(2, -1, 1, &seed), rnd(1, 0.5, 1, &seed)};
    lz_lizard_params_f64 gr = {calloc(nwq, sizeof(double)), calloc(nwk, sizeof(double)),
                               calloc((size_t)c.C, sizeof(double)), calloc(2, sizeof(double)),
                               calloc(1, sizeof(double))};
    double *dx = calloc(nx, sizeof(double)), *dq = calloc(nq, sizeof(double)), *dk = calloc(nk, sizeof(double));
    double *dv = calloc(nk, sizeof(double));
    CHECK(lz_lizard_scratch_create_f64(&c.s, &c.g, c.T, c.C) == 0);
    lizard_loss(&c);
    lz_lizard_layer_backward_f64(&gr, dx, dq, dk, dv, c.R, &c.p, c.x, c.q, c.k, c.v, c.T, &c.g, &c.s);
    CHECK_GRAD(lizard_loss, &c, c.x, dx, nx, "lizard dx");
    CHECK_GRAD(lizard_loss, &c, c.q, dq, nq, "lizard dq");
    CHECK_GRAD(lizard_loss, &c, c.k, dk, nk, "lizard dk");
    CHECK_GRAD(lizard_loss, &c, c.v, dv, nk, "lizard dv");
    CHECK_GRAD(lizard_loss, &c, c.p.wq, gr.wq, nwq, "lizard dWq");
    CHECK_GRAD(lizard_loss, &c, c.p.wk, gr.wk, nwk, "lizard dWk");
    CHECK_GRAD(lizard_loss, &c, c.p.wg, gr.wg, (size_t)c.C, "lizard dW_gamma");
    CHECK_GRAD(lizard_loss, &c, c.p.meta, gr.meta, 2, "lizard dmeta");
    CHECK_GRAD(lizard_loss, &c, c.p.alpha, gr.alpha, 1, "lizard dalpha");
    lz_lizard_scratch_free_f64(&c.s);
    double *bufs[] = {c.x, c.q, c.k, c.v, c.R, c.y, dx, dq, dk, dv, c.p.wq, c.p.wk, c.p.wg, c.p.meta, c.p.alpha,
                      gr.wq, gr.wk, gr.wg, gr.meta, gr.alpha};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

int main(void) {
    check_small(11);
    check_attention(4, 2, 12);
    check_attention(3, 3, 13);
    check_lora(false, 14);
    check_lora(true, 15);
    check_cross_entropy(16);
    check_lizard(1, 2, true, 17);
    check_lizard(4, 4, false, 18); // phi_k per query head: state heads = query heads
    return lz_test_finish("test_train_model");
}
