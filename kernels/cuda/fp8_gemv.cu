// fp8_gemv.cu - the decode GEMV over FP8 E4M3 weights: out[n, m] = x[n, k] . (s . Q[m, k])^T, x bf16.
//
// The structure of gemv_kernel.cuh (memory-bound: each weight byte read once): one warp streams one
// weight row with 16-byte loads (16 codes) and applies it to NT tokens; each lane's first load is
// issued before griddepcontrol.wait, since weights depend on no kernel; L1 no-allocate on the codes
// (read once) while x stays cached for every row; layers of few rows give a row 2 or 4 warps so that
// a launch fills the GPU's thread slots, their partial sums meeting in shared memory; layers of one
// input share one launch (their rows one range of warps); a softmax layer's q, k, v at one token are
// rotated in the epilogue (the 8 warps of a block stream rows i .. i + 3 and i + d/2 .. i + d/2 + 3
// of one head and meet in shared memory, as gemv_kernel.cuh's RoPE epilogue). The SwiGLU epilogue streams the gate row on
// lanes 0-15 and the up row on lanes 16-31, meeting by a shuffle. At one sequence a Lizard layer's
// o_proj (the residual epilogue after the window kernel, ctx->hbm_idle_next) asks the copy engine for
// its rows into L2 before its PDL wait, as the bf16 GEMV does.
// Codes become floats exactly (E4M3 -> f16x2 in one instruction, f16 -> f32), the products and sums
// are fp32, and the row's scale multiplies the sum once, as kernels/cpu/linear_fp8.c computes.
#include <cuda_fp8.h> // __nv_cvt_fp8x2_to_halfraw2

#include "fp8_linear.cuh"
#include "gemv_kernel.cuh" // lz_row_barrier, LZ_GEMV_BLOCK
#include "pdl.cuh"         // lz_launch, lz_pdl_wait
#include "ptx.cuh"         // lz_prefetch_l2
#include "rope_rotate.cuh" // lz_rope_rotate

// 16 codes -> 16 floats (exact: every E4M3 value is an f16).
__device__ __forceinline__ void lz_e4m3x16_to_float(float (&f)[16], uint4 raw) {
    const uint32_t word[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const __half2_raw p = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(word[i] >> (16 * h)), __NV_E4M3);
            const float2 v = __half22float2(__half2(p));
            f[4 * i + 2 * h] = v.x;
            f[4 * i + 2 * h + 1] = v.y;
        }
    }
}

