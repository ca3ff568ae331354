// gemv_fused.cu - the decode GEMV (see gemv.cu) with the ops around it folded in, so that a
// decoder layer's dense part is four launches at decode instead of nine:
//   prologue RMSNorm: the warp that streams a weight row reads all of x[t] anyway; it also sums
//     x[t]^2 (so no block waits for another) and multiplies its weights by the norm's weight;
//     the row's dot product is scaled by rsqrt(mean(x^2) + eps) at the end;
//   epilogue residual: out[t, row] += the row's result (o_proj and down_proj onto the residual stream);
//   epilogue SwiGLU: the warp streams gate row r and up row r together and writes silu(gate) * up
//     (the gate and up outputs never reach memory, and the SwiGLU launch goes).
// Each lane issues GF_UNROLL 16-byte weight loads a row before it uses them (the loop over k unrolled
// by hand). 1: on the H200 (8B shapes, LIZARD_FUSE=all) 4 took the teacher's batch-1 decode from
// 186.6 to 157.8 tok/s and batch 4 from 378 to 290 (fewer warps an SM hid less latency). The plain
// GEMV (gemv.cu) measured the same way: 4 loads a lane for every layer 203 -> 191 tok/s, for the
// layers of few rows only (q/k/v, o, down) 207 -> 191.
// Launched as programmatic dependents (unless LIZARD_PDL=0), so that a GEMV's blocks start
// while the previous kernel drains; each warp issues its first weight loads (weights depend on no
// kernel), then waits for the previous kernel (griddepcontrol.wait: its completion and its memory)
// before it reads x, the norm input or the residual. Without the launch attribute both
// griddepcontrol instructions do nothing.
#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait

enum { GF_UNROLL = 1 };

// One warp per (output row of any segment, group of NT tokens). k % vec16<T>::N == 0.
template <typename T, int NT, bool NORM, int EPI>
__global__ void gemv_fused_kernel(lz_gemv_segments<T> seg, const T *x, const T *norm, float eps, int n, int k,
                                  int n_groups) {
    constexpr int V = vec16<T>::N, U = GF_UNROLL, NW = EPI == LZ_GEMV_SWIGLU ? 2 : 1;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= seg.total_rows * n_groups)
        return;
    int row = warp % seg.total_rows, m = seg.m[0];
    const T *w0 = seg.w[0], *w1 = seg.w[NW - 1], *bias0 = seg.bias[0], *bias1 = seg.bias[NW - 1];
    T *out = seg.out[0];
    if constexpr (EPI != LZ_GEMV_SWIGLU) { // this row's segment; constant indices keep seg in parameter space
#pragma unroll
        for (int s = 1; s < LZ_GEMV_MAX_SEGMENTS; s++)
            if (s < seg.count && row >= m) {
                row -= m;
                m = seg.m[s], w0 = seg.w[s], bias0 = seg.bias[s], out = seg.out[s];
            }
    }
    const int t0 = (warp / seg.total_rows) * NT, nt = min(NT, n - t0);
    const T *wr0 = w0 + (size_t)row * k, *wr1 = w1 + (size_t)row * k;
    float acc[NW][NT], ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        ss[t] = 0.0f;
