// window_decode_ring.cu - the Lizard window branch of a decode step at large batches as a persistent
// kernel: one block an SM walks the (sequence, kv head) items, each item's whole window (w keys and
// values, 64 KB at LLaMA-3-8B's shape) already on its way into a ring of shared-memory stages
// (cp.async) while the block computes the item before.
// Why: attention_decode.cu's split kernel gives each item a block of its own, which loads its window
// once, computes, merges its warps and exits; at 256 sequences of the 8B shape it read the 134 MB of
// rings at 2.0 TB/s (67.4 us a layer, Nsight Compute, session 14) against 4.1 TB/s for a read-only
// stream (tests/bench/stream_ceiling.cu).
// An item in two phases (see the kernel) so that no warp's partial softmax has to be merged: the
// scores q K^T of all keys into shared memory, then every warp takes 16 of the value dims over all
// keys. Ring rows are read in ring order (softmax does not care; a row is masked by the position it
// holds). Rows in shared memory are 16-byte chunks swizzled by row (chunk c of row r at c ^ (r % 8)),
// so ldmatrix's eight rows fall in different banks without padding.
// Measured (H200, Nsight Compute, 256 sequences of the 8B shape, a layer; session 20):
// - the first version (8 warps on 16-key tiles, each its own online softmax, the warps' [G][d]
//   partials merged through shared memory): 68-72 us, no better than the split kernel; 2 warps a
//   scheduler issuing every 3 cycles, ~1,200 instructions a warp an item;
// - the two phases with run-time loop bounds and index divisions: 74 us; with the copies alone (no
//   compute) 48 us, the compute alone (no ring copies) 51 us: both issue-bound, they overlap badly;
// - this version (the window's tiles at compile time, constant shared-memory offsets, the items'
//   indices advanced without dividing): 62.9 us (2.2 TB/s); copies alone 47.7 us (2.9 TB/s: what
//   cp.async from 8 warps, two items in flight, gets here), compute alone 42.4 us. Pure Lizard at 2K
//   (tok/s, two rounds, against LIZARD_WINDOW_RING=0): 64 sequences 8,335-8,354 -> 8,463-8,487, 256
//   sequences 16,653-16,691 -> 16,917-17,003.
#include "window_decode_ring.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_cp_async16, lz_ldsm_x4(_trans), lz_mma_bf16, lz_fast_exp2, lz_pack_bf16

#include <cuda_bf16.h>

enum { WR_THREADS = 256, WR_WARPS = WR_THREADS / 32, WR_KT = 16, WR_MAX_STAGES = 4 };
#define WR_LOG2E 1.4426950408889634f

// A stage in bytes: keys [rows][d] and values [rows][d] (bf16, rows = w rounded up to 16), q [G][d],
// out_old [G][d], the item's token, kv head, position, ring row and slot. After the stages: the
// scores [G][rows + 8] (fp32; the padding puts a quad's four query-head rows in different banks).
struct wr_layout {
    int rows, d, group;
    __host__ __device__ size_t q_off() const { return (size_t)2 * rows * d * 2; }
    __host__ __device__ size_t old_off() const { return q_off() + (size_t)group * d * 2; }
    __host__ __device__ size_t meta_off() const { return old_off() + (size_t)group * d * 2; }
    __host__ __device__ size_t stage_bytes() const { return meta_off() + 32; }
    __host__ __device__ int score_ld() const { return rows + 8; }
    __host__ __device__ size_t score_bytes() const { return (size_t)group * score_ld() * 4; }
};

// Element offset of chunk c (8 bf16) of row r in a swizzled [rows][d] block.
template <int D> __device__ __forceinline__ int wr_at(int r, int c) { return r * D + ((c ^ (r & 7)) << 3); }

// Whether ring row r holds a key of the window of position p (pr = p % w): the position it holds,
// p - ((pr - r) mod w), is at least 0 (rows of a sequence shorter than w were never written).
__device__ __forceinline__ bool wr_valid(int r, int p, int pr, int w) {
    return r < w && p - (pr >= r ? pr - r : pr - r + w) >= 0;
}

// An item's token and kv head, advanced by the grid without dividing
struct wr_item {
    int t, g;
    __device__ void advance(int dt, int dg, int Hkv) {
        t += dt, g += dg;
        if (g >= Hkv)
            g -= Hkv, t++;
    }
};

