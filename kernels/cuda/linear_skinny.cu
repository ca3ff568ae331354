// linear_skinny.cu - linear layers of decode steps of 2 to 64 tokens: out = x . W^T for one or more
// weights W [m][k] read by the same x [n][k] (q, k, v and the gate; the MLP's gate and up; o, down,
// lm_head), as one persistent launch of one block an SM.
// Why: at these steps a layer is a stream of its weights (16 tokens do 16 flops a weight byte), and
// cuBLAS leaves a third of the copy rate unused: at 16 sequences of the 8B shape a Lizard layer's q, k,
// v and o took 37 us and 5 split-K reductions 19 us more for 84 MB that stream in 21 (Nsight Compute,
// session 21); k and v (8 MB each) ran at 1.3 TB/s in 48 blocks. Session 15's mma kernel (one block a
// row tile, cp.async) won on q/k/v but lost on the large layers: too few blocks in flight, no split
// over k.
// How: the weights are cut into tiles of 64 rows x 256 inputs (32 KB); the tiles of all the launch's
// layers, row tile by row tile, are one list of `iterations`, and block b takes the contiguous
// iterations [b T / G, (b + 1) T / G) (stream-K): every SM streams the same bytes whatever the
// shapes. A producer warp has the copy engine fill a ring of stages (a tensor copy of each 64 x 64 box
// of weights in the 128-byte swizzle, and the matching box of x), issuing the first stages' weights
// before the PDL wait (no kernel writes weights), so they stream while the previous kernel drains.
// Four consumer warps take 16 rows each, the tokens as the mma's n (8, 16, 32 or 64 a launch), fp32
// accumulators over the block's share of k. A row tile whose iterations one block covers is written
// by it; one split between blocks (at most the first and last of each block's range) has each
// contributor store its partial sums (fp32, in the fragments' order, coalesced) and count itself on
// the tile's counter; the last to arrive adds the partials in block order (the same sum whoever is
// last) and writes the tile, then zeroes the counter for the next launch.
// Measured (H200, 8B shapes, session 22; docs/benchmarks.md): correct, but slower than cuBLAS at
// every batch (pure Lizard at 16 sequences 2,816 against 2,975 tok/s), so off by default
// (LIZARD_SKINNY_TOKENS). Per launch (Nsight Compute, 16 tokens) the MLP's gate and up read at 77% of
// the DRAM peak like cuBLAS, while o (33.5 MB), q/k/v and down took 6-11 us more than their bytes
// need. Two variants measured slower still and were not kept: the consumers on wgmma (2,607 tok/s)
// and stages of one 8 KB box, ~20 of them (1,613). Same bytes in flight, same copies a byte: that
// points at a stage's round trip through the consumers (not yet profiled on the losing launches; on
// gate/up the consumers mostly wait for data). A next version: warps on different stages at once.
#include "linear_skinny.cuh"
#include "pdl.cuh"        // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh"        // lz_mbar_*, lz_stage_slot, lz_tma_load_2d, lz_ldsm_x2/x4, lz_mma_bf16
#include "tensor_map.cuh" // lz_tensor_map_encoder_for

#include <stdint.h> // uintptr_t

enum {
    SK_WARPS = 4,                        // consumer warps, 16 of a tile's rows each
    SK_CONSUMERS = SK_WARPS * 32,        //
    SK_THREADS = SK_CONSUMERS + 32,      // and the producer warp
    SK_ROWS = 16 * SK_WARPS,             // a tile's weight rows
    SK_BOXES = 4,                        // 64-input boxes a stage (one box a stage: ~0.6x the speed)
    SK_W_BOX = SK_ROWS * 128,            // bytes of a weight box [64 rows][64] bf16
    SK_MAX_STAGES = 8,                   //
    SK_SLOT_FLOATS = SK_ROWS * LZ_SKINNY_MAX_TOKENS, // a block's partial sums of one tile
    SK_MAX_TILES = 1 << 14,              // tile counters (lm_head of 128K rows: 2,004 tiles)
};

