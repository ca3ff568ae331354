// backward_cuda.cuh - the CUDA backward op table's entries (kernels/backward_ops.h has what each
// computes), one function each with the table's signature, gathered into the table by
// backward_ops_cuda.cu. Every launch goes to the backend's stream (be->ctx.stream) and every
// product through its cuBLAS handle (be->ctx.cublas); activations are in be->dtype (bf16 or
// fp32), gradients and trainable tensors fp32. The step's batch is on the device in be->batch
// (begin_step) when these run.
#ifndef LZ_BACKWARD_CUDA_CUH
#define LZ_BACKWARD_CUDA_CUH

#include "cuda_backend.cuh" // struct lz_backend

extern "C" {
#include "backward_ops.h" // lz_backward_ops, lz_lora, lz_dropout, lz_adamw_update
}

// backward_dense.cu: the dense ops of a decoder layer and the head
lz_status lz_cuda_bw_rmsnorm(lz_backend *be, float *dx, const float *dy, const void *x, const lz_weight *w, int N,
                             float eps);
lz_status lz_cuda_bw_swiglu(lz_backend *be, float *dg, float *du, const float *dh, const void *g, const void *u,
                            size_t n);
lz_status lz_cuda_bw_linear(lz_backend *be, float *dx, const float *dy, const lz_weight *w, int N, bool accumulate);
lz_status lz_cuda_bw_rope(lz_backend *be, float *dq, float *dk, const float *inv_freq, const lz_batch *b,
                          const lz_attn_dims *dims);
lz_status lz_cuda_bw_cross_entropy(lz_backend *be, double *loss, float *dh, const void *h, const lz_weight *w,
                                   const int32_t *targets, int N, float grad_scale);

// backward_lora.cu: LoRA's forward and backward
lz_status lz_cuda_bw_lora_sync(lz_backend *be, lz_lora *l);
void lz_cuda_bw_lora_release(lz_backend *be, lz_lora *l);
lz_status lz_cuda_bw_lora_forward(lz_backend *be, void *y, float *u, const void *x, const lz_lora *l,
                                  const lz_dropout *drop, const lz_batch *b);
lz_status lz_cuda_bw_lora_backward(lz_backend *be, lz_lora *l, float *dx, const float *dy, const void *x,
                                   const float *u, const lz_dropout *drop, const lz_batch *b);

// backward_tensors.cu: copies, sums, the optimizer, weights from their fp32 values
lz_status lz_cuda_bw_copy(lz_backend *be, void *dst, const void *src, size_t bytes);
lz_status lz_cuda_bw_to_f32(lz_backend *be, float *dst, const void *src, size_t n);
lz_status lz_cuda_bw_add(lz_backend *be, float *y, const float *x, size_t n);
lz_status lz_cuda_bw_sum_squares(lz_backend *be, double *out, const float *const *x, const size_t *n, int count);
lz_status lz_cuda_bw_adamw(lz_backend *be, float *p, float *m, float *v, const float *g, size_t n,
                           const lz_adamw_update *u);
lz_status lz_cuda_bw_weight_set(lz_backend *be, lz_weight *w, const float *src);

// backward_attention.cu: softmax attention's backward
lz_status lz_cuda_bw_attention(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const void *q,
                               const void *k, const void *v, const lz_batch *b, const lz_attn_dims *dims);

// backward_lizard.cu: the Lizard layer's attention, recomputed and differentiated
lz_status lz_cuda_bw_lizard_scratch_create(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens, int C);
void lz_cuda_bw_lizard_scratch_free(lz_backend *be, void *scratch);
lz_status lz_cuda_bw_lizard(lz_backend *be, void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq,
                            float *dk, float *dv, const float *dout, const lz_lizard_params_f32 *p, const void *x,
                            const void *q, const void *k, const void *v, const lz_batch *b, const lz_lizard_geom *g,
                            int C);

// backward_ops_cuda.cu: the table
const lz_backward_ops *lz_cuda_backward_ops(void);

#endif
