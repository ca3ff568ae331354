// gemv.cu - linear layers for few tokens (decode): out[n, m] = x[n, k] . W[m, k]^T
// with n <= LZ_GEMV_MAX_TOKENS, on the streaming kernel of gemv_kernel.cuh. Also the shape
// every model has once per Lizard layer: m = 1 (the gate), any n.
// Several layers reading the same x (q, k and v; gate and up) go in one launch:
// their rows are one range of warps, so that small layers (k, v: 1024 rows)
// share a wave with large ones instead of running alone below the bandwidth.
#include "gemv_kernel.cuh"

// (The launchers give it one-token steps unless LIZARD_GEMV_TOKENS says more: cuda_kernels.cuh.)
// Accumulators per warp follow the step's size: 1 token (batch-1 decode), up to 4, up to 8. A
// layer of very few rows (the Lizard gate: one) takes one token a warp, so that its warps fill the
// GPU (with 8 tokens a warp the gate of 64 sequences would be one block).
template <typename T> lz_status gemv_segments_forward(lz_cuda_ctx *c, lz_gemv_segments<T> seg, const T *x, int n, int k) {
    seg.total_rows = 0;
    for (int s = 0; s < seg.count; s++)
        seg.total_rows += seg.m[s];
    if (n <= 1 || (size_t)seg.total_rows * (size_t)n <= (size_t)32 * (size_t)c->n_sms)
        return lz_gemv_launch<T, 1, LZ_GEMV_STORE>(c, seg, x, n, k);
    if (n <= 4)
        return lz_gemv_launch<T, 4, LZ_GEMV_STORE>(c, seg, x, n, k);
    return lz_gemv_launch<T, LZ_GEMV_MAX_TOKENS, LZ_GEMV_STORE>(c, seg, x, n, k);
}

template <typename T>
lz_status gemv_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, const T *bias, int n, int k, int m) {
    lz_gemv_segments<T> seg = {};
    seg.count = 1;
    seg.out[0] = out, seg.w[0] = w, seg.bias[0] = bias, seg.m[0] = m;
    return gemv_segments_forward<T>(c, seg, x, n, k);
}

#define LZ_GEMV(T)                                                                                     \
    template lz_status gemv_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, int, int, int); \
    template lz_status gemv_segments_forward<T>(lz_cuda_ctx *, lz_gemv_segments<T>, const T *, int, int);
LZ_INSTANTIATE(LZ_GEMV)