struct sk_params {
    CUtensorMap w[LZ_SKINNY_MAX_SEGMENTS]; // the weights [m][k], boxes [64][64]
    CUtensorMap x;                         // the input [n][k], boxes [NT * 8][64]
    lz_skinny_segment seg[LZ_SKINNY_MAX_SEGMENTS];
    int tile_end[LZ_SKINNY_MAX_SEGMENTS]; // row tiles of segments 0 .. s (unused ones: the total)
    int n, k_iters, iterations, stages, accumulate;
    float *partials;    // [blocks][2][SK_SLOT_FLOATS]: a block's first and last tile, when split
    unsigned *counters; // [tiles]: contributors arrived so far, zero between launches
};

// bytes of a stage of a step of NT * 8 tokens: four weight boxes, four boxes of x
__host__ __device__ constexpr int sk_stage_bytes(int nt) { return SK_BOXES * (SK_W_BOX + nt * 8 * 128); }
__host__ __device__ constexpr size_t sk_smem(int nt, int stages) {
    return 1024 + (size_t)stages * sk_stage_bytes(nt) + 2 * 8 * SK_MAX_STAGES + 16;
}

// The iterations of block b, and the block of iteration i (G blocks share T iterations).
__device__ __forceinline__ int sk_first_iteration(int b, int G, int T) { return (int)((long long)b * T / G); }
__device__ __forceinline__ int sk_block_of(int i, int G, int T) { return (int)(((long long)(i + 1) * G - 1) / T); }

// A row tile's layer and first row.
struct sk_tile {
    int s, row0;
};
__device__ __forceinline__ sk_tile sk_locate(const sk_params &p, int t) {
    int s = 0, first = 0;
#pragma unroll
    for (int j = 0; j + 1 < LZ_SKINNY_MAX_SEGMENTS; j++)
        if (t >= p.tile_end[j])
            s = j + 1, first = p.tile_end[j];
    return {s, (t - first) * SK_ROWS};
}

// v (a warp's 16 rows x NT * 8 tokens in the mma's accumulator layout) into the tile's outputs.
template <int NT>
__device__ __forceinline__ void sk_store(const sk_params &p, sk_tile tl, const float (&v)[NT][4], int warp, int lane) {
    lz_skinny_segment sg = p.seg[0];
#pragma unroll
    for (int j = 1; j < LZ_SKINNY_MAX_SEGMENTS; j++)
        if (tl.s == j)
            sg = p.seg[j];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = tl.row0 + warp * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
            const int tok = nt * 8 + (lane & 3) * 2 + (e & 1);
            if (row < sg.m && tok < p.n) {
                const size_t at = (size_t)tok * sg.m + row;
                float r = v[nt][e];
                if (p.accumulate)
                    r += __bfloat162float(sg.out[at]);
                if (sg.bias)
                    r += __bfloat162float(sg.bias[row]);
                sg.out[at] = __float2bfloat16(r);
            }
        }
    }
}

