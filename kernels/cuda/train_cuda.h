/* train_cuda.h - the training kernels of cpu/train_kernels.h on the GPU
 * (fp32, device pointers), for `lizard distill --device cuda`.
 *
 * Differences from the CPU interface, all for speed:
 *   - the GLA and window take n_seq independent sequences of T tokens packed
 *     one after the other (rows b*T .. b*T+T-1), so one launch covers a batch;
 *     per-token ops take the total row count N;
 *   - the forwards also save what their backwards would otherwise recompute
 *     (the GLA's normaliser, the window's row max and denominator);
 *   - reductions over tokens go through caller scratch (sizes from the
 *     *_scratch functions) and are summed in a fixed order: a run repeats
 *     bit for bit.
 * Results agree with the CPU f32 build within rounding
 * (tests/gpu/test_gpu_train.c, tests/gpu/test_gpu_backward_attn.c). All calls
 * run on the training stream (lz_cuda_train_set_stream); every CUDA call is
 * checked and a failure returns LZ_ERR_INTERNAL with its message.
 *
 * Fine-tuning (stage 2) adds the gradients for the inputs q, k, v and x
 * (the *_input functions and gla_backward_full's dv), all added to. */
#ifndef LZ_TRAIN_CUDA_H
#define LZ_TRAIN_CUDA_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "train_types.h" // lz_lizard_geom, lz_lizard_params_f32
#include "error.h"             // lz_status

/* The stream of every launch, copy and memset below (a cudaStream_t; NULL, the default: the legacy
 * default stream, what distillation uses). Process-wide, as the GLA precision; a call that reads a
 * result on the host (the layer's loss) synchronises this stream. */
void lz_cuda_train_set_stream(void *stream);

/* out [N, Hout, 2f] = phi(x), x [N, Hx, d], w [n_w, d, f] (n_w 1 or Hout) */
lz_status lz_cuda_feature_map_train_forward(float *out, const float *x, const float *w, int n_w, int N, int Hx,
                                            int Hout, int d, int f, bool exp_map);
size_t lz_cuda_feature_map_backward_scratch(int n_w, int N, int Hout, int d, int f); /* floats */
/* dw [n_w, d, f] += dL/dW given dphi [N, Hout, 2f] and the forward's phi */
lz_status lz_cuda_feature_map_backward(float *dw, const float *dphi, const float *phi, const float *x, int n_w, int N,
                                       int Hx, int Hout, int d, int f, bool exp_map, float *scratch);
/* dx [N, Hx, d] += dL/dx given dphi, the forward's phi and w (scratch: lz_cuda_feature_map_backward_scratch) */
lz_status lz_cuda_feature_map_backward_input(float *dx, const float *dphi, const float *phi, const float *w, int n_w,
                                             int N, int Hx, int Hout, int d, int f, bool exp_map, float *scratch);

/* logit [N] = x [N, C] . wg [C];  log_gamma [N] = log(sigmoid(logit)) */
lz_status lz_cuda_gate_train_forward(float *logit, float *log_gamma, const float *x, const float *wg, int N, int C);
size_t lz_cuda_gate_backward_scratch(int N, int C); /* floats */
/* dwg [C] += sum_t dlog_gamma[t] * sigmoid(-logit[t]) * x[t] */
lz_status lz_cuda_gate_backward(float *dwg, const float *dlog_gamma, const float *logit, const float *x, int N, int C,
                                float *scratch);
/* dx [N, C] += dlog_gamma[t] * sigmoid(-logit[t]) * wg */
lz_status lz_cuda_gate_backward_input(float *dx, const float *dlog_gamma, const float *logit, const float *wg, int N,
                                      int C);

/* The GLA's matrix products inside a chunk (forward and backward): fp32, or
 * the bf16 path: operands rounded to bf16 and multiplied on the tensor cores
 * with fp32 accumulation; the chunk-local cumulative log gates, every decay
 * factor e^{G_i - G_t} <= 1 (applied before rounding), the states and the
 * normaliser stay fp32. Process-wide; the default is fp32, or
 * LIZARD_TRAIN_GLA=bf16 in the environment. */
typedef enum { LZ_GLA_FP32 = 0, LZ_GLA_BF16 = 1 } lz_gla_precision;
void lz_cuda_train_set_gla_precision(lz_gla_precision p);
lz_gla_precision lz_cuda_train_gla_precision(void);

/* out [n_seq*T, Hq, d]; S0 [n_seq, chunks, Hs, 2f, d], z0 [n_seq, chunks, Hs, 2f] (each sequence's block
 * as the CPU's); den [n_seq*T, Hq] the normaliser (written when g->normalize) */
