// window_decode_ring.cu - the Lizard window branch of a decode step at large batches as a persistent
// kernel: one block an SM walks the (sequence, kv head) items, each item's whole window (w keys and
// values, 64 KB at LLaMA-3-8B's shape) already on its way into a ring of shared-memory stages while
// the block computes the item before. A producer warp fills the stages (the copy engine: tensor copies
// of the window, bulk copies of the small arrays; full and empty mbarriers a stage), eight consumer
// warps compute.
// Why: attention_decode.cu's split kernel gives each item a block of its own, which loads its window
// once, computes, merges its warps and exits: its reads come in bursts, well below a read-only
// stream's rate (tests/bench/stream_ceiling.cu).
// An item in two phases (see the kernel) so that no warp's partial softmax has to be merged: the
// scores q K^T of all keys into shared memory, then every warp takes 16 of the value dims over all
// keys. Ring rows are read in ring order (softmax does not care; a row is masked by the position it
// holds). Rows in shared memory are 64-dim blocks in the copy engine's 128-byte swizzle (chunk c of
// row r at c ^ (r % 8)), so ldmatrix's eight rows fall in different banks.
// The producer warp alone waits on the items' index loads and runs stages ahead; the new key's scores
// are one more mma column; scores are double-buffered (one barrier an item); offsets come from the
// shared array (ld.shared). docs/benchmarks.md has the versions measured.
#include "window_decode_ring.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_mbar_*, lz_stage_slot, lz_tma_load_4d, lz_bulk_load, lz_ldsm_x4(_trans), lz_mma_bf16, lz_fast_exp2
#include "tensor_map.cuh" // lz_tensor_map_encoder_for, lz_tensor_map_head_rows

#include <cuda_bf16.h>
#include <stdint.h> // uintptr_t

enum { WR_WARPS = 8, WR_CONSUMERS = WR_WARPS * 32, WR_THREADS = WR_CONSUMERS + 32, WR_KT = 16, WR_MAX_STAGES = 6 };
#define WR_LOG2E 1.4426950408889634f

// A stage in bytes (each part a multiple of 1024 where the copy engine writes it, as its 128-byte
// swizzle wants): keys and values as d / 64 blocks each of [rows][64] bf16 (rows = w rounded up to
// 16), q [G][d], out_old [G][d], the new key [d] and value [d], the item's indices. After the stages:
// two score buffers [G][rows + 8] (fp32; the padding puts a quad's four query-head rows in different
// banks) and two of the new key's scores [8], then the stages' full and empty mbarriers.
struct wr_layout {
    int rows, d, group;
    __host__ __device__ size_t block_bytes() const { return (size_t)rows * 128; } // [rows][64] bf16
    __host__ __device__ size_t v_off() const { return (size_t)(d / 64) * block_bytes(); }
    __host__ __device__ size_t q_off() const { return 2 * v_off(); }
    __host__ __device__ size_t old_off() const { return q_off() + (size_t)group * d * 2; }
    __host__ __device__ size_t new_off() const { return old_off() + (size_t)group * d * 2; }
    __host__ __device__ size_t meta_off() const { return new_off() + (size_t)2 * d * 2; }
    __host__ __device__ size_t stage_bytes() const { return (meta_off() + 32 + 1023) / 1024 * 1024; }
    __host__ __device__ int score_ld() const { return rows + 8; }
    __host__ __device__ size_t score_bytes() const { return ((size_t)group * score_ld() * 4 + 15) / 16 * 16; }
    // two buffers of scores and two of the new key's scores, the mbarriers
    __host__ __device__ size_t fixed_bytes() const { return 2 * score_bytes() + 2 * 32 + 2 * 8 * WR_MAX_STAGES; }
    // shared memory to ask for: the stages, the fixed part and the slack of aligning to 1024
    __host__ __device__ size_t smem(int stages) const { return 1024 + stages * stage_bytes() + fixed_bytes(); }
};

// The window's 16-key tiles (its rows in shared memory: w rounded up to a tile)
__host__ __device__ constexpr int wr_tiles(int w) { return (w + WR_KT - 1) / WR_KT; }