// grid (blocks), block WR_THREADS; items it = blockIdx.x + j gridDim.x: (token it / Hkv, kv head
// it % Hkv). Per item two phases: warps take 16-key tiles (warp, warp + 8, ...) and write q K^T (the
// group's heads as the mma's rows, masked, log2 units) to the scores; after a barrier each warp takes
// 16 value dims (warp) over all keys: the softmax's maximum and weights from the scores (every warp
// the same, no merge), P V on the mma, the result onto the GLA output. NT: the window's 16-key tiles
// when known at compile time (w of 64 or 128: unrolled loops, constant offsets), else 0.
template <int G, int D, int NT>
__global__ void __launch_bounds__(WR_THREADS, 1)
    window_decode_ring_kernel(wr_params<__nv_bfloat16> p, int stages) {
    typedef __nv_bfloat16 T;
    constexpr int CH = D / 8, RS = WR_THREADS / CH; // 16-byte chunks a row; rows a copy pass
    static_assert(G <= 8 && RS % 8 == 0, "8 query heads at most; a thread's chunks keep their swizzle");
    extern __shared__ float4 wr_sm4[];
    unsigned char *sm = (unsigned char *)wr_sm4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, w = p.w, Hkv = p.Hkv;
    const int n_tiles = NT ? NT : (w + WR_KT - 1) / WR_KT, rows = n_tiles * WR_KT, n_items = p.n * Hkv;
    const wr_layout L = {rows, D, G};
    const size_t stage_bytes = L.stage_bytes(), ring_row = (size_t)Hkv * D;
    float *scores = (float *)(sm + stages * stage_bytes);
    const int sld = L.score_ld();
    // the ring rows of an item (all but row pr = pos % w) into stage st: this thread's chunk column cc
    // of rows r0, r0 + RS, ... (one swizzle: RS is a multiple of 8); rows of no key zero-filled
    const int cc = tid % CH, r0 = tid / CH;
    auto copy_ring = [&](int st, int g, int pos, int pr, int slot) {
        const bool full = pos >= w - 1; // every row below w holds a key of the window
        T *ks = (T *)(sm + st * stage_bytes) + wr_at<D>(r0, cc), *vs = ks + (size_t)rows * D;
        const size_t base = ((size_t)slot * w + r0) * ring_row + (size_t)g * D + cc * 8;
        const T *gk = p.ring_k + base, *gv = p.ring_v + base;
#pragma unroll
        for (int j = 0; j < (NT ? NT * WR_KT / RS : 1 << 20); j++) {
            const int r = r0 + j * RS;
            if (!NT && r >= rows)
                break;
            if (r == pr)
                continue;
            const bool ok = full ? r < w : wr_valid(r, pos, pr, w);
            lz_cp_async16(ks + j * RS * D, ok ? gk + j * RS * ring_row : p.ring_k, ok);
            lz_cp_async16(vs + j * RS * D, ok ? gv + j * RS * ring_row : p.ring_v, ok);
        }
    };
    // what earlier kernels of the step wrote (after the PDL wait): q, the GLA output, the new key and
    // value (into row pr); and the item's indices
    auto copy_small = [&](int st, int t, int g, int pos, int pr, int slot) {
        unsigned char *stage = sm + st * stage_bytes;
        T *ks = (T *)stage, *vs = ks + (size_t)rows * D;
        const size_t qrow = ((size_t)t * p.Hq + (size_t)g * G) * D, krow = ((size_t)t * Hkv + g) * D;
        for (int e = tid; e < G * CH; e += WR_THREADS) {
            lz_cp_async16(stage + L.q_off() + e * 16, p.q + qrow + e * 8);
            lz_cp_async16(stage + L.old_off() + e * 16, p.out + qrow + e * 8);
        }
        if (tid < CH) {
            lz_cp_async16(ks + wr_at<D>(pr, tid), p.k + krow + tid * 8);
            lz_cp_async16(vs + wr_at<D>(pr, tid), p.v + krow + tid * 8);
        }
        if (tid == 0) {
            int *meta = (int *)(stage + L.meta_off());
            meta[0] = t, meta[1] = g, meta[2] = pos, meta[3] = pr, meta[4] = slot;
        }
    };

    // prologue: items 0 .. stages - 2 of this block, the rings before the wait (written by earlier
    // steps; the step's arrays were copied in before its first kernel), the rest after it
    const int dt = (int)gridDim.x / Hkv, dg = (int)gridDim.x % Hkv;
    wr_item first = {(int)blockIdx.x / Hkv, (int)blockIdx.x % Hkv}, nx = first;
    for (int j = 0; j < stages - 1 && nx.t < p.n; j++, nx.advance(dt, dg, Hkv)) {
        const int pos = p.token_pos[nx.t];
        copy_ring(j, nx.g, pos, pos % w, p.slot[p.token_seq[nx.t]]);
    }
    // the meta logits' mass in log2 units: mm + log2(lm)
    float mm = -INFINITY, lm = 0.0f;
    if (p.n_meta > 0) {
        for (int j = 0; j < p.n_meta; j++)
            mm = fmaxf(mm, __bfloat162float(p.meta[j]));
        for (int j = 0; j < p.n_meta; j++)
            lm += expf(__bfloat162float(p.meta[j]) - mm);
        mm *= WR_LOG2E;
    }
    lz_pdl_wait(); // q, k, v, out come from earlier kernels of the step
    lz_pdl_launch_dependents();
    nx = first;
    for (int j = 0; j < stages - 1 && nx.t < p.n; j++, nx.advance(dt, dg, Hkv)) {
        const int pos = p.token_pos[nx.t];
        copy_small(j, nx.t, nx.g, pos, pos % w, p.slot[p.token_seq[nx.t]]);
    }
    lz_cp_async_commit();
    // nx: the next item to request; its position and slot loaded an item ahead of their use
    int next_pos = nx.t < p.n ? p.token_pos[nx.t] : 0, next_slot = nx.t < p.n ? p.slot[p.token_seq[nx.t]] : 0;
    const float scale = rsqrtf((float)D) * WR_LOG2E; // exp2 below
    const int r8 = lane >> 2, cq = lane & 3; // mma fragments: row (query head) r8 (rows 8-15 zero); pairs 2 cq
    for (int i = 0, it = blockIdx.x; it < n_items; i++, it += gridDim.x) {
        lz_cp_async_wait_upto(min(i, stages - 2)); // (the prologue is one group, then one an item)
        __syncthreads(); // the item's stage is complete; the stage refilled below and the scores are free
        if (nx.t < p.n) {
            const int st = (i + stages - 1) % stages, pr = next_pos % w;
            copy_ring(st, nx.g, next_pos, pr, next_slot);
            copy_small(st, nx.t, nx.g, next_pos, pr, next_slot);
            nx.advance(dt, dg, Hkv);
            if (nx.t < p.n)
                next_pos = p.token_pos[nx.t], next_slot = p.slot[p.token_seq[nx.t]];
        }
        lz_cp_async_commit(); // (empty at the end: one group an item keeps the count)

        const unsigned char *stage = sm + (i % stages) * stage_bytes;
        const T *ks = (const T *)stage, *vs = ks + (size_t)rows * D, *qs = (const T *)(stage + L.q_off());
        const int *meta = (const int *)(stage + L.meta_off());
        const int t = meta[0], g = meta[1], pos = meta[2], pr = meta[3], slot = meta[4];
        const bool full = pos >= w - 1;
        // phase 1: the scores of the warp's tiles
        if (warp < n_tiles) {
            uint32_t qa[D / 16][2]; // q as the A operand: rows r8 (columns +0, +8); rows 8-15 zero
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const int c0 = kk * 16 + 2 * cq;
                qa[kk][0] = r8 < G ? *(const uint32_t *)(qs + r8 * D + c0) : 0u;
                qa[kk][1] = r8 < G ? *(const uint32_t *)(qs + r8 * D + c0 + 8) : 0u;
            }
            // x4: keys 0-7 dims +0 / +8, keys 8-15 dims +0 / +8: the B operands of both key halves;
            // a lane's row is k0 + (lane >> 4) 8 + lane % 8 (its swizzle lane % 8), its chunk 2 kk + khalf
            const int khalf = (lane >> 3) & 1, sw = lane & 7;
            const T *krow = ks + ((lane >> 4) * 8 + sw) * D;
            for (int tile = warp; tile < n_tiles; tile += WR_WARPS) {
                const int k0 = tile * WR_KT;
                float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}}; // keys 0-7, 8-15
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    uint32_t b[4];
                    const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
                    lz_ldsm_x4(b, lz_smem_u32(krow + k0 * D + (((2 * kk + khalf) ^ sw) << 3)));
                    lz_mma_bf16(s[0], a, b[0], b[1]);
                    lz_mma_bf16(s[1], a, b[2], b[3]);
                }
                if (r8 < G)