// grid: G blocks (one an SM), block SK_THREADS. NT: the step's tokens in 8-token mma tiles.
template <int NT>
__global__ void __launch_bounds__(SK_THREADS, 1) linear_skinny_kernel(const __grid_constant__ sk_params p) {
    constexpr int X_BOX = NT * 8 * 128, STAGE = sk_stage_bytes(NT), STAGE_K = 64 * SK_BOXES;
    extern __shared__ __align__(1024) unsigned char sk_sm[];
    unsigned char *sm = sk_sm + ((1024u - (lz_smem_u32(sk_sm) & 1023u)) & 1023u);
    const int stages = p.stages, KI = p.k_iters, T = p.iterations, G = (int)gridDim.x, b = (int)blockIdx.x;
    uint64_t *full = (uint64_t *)(sm + (size_t)stages * STAGE), *empty = full + SK_MAX_STAGES;
    int *last_flag = (int *)(empty + SK_MAX_STAGES);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int begin = sk_first_iteration(b, G, T), end = sk_first_iteration(b + 1, G, T);
    if (tid == 0)
        lz_stage_ring_init(full, empty, stages, SK_WARPS);
    __syncthreads();

    if (warp == SK_WARPS) { // the producer
        if (lane != 0) {
            lz_pdl_wait(), lz_pdl_launch_dependents();
            return;
        }
        auto stage_of = [&](int st) { return sm + (size_t)st * STAGE; };
        auto load_weights = [&](int st, int i) {
            const int t = i / KI, k0 = (i - t * KI) * STAGE_K;
            const sk_tile tl = sk_locate(p, t);
            lz_mbar_arrive_expect_tx(&full[st], (unsigned)STAGE); // (whole boxes: the copy engine zero-fills beyond the edges)
#pragma unroll
            for (int q = 0; q < SK_BOXES; q++)
                lz_tma_load_2d(stage_of(st) + q * SK_W_BOX, &p.w[tl.s], k0 + 64 * q, tl.row0, &full[st]);
        };
        auto load_x = [&](int st, int i) {
            const int k0 = (i % KI) * STAGE_K;
#pragma unroll
            for (int q = 0; q < SK_BOXES; q++)
                lz_tma_load_2d(stage_of(st) + SK_BOXES * SK_W_BOX + q * X_BOX, &p.x, k0 + 64 * q, 0, &full[st]);
        };
        for (int j = 0; j < LZ_SKINNY_MAX_SEGMENTS; j++)
            if (j == 0 || p.tile_end[j] > p.tile_end[j - 1])
                lz_prefetch_tensor_map(&p.w[j]);
        lz_prefetch_tensor_map(&p.x);
        const int ahead = min(stages, end - begin);
        for (int j = 0; j < ahead; j++)
            load_weights(j, begin + j);
        lz_pdl_wait(); // x is the previous kernel's output
        lz_pdl_launch_dependents();
        for (int j = 0; j < ahead; j++)
            load_x(j, begin + j);
        lz_stage_slot s = {0, 0u};
        for (int j = 0; j < ahead; j++)
            s.advance(stages);
        for (int i = begin + ahead; i < end; i++, s.advance(stages)) {
            lz_mbar_wait(&empty[s.st], s.parity ^ 1u); // the consumers are done with the stage
            load_weights(s.st, i);
            load_x(s.st, i);
        }
        return;
    }

    lz_pdl_wait(); // (the outputs, partial sums and counters: after the previous kernels)
    lz_pdl_launch_dependents();
    const uint32_t sm_base = lz_smem_u32(sm);
    // ldmatrix addresses: weight row (this warp's 16) and chunk half; x row and chunk half
    const int ra = warp * 16 + (lane & 15), ca = lane >> 4;
    const int rb = (lane & 7) + ((lane >> 4) << 3), cb = (lane >> 3) & 1;
    float acc[NT][4] = {};
    lz_stage_slot s = {0, 0u};
    for (int i = begin; i < end; i++) {
        lz_mbar_wait(&full[s.st], s.parity);
        const uint32_t stage = sm_base + (uint32_t)(s.st * STAGE);
#pragma unroll
        for (int q = 0; q < SK_BOXES; q++) {
            const uint32_t wbox = stage + q * SK_W_BOX, xbox = stage + SK_BOXES * SK_W_BOX + q * X_BOX;
#pragma unroll
            for (int ks = 0; ks < 4; ks++) { // 16 inputs a step; chunk c of row r at c ^ (r % 8)
                uint32_t a[4], bf[NT][2];
                lz_ldsm_x4(a, wbox + ra * 128 + (((2 * ks + ca) ^ (ra & 7)) << 4));
                if constexpr (NT == 1) {
                    lz_ldsm_x2(bf[0], xbox + (lane & 7) * 128 + (((2 * ks + cb) ^ (lane & 7)) << 4));
                } else {
#pragma unroll
                    for (int j = 0; j < NT / 2; j++) {
                        const int r = 16 * j + rb;
                        uint32_t t4[4];
                        lz_ldsm_x4(t4, xbox + r * 128 + (((2 * ks + cb) ^ (r & 7)) << 4));
                        bf[2 * j][0] = t4[0], bf[2 * j][1] = t4[1], bf[2 * j + 1][0] = t4[2], bf[2 * j + 1][1] = t4[3];
                    }
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    lz_mma_bf16(acc[nt], a, bf[nt][0], bf[nt][1]);
            }
        }
        __syncwarp();
        if (lane == 0)
            lz_mbar_arrive(&empty[s.st]); // (release: this warp's reads of the stage are done)
        s.advance(stages);
        if (i + 1 != end && (i + 1) % KI != 0)
            continue;
        // the end of this block's share of row tile t
        const int t = i / KI, first = sk_block_of(t * KI, G, T), last = sk_block_of(t * KI + KI - 1, G, T);
        const sk_tile tl = sk_locate(p, t);
        if (first == last) {
            sk_store<NT>(p, tl, acc, warp, lane);
        } else {
            const int slot = t == begin / KI ? 0 : 1;
            float4 *mine = (float4 *)(p.partials + ((size_t)b * 2 + slot) * SK_SLOT_FLOATS) + warp * NT * 32 + lane;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                __stcg(mine + nt * 32, make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]));
            lz_bar_sync<1>(SK_CONSUMERS); // (the block's partials, then one thread's release and count)
            if (tid == 0) {
                __threadfence();
                const bool last_one = atomicAdd(&p.counters[t], 1u) == (unsigned)(last - first);
                __threadfence(); // (acquire: the other blocks' partials, before the barrier)
                *last_flag = last_one;
            }
            lz_bar_sync<1>(SK_CONSUMERS);
            if (*(volatile int *)last_flag) {
                float sum[NT][4] = {};
                for (int bb = first; bb <= last; bb++) { // in block order, this block's own from registers
                    const int sl = t == sk_first_iteration(bb, G, T) / KI ? 0 : 1;
                    const float4 *src =
                        (const float4 *)(p.partials + ((size_t)bb * 2 + sl) * SK_SLOT_FLOATS) + warp * NT * 32 + lane;
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const float4 v = bb == b ? make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3])
                                                 : __ldcg(src + nt * 32);
                        sum[nt][0] += v.x, sum[nt][1] += v.y, sum[nt][2] += v.z, sum[nt][3] += v.w;
                    }
                }
                sk_store<NT>(p, tl, sum, warp, lane);
                if (tid == 0)
                    p.counters[t] = 0;
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    }
}

