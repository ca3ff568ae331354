// attention_wgmma.cu - the prompt path of retained softmax layers on Hopper, warp-specialised
// (sm_90a; bf16 in, fp32 accumulation; head_dim 128, GQA groups of an even size): the function and
// the walk of attention_flash.cu (a block owns one chunk of up to 64 consecutive rows of one
// sequence and two query heads of a GQA group, keys walked from the diagonal down), with the
// work split the way FlashAttention-3 splits it:
//
// - a producer warpgroup, one thread of which asks the copy engine for Q and for each K/V tile
//   (128 keys, 64 KB) through tensor maps, into a ring of stages guarded by mbarriers; it gives
//   most of its registers to
// - two consumer warpgroups, a query head each, 64 rows: S = Q K^T as m64n128k16 products from
//   shared memory, the online softmax in registers, O += P V with P from registers and V MN-major.
//   Each warpgroup issues tile j's S together with tile j-1's PV, so that its softmax of tile j runs
//   while its own PV does, and the two warpgroups take turns at issuing (named barriers 1 and 2),
//   so that one's softmax also runs under the other's products.
//
// Keys before 0 come as zeros from the copy engine; keys before a sliding window's first key are
// read from the cache, where nothing guarantees a number, so that tile's V rows are zeroed before
// P (0 there) meets them.
#include "cuda_kernels.cuh"     // lz_cuda_ctx, checks
#include "flash_fragments.cuh" // the masking, online softmax and store the flash kernels share
#include "ptx.cuh"             // mbarriers, tensor copies, named barriers
#include "tensor_map.cuh"      // lz_tensor_map_encoder_for, lz_tensor_map_head_rows
#include "wgmma.cuh"           // lz_wgmma_*, lz_setmaxnreg_*

typedef __nv_bfloat16 bf16;