__device__ __forceinline__ uint4 lz_load_codes16(const uint8_t *p) {
    uint4 r;
    asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

// SPLIT warps per (output row of any segment, group of NT tokens); k % 16 == 0.
// One token: held to 32 registers a thread, so that 8 blocks fit an SM (a whole wave of thread slots,
// which the split below counts on); the plain store, whose warps may also stream a bf16 row (the
// Lizard gate beside q, k, v), to 40 (6 blocks: q, k, v and the gate of LLaMA-3-8B still one wave;
// at 32 it spilled 52 bytes, at 40 8; unbounded it takes 42, 5 blocks).
template <int NT, int EPI, int SPLIT>
__global__ void __launch_bounds__(LZ_GEMV_BLOCK, NT != 1 ? 0 : EPI == LZ_FP8_STORE ? 6 : 8)
    fp8_gemv_kernel(lz_fp8_segments seg, const lz_bf16 *x, int n, int k, int n_groups, bool l2_prefetch) {
    constexpr bool HALVES = EPI == LZ_FP8_SWIGLU;
    static_assert(!HALVES || SPLIT == 1, "SwiGLU: gate and up on the two halves of one warp");
    const int block_warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * (LZ_GEMV_BLOCK / 32) + block_warp) / SPLIT, part = block_warp % SPLIT;
    if (warp >= seg.total_rows * n_groups)
        return; // (the SPLIT warps of a row leave together)
    const int warp_row = warp % seg.total_rows;
    const bool rotated = EPI == LZ_FP8_ROPE && warp_row < seg.m[0] + seg.m[1]; // a row of q or k
    int row = warp_row, m = seg.m[0];
    if constexpr (EPI == LZ_FP8_ROPE) { // rows i and i + d/2 of a head on warps w and w + 4 of a block
        if (rotated) {
            const int d = 2 * seg.rope_half, r = warp_row % d, w8 = r & 7;
            row = warp_row - r + (r >> 3) * 4 + (w8 & 3) + (w8 >> 2) * seg.rope_half;
        }
    }
    bool wide = EPI == LZ_FP8_STORE && (seg.wide & 1); // a bf16 row (8 weights a 16-byte load), not codes
    const uint8_t *w = seg.w[0];
    const float *scale = seg.scale[0];
    const lz_bf16 *bias = seg.bias[0];
    lz_bf16 *out = seg.out[0];
    if constexpr (HALVES) {
        if (lane >= 16)
            w = seg.w[1], scale = seg.scale[1], bias = seg.bias[1];
    } else { // this row's segment; constant indices keep seg in parameter space
#pragma unroll
        for (int s = 1; s < LZ_FP8_MAX_SEGMENTS; s++)
            if (s < seg.count && row >= m) {
                row -= m;
                m = seg.m[s], w = seg.w[s], scale = seg.scale[s], bias = seg.bias[s], out = seg.out[s];
                wide = EPI == LZ_FP8_STORE && ((seg.wide >> s) & 1);
            }
    }
    const int t0 = (warp / seg.total_rows) * NT, nt = min(NT, n - t0);
    const int kb = wide ? 2 * k : k; // the row's bytes
    const uint8_t *wr = w + (size_t)row * kb;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    auto fma_wide = [&](uint4 raw, int c) { // 8 bf16 weights from column c
        float wv[8];
        vec16<lz_bf16>::load(wv, (const lz_bf16 *)&raw);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                float xv[8];
                vec16<lz_bf16>::load(xv, x + (size_t)(t0 + t) * k + c);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    acc[t] += wv[i] * xv[i];
            }
        }
    };
    auto fma_chunk = [&](uint4 raw, int c) {
        float wv[16];
        lz_e4m3x16_to_float(wv, raw);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                const lz_bf16 *xt = x + (size_t)(t0 + t) * k + c;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float xv[8];
                    vec16<lz_bf16>::load(xv, xt + 8 * h);
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        acc[t] += wv[8 * h + i] * xv[i];
                }
            }
        }
    };
    // byte offsets: this lane's first 16 bytes of the row, and the stride of its warp(s)
    const int b0 = HALVES ? (lane & 15) * 16 : (part * 32 + lane) * 16, stride = HALVES ? 256 : 512 * SPLIT;
    uint4 pre = {}; // the first weights, loaded before the wait
    if (b0 < kb)
        pre = lz_load_codes16(wr + b0);
    if constexpr (EPI == LZ_FP8_RESIDUAL && NT == 1) // the whole row into L2 while the kernels before run
        if (l2_prefetch && b0 == 0)
            lz_prefetch_l2(wr, (unsigned)kb);
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    if (EPI == LZ_FP8_STORE && wide) { // (a whole warp's branch: its row is bf16; q, k, v and gate only)
        if (b0 < kb)
            fma_wide(pre, b0 / 2);
        for (int b = b0 + stride; b < kb; b += stride)
            fma_wide(lz_load_codes16(wr + b), b / 2);
    } else {
        if (b0 < kb)
            fma_chunk(pre, b0);
        for (int b = b0 + stride; b < kb; b += stride)
            fma_chunk(lz_load_codes16(wr + b), b);
    }

    // the row's scale once, then its bias (each half of a SwiGLU warp its own row's)
    const float s_row = scale ? scale[row] : 1.0f, b_row = bias ? __bfloat162float(bias[row]) : 0.0f;
    float sum[NT], up[NT] = {};
    constexpr int FROM = HALVES ? 8 : 16;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        sum[t] = lz_warp_sum(acc[t], FROM);
        if constexpr (HALVES) {
            sum[t] = sum[t] * s_row + b_row;
            up[t] = __shfl_sync(0xffffffffu, sum[t], 16);
        }
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
    if constexpr (!HALVES) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            sum[t] = sum[t] * s_row + b_row;
    }
    if constexpr (EPI == LZ_FP8_ROPE) { // (one token a warp, whole blocks: lz_gemv_rope_fits)
        if (rotated) {
            __shared__ float pair_sums[LZ_GEMV_BLOCK / 32];
            if (lane == 0) // rounded to bf16 as the unrotated output would be, then rotated as rope.cu does
                pair_sums[block_warp] = __bfloat162float(__float2bfloat16_rn(sum[0]));
            __syncthreads();
            if (lane == 0) {
                const int i = block_warp & 3;
                float x0, x1;
                lz_rope_rotate(pair_sums[i], pair_sums[i + 4], (float)seg.rope_pos[t0], seg.rope_freq[row % seg.rope_half],
                               &x0, &x1);
                out[(size_t)t0 * m + row] = __float2bfloat16_rn(block_warp < 4 ? x0 : x1);
            }
            return;
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (lane == 0 && t < nt) {
            lz_bf16 *o = out + (size_t)(t0 + t) * m + row;
            if constexpr (EPI == LZ_FP8_SWIGLU) { // rounded as the unfused path rounds
                const float g = __bfloat162float(__float2bfloat16_rn(sum[t]));
                const float u = __bfloat162float(__float2bfloat16_rn(up[t]));
                *o = __float2bfloat16_rn(lz_swiglu(g, u));
            } else if constexpr (EPI == LZ_FP8_RESIDUAL) {
                *o = __float2bfloat16_rn(__bfloat162float(*o) + __bfloat162float(__float2bfloat16_rn(sum[t])));
            } else {
                *o = __float2bfloat16_rn(sum[t]);
            }
        }
    }
}

