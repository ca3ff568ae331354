// gemv.cu - linear layers for few tokens (decode): out[n, m] = x[n, k] . W[m, k]^T
// with n <= LZ_GEMV_MAX_TOKENS. Memory-bound: each weight row is streamed once
// with 16-byte loads by one warp, which applies it to every token of the step.
// Also the shape every model has once per Lizard layer: m = 1 (the gate), any n.
// Several layers reading the same x (q, k and v; gate and up) go in one launch:
// their rows are one range of warps, so that small layers (k, v: 1024 rows)
// share a wave with large ones instead of running alone below the bandwidth.
// Launched through lz_launch: each lane issues its first GW_PRE weight loads
// (weights depend on no kernel) before it waits for the previous kernel, so a
// programmatic dependent's loads start while its predecessor drains. One load:
// 34 registers for one token in bf16, as before (4 took 56, fewer blocks an SM),
// and a resident wave's first loads are already megabytes in flight.
#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait

enum { GW_PRE = 1 };

// One warp per (output row of any segment, group of NT tokens). k % vec16<T>::N == 0.
template <typename T, int NT>
__global__ void gemv_kernel(lz_gemv_segments<T> seg, const T *x, int n, int k, int n_groups) {
    constexpr int V = vec16<T>::N;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= seg.total_rows * n_groups)
        return; // (touches no memory; the block's other warps wait)
    // this row's segment; constant indices only, so that the segments stay in parameter space
    int row = warp % seg.total_rows, m = seg.m[0];
    const T *w = seg.w[0], *bias = seg.bias[0];
    T *out = seg.out[0];
#pragma unroll
    for (int s = 1; s < LZ_GEMV_MAX_SEGMENTS; s++)
        if (s < seg.count && row >= m) {
            row -= m;
            m = seg.m[s], w = seg.w[s], bias = seg.bias[s], out = seg.out[s];
        }
    const int t0 = (warp / seg.total_rows) * NT, nt = min(NT, n - t0);
    const T *wr = w + (size_t)row * k;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    auto fma_row = [&](const float *wv, int c) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                float xv[V];
                vec16<T>::load(xv, x + (size_t)(t0 + t) * k + c);
#pragma unroll
                for (int i = 0; i < V; i++)
                    acc[t] += wv[i] * xv[i];
            }
        }
    };
    uint4 pre[GW_PRE]; // the first weights, loaded before the wait (raw: 4 registers, not 8)
#pragma unroll
    for (int u = 0; u < GW_PRE; u++)
        if (lane * V + u * 32 * V < k)
            pre[u] = *(const uint4 *)(wr + lane * V + u * 32 * V);
    lz_pdl_wait();
    lz_pdl_launch_dependents();
#pragma unroll
    for (int u = 0; u < GW_PRE; u++) {
        if (lane * V + u * 32 * V < k) {
            float wv[V];
            vec16<T>::load(wv, (const T *)&pre[u]);
            fma_row(wv, lane * V + u * 32 * V);
        }
    }
    for (int c = lane * V + GW_PRE * 32 * V; c < k; c += 32 * V) {
        float wv[V];
        vec16<T>::load(wv, wr + c);
        fma_row(wv, c);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float sum = lz_warp_sum(acc[t]);
        if (lane == 0 && t < nt)
            out[(size_t)(t0 + t) * m + row] = lz_from_float<T>(bias ? sum + lz_to_float(bias[row]) : sum);
    }
}

template <typename T, int NT>
static lz_status launch(lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, int n, int k) {
    const int groups = (n + NT - 1) / NT, block = 256;
    const int grid = (int)(((size_t)seg.total_rows * groups * 32 + block - 1) / block);
    return lz_launch(c, "gemv", gemv_kernel<T, NT>, dim3((unsigned)grid), dim3(block), 0, seg, x, n, k, groups);
}

// Accumulators per warp follow the step's size: 1 token (batch-1 decode), up to 4, up to 8. A
// layer of very few rows (the Lizard gate: one) takes one token a warp, so that its warps fill the
// GPU: with 8 tokens a warp the gate of 64 sequences was one block, 28.8 µs a layer (H200).
template <typename T> lz_status gemv_segments_forward(lz_cuda_ctx *c, lz_gemv_segments<T> seg, const T *x, int n, int k) {
    seg.total_rows = 0;
    for (int s = 0; s < seg.count; s++)
        seg.total_rows += seg.m[s];
    if (n <= 1 || (size_t)seg.total_rows * (size_t)n <= (size_t)32 * (size_t)c->n_sms)
        return launch<T, 1>(c, seg, x, n, k);
    if (n <= 4)
        return launch<T, 4>(c, seg, x, n, k);
    return launch<T, LZ_GEMV_MAX_TOKENS>(c, seg, x, n, k);
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
