// gemv_kernel.cuh - the decode GEMV kernel that gemv.cu (plain) and gemv_fused.cu (residual, SwiGLU
// or RoPE epilogue) launch: out[n, m] = x[n, k] . W[m, k]^T for n <= LZ_GEMV_MAX_TOKENS.
//
// Memory-bound: one warp streams one weight row with 16-byte loads and applies it to NT tokens;
// each lane's first load goes before griddepcontrol.wait (weights depend on no kernel), so a GEMV's
// loads start while the previous kernel drains. LOAD picks the weight load's cache operators and the
// registers (bf16 only): 0 plain (L1 and L2 as the hardware likes), 2 L1 no-allocate, 5 as 2 held to
// 32 registers a thread, so that 8 blocks fit an SM instead of 6 (one token: the q/k/v GEMV's 768
// blocks then take 73% of the slots, not 97%, and the next kernel's blocks find room while it runs).
// SPLIT (one token): warps a row, so that layers of few rows (o_proj, down_proj: 4096) fill the GPU's
// thread slots with warps streaming a half or a quarter of a row each.
// The SwiGLU epilogue (HALVES): lanes 0-15 of a warp stream the gate row of an output and lanes 16-31
// its up row, and the halves meet by a shuffle; so the fused GEMV keeps the plain one's registers
// (32, no spills), 8 blocks an SM, and no shared memory.
// The RoPE epilogue (ROPE, a softmax layer's q, k, v at one token): the 8 warps of a block stream rows
// i .. i + 3 and i + d/2 .. i + d/2 + 3 of one head (rows permuted within the head), meet in 32 bytes
// of shared memory and write the rotated pairs with rope.cu's arithmetic (rope_rotate.cuh), so the
// rope launch goes.
// L2 prefetch of o_proj at one sequence (l2_prefetch): in a Lizard layer the GLA and window decode
// kernels before o_proj are chains of small dependent steps that leave HBM nearly idle, so o_proj's
// first lane of each row asks the copy engine for the whole row (cp.async.bulk.prefetch.L2) before
// its PDL wait, and streams it from L2 after. The window decode launcher marks the chance
// (ctx->hbm_idle_next), so softmax layers, whose attention reads the KV cache, and down_proj never
// prefetch. The instruction sits in the residual epilogue's instance only and reuses the first load's
// address: as a runtime test in every instance it made ptxas spill in the 32-register one-token GEMVs.
// (docs/benchmarks.md lists the variants measured and not kept.)
#ifndef LZ_GEMV_KERNEL_CUH
#define LZ_GEMV_KERNEL_CUH

#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait
#include "ptx.cuh" // lz_prefetch_l2
#include "rope_rotate.cuh" // lz_rope_rotate

enum { LZ_GEMV_BLOCK = 256 };

// 16 bytes of weights with the cache operators of LOAD (above).
template <int LOAD> __device__ __forceinline__ uint4 lz_load_weight16(const void *p) {
    uint4 r;
    static_assert(LOAD == 0 || LOAD == 2 || LOAD == 5, "a load variant of the list above");
    if constexpr (LOAD == 0) {
        r = *(const uint4 *)p;
    } else {
        asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
            : "l"(p));
    }
    return r;
}

// Named barrier 1 + group of the SPLIT warps of a row (immediate ids: a register id makes ptxas
// reserve all 16).
template <int SPLIT> __device__ __forceinline__ void lz_row_barrier(int group) {
    switch (group) {
    case 0: asm volatile("bar.sync 1, %0;" ::"n"(32 * SPLIT) : "memory"); break;
    case 1: asm volatile("bar.sync 2, %0;" ::"n"(32 * SPLIT) : "memory"); break;
    case 2: asm volatile("bar.sync 3, %0;" ::"n"(32 * SPLIT) : "memory"); break;
    default: asm volatile("bar.sync 4, %0;" ::"n"(32 * SPLIT) : "memory"); break;
    }
}

