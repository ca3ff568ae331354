// linear_stream.cu - bf16 linear layers of decode steps of a few tokens (2 to LIZARD_STREAM_TOKENS; the
// kernel takes up to 64): out = x . W^T for one or more weights W [m][k] read by the same x [n][k],
// with the residual add or the MLP's SwiGLU folded in.
//
// Why: at these steps a layer is a stream of its weights. cuBLAS's small products need split-K and a
// reduction launch (and q/k/v a split launch after the joined product). The one-token GEMV
// (gemv_kernel.cuh), whose warps load weights straight into registers, streams near the copy rate:
// this is that GEMV with tensor cores.
// How: a warp owns 16 weight rows (a group) and a share of k (1, 2, 4 or 8 shares, so that small
// layers still fill the GPU's warp slots). Per 64 inputs (a chunk) each lane loads 2 x 16 bytes of row
// g = lane / 4 and 2 x 16 of row g + 8, D chunks ahead, and uses them as mma.m16n8k16's A fragments:
// a sum over k does not care in which order the inputs meet, so lane (g, t) takes inputs 16t .. 16t + 15
// of a chunk as its fragment columns in order, and the same inputs of x (tokens g, g + 8, ...) as its B
// fragments. The shares of a group meet in shared memory, added in share order (two launches agree bit
// for bit). SwiGLU: the 16 rows are 8 gate rows and the same 8 up rows, so the gate and up of an output
// meet in one lane's accumulators. The first D chunks of weights load before the PDL wait (no kernel
// writes weights), x after it.
// What makes it fast: lane (g, t) takes inputs 16t .. 16t + 15 with plain loads (the first load
// requests every sector of the line, the second finds it in L1) and 256-byte L2 fetches; x is loaded
// D chunks ahead with the weights, not at its use, where a miss in L1 would stall the mmas. From 8
// tokens on cuBLAS is faster, so the launchers stop at LIZARD_STREAM_TOKENS (docs/benchmarks.md).
#include "linear_stream.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_mma_bf16

#include <limits.h> // INT_MAX
#include <string.h> // memset

enum {
    LS_WARPS = 8,                  // a block's warps: 8 / split groups of split warps
    LS_THREADS = 32 * LS_WARPS,    //
    LS_CHUNK = 64,                 // inputs a lane's four loads cover
    LS_MAX_SPLIT = LS_WARPS,       // shares of k a group (a block's warps)
};

struct ls_params {
    lz_stream_segment seg[LZ_STREAM_MAX_SEGMENTS];
    int row_end[LZ_STREAM_MAX_SEGMENTS]; // rows of segments 0 .. s (unused ones: the total)
    const __nv_bfloat16 *x;
    int count, n, k, chunks, split, groups;
};

// A lane's weight row: where it starts, and where its products go (seg -1: nowhere, a row past the end,
// whose loads read row 0 of the first layer instead).
struct ls_row {
    const __nv_bfloat16 *w;
    int seg, row;
};

__device__ __forceinline__ ls_row ls_locate(const ls_params &p, int r) {
    ls_row out = {p.seg[0].w, -1, 0};
    int first = 0;
#pragma unroll
    for (int s = 0; s < LZ_STREAM_MAX_SEGMENTS; s++) // constant indices: the segments stay parameters
        if (s < p.count) {
            if (r >= first && r < p.row_end[s])
                out = {p.seg[s].w + (size_t)(r - first) * p.k, s, r - first};
            first = p.row_end[s];
        }
    return out;
}

