/* train_kernels.h - the CPU reference of a Lizard layer for training
 * (stage-1 attention distillation): forward passes that keep what the
 * backward needs, and the backward of every op (feature map, gate, chunked
 * GLA, window branch with meta-memory logits, the branch combination).
 *
 * One sequence of T tokens starting at position 0 per call (training
 * sequences are independent). Gradients flow only to the trainable tensors
 * (W of phi_q and phi_k, W_gamma, the meta logits, alpha) and to the
 * intermediates between them; q, k, v and x are the teacher's and frozen.
 *
 * Every function exists twice, built from one source (kernels/cpu/backward/):
 * _f32 (what `lizard distill` runs) and _f64 (what the gradient checks run
 * against finite differences). The f32 forward is the same arithmetic as the
 * inference kernels (checked in tests/unit/test_train_kernels.c). */
#ifndef LZ_TRAIN_KERNELS_H
#define LZ_TRAIN_KERNELS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t

#include "train_types.h" // lz_lizard_geom, lz_lizard_params_f32/_f64

#define LZ_TRAIN_DECLARE(real, sfx)                                                                                 \
    /* out [T, Hout, 2f] = phi(x), x [T, Hx, d], w [n_w, d, f] */                                                    \
    void feature_map_train_forward_##sfx(real *out, const real *x, const real *w, int n_w, int T, int Hx, int Hout, \
                                         int d, int f, bool exp_map);                                               \
    /* dw [n_w, d, f] += dL/dW given dphi [T, Hout, 2f] and the forward's phi */                                     \
    void feature_map_backward_##sfx(real *dw, const real *dphi, const real *phi, const real *x, int n_w, int T,     \
                                    int Hx, int Hout, int d, int f, bool exp_map);                                  \
    /* logit [T] = x [T, C] . wg [C];  log_gamma [T] = log(sigmoid(logit)) */                                        \
    void gate_train_forward_##sfx(real *logit, real *log_gamma, const real *x, const real *wg, int T, int C);       \
    /* dwg [C] += sum_t dlog_gamma[t] * sigmoid(-logit[t]) * x[t] */                                                 \
    void gate_backward_##sfx(real *dwg, const real *dlog_gamma, const real *logit, const real *x, int T, int C);    \
    /* out [T, Hq, d] = chunked GLA from a zero state; saves the state at the                                      \
     * start of every chunk: S0 [chunks, Hs, 2f, d], z0 [chunks, Hs, 2f] */                                          \
    void gla_train_forward_##sfx(real *out, real *S0, real *z0, const real *phi_q, const real *phi_k, const real *v, \
                                 const real *log_gamma, int T, const lz_lizard_geom *g);                            \
    /* dphi_q [T, Hq, 2f], dphi_k [T, Hs, 2f], dlog_gamma [T] (all overwritten) from dout [T, Hq, d] */              \
    void gla_backward_##sfx(real *dphi_q, real *dphi_k, real *dlog_gamma, const real *dout, const real *out,        \
                            const real *S0, const real *z0, const real *phi_q, const real *phi_k, const real *v,    \
                            const real *log_gamma, int T, const lz_lizard_geom *g);                                 \
    /* win [T, Hq, d] = WIN (the window branch before alpha), raw q, k */                                           \
    void window_train_forward_##sfx(real *win, const real *q, const real *k, const real *v, const real *meta, int T, \
                                    const lz_lizard_geom *g);                                                       \
    /* dmeta [m] += dL/dt_j given dwin [T, Hq, d] (the gradient of WIN, i.e. alpha * dy) */                          \
    void window_backward_##sfx(real *dmeta, const real *dwin, const real *win, const real *q, const real *k,        \
                               const real *meta, int T, const lz_lizard_geom *g);                              \
    /* Fine-tuning: the same ops' gradients for their inputs (all added to, except dv of gla_backward_full,       \
     * which is added to as well; NULL dv: none). */                                                              \
    void feature_map_backward_input_##sfx(real *dx, const real *dphi, const real *phi, const real *w, int n_w,      \
                                          int T, int Hx, int Hout, int d, int f, bool exp_map);                     \
    void gate_backward_input_##sfx(real *dx, const real *dlog_gamma, const real *logit, const real *wg, int T,      \
                                   int C);                                                                          \
    void gla_backward_full_##sfx(real *dphi_q, real *dphi_k, real *dlog_gamma, real *dv, const real *dout,          \
                                 const real *out, const real *S0, const real *z0, const real *phi_q,               \
                                 const real *phi_k, const real *v, const real *log_gamma, int T,                    \
                                 const lz_lizard_geom *g);                                                          \
    void window_backward_input_##sfx(real *dq, real *dk, real *dv, const real *dwin, const real *win, const real *q, \
                                     const real *k, const real *v, const real *meta, int T, const lz_lizard_geom *g);

LZ_TRAIN_DECLARE(float, f32)
LZ_TRAIN_DECLARE(double, f64)

/* The whole layer: y = GLA + alpha * WIN against the teacher's attention
 * output, loss = mean((y - target)^2), and its gradient for every trainable
 * tensor. Scratch for sequences of up to T tokens. */