lz_status lz_cuda_gla_train_forward(float *out, float *S0, float *z0, float *den, const float *phi_q,
                                    const float *phi_k, const float *v, const float *log_gamma, int n_seq, int T,
                                    const lz_lizard_geom *g);
size_t lz_cuda_gla_backward_scratch(int n_seq, int T, const lz_lizard_geom *g); /* floats */
/* dphi_q [n_seq*T, Hq, 2f], dphi_k [n_seq*T, Hs, 2f], dlog_gamma [n_seq*T] (overwritten) from dout */
lz_status lz_cuda_gla_backward(float *dphi_q, float *dphi_k, float *dlog_gamma, const float *dout, const float *out,
                               const float *S0, const float *z0, const float *den, const float *phi_q,
                               const float *phi_k, const float *v, const float *log_gamma, int n_seq, int T,
                               const lz_lizard_geom *g, float *scratch);
/* The same and, if dv is not NULL, dv [n_seq*T, Hkv, d] += dL/dv (the same scratch) */
lz_status lz_cuda_gla_backward_full(float *dphi_q, float *dphi_k, float *dlog_gamma, float *dv, const float *dout,
                                    const float *out, const float *S0, const float *z0, const float *den,
                                    const float *phi_q, const float *phi_k, const float *v, const float *log_gamma,
                                    int n_seq, int T, const lz_lizard_geom *g, float *scratch);

/* win [n_seq*T, Hq, d] = WIN; stats [n_seq*T, Hq, 2] = (row max, denominator / e^max) for the backward */
lz_status lz_cuda_window_train_forward(float *win, float *stats, const float *q, const float *k, const float *v,
                                       const float *meta, int n_seq, int T, const lz_lizard_geom *g);
size_t lz_cuda_window_backward_scratch(int n_seq, int T, const lz_lizard_geom *g); /* floats */
/* dmeta [m] += dL/dt_j given dwin [n_seq*T, Hq, d] */
lz_status lz_cuda_window_backward(float *dmeta, const float *dwin, const float *win, const float *stats,
                                  const float *meta, int n_seq, int T, const lz_lizard_geom *g, float *scratch);
/* dq [n_seq*T, Hq, d], dk, dv [n_seq*T, Hkv, d] += dL/d(q, k, v) given dwin, the forward's win and stats
 * (scratch: lz_cuda_window_backward_scratch) */
lz_status lz_cuda_window_backward_input(float *dq, float *dk, float *dv, const float *dwin, const float *win,
                                        const float *stats, const float *q, const float *k, const float *v, int n_seq,
                                        int T, const lz_lizard_geom *g, float *scratch);

/* dst [n] = src [n] (bf16 bits, the activations of a bf16 teacher) as fp32 */
lz_status lz_cuda_bf16_to_f32(float *dst, const void *src, size_t n);

/* The whole layer on the GPU (layer_train.inc's lz_lizard_layer_sse): scratch for
 * n_seq sequences of T tokens and hidden size C. */
typedef struct {
    int n_seq, T, C;
    float *phi_q, *phi_k, *logit, *lg, *gla, *S0, *z0, *den, *win, *stats, *dy, *dphi_q, *dphi_k, *dlg, *dwin;
    float *work;       /* the backwards' reduction scratch */
    double *partial;   /* per-block sums of the loss and d alpha */
    double *h_partial; /* host copy */
} lz_lizard_cuda_scratch;

lz_status lz_lizard_cuda_scratch_create(lz_lizard_cuda_scratch *s, const lz_lizard_geom *g, int n_seq, int T, int C);
void lz_lizard_cuda_scratch_free(lz_lizard_cuda_scratch *s);
/* *sse = sum over the n_seq sequences of (y - target)^2 (and, if energy is not NULL, *energy = sum
 * of target^2, the scale of the relative error); if grad is not NULL, adds grad_scale *
 * d(sum)/d(param) to it. p, grad: device tensors; x [n_seq*T, C], q [.., Hq, d], k, v [.., Hkv, d],
 * target [.., Hq, d] on the device. */
lz_status lz_lizard_layer_sse_cuda(double *sse, double *energy, const lz_lizard_params_f32 *p,
                                   lz_lizard_params_f32 *grad, float grad_scale, const float *x, const float *q,
                                   const float *k, const float *v, const float *target, int n_seq, int T,
                                   const lz_lizard_geom *g, lz_lizard_cuda_scratch *s);

#endif