#pragma unroll
                    for (int h2 = 0; h2 < 2; h2++) {
                        const int key = k0 + h2 * 8 + 2 * cq;
                        const bool in0 = full ? key < w : wr_valid(key, pos, pr, w);
                        const bool in1 = full ? key + 1 < w : wr_valid(key + 1, pos, pr, w);
                        *(float2 *)(scores + r8 * sld + key) =
                            make_float2(in0 ? s[h2][0] * scale : -INFINITY, in1 ? s[h2][1] * scale : -INFINITY);
                    }
            }
        }
        // this step's key and value into the rings' row pr (global; no item of this step reads it)
        if (tid < 2 * CH) {
            const int c = tid % CH;
            const T *src = (tid < CH ? ks : vs) + wr_at<D>(pr, c);
            T *dst = (tid < CH ? p.ring_k : p.ring_v) + ((size_t)slot * w + pr) * ring_row + (size_t)g * D + c * 8;
            *(float4 *)dst = *(const float4 *)src;
        }
        __syncthreads(); // the scores are complete
        // phase 2: value dims 16 warp .. + 15 of every query head; lane: head r8, keys 16 kk + 2 cq + {0, 1, 8, 9}
        if (16 * warp < D) {
            const float *sr = scores + (r8 < G ? r8 : 0) * sld + 2 * cq;
            float m = -INFINITY;
#pragma unroll
            for (int kk = 0; kk < (NT ? NT : 1 << 20); kk++) {
                if (!NT && kk >= n_tiles)
                    break;
                const float2 a = *(const float2 *)(sr + 16 * kk), b = *(const float2 *)(sr + 16 * kk + 8);
                m = fmaxf(m, fmaxf(fmaxf(a.x, a.y), fmaxf(b.x, b.y)));
            }
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2)); // finite for heads < G: row pr holds a key
            float o[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}}, l = 0.0f;
            // x4.trans: keys 0-7 / 8-15 of dims 16 warp + 0-7 and + 8-15: the B operands of both dim
            // tiles; a lane's row 16 kk + vr (swizzle vr % 8 = lane % 8), its chunk 2 warp + lane / 16
            const int vr = ((lane >> 3) & 1) * 8 + (lane & 7);
            const T *vrow = vs + vr * D + (((2 * warp + (lane >> 4)) ^ (lane & 7)) << 3);