// Element offset of 16-byte chunk ch (dims 8 ch .. 8 ch + 7) of row r in a key or value region: the
// block of dims 64 (ch / 8) .., the copy engine's 128-byte swizzle (chunk c of row r at c ^ (r % 8)).
__device__ __forceinline__ int wr_at(int rows, int r, int ch) {
    return (ch >> 3) * rows * 64 + r * 64 + (((ch & 7) ^ (r & 7)) << 3);
}

// An item's token and kv head, advanced by a stride of items without dividing
struct wr_item {
    int t, g;
    __device__ void advance(int dt, int dg, int Hkv) {
        t += dt, g += dg;
        if (g >= Hkv)
            g -= Hkv, t++;
    }
};

// The item's indices in a stage (written by the producer before it arrives on the stage's barrier)
struct wr_meta {
    int t, g, pos, slot, ring_row, key_end;
};

// grid (blocks), block WR_CONSUMERS consumer threads and one producer warp; items it = blockIdx.x + j
// gridDim.x: (token it / Hkv, kv head it % Hkv), item j of a block in stage j % stages. The producer
// warp's first lane runs ahead of the consumers: it waits until a stage is given back (its empty
// barrier: each consumer warp arrives once it has read the stage), writes the next item's indices into
// it and has the copy engine fill it (the window by two tensor copies a 64-dim block, q, the GLA output
// and the new key and value by bulk copies), all completing on the stage's full barrier. So no
// consumer thread issues a copy or waits on an index load. The ring's row p % w holds the key of
// position p - w (or nothing): it is masked, and the new key joins as one more score, its value added
// after the product. An item in two phases: warps take 16-key tiles (warp, warp + 8, ...) and write
// q K^T (the group's heads as the mma's rows, masked, log2 units) to the scores (the last warp also the
// new key's, by one more column of mma); after a barrier each warp takes 16 value dims over all keys:
// the softmax's maximum and weights from the scores (every warp the same, no merge), P V on the mma,
// the result onto the GLA output. Scores double-buffered: the next item's phase 1 may start while a
// warp still reads this one's. NT: the window's 16-key tiles when known at compile time (w of 64 or
// 128: unrolled loops), else 0.
template <int G, int D, int NT>
__global__ void __launch_bounds__(WR_THREADS, 1)
    window_decode_ring_kernel(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                              wr_params<__nv_bfloat16> p, int stages) {
    typedef __nv_bfloat16 T;
    constexpr int CH = D / 8, HALVES = D / 64; // 16-byte chunks a row; 64-dim blocks
    static_assert(G <= 8 && D % 64 == 0, "8 query heads at most; whole 64-dim blocks");
    extern __shared__ __align__(1024) unsigned char wr_sm[];
    // (offsets from the shared array itself, so that the compiler emits shared-memory instructions)
    unsigned char *sm = wr_sm + ((1024u - (lz_smem_u32(wr_sm) & 1023u)) & 1023u);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, w = p.w, Hkv = p.Hkv;
    const int n_tiles = NT ? NT : wr_tiles(w), rows = n_tiles * WR_KT, n_items = p.n * Hkv;
    const wr_layout L = {rows, D, G};
    const size_t stage_bytes = L.stage_bytes(), ring_row = (size_t)Hkv * D;
    unsigned char *fixed = sm + stages * stage_bytes;
    uint64_t *full = (uint64_t *)(fixed + 2 * L.score_bytes() + 2 * 32), *empty = full + WR_MAX_STAGES;
    if (tid == 0)
        lz_stage_ring_init(full, empty, stages, WR_WARPS);
    // rows w .. rows - 1 of every stage: zeros (the copies write rows below w only)
    for (int e = tid; e < stages * 2 * HALVES * (rows - w) * 8; e += blockDim.x) {
        const int c = e % 8, r = w + (e / 8) % (rows - w), blk = e / (8 * (rows - w));
        *(float4 *)(sm + (size_t)(blk / (2 * HALVES)) * stage_bytes + (size_t)(blk % (2 * HALVES)) * L.block_bytes() +
                    (size_t)r * 128 + c * 16) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    lz_fence_proxy_async(); // (the zeros, before the copy engine writes the stages)
    __syncthreads();
    const int dt = (int)gridDim.x / Hkv, dg = (int)gridDim.x % Hkv;

    if (warp == WR_WARPS) { // the producer
        if (lane != 0) {
            lz_pdl_wait(), lz_pdl_launch_dependents();
            return;
        }
        const unsigned ring_bytes = 2 * HALVES * w * 128, small_bytes = 2 * G * D * 2 + 2 * D * 2;
        // an item's indices and window into stage st (once the stage is free)
        auto fill_ring = [&](int st, wr_item x) {
            unsigned char *stage = sm + st * stage_bytes;
            const int pos = p.token_pos[x.t], slot = p.slot[p.token_seq[x.t]], pr = pos % w;
            *(wr_meta *)(stage + L.meta_off()) = {x.t, x.g, pos, slot, pr, pos >= w - 1 ? w : pos};
            lz_mbar_arrive_expect_tx(&full[st], ring_bytes + small_bytes); // (release: the indices above)
#pragma unroll
            for (int h = 0; h < HALVES; h++) {
                lz_tma_load_4d(stage + h * L.block_bytes(), &tk, 64 * h, x.g, 0, slot, &full[st]);
                lz_tma_load_4d(stage + L.v_off() + h * L.block_bytes(), &tv, 64 * h, x.g, 0, slot, &full[st]);
            }
        };
        // what earlier kernels of the step wrote (after the PDL wait): q, the GLA output, the new key and value
        auto fill_small = [&](int st, wr_item x) {
            unsigned char *stage = sm + st * stage_bytes;
            const size_t qrow = ((size_t)x.t * p.Hq + (size_t)x.g * G) * D, krow = ((size_t)x.t * Hkv + x.g) * D;
            lz_bulk_load(stage + L.q_off(), p.q + qrow, G * D * 2, &full[st]);
            lz_bulk_load(stage + L.old_off(), p.out + qrow, G * D * 2, &full[st]);
            lz_bulk_load(stage + L.new_off(), p.k + krow, D * 2, &full[st]);
            lz_bulk_load(stage + L.new_off() + D * 2, p.v + krow, D * 2, &full[st]);
        };
        // the first stages' windows before the wait (written by earlier steps; the step's index arrays
        // were copied in before its first kernel), their small arrays after it
        wr_item x = {(int)blockIdx.x / Hkv, (int)blockIdx.x % Hkv};
        int i = 0;
        for (wr_item y = x; i < stages && y.t < p.n; i++, y.advance(dt, dg, Hkv))
            fill_ring(i, y);
        lz_pdl_wait();
        lz_pdl_launch_dependents();
        for (int j = 0; j < i; j++, x.advance(dt, dg, Hkv))
            fill_small(j, x);
        lz_stage_slot s = {0, 0u}; // (stage of item i, parity of its use)
        for (int j = 0; j < i; j++)
            s.advance(stages);
        for (; x.t < p.n; i++, x.advance(dt, dg, Hkv), s.advance(stages)) {
            lz_mbar_wait(&empty[s.st], s.parity ^ 1u); // the consumers are done with the stage
            fill_ring(s.st, x);
            fill_small(s.st, x);
        }
        return;
    }

    lz_pdl_wait(); // (the rings' rows written below: no earlier kernel of the step reads them)
    lz_pdl_launch_dependents();
    // the meta logits' mass in log2 units: mm + log2(lm)
    float mm = -INFINITY, lm = 0.0f;
    if (p.n_meta > 0) {
        for (int j = 0; j < p.n_meta; j++)
            mm = fmaxf(mm, __bfloat162float(p.meta[j]));
        for (int j = 0; j < p.n_meta; j++)
            lm += expf(__bfloat162float(p.meta[j]) - mm);
        mm *= WR_LOG2E;
    }
    const float scale = rsqrtf((float)D) * WR_LOG2E; // exp2 below
    const int r8 = lane >> 2, cq = lane & 3; // mma fragments: row (query head) r8 (rows 8-15 zero); pairs 2 cq
    const int sld = L.score_ld();
    lz_stage_slot s = {0, 0u};
    unsigned buf = 0;
    for (int it = blockIdx.x; it < n_items; it += gridDim.x, s.advance(stages), buf ^= 1u) {
        lz_mbar_wait(&full[s.st], s.parity);
        unsigned char *stage = sm + s.st * stage_bytes;
        float *scores = (float *)(fixed + buf * L.score_bytes());
        float *snew = (float *)(fixed + 2 * L.score_bytes() + buf * 32);
        const T *ks = (const T *)stage, *qs = (const T *)(stage + L.q_off());
        T *vs = (T *)(stage + L.v_off());
        const T *knew = (const T *)(stage + L.new_off()), *vnew = knew + D;
        const wr_meta meta = *(const wr_meta *)(stage + L.meta_off());
        const int pr = meta.ring_row, key_end = meta.key_end;
        // keys of the window in the ring: rows below w but pr (position p - w) once it is full, else
        // rows below pos (positions 0 .. p - 1; row pr = p and above never written): key_end
        // phase 1: the scores of the warp's tiles; the last warp also the new key's
        const bool new_key = warp == WR_WARPS - 1;
        if (warp < n_tiles || new_key) {
            uint32_t qa[D / 16][2]; // q as the A operand: rows r8 (columns +0, +8); rows 8-15 zero
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const int c0 = kk * 16 + 2 * cq;
                qa[kk][0] = r8 < G ? *(const uint32_t *)(qs + r8 * D + c0) : 0u;
                qa[kk][1] = r8 < G ? *(const uint32_t *)(qs + r8 * D + c0 + 8) : 0u;
            }
            if (new_key) { // q . k_new as column 0 of one more mma (lanes 0-3 hold it as the B operand)
                float sn[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
                    const uint32_t b0 = lane < 4 ? *(const uint32_t *)(knew + kk * 16 + 2 * cq) : 0u;
                    const uint32_t b1 = lane < 4 ? *(const uint32_t *)(knew + kk * 16 + 8 + 2 * cq) : 0u;
                    lz_mma_bf16(sn, a, b0, b1);
                }
                if (cq == 0 && r8 < G)
                    snew[r8] = sn[0] * scale;
            }
            // x4: keys 0-7 dims +0 / +8, keys 8-15 dims +0 / +8: the B operands of both key halves;
            // a lane's row is k0 + (lane >> 4) 8 + lane % 8, its chunk 2 kk + khalf
            const int khalf = (lane >> 3) & 1, kr = (lane >> 4) * 8 + (lane & 7);
            for (int tile = warp; tile < n_tiles; tile += WR_WARPS) {
                const int k0 = tile * WR_KT;
                float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}}; // keys 0-7, 8-15
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    uint32_t b[4];
                    const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
                    lz_ldsm_x4(b, lz_smem_u32(ks + wr_at(rows, k0 + kr, 2 * kk + khalf)));
                    lz_mma_bf16(sc[0], a, b[0], b[1]);
                    lz_mma_bf16(sc[1], a, b[2], b[3]);
                }
                if (r8 < G)
#pragma unroll
                    for (int h2 = 0; h2 < 2; h2++) {
                        const int key = k0 + h2 * 8 + 2 * cq;
                        const bool in0 = key < key_end && key != pr, in1 = key + 1 < key_end && key + 1 != pr;
                        *(float2 *)(scores + r8 * sld + key) =
                            make_float2(in0 ? sc[h2][0] * scale : -INFINITY, in1 ? sc[h2][1] * scale : -INFINITY);
                    }
            }
        }
        // this step's key and value into the rings' row pr (global; no item of this step reads it)
        if (tid < 2 * CH) {
            T *dst = (tid < CH ? p.ring_k : p.ring_v) + ((size_t)meta.slot * w + pr) * ring_row + (size_t)meta.g * D +
                     (tid % CH) * 8;
            *(float4 *)dst = *(const float4 *)(knew + tid * 8);
        }
        // value rows of no key (weight 0) to zeros, so that what they hold cannot reach the product
        // as NaN: row pr, and rows pr .. w - 1 before the ring is full. (The copy engine writes this
        // stage again later: the fence orders these stores before it.)
        const int nz = key_end == w ? 1 : w - meta.pos;
        if (tid < nz * CH) {
            for (int e = tid; e < nz * CH; e += WR_CONSUMERS)
                *(float4 *)(vs + wr_at(rows, pr + e / CH, e % CH)) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            lz_fence_proxy_async();
        }
        lz_bar_sync<1>(WR_CONSUMERS); // the scores are complete, the zeros written
        // phase 2: value dims 16 warp .. + 15 of every query head; lane: head r8, keys 16 kk + 2 cq + {0, 1, 8, 9}
        if (16 * warp < D) {
            const float *sr = scores + (r8 < G ? r8 : 0) * sld + 2 * cq;
            const float sn = snew[r8 < G ? r8 : 0];
            float m = sn;
#pragma unroll
            for (int kk = 0; kk < (NT ? NT : 1 << 20); kk++) {
                if (!NT && kk >= n_tiles)
                    break;
                const float2 a = *(const float2 *)(sr + 16 * kk), b = *(const float2 *)(sr + 16 * kk + 8);
                m = fmaxf(m, fmaxf(fmaxf(a.x, a.y), fmaxf(b.x, b.y)));
            }
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2)); // finite: the new key's score
            float o[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}}, l = 0.0f;
            // x4.trans: keys 0-7 / 8-15 of dims 16 warp + 0-7 and + 8-15: the B operands of both dim
            // tiles; a lane's row 16 kk + vr, its chunk 2 warp + lane / 16
            const int vr = ((lane >> 3) & 1) * 8 + (lane & 7);
            const T *vrow = vs + wr_at(rows, vr, 2 * warp + (lane >> 4));
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
                lz_ldsm_x4_trans(bv, lz_smem_u32(vrow + 16 * kk * 64)); // (16 rows on: the same swizzle)
                lz_mma_bf16(o[0], pa, bv[0], bv[1]);
                lz_mma_bf16(o[1], pa, bv[2], bv[3]);
            }
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            if (r8 < G) { // the new key's value, then onto the GLA output, the meta logits' mass in the denominator
                const float pn = lz_fast_exp2(sn - m);
                const float inv = p.alpha / (l + pn + lm * exp2f(mm - m));
                const T *old = (const T *)(stage + L.old_off()) + r8 * D;
                T *dst = p.out + ((size_t)meta.t * p.Hq + (size_t)meta.g * G + r8) * D;
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int x = 16 * warp + 8 * j + 2 * cq;
                    const float2 vn = __bfloat1622float2(*(const __nv_bfloat162 *)(vnew + x));
                    const float2 prev = __bfloat1622float2(*(const __nv_bfloat162 *)(old + x));
                    *(__nv_bfloat162 *)(dst + x) = __floats2bfloat162_rn(prev.x + (o[j][0] + pn * vn.x) * inv,
                                                                         prev.y + (o[j][1] + pn * vn.y) * inv);
                }
            }
        }
        __syncwarp();
        if (lane == 0)
            lz_mbar_arrive(&empty[s.st]); // (release: this warp's reads of the stage are done)
    }
}