#pragma unroll
        for (int j = 0; j < NW; j++)
            acc[j][t] = 0.0f;
    }
    float wv[U][NW][V];
    auto load_weights = [&](int c0) { // the weight loads first, all in flight
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * 32 * V;
            if (c < k) {
                vec16<T>::load(wv[u][0], wr0 + c);
                if constexpr (NW == 2)
                    vec16<T>::load(wv[u][NW - 1], wr1 + c);
            }
        }
    };
    load_weights(lane * V);
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    for (int c0 = lane * V; c0 < k; c0 += 32 * V * U) {
        if (c0 != lane * V) // the first pass's weights were loaded before the wait
            load_weights(c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * 32 * V;
            if (c >= k)
                continue;
            if constexpr (NORM) {
                float g[V];
                vec16<T>::load(g, norm + c);
#pragma unroll
                for (int j = 0; j < NW; j++)
#pragma unroll
                    for (int i = 0; i < V; i++)
                        wv[u][j][i] *= g[i];
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < nt) {
                    float xv[V];
                    vec16<T>::load(xv, x + (size_t)(t0 + t) * k + c);
#pragma unroll
                    for (int i = 0; i < V; i++) {
#pragma unroll
                        for (int j = 0; j < NW; j++)
                            acc[j][t] += wv[u][j][i] * xv[i];
                        if constexpr (NORM)
                            ss[t] += xv[i] * xv[i];
                    }
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float r0 = lz_warp_sum(acc[0][t]), r1 = NW == 2 ? lz_warp_sum(acc[NW - 1][t]) : 0.0f;
        if constexpr (NORM) {
            const float inv = rsqrtf(lz_warp_sum(ss[t]) / (float)k + eps);
            r0 *= inv, r1 *= inv;
        }
        if (lane == 0 && t < nt) {
            T *o = out + (size_t)(t0 + t) * m + row;
            if (bias0)
                r0 += lz_to_float(bias0[row]);
            if constexpr (EPI == LZ_GEMV_SWIGLU) {
                if (bias1)
                    r1 += lz_to_float(bias1[row]);
                *o = lz_from_float<T>(r0 / (1.0f + expf(-r0)) * r1);
            } else if constexpr (EPI == LZ_GEMV_RESIDUAL) {
                *o = lz_from_float<T>(lz_to_float(*o) + r0);
            } else {
                *o = lz_from_float<T>(r0);
            }
        }
    }
}

template <typename T, int NT, bool NORM, int EPI>
static lz_status launch(lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, const T *norm, float eps, int n,
                        int k) {
    const int groups = (n + NT - 1) / NT, block = 256;
    const int grid = (int)(((size_t)seg.total_rows * groups * 32 + block - 1) / block);
    LZ_TRY(lz_launch(c, "gemv (fused)", gemv_fused_kernel<T, NT, NORM, EPI>, dim3((unsigned)grid), dim3(block), 0, seg, x,
                     norm, eps, n, k, groups));
    LZ_LAUNCH_CHECK("gemv (fused)");
    return LZ_OK;
}

template <typename T, bool NORM, int EPI>
static lz_status by_tokens(lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, const T *norm, float eps, int n,
                           int k) {
    if (n <= 1)
        return launch<T, 1, NORM, EPI>(c, seg, x, norm, eps, n, k);
    if (n <= 4)
        return launch<T, 4, NORM, EPI>(c, seg, x, norm, eps, n, k);
    return launch<T, LZ_GEMV_MAX_TOKENS, NORM, EPI>(c, seg, x, norm, eps, n, k);
}

template <typename T>
lz_status gemv_fused_forward(lz_cuda_ctx *c, lz_gemv_segments<T> seg, const T *x, const T *norm, float eps,
                             lz_gemv_epilogue epilogue, int n, int k) {
    if (n < 1 || n > LZ_GEMV_MAX_TOKENS || k % vec16<T>::N != 0 || seg.count < 1 || seg.count > LZ_GEMV_MAX_SEGMENTS)
        return lz_fail(LZ_ERR_INTERNAL, "fused GEMV: %d tokens, %d inputs, %d segments", n, k, seg.count);
    if (epilogue == LZ_GEMV_SWIGLU) {
        if (seg.count != 2 || seg.m[0] != seg.m[1])
            return lz_fail(LZ_ERR_INTERNAL, "fused GEMV: SwiGLU needs two segments of equal rows");
        seg.total_rows = seg.m[0];
        return norm ? by_tokens<T, true, LZ_GEMV_SWIGLU>(c, seg, x, norm, eps, n, k)
                    : by_tokens<T, false, LZ_GEMV_SWIGLU>(c, seg, x, norm, eps, n, k);
    }
    seg.total_rows = 0;
    for (int s = 0; s < seg.count; s++)
        seg.total_rows += seg.m[s];
    if (epilogue == LZ_GEMV_RESIDUAL) // (no norm: o_proj and down_proj read attention / MLP outputs)
        return norm ? lz_fail(LZ_ERR_INTERNAL, "fused GEMV: a norm with the residual epilogue")
                    : by_tokens<T, false, LZ_GEMV_RESIDUAL>(c, seg, x, norm, eps, n, k);
    return norm ? by_tokens<T, true, LZ_GEMV_STORE>(c, seg, x, norm, eps, n, k)
                : by_tokens<T, false, LZ_GEMV_STORE>(c, seg, x, norm, eps, n, k);
}

#define LZ_GEMV_FUSED(T)                                                                                         \
    template lz_status gemv_fused_forward<T>(lz_cuda_ctx *, lz_gemv_segments<T>, const T *, const T *, float,     \
                                             lz_gemv_epilogue, int, int);
LZ_INSTANTIATE(LZ_GEMV_FUSED)