namespace {

constexpr int QB = 64;                 // query rows per block and head
constexpr int KB = 128;                // keys per tile
constexpr int D = 128;                 // head_dim
constexpr int THREADS = 384;           // producer warpgroup, two consumer warpgroups
constexpr int CONSUMERS = 256;
constexpr uint32_t Q_HALF = QB * 128;  // bytes of 64 rows x 64 bf16 columns
constexpr uint32_t Q_TILE = 2 * Q_HALF;
constexpr uint32_t KV_HALF = KB * 128; // bytes of 128 keys x 64 columns
constexpr uint32_t KV_TILE = 2 * KV_HALF;
constexpr int STAGES = 3;              // K and V tiles in flight (with 2 a 32K prompt's attention took 33% longer)
constexpr size_t SMEM = 2 * Q_TILE + 2 * STAGES * KV_TILE + 1024; // Q[2], K[3], V[3], room to align to 1024

// Byte offset of 16-byte unit u (0 .. 15) of row r in a tile of `half` bytes per 64 columns, in the
// copy engine's (and wgmma's) 128-byte swizzle.
__device__ __forceinline__ uint32_t swz(uint32_t half, int r, int u) {
    return (uint32_t)((u >> 3) * half + r * 128 + (((u & 7) ^ (r & 7)) << 4));
}

// Zeroes V rows 0 .. rows - 1 of a tile (each row: 128 bytes in each half) by the consumers, then
// orders the stores before the tensor cores' reads.
__device__ __forceinline__ void zero_v_rows(unsigned char *v, int rows, int ctid) {
    for (int e = ctid; e < rows * 16; e += CONSUMERS) {
        const int r = e >> 4, u = e & 15;
        *(uint4 *)(v + swz(KV_HALF, r, u)) = make_uint4(0, 0, 0, 0);
    }
    lz_fence_proxy_async();
    lz_bar_sync<3>(CONSUMERS);
}

// grid (Hq / 2, chunks), block 384. Chunks run last first (the heaviest blocks start first).
__global__ void __launch_bounds__(THREADS, 1)
    attention_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                           const __grid_constant__ CUtensorMap tv, bf16 *out, const int32_t *chunk_row0,
                           const int32_t *chunk_len, const int32_t *token_seq, const int32_t *slot,
                           const int32_t *token_pos, int n_chunks, int Hq, int Hkv, int sw, float scale_log2) {
    extern __shared__ unsigned char smem_raw[];
    // K and V have rings of their own: a tile's K is free once its S is done, its V only after the PV
    // of the next round
    __shared__ uint64_t k_full[STAGES], k_empty[STAGES], v_full[STAGES], v_empty[STAGES], q_full;
    unsigned char *base = smem_raw + (((lz_smem_u32(smem_raw) + 1023) & ~1023u) - lz_smem_u32(smem_raw));
    unsigned char *sQ0 = base, *sK = base + 2 * Q_TILE, *sV = sK + STAGES * KV_TILE; // stage s: + s KV_TILE

    const int c = n_chunks - 1 - (int)blockIdx.y, tid = threadIdx.x;
    const int h0 = blockIdx.x * 2, kv_head = h0 / (Hq / Hkv);
    const int row0 = chunk_row0[c], L = chunk_len[c];
    const int p0 = token_pos[row0], p_last = token_pos[row0 + L - 1];
    const int k_first = sw > 0 && p0 - sw + 1 > 0 ? p0 - sw + 1 : 0;
    const int n_tiles = (p_last - k_first) / KB + 1;
    const auto t0 = [&](int j) { return p_last - (KB - 1) - KB * j; };

    if (tid == 0) {
        lz_mbar_init(&q_full, 1); // (before the rings: their set-up's fence covers it)
        lz_stage_ring_init(k_full, k_empty, STAGES, CONSUMERS / 32); // (empty: each consumer warp gives it back)
        lz_stage_ring_init(v_full, v_empty, STAGES, CONSUMERS / 32);
    }
    __syncthreads();

    if (tid < 128) { // the producer
        lz_setmaxnreg_dec<40>();
        if (tid == 0) {
            const int seq_slot = slot[token_seq[row0]];
            lz_prefetch_tensor_map(&tk), lz_prefetch_tensor_map(&tv);
            lz_mbar_arrive_expect_tx(&q_full, 2 * Q_TILE);
            for (int hh = 0; hh < 2; hh++)
                for (int half = 0; half < 2; half++)
                    lz_tma_load_3d(sQ0 + hh * Q_TILE + half * Q_HALF, &tq, half * 64, h0 + hh, row0, &q_full);
            // K or V of tile j, both column halves
            const auto load = [&](const CUtensorMap *map, unsigned char *dst, uint64_t *bar, int j) {
                lz_mbar_arrive_expect_tx(bar, KV_TILE);
                for (int half = 0; half < 2; half++)
                    lz_tma_load_4d(dst + half * KV_HALF, map, half * 64, kv_head, t0(j), seq_slot, bar);
            };
            lz_stage_slot s = {0, 0};
            for (int j = 0; j < n_tiles; j++, s.advance(STAGES)) {
                if (j >= STAGES)
                    lz_mbar_wait(&k_empty[s.st], s.parity ^ 1u); // the consumers gave the stage back
                load(&tk, sK + s.st * KV_TILE, &k_full[s.st], j);
                if (j >= STAGES)
                    lz_mbar_wait(&v_empty[s.st], s.parity ^ 1u);
                load(&tv, sV + s.st * KV_TILE, &v_full[s.st], j);
            }
        }
    } else { // the consumers: warpgroup hh takes query head h0 + hh
        lz_setmaxnreg_inc<232>();
        const int ctid = tid - 128, hh = ctid >> 7, warp = (ctid >> 5) & 3, lane = tid & 31;
        const int gr = lane >> 2, qd = lane & 3;      // the quad (row) and the lane in it (column pair)
        const int rA = warp * 16 + gr, pA = p0 + rA;  // this lane's rows rA and rA + 8, rA's position
        const uint32_t sQ = lz_smem_u32(sQ0 + hh * Q_TILE), sK32 = lz_smem_u32(sK), sV32 = lz_smem_u32(sV);
        float o[D / 8][4]; // O, in wgmma's m64n128 accumulator layout
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
        float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f}; // running max (raw scores), this lane's sum
        float sc[KB / 8][4];     // this tile's S, then its P in fp32
        uint32_t p[KB / 16][4];  // the previous tile's P, bf16: the A operand of its PV
        const int my_turn = 1 + hh, their_turn = 2 - hh; // named barriers: head 0 issues on 1, head 1 on 2
        if (hh == 1)
            lz_bar_arrive<1>(CONSUMERS); // head 0 issues first

        // A tile's V before its PV: landed, and where the window cut the tile, its rows before the
        // first key zeroed (both warpgroups, in the same round).
        const auto v_ready = [&](int j, const lz_stage_slot &s) {
            lz_mbar_wait(&v_full[s.st], s.parity);
            if (t0(j) < k_first && k_first > 0)
                zero_v_rows(sV + s.st * KV_TILE, min(KB, k_first - t0(j)), ctid);
        };
        // S = Q K^T over head_dim in 8 steps of 16 (32 bytes of one 128-byte row of a half)
        const auto issue_s = [&](const lz_stage_slot &s) {
            const uint32_t k = sK32 + s.st * KV_TILE;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint32_t qa = (kk >> 2) * Q_HALF + (kk & 3) * 32, ka = (kk >> 2) * KV_HALF + (kk & 3) * 32;
                lz_wgmma_64x128_ss(&sc[0][0], lz_wgmma_desc(sQ + qa), lz_wgmma_desc(k + ka), kk > 0);
            }
            lz_wgmma_commit();
        };
        // O += P V: keys in 8 steps of 16 (2048 bytes of V's rows), V's two column halves KV_HALF apart
        const auto issue_pv = [&](const lz_stage_slot &s) {
            const uint32_t v = sV32 + s.st * KV_TILE;
#pragma unroll
            for (int kk = 0; kk < KB / 16; kk++)
                lz_wgmma_64x128_rs_bt(&o[0][0], p[kk], lz_wgmma_desc_lbo(v + kk * 2048, KV_HALF));
            lz_wgmma_commit();
        };
        // S's softmax; returns whether O must be rescaled by alpha once its running PV is done
        const auto softmax = [&](int j, float (&alpha)[2]) {
            flash_mask<KB / 8>(sc, t0(j), p0, p_last, k_first, sw, pA, qd);
            return flash_softmax_scores<KB / 8, true>(sc, m_r, l_r, scale_log2, alpha);
        };
        const auto pack_p = [&] {
#pragma unroll
            for (int kk = 0; kk < KB / 16; kk++)
                flash_pack_p<KB / 8>(sc, kk, p[kk]);
        };
        const auto release = [&](uint64_t *empty) { // a stage given back: this warp's products read it
            __syncwarp();
            if (lane == 0)
                lz_mbar_arrive(empty);
        };

        lz_mbar_wait(&q_full, 0);
        lz_stage_slot s = {0, 0}, prev;
        float alpha[2];
        lz_mbar_wait(&k_full[0], 0); // the diagonal tile (j = 0): its S alone
        lz_bar_sync_id(my_turn, CONSUMERS);
        lz_wgmma_fence();
        issue_s(s);
        lz_bar_arrive_id(their_turn, CONSUMERS);
        lz_wgmma_wait<0>();
        lz_wgmma_fence_regs(sc);
        release(&k_empty[s.st]);
        softmax(0, alpha); // (O is still zero)
        pack_p();
        prev = s;
        s.advance(STAGES);
        for (int j = 1; j < n_tiles; j++) { // tile j's S beside tile j - 1's PV
            lz_mbar_wait(&k_full[s.st], s.parity);
            v_ready(j - 1, prev);
            lz_bar_sync_id(my_turn, CONSUMERS);
            lz_wgmma_fence();
            issue_s(s);
            issue_pv(prev);
            lz_bar_arrive_id(their_turn, CONSUMERS);
            lz_wgmma_wait<1>(); // S landed; the PV may still run
            lz_wgmma_fence_regs(sc);
            release(&k_empty[s.st]);
            const bool rescale = softmax(j, alpha);
            lz_wgmma_wait<0>();
            lz_wgmma_fence_regs(o);
            release(&v_empty[prev.st]);
            if (rescale)
                flash_rescale_o(o, alpha);
            pack_p();
            prev = s;
            s.advance(STAGES);
        }
        v_ready(n_tiles - 1, prev); // the last tile's PV
        lz_bar_sync_id(my_turn, CONSUMERS);
        lz_wgmma_fence();
        issue_pv(prev);
        lz_bar_arrive_id(their_turn, CONSUMERS);
        lz_wgmma_wait<0>();
        lz_wgmma_fence_regs(o);
        flash_store_rows<D>(out, o, l_r, row0, L, rA, Hq, h0 + hh, qd);
    }
}