template <int NT, int EPI, int SPLIT>
static lz_status fp8_gemv_as(lz_cuda_ctx *c, const lz_fp8_segments &seg, const lz_bf16 *x, int n, int k) {
    const int groups = (n + NT - 1) / NT;
    const int grid = (int)(((size_t)seg.total_rows * groups * SPLIT * 32 + LZ_GEMV_BLOCK - 1) / LZ_GEMV_BLOCK);
    // (rows of whole 16-byte vectors, as the bulk prefetch needs; at most 3/4 of L2)
    const bool l2_prefetch = c->hbm_idle_next && EPI == LZ_FP8_RESIDUAL && NT == 1 && !seg.wide &&
                             (size_t)seg.total_rows * (size_t)k * 4 <= c->l2_bytes * 3;
    c->hbm_idle_next = false; // (a chance for the launch right after the attention only)
    LZ_TRY(lz_launch(c, "fp8_gemv", fp8_gemv_kernel<NT, EPI, SPLIT>, dim3((unsigned)grid), dim3(LZ_GEMV_BLOCK), 0, seg,
                     x, n, k, groups, l2_prefetch));
    LZ_LAUNCH_CHECK("fp8_gemv");
    return LZ_OK;
}

// Warps a row as gemv_kernel.cuh chooses them: the largest of 4 and 2 that keeps the launch in one
// wave of the blocks that fit (one token; not SwiGLU), else 1.
template <int NT, int EPI>
static lz_status fp8_gemv_split(lz_cuda_ctx *c, const lz_fp8_segments &seg, const lz_bf16 *x, int n, int k) {
    if constexpr (NT == 1 && EPI != LZ_FP8_SWIGLU) {
        const size_t threads = (size_t)seg.total_rows * (size_t)n * 32;
        const size_t slots = (size_t)c->n_sms * LZ_GEMV_BLOCK * (EPI == LZ_FP8_STORE ? 6 : 8); // (the bounds above)
        if (threads * 4 <= slots)
            return fp8_gemv_as<NT, EPI, 4>(c, seg, x, n, k);
        if (threads * 2 <= slots)
            return fp8_gemv_as<NT, EPI, 2>(c, seg, x, n, k);
    }
    return fp8_gemv_as<NT, EPI, 1>(c, seg, x, n, k);
}

template <int EPI>
static lz_status fp8_gemv_tokens(lz_cuda_ctx *c, const lz_fp8_segments &seg, const lz_bf16 *x, int n, int k) {
    if (n <= 1 || (size_t)seg.total_rows * (size_t)n <= (size_t)32 * (size_t)c->n_sms)
        return fp8_gemv_split<1, EPI>(c, seg, x, n, k);
    if (n <= 4)
        return fp8_gemv_split<4, EPI>(c, seg, x, n, k);
    return fp8_gemv_split<LZ_FP8_GEMV_TOKENS, EPI>(c, seg, x, n, k);
}

lz_status lz_fp8_gemv(lz_cuda_ctx *c, lz_fp8_segments seg, const lz_bf16 *x, lz_fp8_epilogue epi, int n, int k) {
    if (n < 1 || n > LZ_FP8_GEMV_TOKENS || k % 16 != 0 || seg.count < 1 || seg.count > LZ_FP8_MAX_SEGMENTS ||
        (epi == LZ_FP8_SWIGLU && (seg.count != 2 || seg.m[0] != seg.m[1] || seg.wide)))
        return lz_fail(LZ_ERR_INTERNAL, "fp8_gemv: %d tokens, k %d, %d segments: not a shape it takes", n, k, seg.count);
    seg.total_rows = 0;
    for (int s = 0; s < seg.count; s++)
        seg.total_rows += seg.m[s];
    if (epi == LZ_FP8_SWIGLU) {
        seg.total_rows = seg.m[0]; // one warp an output: gate and up rows on its halves
        seg.count = 1;
        return fp8_gemv_tokens<LZ_FP8_SWIGLU>(c, seg, x, n, k);
    }
    if (epi == LZ_FP8_RESIDUAL)
        return fp8_gemv_tokens<LZ_FP8_RESIDUAL>(c, seg, x, n, k);
    if (epi == LZ_FP8_ROPE) {
        if (seg.count != 3 || seg.wide || !seg.rope_half ||
            !lz_gemv_rope_fits(n, seg.m[0], seg.m[1], seg.total_rows, 2 * seg.rope_half))
            return lz_fail(LZ_ERR_INTERNAL, "fp8_gemv: RoPE epilogue for a shape it does not take");
        return fp8_gemv_as<1, LZ_FP8_ROPE, 1>(c, seg, x, n, k);
    }
    return fp8_gemv_tokens<LZ_FP8_STORE>(c, seg, x, n, k);
}
