// gemv.cu - linear layers for few tokens (decode): out[n, m] = x[n, k] . W[m, k]^T
// with n <= LZ_GEMV_MAX_TOKENS. Memory-bound: each weight row is streamed once
// with 16-byte loads by one warp, which applies it to every token of the step.
// Also the shape every model has once per Lizard layer: m = 1 (the gate), any n.
#include "cuda_kernels.cuh"

// One warp per (output row, group of NT tokens). k % vec16<T>::N == 0.
template <typename T, int NT>
__global__ void gemv_kernel(T *out, const T *x, const T *w, const T *bias, int n, int k, int m, int n_groups) {
    constexpr int V = vec16<T>::N;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= m * n_groups)
        return;
    const int row = warp % m, t0 = (warp / m) * NT, nt = min(NT, n - t0);
    const T *wr = w + (size_t)row * k;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    for (int c = lane * V; c < k; c += 32 * V) {
        float wv[V], xv[V];
        vec16<T>::load(wv, wr + c);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                vec16<T>::load(xv, x + (size_t)(t0 + t) * k + c);
#pragma unroll
                for (int i = 0; i < V; i++)
                    acc[t] += wv[i] * xv[i];
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float sum = lz_warp_sum(acc[t]);
        if (lane == 0 && t < nt)
            out[(size_t)(t0 + t) * m + row] = lz_from_float<T>(bias ? sum + lz_to_float(bias[row]) : sum);
    }
}

template <typename T, int NT>
static lz_status launch(lz_cuda_ctx *c, T *out, const T *x, const T *w, const T *bias, int n, int k, int m) {
    const int groups = (n + NT - 1) / NT, block = 256;
    const int grid = (int)(((size_t)m * groups * 32 + block - 1) / block);
    gemv_kernel<T, NT><<<grid, block, 0, c->stream>>>(out, x, w, bias, n, k, m, groups);
    LZ_LAUNCH_CHECK("gemv");
    return LZ_OK;
}

// Accumulators per warp follow the step's size: 1 token (batch-1 decode), up to 4, up to 8.
template <typename T>
lz_status gemv_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, const T *bias, int n, int k, int m) {
    if (n <= 1)
        return launch<T, 1>(c, out, x, w, bias, n, k, m);
    if (n <= 4)
        return launch<T, 4>(c, out, x, w, bias, n, k, m);
    return launch<T, LZ_GEMV_MAX_TOKENS>(c, out, x, w, bias, n, k, m);
}

#define LZ_GEMV(T) template lz_status gemv_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, int, int, int);
LZ_INSTANTIATE(LZ_GEMV)