// 16 bytes of weights: L2 fetches of 256 bytes (a row is read from start to end).
__device__ __forceinline__ uint4 ls_load_weight(const __nv_bfloat16 *p) {
    uint4 r;
    asm("ld.global.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// NG groups of 8 tokens (the mma's n). Up to 16 tokens (XA) x goes ahead with the weights, D chunks of
// both in flight a warp (beyond, x's registers would spill and it is loaded at its use).
template <int NG, int EPI>
__global__ void __launch_bounds__(LS_THREADS, 2) linear_stream_kernel(const __grid_constant__ ls_params p) {
    constexpr bool XA = NG <= 2;
    constexpr int D = NG >= 8 || (XA && NG >= 2) ? 2 : 3, NB = 4 + (XA ? 2 * NG : 0);
    __shared__ float partial[LS_WARPS][NG * 4][32]; // a warp's accumulators, when its group's k is shared
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int split = p.split, gi = blockIdx.x * (LS_WARPS / split) + warp / split, part = warp % split;
    const bool active = gi < p.groups;
    ls_row ra, rb; // rows g and g + 8 of the group (SwiGLU: gate row and up row of output g)
    if constexpr (EPI == LZ_STREAM_SWIGLU) {
        const int r = gi * 8 + g;
        const bool ok = active && r < p.seg[0].m;
        const size_t off = (size_t)(ok ? r : 0) * p.k;
        ra = {p.seg[0].w + off, ok ? 0 : -1, r};
        rb = {p.seg[1].w + off, ok ? 1 : -1, r};
    } else {
        ra = ls_locate(p, gi * 16 + g);
        rb = ls_locate(p, gi * 16 + g + 8);
    }
    const int c0 = active ? part * p.chunks / split : 0, c1 = active ? (part + 1) * p.chunks / split : 0;
    // this lane's inputs of a chunk: 16t .. 16t + 15, so that the four lanes of a row request all of
    // its 128-byte line in their first load, and the second load finds it in L1
    const int o0 = 16 * t, o1 = 16 * t + 8;
    int xo[NG]; // token rows of x that this lane's B fragments read (past n: the last token's, unused)
#pragma unroll
    for (int j = 0; j < NG; j++)
        xo[j] = min(8 * j + g, p.n - 1) * p.k;

    uint4 w[D][NB]; // a chunk: weights of rows g, g + 8 (XA: then x of the lane's tokens)
    auto load_chunk = [&](uint4 (&b)[NB], int c) {
        const size_t e = (size_t)c * LS_CHUNK;
        b[0] = ls_load_weight(ra.w + e + o0);
        b[1] = ls_load_weight(ra.w + e + o1);
        b[2] = ls_load_weight(rb.w + e + o0);
        b[3] = ls_load_weight(rb.w + e + o1);
    };
    auto load_x = [&](uint4 (&b)[NB], int c) {
        if constexpr (XA) {
            const __nv_bfloat16 *xc = p.x + (size_t)c * LS_CHUNK;
#pragma unroll
            for (int j = 0; j < NG; j++) {
                b[4 + 2 * j] = __ldg((const uint4 *)(xc + xo[j] + o0));
                b[5 + 2 * j] = __ldg((const uint4 *)(xc + xo[j] + o1));
            }
        }
    };
#pragma unroll
    for (int i = 0; i < D; i++)
        if (c0 + i < c1)
            load_chunk(w[i], c0 + i);
    lz_pdl_wait();
    lz_pdl_launch_dependents();
#pragma unroll
    for (int i = 0; i < D; i++)
        if (c0 + i < c1)
            load_x(w[i], c0 + i);

    float acc[NG][4];
#pragma unroll
    for (int j = 0; j < NG; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    // A fragments: rows g (b[0], b[1]) and g + 8 (b[2], b[3]); fragment columns 2t, 2t + 1 and
    // 2t + 8, 2t + 9 are the lane's inputs in order, four a 16-input mma
    auto mma_chunk = [&](const uint4 (&b)[NB], int c) {
        const __nv_bfloat16 *xc = p.x + (size_t)c * LS_CHUNK;
#pragma unroll
        for (int j = 0; j < NG; j++) {
            uint4 x0, x1;
            if constexpr (XA) {
                x0 = b[4 + 2 * j], x1 = b[5 + 2 * j];
            } else {
                x0 = __ldg((const uint4 *)(xc + xo[j] + o0)), x1 = __ldg((const uint4 *)(xc + xo[j] + o1));
            }
            const uint32_t a0[4] = {b[0].x, b[2].x, b[0].y, b[2].y}, a1[4] = {b[0].z, b[2].z, b[0].w, b[2].w};
            const uint32_t a2[4] = {b[1].x, b[3].x, b[1].y, b[3].y}, a3[4] = {b[1].z, b[3].z, b[1].w, b[3].w};
            lz_mma_bf16(acc[j], a0, x0.x, x0.y);
            lz_mma_bf16(acc[j], a1, x0.z, x0.w);
            lz_mma_bf16(acc[j], a2, x1.x, x1.y);
            lz_mma_bf16(acc[j], a3, x1.z, x1.w);
        }
    };
    for (int c = c0; c < c1; c += D) {
#pragma unroll
        for (int i = 0; i < D; i++)
            if (c + i < c1) {
                mma_chunk(w[i], c + i);
                if (c + i + D < c1) {
                    load_chunk(w[i], c + i + D);
                    load_x(w[i], c + i + D);
                }
            }
    }

    if (split > 1) { // the group's shares to its first warp, added in share order
#pragma unroll
        for (int j = 0; j < NG; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                partial[warp][j * 4 + e][lane] = acc[j][e];
        __syncthreads();
        if (part != 0)
            return;
        for (int q = 1; q < split; q++)
#pragma unroll
            for (int j = 0; j < NG; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[j][e] += partial[warp + q][j * 4 + e][lane];
    }
    // accumulator e of token group j: row g (e < 2) or g + 8, token 8j + 2t + (e & 1)
#pragma unroll
    for (int j = 0; j < NG; j++)
#pragma unroll
        for (int e = 0; e < (EPI == LZ_STREAM_SWIGLU ? 2 : 4); e++) {
            const ls_row &r = e < 2 ? ra : rb;
            const int token = 8 * j + 2 * t + (e & 1);
            if (r.seg < 0 || token >= p.n)
                continue;
            const lz_stream_segment &s = p.seg[r.seg];
            const float v = acc[j][e] + (s.bias ? __bfloat162float(s.bias[r.row]) : 0.0f);
            __nv_bfloat16 *o = s.out + (size_t)token * s.m + r.row;
            if constexpr (EPI == LZ_STREAM_SWIGLU) { // up: the same output's row of the second layer
                const __nv_bfloat16 *bu = p.seg[1].bias;
                const float u = acc[j][e + 2] + (bu ? __bfloat162float(bu[r.row]) : 0.0f);
                *o = __float2bfloat16_rn(lz_swiglu(__bfloat162float(__float2bfloat16_rn(v)),
                                                   __bfloat162float(__float2bfloat16_rn(u))));
            } else if constexpr (EPI == LZ_STREAM_ACCUMULATE) {
                *o = __float2bfloat16_rn(__bfloat162float(*o) + __bfloat162float(__float2bfloat16_rn(v)));
            } else {
                *o = __float2bfloat16_rn(v);
            }
        }
}

bool linear_stream_takes(const lz_cuda_ctx *c, int count, const lz_stream_segment *seg, const __nv_bfloat16 *x,
                         int n, int k, lz_stream_epilogue epilogue) {
    if (n < 2 || n > c->stream_tokens || n > LZ_STREAM_MAX_TOKENS || count < 1 ||
        count > LZ_STREAM_MAX_SEGMENTS || k < LS_CHUNK || k % LS_CHUNK != 0 || k > INT_MAX / LZ_STREAM_MAX_TOKENS)
        return false;
    if (epilogue == LZ_STREAM_SWIGLU && (count != 2 || seg[0].m != seg[1].m))
        return false;
    bool aligned = lz_aligned16(x);
    long long rows = 0;
    for (int s = 0; s < count; s++) {
        if (seg[s].m < 1 || !seg[s].w || !seg[s].out)
            return false;
        aligned &= lz_aligned16(seg[s].w);
        rows += seg[s].m;
    }
    return aligned && rows <= INT_MAX / 2;
}

// Shares of k a group: LIZARD_STREAM_SPLIT if set, else the most (up to a block's warps) with which
// the launch's warps still fit the GPU's resident warp slots, each share at least two chunks.
static int ls_split(const lz_cuda_ctx *c, int groups, int chunks, int blocks_per_sm) {
    int split = 1;
    if (c->stream_split > 0) {
        while (split * 2 <= c->stream_split && split * 2 <= chunks)
            split *= 2;
        return split;
    }
    const long long slots = (long long)c->n_sms * blocks_per_sm * LS_WARPS;
    while (split < LS_MAX_SPLIT && (long long)groups * split * 2 <= slots && split * 4 <= chunks)
        split *= 2;
    return split;
}

template <int NG, int EPI> static lz_status ls_launch(lz_cuda_ctx *c, ls_params &p) {
    static int blocks_per_sm = 0; // (the same for every GPU of one kind)
    if (blocks_per_sm == 0)
        LZ_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, linear_stream_kernel<NG, EPI>,
                                                                  LS_THREADS, 0));
    p.split = ls_split(c, p.groups, p.chunks, blocks_per_sm > 0 ? blocks_per_sm : 1);
    const int blocks = lz_div_up(p.groups, LS_WARPS / p.split);
    LZ_TRY(lz_launch(c, "linear (stream)", linear_stream_kernel<NG, EPI>, dim3((unsigned)blocks), dim3(LS_THREADS), 0, p));
    LZ_LAUNCH_CHECK("linear (stream)");
    return LZ_OK;
}

template <int EPI> static lz_status ls_by_tokens(lz_cuda_ctx *c, ls_params &p) {
    if (p.n <= 8)
        return ls_launch<1, EPI>(c, p);
    if (p.n <= 16)
        return ls_launch<2, EPI>(c, p);
    if (p.n <= 32)
        return ls_launch<4, EPI>(c, p);
    return ls_launch<8, EPI>(c, p);
}

lz_status linear_stream_forward(lz_cuda_ctx *c, int count, const lz_stream_segment *seg, const __nv_bfloat16 *x,
                                int n, int k, lz_stream_epilogue epilogue) {
    if (!linear_stream_takes(c, count, seg, x, n, k, epilogue))
        return lz_fail(LZ_ERR_INTERNAL, "linear (stream): %d layers of %d inputs at %d tokens", count, k, n);
    ls_params p;
    memset(&p, 0, sizeof p);
    int rows = 0;
    for (int s = 0; s < count; s++) {
        p.seg[s] = seg[s];
        rows += seg[s].m;
        p.row_end[s] = rows;
    }
    for (int s = count; s < LZ_STREAM_MAX_SEGMENTS; s++)
        p.row_end[s] = rows;
    p.x = x, p.count = count, p.n = n, p.k = k, p.chunks = k / LS_CHUNK;
    p.groups = epilogue == LZ_STREAM_SWIGLU ? lz_div_up(seg[0].m, 8) : lz_div_up(rows, 16);
    switch (epilogue) {
    case LZ_STREAM_SWIGLU: return ls_by_tokens<LZ_STREAM_SWIGLU>(c, p);
    case LZ_STREAM_ACCUMULATE: return ls_by_tokens<LZ_STREAM_ACCUMULATE>(c, p);
    default: return ls_by_tokens<LZ_STREAM_STORE>(c, p);
    }
}
