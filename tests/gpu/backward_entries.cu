// backward_entries.cu - the C entry points of backward_entries.h: each forwards to the CUDA
// backward op table's function of the same entry (kernels/cuda/backward_cuda.cuh).
#include "backward_cuda.cuh" // lz_cuda_bw_attention, lz_cuda_bw_lizard*

extern "C" {
#include "backward_entries.h"
}

lz_status lz_test_bw_attention(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const void *q,
                               const void *k, const void *v, const lz_batch *b, const lz_attn_dims *dims) {
    return lz_cuda_bw_attention(be, dq, dk, dv, dout, q, k, v, b, dims);
}

lz_status lz_test_bw_lizard_scratch_create(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens,
                                           int C) {
    return lz_cuda_bw_lizard_scratch_create(be, out, g, max_tokens, C);
}

void lz_test_bw_lizard_scratch_free(lz_backend *be, void *scratch) { lz_cuda_bw_lizard_scratch_free(be, scratch); }

lz_status lz_test_bw_lizard(lz_backend *be, void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq, float *dk,
                            float *dv, const float *dout, const lz_lizard_params_f32 *p, const void *x, const void *q,
                            const void *k, const void *v, const lz_batch *b, const lz_lizard_geom *g, int C) {
    return lz_cuda_bw_lizard(be, scratch, grad, dx, dq, dk, dv, dout, p, x, q, k, v, b, g, C);
}