#define LZ_LAYER_TRAIN_DECLARE(real, sfx)                                                                          \
    typedef struct {                                                                                               \
        int max_T, C;                                                                                              \
        real *phi_q, *phi_k, *logit, *lg, *gla, *S0, *z0, *win, *dy, *dphi_q, *dphi_k, *dlg, *dwin;               \
    } lz_lizard_scratch_##sfx;                                                                                     \
    int lz_lizard_scratch_create_##sfx(lz_lizard_scratch_##sfx *s, const lz_lizard_geom *g, int max_T, int C);     \
    void lz_lizard_scratch_free_##sfx(lz_lizard_scratch_##sfx *s);                                                 \
    /* Sum over the sequence of (y - target)^2; if grad is not NULL, adds                                         \
     * grad_scale * d(sum)/d(param) to it. x [T, C], q [T, Hq, d], k, v [T, Hkv, d], target [T, Hq, d]. */         \
    double lz_lizard_layer_sse_##sfx(const lz_lizard_params_##sfx *p, lz_lizard_params_##sfx *grad,                \
                                     real grad_scale, const real *x, const real *q, const real *k, const real *v,  \
                                     const real *target, int T, const lz_lizard_geom *g,                           \
                                     lz_lizard_scratch_##sfx *s);                                                  \
    /* y [T, Hq, d] = GLA + alpha WIN (y may be NULL); keeps in s what the backward reads. */                      \
    void lz_lizard_layer_forward_##sfx(real *y, const lz_lizard_params_##sfx *p, const real *x, const real *q,      \
                                       const real *k, const real *v, int T, const lz_lizard_geom *g,               \
                                       lz_lizard_scratch_##sfx *s);                                                \
    /* After the forward: from dy, adds d/dparam to grad (if not NULL) and d/dx, dq, dk, dv to those (if dq is     \
     * not NULL; all four then). */                                                                                \
    void lz_lizard_layer_backward_##sfx(lz_lizard_params_##sfx *grad, real *dx, real *dq, real *dk, real *dv,       \
                                        const real *dy, const lz_lizard_params_##sfx *p, const real *x,             \
                                        const real *q, const real *k, const real *v, int T, const lz_lizard_geom *g, \
                                        lz_lizard_scratch_##sfx *s);

LZ_LAYER_TRAIN_DECLARE(float, f32)
LZ_LAYER_TRAIN_DECLARE(double, f64)

/* The other ops of the model for fine-tuning (stage 2), one sequence of T
 * tokens from position 0 per call; backward_input/backward functions add to
 * their outputs unless said otherwise. Equations in kernels/cpu/backward/. */
enum { LZ_CE_CHUNK = 1024 }; /* vocabulary rows of logits at a time */
#define LZ_MODEL_TRAIN_DECLARE(real, sfx)                                                                          \
    /* y [T, C] = rmsnorm(x) * w; rinv [T] kept */                                                                 \
    void rmsnorm_train_forward_##sfx(real *y, real *rinv, const real *x, const real *w, int T, int C, real eps);    \
    void rmsnorm_backward_##sfx(real *dx, const real *dy, const real *x, const real *w, const real *rinv, int T,    \
                                int C);                                                                            \
    /* h [n] = silu(g) * u; dg, du overwritten */                                                                  \
    void swiglu_train_forward_##sfx(real *h, const real *g, const real *u, size_t n);                              \
    void swiglu_backward_##sfx(real *dg, real *du, const real *dh, const real *g, const real *u, size_t n);        \
    void embedding_train_forward_##sfx(real *x, const real *E, const int32_t *ids, int T, int C);                  \
    void embedding_backward_##sfx(real *dE, const real *dx, const int32_t *ids, int T, int C);                     \
    /* x [T, H, d] rotated in place at positions 0..T-1; sign -1: the backward */                                  \
    void rope_train_##sfx(real *x, int T, int H, int d, const float *inv_freq, real sign);                         \
    /* causal attention, q [T, Hq, d], k, v [T, Hkv, d]; out [T, Hq, d], lse [T, Hq];                              \
     * the backward overwrites dq, dk, dv */                                                                       \
    void attention_train_forward_##sfx(real *out, real *lse, const real *q, const real *k, const real *v, int T,   \
                                       int Hq, int Hkv, int d);                                                    \
    void attention_backward_##sfx(real *dq, real *dk, real *dv, const real *dout, const real *out,                \
                                  const real *lse, const real *q, const real *k, const real *v, int T, int Hq,     \
                                  int Hkv, int d);                                                                 \
    /* y [T, out] = x [T, in] W^T (overwritten), W [out, in]; dx += dy W */                                        \
    void linear_train_forward_##sfx(real *y, const real *x, const real *W, int T, int in, int out);                \
    void linear_backward_input_##sfx(real *dx, const real *dy, const real *W, int T, int in, int out);             \
    /* y += scale (x*mask) A^T B^T, u [T, r] = (x*mask) A^T kept; A [r, in], B [out, r]; mask NULL: none;            \
     * dx may be NULL */                                                                                           \
    void lora_train_forward_##sfx(real *y, real *u, const real *x, const real *A, const real *B, const real *mask,  \
                                  real scale, int T, int in, int out, int r);                                      \
    void lora_backward_##sfx(real *dA, real *dB, real *dx, const real *dy, const real *x, const real *u,          \
                             const real *A, const real *B, const real *mask, real scale, int T, int in, int out,   \
                             int r);                                                                               \
    /* sum over rows with targets[t] >= 0 of CE(h_t W^T, targets[t]), W [V, C]; dh [T, C] (overwritten,           \
     * NULL: none) = grad_scale * d(sum)/dh */                                                                     \
    double lm_head_cross_entropy_##sfx(real *dh, const real *h, const real *W, const int32_t *targets, int T,      \
                                       int C, int V, real grad_scale);

LZ_MODEL_TRAIN_DECLARE(float, f32)
LZ_MODEL_TRAIN_DECLARE(double, f64)

#endif