// The driver's tensor-map encoder; NULL where unavailable or the kernel was built for an older target.
PFN_cuTensorMapEncodeTiled_v12000 tma_encode;

} // namespace

lz_status lz_attention_wgmma_init(lz_cuda_ctx *c) {
    if (!c->wgmma || SMEM > c->max_smem)
        return LZ_OK;
    LZ_CUDA_TRY(cudaFuncSetAttribute(attention_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    LZ_TRY(lz_tensor_map_encoder_for((const void *)attention_wgmma_kernel, &tma_encode));
    return LZ_OK;
}

bool lz_attention_wgmma_fits(const lz_cuda_ctx *c, int d, int Hq, int Hkv, int n_chunks, const void *q,
                             const void *kc, const void *vc) {
    const uintptr_t align = (uintptr_t)q | (uintptr_t)kc | (uintptr_t)vc; // (the copy engine's maps: 16 bytes)
    return tma_encode && c->wgmma && d == D &&
           (Hq / Hkv) % 2 == 0 && SMEM <= c->max_smem && n_chunks <= 65535 && (align & 15) == 0;
}

lz_status lz_attention_wgmma(lz_cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                             const int32_t *chunk_row0, const int32_t *chunk_len, const int32_t *token_seq,
                             const int32_t *slot, const int32_t *token_pos, int n_tokens, int n_chunks, int Hq,
                             int Hkv, int capacity, int sliding_window) {
    if (n_chunks == 0)
        return LZ_OK;
    // q [tokens][Hq][d]; the caches [slots][capacity][Hkv][d], with a slot extent no slot reaches
    const cuuint64_t qdims[3] = {D, (cuuint64_t)Hq, (cuuint64_t)n_tokens};
    const cuuint64_t qstrides[2] = {D * 2, (cuuint64_t)Hq * D * 2};
    const cuuint64_t kdims[4] = {D, (cuuint64_t)Hkv, (cuuint64_t)capacity, (cuuint64_t)1 << 20};
    const cuuint64_t kstrides[3] = {D * 2, (cuuint64_t)Hkv * D * 2, (cuuint64_t)capacity * Hkv * D * 2};
    CUtensorMap tq, tk, tv;
    if (!lz_tensor_map_head_rows(tma_encode, &tq, q, 3, qdims, qstrides, QB) ||
        !lz_tensor_map_head_rows(tma_encode, &tk, kc, 4, kdims, kstrides, KB) ||
        !lz_tensor_map_head_rows(tma_encode, &tv, vc, 4, kdims, kstrides, KB))
        return lz_fail(LZ_ERR_INTERNAL, "prompt attention (wgmma): cuTensorMapEncodeTiled failed");
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D); // softmax in exp2: log2(e) / sqrt(d)
    attention_wgmma_kernel<<<dim3(Hq / 2, n_chunks), THREADS, SMEM, c->stream>>>(
        tq, tk, tv, out, chunk_row0, chunk_len, token_seq, slot, token_pos, n_chunks, Hq, Hkv, sliding_window,
        scale_log2);
    LZ_LAUNCH_CHECK("attention (wgmma)");
    return LZ_OK;
}