// SPLIT warps of one block per (output row of any segment, group of NT tokens), each taking every
// SPLIT-th 32 x 16-byte chunk of the row; k % vec16<T>::N == 0. Split rows meet
// at a named barrier of their SPLIT warps, and the first warp adds the partial sums in order. The
// SwiGLU epilogue (SPLIT = 1): lanes 0-15 stream the gate row and lanes 16-31 the up row (16 x 16
// bytes a load each).
template <typename T, int NT, int EPI, int LOAD, int SPLIT>
__global__ void __launch_bounds__(LZ_GEMV_BLOCK, LOAD == 5 ? 8 : 0)
    gemv_kernel(lz_gemv_segments<T> seg, const T *x, int n, int k, int n_groups, bool l2_prefetch) {
    constexpr bool HALVES = EPI == LZ_GEMV_SWIGLU; // gate and up rows on the halves of a warp
    static_assert(!HALVES || SPLIT == 1, "SwiGLU: gate and up on the two halves of one warp");
    static_assert((LZ_GEMV_BLOCK / 32) % SPLIT == 0, "split rows: whole groups of warps a block");
    constexpr int V = vec16<T>::N;
    const int block_warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * (LZ_GEMV_BLOCK / 32) + block_warp) / SPLIT, part = block_warp % SPLIT;
    if (warp >= seg.total_rows * n_groups)
        return; // (the SPLIT warps of a row leave together: the barrier below waits for none of them)
    const int warp_row = warp % seg.total_rows;
    const bool rotated = EPI == LZ_GEMV_ROPE && warp_row < seg.m[0] + seg.m[1]; // a row of q or k
    int row = warp_row, m = seg.m[0];
    if constexpr (EPI == LZ_GEMV_ROPE) { // rows i and i + d/2 of a head on warps w and w + 4 of a block
        if (rotated) {
            const int d = 2 * seg.rope_half, r = warp_row % d, w = r & 7;
            row = warp_row - r + (r >> 3) * 4 + (w & 3) + (w >> 2) * seg.rope_half;
        }
    }
    const T *w = seg.w[0], *bias = seg.bias[0];
    T *out = seg.out[0];
    if constexpr (HALVES) { // the second half of the warp streams the up row
        if (lane >= 16)
            w = seg.w[1];
    } else { // this row's segment; constant indices keep seg in parameter space
#pragma unroll
        for (int s = 1; s < LZ_GEMV_MAX_SEGMENTS; s++)
            if (s < seg.count && row >= m) {
                row -= m;
                m = seg.m[s], w = seg.w[s], bias = seg.bias[s], out = seg.out[s];
            }
    }
    const int t0 = (warp / seg.total_rows) * NT, nt = min(NT, n - t0);
    const T *wr = w + (size_t)row * k;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    // the products of one chunk: weights wv (V columns from column c) with every token
    auto fma_chunk = [&](float (&wv)[V], int c) {
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
    uint4 pre; // the first weights, loaded before the wait (raw: 4 registers, not 8)
    const int c0 = HALVES ? (lane & 15) * V : (part * 32 + lane) * V, stride = HALVES ? 16 * V : 32 * V * SPLIT;
    if (c0 < k)
        pre = lz_load_weight16<LOAD>(wr + c0);
    if constexpr (EPI == LZ_GEMV_RESIDUAL && NT == 1) // the whole row into L2 while the kernels before run
        if (l2_prefetch && c0 == 0)
            lz_prefetch_l2(wr + c0, (unsigned)(k * sizeof(T))); // (c0 = 0: the load's address)
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    if (c0 < k) {
        float wv[V];
        vec16<T>::load(wv, (const T *)&pre);
        fma_chunk(wv, c0);
    }
    for (int c = c0 + stride; c < k; c += stride) {
        float wv[V];
        const uint4 raw = lz_load_weight16<LOAD>(wr + c);
        vec16<T>::load(wv, (const T *)&raw);
        fma_chunk(wv, c);
    }

    float sum[NT], up[NT]; // HALVES: each half's sums (xor offsets below 16), up from the second half
    constexpr int FROM = HALVES ? 8 : 16;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        sum[t] = lz_warp_sum(acc[t], FROM);
        up[t] = HALVES ? __shfl_sync(0xffffffffu, sum[t], 16) : 0.0f;
    }
    if constexpr (SPLIT > 1) { // the row's partial sums to its first warp
        __shared__ float partial[LZ_GEMV_BLOCK / 32][NT];
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < NT; t++)
                partial[block_warp][t] = sum[t];
        lz_row_barrier<SPLIT>(block_warp / SPLIT);
        if (part != 0)
            return;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            sum[t] = 0.0f;