// The driver's tensor-map encoder; NULL where unavailable or the kernels were built for an older target.
static PFN_cuTensorMapEncodeTiled_v12000 wr_encode;

// The rings [slots][w][Hkv][d] as a 4-d tensor (d innermost) of boxes [w][64] with the 128-byte
// swizzle. The slot extent is a bound no slot reaches (the map is recorded into graphs, replayed with
// other slots).
static bool wr_map(CUtensorMap *map, const void *ring, int d, int Hkv, int w) {
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)Hkv, (cuuint64_t)w, (cuuint64_t)1 << 24};
    const cuuint64_t strides[3] = {(cuuint64_t)d * 2, (cuuint64_t)Hkv * d * 2, (cuuint64_t)w * Hkv * d * 2};
    return lz_tensor_map_head_rows(wr_encode, map, ring, 4, dims, strides, w);
}

// Stages that fit the SM's shared memory (at most WR_MAX_STAGES).
static int wr_stages(const lz_cuda_ctx *c, int w, int d, int group) {
    const wr_layout L = {WR_KT * wr_tiles(w), d, group};
    int n = 0;
    while (n < WR_MAX_STAGES && L.smem(n + 1) <= c->max_smem)
        n++;
    return n;
}

template <typename T> bool window_decode_ring_fits(const lz_cuda_ctx *c, const wr_params<T> &p) {
    if constexpr (sizeof(T) != 2) {
        return false; // (bf16 mma)
    } else {
        const int group = p.Hq / p.Hkv;
        const uintptr_t align = (uintptr_t)p.out | (uintptr_t)p.q | (uintptr_t)p.k | (uintptr_t)p.v |
                                (uintptr_t)p.ring_k | (uintptr_t)p.ring_v;
        // (a group of 1, 2, 4 or 8 query heads: the kernel's G is the group itself)
        return wr_encode && c->window_ring_min > 0 && p.n >= c->window_ring_min &&
               (p.d == 64 || p.d == 128) && (group == 1 || group == 2 || group == 4 || group == 8) && p.w >= 1 &&
               p.w <= 256 && (align & 15) == 0 && wr_stages(c, p.w, p.d, group) >= 2;
    }
}