#pragma unroll
            for (int kk = 0; kk < (NT ? NT : 1 << 20); kk++) {
                if (!NT && kk >= n_tiles)
                    break;
                const float2 a = *(const float2 *)(sr + 16 * kk), b = *(const float2 *)(sr + 16 * kk + 8);
                float e0 = lz_fast_exp2(a.x - m), e1 = lz_fast_exp2(a.y - m);
                float e2 = lz_fast_exp2(b.x - m), e3 = lz_fast_exp2(b.y - m);
                if (r8 >= G)
                    e0 = e1 = e2 = e3 = 0.0f;
                l += (e0 + e1) + (e2 + e3);
                const uint32_t pa[4] = {lz_pack_bf16(e0, e1), 0u, lz_pack_bf16(e2, e3), 0u};
                uint32_t bv[4];
                lz_ldsm_x4_trans(bv, lz_smem_u32(vrow + 16 * kk * D));
                lz_mma_bf16(o[0], pa, bv[0], bv[1]);
                lz_mma_bf16(o[1], pa, bv[2], bv[3]);
            }
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            if (r8 < G) { // onto the GLA output, the meta logits' mass in the denominator
                const float inv = p.alpha / (l + lm * exp2f(mm - m));
                const T *old = (const T *)(stage + L.old_off()) + r8 * D;
                T *dst = p.out + ((size_t)t * p.Hq + (size_t)g * G + r8) * D;
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int x = 16 * warp + 8 * j + 2 * cq;
                    const __nv_bfloat162 prev = *(const __nv_bfloat162 *)(old + x);
                    *(__nv_bfloat162 *)(dst + x) = __floats2bfloat162_rn(__low2float(prev) + o[j][0] * inv,
                                                                         __high2float(prev) + o[j][1] * inv);
                }
            }
        }
    }
    lz_cp_async_wait<0>(); // (nothing left in flight at exit)
}

// Stages that fit the SM's shared memory (at most WR_MAX_STAGES).
static int wr_stages(const lz_cuda_ctx *c, int w, int d, int group) {
    const wr_layout L = {(w + WR_KT - 1) / WR_KT * WR_KT, d, group};
    if (L.score_bytes() >= c->max_smem)
        return 0;
    const size_t n = (c->max_smem - L.score_bytes()) / L.stage_bytes();
    return (int)(n < (size_t)WR_MAX_STAGES ? n : (size_t)WR_MAX_STAGES);
}

