// rope.cu - rotary embedding in HF's rotate-half layout, angle = pos * inv_freq
// in fp32 (as HF computes it), precise cosf/sinf. Launched as a programmatic dependent
// (pdl.cuh): at one token a step it is all launch latency.
#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait
#include "rope_rotate.cuh" // lz_rope_rotate

// grid (tokens, Hq + Hkv), block: half head_dim
template <typename T>
__global__ void rope_kernel(T *q, T *k, const float *inv_freq, const int32_t *token_pos, int Hq, int Hkv, int d) {
    lz_pdl_wait(); // q and k come from the previous kernel
    lz_pdl_launch_dependents();
    const int t = blockIdx.x, h = blockIdx.y, half = d / 2;
    T *x = h < Hq ? q + ((size_t)t * Hq + h) * d : k + ((size_t)t * Hkv + (h - Hq)) * d;
    const float p = (float)token_pos[t];
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        float r0, r1;
        lz_rope_rotate(lz_to_float(x[j]), lz_to_float(x[j + half]), p, inv_freq[j], &r0, &r1);
        x[j] = lz_from_float<T>(r0);
        x[j + half] = lz_from_float<T>(r1);
    }
}

template <typename T>
lz_status rope_forward(lz_cuda_ctx *c, T *q, T *k, const float *inv_freq, const lz_cuda_batch *b, int n_tokens,
                       const lz_attn_dims *dims) {
    const int half = dims->head_dim / 2;
    dim3 grid(n_tokens, dims->n_heads + dims->n_kv_heads);
    return lz_launch(c, "rope", rope_kernel<T>, grid, dim3(half < 32 ? 32 : (half > 512 ? 512 : half)), 0, q, k,
                     inv_freq, b->token_pos, dims->n_heads, dims->n_kv_heads, dims->head_dim);
}

#define LZ_ROPE(T)                                                                                              \
    template lz_status rope_forward<T>(lz_cuda_ctx *, T *, T *, const float *, const lz_cuda_batch *, int,      \
                                       const lz_attn_dims *);
LZ_INSTANTIATE(LZ_ROPE)