template <int G, int D, int NT> static lz_status wr_launch(lz_cuda_ctx *c, const wr_params<__nv_bfloat16> &p) {
    const int stages = wr_stages(c, p.w, D, G), items = p.n * p.Hkv;
    const wr_layout L = {WR_KT * wr_tiles(p.w), D, G};
    const int blocks = min(items, c->window_ring_blocks > 0 ? c->window_ring_blocks : c->n_sms);
    CUtensorMap tk, tv;
    if (!wr_map(&tk, p.ring_k, D, p.Hkv, p.w) || !wr_map(&tv, p.ring_v, D, p.Hkv, p.w))
        return lz_fail(LZ_ERR_INTERNAL, "window decode (ring): cuTensorMapEncodeTiled failed (w %d, d %d)", p.w, D);
    return lz_launch(c, "window decode (ring)", window_decode_ring_kernel<G, D, NT>, dim3((unsigned)blocks),
                     dim3(WR_THREADS), L.smem(stages), tk, tv, p, stages);
}

// the window's tiles at compile time for w of 64 and 128 (113 to 128 keys take 8 tiles, ...)
template <int G, int D> static lz_status wr_launch_tiles(lz_cuda_ctx *c, const wr_params<__nv_bfloat16> &p) {
    const int tiles = wr_tiles(p.w);
    if (tiles == 8)
        return wr_launch<G, D, 8>(c, p);
    if (tiles == 4)
        return wr_launch<G, D, 4>(c, p);
    return wr_launch<G, D, 0>(c, p);
}

template <int D> static lz_status wr_launch_group(lz_cuda_ctx *c, const wr_params<__nv_bfloat16> &p) {
    switch (p.Hq / p.Hkv) {
    case 1: return wr_launch_tiles<1, D>(c, p);
    case 2: return wr_launch_tiles<2, D>(c, p);
    case 4: return wr_launch_tiles<4, D>(c, p);
    default: return wr_launch_tiles<8, D>(c, p);
    }
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

// The kernels' shared memory limits; the tensor-map encoder (without it the kernel is not used).
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
        LZ_TRY(lz_tensor_map_encoder_for((const void *)window_decode_ring_kernel<4, 128, 8>, &wr_encode));
    }
    return LZ_OK;
}

#define LZ_WINDOW_DECODE_RING(T)                                                                                  \
    template bool window_decode_ring_fits<T>(const lz_cuda_ctx *, const wr_params<T> &);                         \
    template lz_status window_decode_ring<T>(lz_cuda_ctx *, const wr_params<T> &);                               \
    template lz_status window_decode_ring_init<T>(lz_cuda_ctx *);
LZ_INSTANTIATE(LZ_WINDOW_DECODE_RING)