template <typename T> bool window_decode_ring_fits(const lz_cuda_ctx *c, const wr_params<T> &p) {
    if constexpr (sizeof(T) != 2) {
        return false; // (bf16 mma)
    } else {
        const int group = p.Hq / p.Hkv;
        const uintptr_t align = (uintptr_t)p.out | (uintptr_t)p.q | (uintptr_t)p.k | (uintptr_t)p.v |
                                (uintptr_t)p.ring_k | (uintptr_t)p.ring_v;
        return c->window_ring_min > 0 && p.n >= c->window_ring_min && !c->tc_off && (p.d == 64 || p.d == 128) &&
               group >= 1 && group <= 8 && p.w >= 1 && (align & 15) == 0 && wr_stages(c, p.w, p.d, group) >= 2;
    }
}

template <int G, int D, int NT> static lz_status wr_launch(lz_cuda_ctx *c, const wr_params<__nv_bfloat16> &p) {
    const int stages = wr_stages(c, p.w, D, G), items = p.n * p.Hkv;
    const wr_layout L = {(p.w + WR_KT - 1) / WR_KT * WR_KT, D, G};
    const int blocks = min(items, c->window_ring_blocks > 0 ? c->window_ring_blocks : c->n_sms);
    return lz_launch(c, "window decode (ring)", window_decode_ring_kernel<G, D, NT>, dim3((unsigned)blocks),
                     dim3(WR_THREADS), stages * L.stage_bytes() + L.score_bytes(), p, stages);
}

// the window's tiles at compile time for w of 64 and 128 (113 to 128 keys take 8 tiles, ...)
template <int G, int D> static lz_status wr_launch_tiles(lz_cuda_ctx *c, const wr_params<__nv_bfloat16> &p) {
    const int tiles = (p.w + WR_KT - 1) / WR_KT;
    if (tiles == 8)
        return wr_launch<G, D, 8>(c, p);
    if (tiles == 4)
        return wr_launch<G, D, 4>(c, p);
    return wr_launch<G, D, 0>(c, p);
}

template <int D> static lz_status wr_launch_group(lz_cuda_ctx *c, const wr_params<__nv_bfloat16> &p) {
    const int group = p.Hq / p.Hkv;
    if (group == 1)
        return wr_launch_tiles<1, D>(c, p);
    if (group == 2)
        return wr_launch_tiles<2, D>(c, p);
    if (group <= 4)
        return wr_launch_tiles<4, D>(c, p);
    return wr_launch_tiles<8, D>(c, p);
}

template <typename T> lz_status window_decode_ring(lz_cuda_ctx *c, const wr_params<T> &p) {
    if constexpr (sizeof(T) != 2) {
        return lz_fail(LZ_ERR_INTERNAL, "window decode (ring): bf16 only");
    } else {
        return p.d == 64 ? wr_launch_group<64>(c, p) : wr_launch_group<128>(c, p);
    }
}

template <int G, int D> static lz_status wr_init_one(lz_cuda_ctx *c) {
    const int max = (int)c->max_smem;
    LZ_CUDA_TRY(cudaFuncSetAttribute(window_decode_ring_kernel<G, D, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(window_decode_ring_kernel<G, D, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(window_decode_ring_kernel<G, D, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    return LZ_OK;
}

template <typename T> lz_status window_decode_ring_init(lz_cuda_ctx *c) {
    if constexpr (sizeof(T) == 2) {
        LZ_TRY((wr_init_one<1, 64>(c)));
        LZ_TRY((wr_init_one<2, 64>(c)));
        LZ_TRY((wr_init_one<4, 64>(c)));
        LZ_TRY((wr_init_one<8, 64>(c)));
        LZ_TRY((wr_init_one<1, 128>(c)));
        LZ_TRY((wr_init_one<2, 128>(c)));
        LZ_TRY((wr_init_one<4, 128>(c)));
        LZ_TRY((wr_init_one<8, 128>(c)));
    }
    return LZ_OK;
}

#define LZ_WINDOW_DECODE_RING(T)                                                                                  \
    template bool window_decode_ring_fits<T>(const lz_cuda_ctx *, const wr_params<T> &);                         \
    template lz_status window_decode_ring<T>(lz_cuda_ctx *, const wr_params<T> &);                               \
    template lz_status window_decode_ring_init<T>(lz_cuda_ctx *);
LZ_INSTANTIATE(LZ_WINDOW_DECODE_RING)
