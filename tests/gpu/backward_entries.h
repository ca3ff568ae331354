/* backward_entries.h - C entry points to the CUDA backward op table's softmax attention and Lizard
 * entries (kernels/cuda/backward_cuda.cuh declares them as C++ functions), for
 * test_gpu_backward_attn.c; backward_entries.cu forwards each call. Semantics: kernels/backward_ops.h. */
#ifndef LZ_TEST_BACKWARD_ENTRIES_H
#define LZ_TEST_BACKWARD_ENTRIES_H

#include "ops.h"         // lz_backend, lz_batch, lz_attn_dims, lz_status
#include "train_types.h" // lz_lizard_geom, lz_lizard_params_f32

lz_status lz_test_bw_attention(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const void *q,
                               const void *k, const void *v, const lz_batch *b, const lz_attn_dims *dims);
lz_status lz_test_bw_lizard_scratch_create(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens, int C);
void lz_test_bw_lizard_scratch_free(lz_backend *be, void *scratch);
lz_status lz_test_bw_lizard(lz_backend *be, void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq, float *dk,
                            float *dv, const float *dout, const lz_lizard_params_f32 *p, const void *x, const void *q,
                            const void *k, const void *v, const lz_batch *b, const lz_lizard_geom *g, int C);

#endif
