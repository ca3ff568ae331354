// backward_pending.cu - the entries of backward_attention.cu and backward_lizard.cu until those
// files are built: each fails, naming itself.
#include "backward_cuda.cuh"

lz_status lz_cuda_bw_attention(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const void *q,
                               const void *k, const void *v, const lz_batch *b, const lz_attn_dims *dims) {
    return lz_fail(LZ_ERR_INTERNAL, "cuda backward: attention is not built");
}

lz_status lz_cuda_bw_lizard_scratch_create(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens,
                                           int C) {
    *out = NULL;
    return lz_fail(LZ_ERR_INTERNAL, "cuda backward: lizard_scratch_create is not built");
}

void lz_cuda_bw_lizard_scratch_free(lz_backend *be, void *scratch) {}

lz_status lz_cuda_bw_lizard(lz_backend *be, void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq,
                            float *dk, float *dv, const float *dout, const lz_lizard_params_f32 *p, const void *x,
                            const void *q, const void *k, const void *v, const lz_batch *b, const lz_lizard_geom *g,
                            int C) {
    return lz_fail(LZ_ERR_INTERNAL, "cuda backward: lizard is not built");
}