#pragma unroll
            for (int p = 0; p < SPLIT; p++)
                sum[t] += partial[block_warp + p][t];
        }
    }
    if constexpr (EPI == LZ_GEMV_ROPE) { // (one token a warp, whole blocks: lz_gemv_rope_fits)
        if (rotated) {
            __shared__ float pair_sums[LZ_GEMV_BLOCK / 32];
            float r = sum[0] + (bias ? lz_to_float(bias[row]) : 0.0f);
            if (lane == 0) // rounded to T as the unrotated output would be, then rotated as rope.cu does
                pair_sums[block_warp] = lz_to_float(lz_from_float<T>(r));
            __syncthreads();
            if (lane == 0) {
                const int i = block_warp & 3;
                float x0, x1;
                lz_rope_rotate(pair_sums[i], pair_sums[i + 4], (float)seg.rope_pos[t0], seg.rope_freq[row % seg.rope_half],
                               &x0, &x1);
                out[(size_t)t0 * m + row] = lz_from_float<T>(block_warp < 4 ? x0 : x1);
            }
            return;
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float r = sum[t];
        if (lane == 0 && t < nt) {
            T *o = out + (size_t)(t0 + t) * m + row;
            if (bias)
                r += lz_to_float(bias[row]);
            if constexpr (EPI == LZ_GEMV_SWIGLU) {
                const T *bias_up = seg.bias[1];
                const float u_sum = up[t] + (bias_up ? lz_to_float(bias_up[row]) : 0.0f);
                // rounded as the unfused path rounds: gate and up to T, then silu(gate) * up
                const float g = lz_to_float(lz_from_float<T>(r)), u = lz_to_float(lz_from_float<T>(u_sum));
                *o = lz_from_float<T>(lz_swiglu(g, u));
            } else if constexpr (EPI == LZ_GEMV_RESIDUAL) {
                // the product rounded to T first, as the unfused GEMV then add would
                *o = lz_from_float<T>(lz_to_float(*o) + lz_to_float(lz_from_float<T>(r)));
            } else {
                *o = lz_from_float<T>(r);
            }
        }
    }
    lz_trace_mark();
}

template <typename T, int NT, int EPI, int LOAD, int SPLIT>
static lz_status lz_gemv_launch_as(lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, int n, int k) {
    const int groups = (n + NT - 1) / NT;
    const int grid = (int)(((size_t)seg.total_rows * groups * SPLIT * 32 + LZ_GEMV_BLOCK - 1) / LZ_GEMV_BLOCK);
    // (rows are whole 16-byte vectors here, as the bulk prefetch needs; at most 3/4 of L2, so that
    // the rows are still there when the loads come)
    const size_t bytes = (size_t)seg.total_rows * (size_t)k * sizeof(T);
    const bool l2_prefetch = c->hbm_idle_next && EPI == LZ_GEMV_RESIDUAL && NT == 1 &&
                             bytes * 4 <= c->l2_bytes * 3;
    c->hbm_idle_next = false; // (a chance for the launch right after the attention only)
    LZ_TRY(lz_launch(c, "gemv", gemv_kernel<T, NT, EPI, LOAD, SPLIT>, dim3((unsigned)grid), dim3(LZ_GEMV_BLOCK), 0,
                     seg, x, n, k, groups, l2_prefetch));
    LZ_LAUNCH_CHECK("gemv");
    return LZ_OK;
}

// Warps a row: the largest of 4 and 2 that still fits the launch in one wave of the GPU's thread
// slots (2048 an SM), so that the layers of few rows (o_proj and down_proj: 4096 rows, 2 warps each)
// fill the SMs; else 1. One-token GEMVs only, not the SwiGLU or RoPE epilogues.
template <typename T, int NT, int EPI, int LOAD>
static lz_status lz_gemv_launch_split(lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, int n, int k) {
    if constexpr (NT == 1 && EPI != LZ_GEMV_SWIGLU && EPI != LZ_GEMV_ROPE) {
        const size_t threads = (size_t)seg.total_rows * (size_t)n * 32, slots = (size_t)c->n_sms * 2048;
        if (threads * 4 <= slots)
            return lz_gemv_launch_as<T, NT, EPI, LOAD, 4>(c, seg, x, n, k);
        if (threads * 2 <= slots)
            return lz_gemv_launch_as<T, NT, EPI, LOAD, 2>(c, seg, x, n, k);
        return lz_gemv_launch_as<T, NT, EPI, LOAD, 1>(c, seg, x, n, k);
    } else {
        return lz_gemv_launch_as<T, NT, EPI, LOAD, 1>(c, seg, x, n, k);
    }
}

// The load variant: bf16 2 for several tokens, 5 for one; fp32 plain loads.
template <typename T, int NT, int EPI>
static lz_status lz_gemv_launch(lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, int n, int k) {
    constexpr int load = sizeof(T) != 2 ? 0 : NT > 1 ? 2 : 5;
    return lz_gemv_launch_split<T, NT, EPI, load>(c, seg, x, n, k);
}

#endif
