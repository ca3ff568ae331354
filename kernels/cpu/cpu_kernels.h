/* cpu_kernels.h - the CPU backend's fp32 kernels, one C function per op
 * (names <op>_forward, shapes in comments): products through OpenBLAS in
 * tiles (cpu_gemm.h), the other loops over the cores (cpu_threads.h), each
 * token's result independent of the batch it came in. cpu_backend.c wires
 * them into the op table; the GPU kernels are checked against these. */
#ifndef LZ_CPU_KERNELS_H
#define LZ_CPU_KERNELS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <math.h>    // sqrtf
#include <stdint.h>  // int32_t

#include "backward_ops.h" // lz_backward_ops
#include "ops.h"          // lz_batch, lz_attn_dims, lz_layer_state

/* Tokens per chunk of the chunked GLA prompt path. */
enum { LZ_GLA_CHUNK = 64 };

void embedding_forward(float *out, const float *table, const int32_t *ids, int T, int C);
// 1 / sqrt(mean(x^2) + eps) of one row, summed in fp32 in order: the forward and the backward share it
static inline float rmsnorm_inv_rms(const float *x, int C, float eps) {
    float ss = 0.0f;
    for (int c = 0; c < C; c++)
        ss += x[c] * x[c];
    return 1.0f / sqrtf(ss / (float)C + eps);
}
void rmsnorm_forward(float *out, const float *x, const float *w, int T, int C, float eps);
void linear_forward(float *out, const float *x, const float *w, const float *bias, int T, int in, int out_features);
/* The same with an FP8 weight: codes q [out_features, in] and one scale per row (fp8_rule.h). */
lz_status linear_fp8_forward(float *out, const float *x, const uint8_t *q, const float *scale, const float *bias,
                             int T, int in, int out_features);
void add_forward(float *y, const float *x, size_t n);
void swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void argmax_rows_forward(int32_t *ids, const float *x, int n, int C);
/* ids[r] = row r of x [n, C] sampled with params[r] (the rule of sample_rule.h) */
void sample_rows_forward(int32_t *ids, const float *x, int n, int C, const lz_sample_row *params);
void gather_rows_forward(float *out, const float *x, const int32_t *rows, int n, int C);
void log_sigmoid_forward(float *out, const float *x, int T);
void rope_forward(float *q, float *k, const float *inv_freq, const lz_batch *batch, const lz_attn_dims *dims);
void softmax_attention_forward(float *out, const float *q, const float *k, const float *v, lz_layer_state *st,
                               const lz_batch *batch, const lz_attn_dims *dims);
void feature_map_forward(float *out, const float *x, const float *w, int n_w, int T, int Hx, int Hout, int d, int f,
                         bool exp_map);
void gla_chunked_forward(float *out, const float *phi_q, const float *phi_k, const float *v, const float *log_gamma,
                         lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims);
void gla_recurrent_forward(float *out, const float *phi_q, const float *phi_k, const float *v,
                           const float *log_gamma, lz_layer_state *st, const lz_batch *batch,
                           const lz_attn_dims *dims);
void window_attention_forward(float *out, const float *q, const float *k, const float *v, const float *meta_logits,
                              float alpha, lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims);

/* The LM head's cross-entropy over the rows with a target (targets[t] >= 0; the others add nothing and
 * get zero gradients): *loss = the sum over those rows, dh [N, C] (overwritten; NULL: none) =
 * grad_scale * d(sum)/dh; h [N, C], W [V, C]. */
lz_status lm_head_loss(double *loss, float *dh, const float *h, const float *W, const int32_t *targets, int N, int C,
                       int V, float grad_scale);

/* Causal GQA softmax attention's gradients (attention_grad.c) of one sequence from position 0, for the
 * query heads of kv head kvh: dq's rows of those heads overwritten, dk and dv of kvh added to. q, dout
 * [T, Hq, d]; k, v, dk, dv [T, Hkv, d]; scratch: LZ_ATTN_GRAD_SCRATCH(T, d) floats. */
enum { LZ_ATTN_GRAD_ROWS = 64 }; /* query rows a block */
#define LZ_ATTN_GRAD_SCRATCH(T, d) ((size_t)LZ_ATTN_GRAD_ROWS * (2 * (size_t)(T) + (size_t)(d) + 1))
void attention_grad_group(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                          const float *v, int T, int Hq, int Hkv, int d, int kvh, float *scratch);

/* The gradients of these ops for training (backward_ops_cpu.c): the op table's `backward`. */
extern const lz_backward_ops lz_cpu_backward_table;

#endif