// The driver's tensor-map encoder; NULL where unavailable or the kernel was built for an older target.
static PFN_cuTensorMapEncodeTiled_v12000 sk_encode;

// A row-major bf16 matrix [rows][k] as a 2-d tensor of boxes [box_rows][64] in the 128-byte swizzle.
static bool sk_map(CUtensorMap *map, const void *base, int k, int rows, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)k * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    return sk_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, elem,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static int sk_tiles(int m) { return (m + SK_ROWS - 1) / SK_ROWS; }
static int sk_nt(int n) { return n <= 8 ? 1 : n <= 16 ? 2 : n <= 32 ? 4 : 8; }

// Stages that fit the SM's shared memory (at most SK_MAX_STAGES).
static int sk_stages(const lz_cuda_ctx *c, int nt) {
    int n = 0;
    while (n < SK_MAX_STAGES && sk_smem(nt, n + 1) <= c->max_smem)
        n++;
    return n;
}

bool linear_skinny_takes(const lz_cuda_ctx *c, int count, const lz_skinny_segment *seg, const __nv_bfloat16 *x,
                         int n, int k) {
    if (!sk_encode || !c->skinny_partials || c->gemv_off || c->on_side || n < 2 || n > c->skinny_tokens || count < 1 ||
        count > LZ_SKINNY_MAX_SEGMENTS || k < 8 || k % 8 != 0 || sk_stages(c, sk_nt(n)) < 2)
        return false;
    uintptr_t align = (uintptr_t)x;
    long long tiles = 0;
    for (int s = 0; s < count; s++) {
        if (seg[s].m < 1)
            return false;
        align |= (uintptr_t)seg[s].w;
        tiles += sk_tiles(seg[s].m);
    }
    const long long iterations = tiles * ((k + 64 * SK_BOXES - 1) / (64 * SK_BOXES));
    return (align & 15) == 0 && tiles <= SK_MAX_TILES && iterations <= INT_MAX;
}

template <int NT> static lz_status sk_launch(lz_cuda_ctx *c, const sk_params &p, int blocks) {
    return lz_launch(c, "linear (skinny)", linear_skinny_kernel<NT>, dim3((unsigned)blocks), dim3(SK_THREADS),
                     sk_smem(NT, p.stages), p);
}

lz_status linear_skinny_forward(lz_cuda_ctx *c, int count, const lz_skinny_segment *seg, const __nv_bfloat16 *x,
                                int n, int k, bool accumulate) {
    sk_params p;
    memset(&p, 0, sizeof p);
    const int nt = sk_nt(n);
    int tiles = 0;
    for (int s = 0; s < count; s++) {
        if (!sk_map(&p.w[s], seg[s].w, k, seg[s].m, SK_ROWS))
            return lz_fail(LZ_ERR_INTERNAL, "linear (skinny): cuTensorMapEncodeTiled failed (%d x %d)", seg[s].m, k);
        p.seg[s] = seg[s];
        tiles += sk_tiles(seg[s].m);
        p.tile_end[s] = tiles;
    }
    for (int s = count; s < LZ_SKINNY_MAX_SEGMENTS; s++)
        p.tile_end[s] = tiles;
    if (!sk_map(&p.x, x, k, n, nt * 8))
        return lz_fail(LZ_ERR_INTERNAL, "linear (skinny): cuTensorMapEncodeTiled failed (x %d x %d)", n, k);
    const int stage_k = 64 * SK_BOXES;
    p.n = n, p.k_iters = (k + stage_k - 1) / stage_k, p.iterations = tiles * p.k_iters;
    p.stages = sk_stages(c, nt), p.accumulate = accumulate;
    p.partials = c->skinny_partials, p.counters = c->skinny_counters;
    const int blocks = min(p.iterations, c->skinny_blocks);
    switch (nt) {
    case 1: return sk_launch<1>(c, p, blocks);
    case 2: return sk_launch<2>(c, p, blocks);
    case 4: return sk_launch<4>(c, p, blocks);
    default: return sk_launch<8>(c, p, blocks);
    }
}

lz_status linear_skinny_init(lz_cuda_ctx *c) {
    const int max = (int)c->max_smem;
#define SK_SMEM_ATTR(NT) \
    LZ_CUDA_TRY(cudaFuncSetAttribute(linear_skinny_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, max))
    SK_SMEM_ATTR(1);
    SK_SMEM_ATTR(2);
    SK_SMEM_ATTR(4);
    SK_SMEM_ATTR(8);
#undef SK_SMEM_ATTR
    LZ_TRY(lz_tensor_map_encoder_for((const void *)linear_skinny_kernel<2>, &sk_encode));
    if (!sk_encode || c->skinny_tokens < 2)
        return LZ_OK;
    // blocks: one an SM unless LIZARD_SKINNY_BLOCKS says fewer (tests: many iterations a block)
    c->skinny_blocks = c->skinny_blocks > 0 && c->skinny_blocks < c->n_sms ? c->skinny_blocks : c->n_sms;
    LZ_CUDA_TRY(cudaMalloc(&c->skinny_partials, sizeof(float) * 2 * SK_SLOT_FLOATS * (size_t)c->skinny_blocks));
    LZ_CUDA_TRY(cudaMalloc(&c->skinny_counters, sizeof(unsigned) * SK_MAX_TILES));
    LZ_CUDA_TRY(cudaMemsetAsync(c->skinny_counters, 0, sizeof(unsigned) * SK_MAX_TILES, c->stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(c->stream));
    return LZ_OK;
}

void linear_skinny_destroy(lz_cuda_ctx *c) {
    if (c->skinny_partials)
        cudaFree(c->skinny_partials);
    if (c->skinny_counters)
        cudaFree(c->skinny_counters);
    c->skinny_partials = NULL, c->skinny_counters = NULL;
}
