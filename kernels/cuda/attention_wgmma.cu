// attention_wgmma.cu - the prompt path of retained softmax layers on Hopper's warpgroup
// matrix instructions (wgmma, sm_90a; bf16 in, fp32 accumulation; head_dim 128, GQA groups
// of an even size). The same function and the same walk as attention_flash.cu's kernel,
// which stays the path elsewhere (LIZARD_WGMMA=0 selects it here too, for comparison):
// a block owns one chunk (up to 64 consecutive rows of one sequence) and two query heads of
// one GQA group, a warpgroup each, which share each K/V tile; keys are walked from the
// diagonal down in tiles of 64, double-buffered through cp.async.
//
// What wgmma changes: the tensor cores read Q, K and V from shared memory themselves (no
// ldmatrix through the registers), 64 rows a warpgroup an instruction. S = Q K^T takes Q and
// K there (K-major); O += P V takes P from the registers S became and V there (MN-major, its
// rows run along the keys). Every tile is stored in wgmma's 128-byte swizzle: two halves of
// 64 columns, rows of 128 bytes whose 16-byte units are XOR-ed with the row's low 3 bits.
// Q in shared memory (not registers) keeps a thread at <= 128 registers: 2 blocks an SM, 4
// warpgroups, so that one's softmax runs while another's products do (with Q in registers the
// kernel measured 52% slower at 128 registers, spilling, and 21% slower at one block an SM).
#include "cuda_kernels.cuh"     // lz_cuda_ctx, checks
#include "flash_fragments.cuh" // the masking, online softmax and store both flash kernels share
#include "ptx.cuh"             // lz_smem_u32, lz_bar_sync, lz_bar_arrive
#include "wgmma.cuh"           // lz_wgmma_*

typedef __nv_bfloat16 bf16;

namespace {

constexpr int WB = 64;           // query rows per block and head, keys per tile
constexpr int WD = 128;          // head_dim
constexpr int WTHREADS = 256;    // two warpgroups: a query head each
constexpr uint32_t HALF = 8192;  // bytes of 64 rows x 64 bf16 columns
constexpr uint32_t TILE = 2 * HALF;
constexpr size_t WSMEM = 6 * TILE + 1024; // Q[2], K[2], V[2], and room to align to 1024 bytes

// Byte offset of 16-byte unit u (0 .. 15) of row r in a [64][128] bf16 tile (see the header).
__device__ __forceinline__ uint32_t wswz(int r, int u) {
    return (uint32_t)((u >> 3) * HALF + r * 128 + (((u & 7) ^ (r & 7)) << 4));
}

// grid (Hq / 2, chunks), block 256. Chunks run last first (the heaviest blocks start first).
// The two warpgroups take turns at the tensor cores within a tile (S of head 0, S of head 1, PV of
// head 0, PV of head 1), so that each one's softmax runs while the other's products do; named
// barriers 1 (head 0's turn) and 2 (head 1's) order the issues (measured +1.3% at a 32K prompt
// against no order: the two blocks an SM already overlap much of it).
__global__ void __launch_bounds__(WTHREADS, 2)
    attention_wgmma_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, const int32_t *chunk_row0,
                           const int32_t *chunk_len, const int32_t *token_seq, const int32_t *slot,
                           const int32_t *token_pos, int n_chunks, int Hq, int Hkv, int capacity, int sw,
                           float scale_log2) {
    extern __shared__ unsigned char smem_raw[];
    const uint32_t sQ0 = (lz_smem_u32(smem_raw) + 1023) & ~1023u, sK0 = sQ0 + 2 * TILE, sV0 = sK0 + 2 * TILE;
    const int c = n_chunks - 1 - (int)blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const int hh = tid >> 7, warp = (tid >> 5) & 3; // head (warpgroup) in the block, warp in the warpgroup
    const int h0 = blockIdx.x * 2, h = h0 + hh;
    const flash_chunk<WB, WD> ch(c, h0 / (Hq / Hkv), kc, vc, chunk_row0, chunk_len, token_seq, slot, token_pos, Hkv,
                                 capacity, sw);
    const auto sw_tile = [](int r, int u) { return wswz(r, u); };
    flash_load_q<WTHREADS, 2>(ch, q, Hq, h0, tid, sQ0, TILE, sw_tile);
    flash_load_kv<WTHREADS>(ch, 0, tid, sK0, sV0, sw_tile);
    lz_cp_async_commit();

    const int gr = lane >> 2, qd = lane & 3;     // the quad (row) and the lane in it (column pair)
    const int rA = warp * 16 + gr, pA = ch.p0 + rA; // this lane's rows rA and rA + 8, rA's position
    const uint32_t sQ = sQ0 + hh * TILE;
    float o[WD / 8][4];
#pragma unroll
    for (int n = 0; n < WD / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f}; // running max (raw scores), this lane's sum

    for (int j = 0; j < ch.n_tiles; j++) {
        const int buf = j & 1;
        // the next tile streams in while this one is computed
        flash_next_tile<WTHREADS>(ch, j, tid, sK0, sV0, TILE, sw_tile);
        lz_fence_proxy_async(); // this thread's cp.async writes, before the tensor cores read them
        __syncthreads();
        const uint32_t sK = sK0 + buf * TILE, sV = sV0 + buf * TILE;

        // S = Q K^T over head_dim in 8 steps of 16: a step's 32 bytes sit in one 128-byte row of a half
        float s[WB / 8][4];
#pragma unroll
        for (int n = 0; n < WB / 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        if (hh == 1)
            lz_bar_sync<2>(WTHREADS); // head 1's S after head 0's
        lz_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WD / 16; kk++) {
            const uint32_t at = (kk >> 2) * HALF + (kk & 3) * 32;
            lz_wgmma_64x64_ss(&s[0][0], lz_wgmma_desc(sQ + at), lz_wgmma_desc(sK + at));
        }
        lz_wgmma_commit();
        if (hh == 0)
            lz_bar_arrive<2>(WTHREADS); // head 1's S may go
        if (hh == 1)
            lz_bar_arrive<1>(WTHREADS); // head 0's PV may go
        lz_wgmma_wait<0>();

        flash_mask<WB / 8>(s, ch.t0(j), ch.p0, ch.p_last, ch.k_first, sw, pA, qd);
        flash_online_softmax<WB / 8, WD / 8, true>(s, o, m_r, l_r, scale_log2);

        // O += P V: keys in 4 steps of 16 (2048 bytes of V's rows a step), output columns in two halves of 64
        uint32_t a[WB / 16][4];
#pragma unroll
        for (int kk = 0; kk < WB / 16; kk++)
            flash_pack_p<WB / 8>(s, kk, a[kk]);
        if (hh == 0)
            lz_bar_sync<1>(WTHREADS); // head 0's PV after head 1's S
        if (hh == 1)
            lz_bar_sync<2>(WTHREADS); // head 1's PV after head 0's
        lz_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WB / 16; kk++) {
            lz_wgmma_64x64_rs_bt(&o[0][0], a[kk], lz_wgmma_desc(sV + kk * 2048));
            lz_wgmma_64x64_rs_bt(&o[8][0], a[kk], lz_wgmma_desc(sV + HALF + kk * 2048));
        }
        lz_wgmma_commit();
        if (hh == 0)
            lz_bar_arrive<2>(WTHREADS); // head 1's PV may go
        lz_wgmma_wait<0>();
        __syncthreads(); // every warpgroup is done with this buffer before the next iteration refills it
    }

    flash_store_rows<WD>(out, o, l_r, ch.row0, ch.L, rA, Hq, h, qd);
}

} // namespace

lz_status lz_attention_wgmma_init(lz_cuda_ctx *c) {
    if (!c->wgmma || WSMEM > c->max_smem)
        return LZ_OK;
    LZ_CUDA_TRY(
        cudaFuncSetAttribute(attention_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WSMEM));
    return LZ_OK;
}

bool lz_attention_wgmma_fits(const lz_cuda_ctx *c, int d, int Hq, int Hkv, int n_chunks) {
    return c->wgmma && !c->tc_off && !c->flash_off && !c->flash_one_head && d == WD && (Hq / Hkv) % 2 == 0 &&
           WSMEM <= c->max_smem && n_chunks <= 65535;
}

lz_status lz_attention_wgmma(lz_cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                             const int32_t *chunk_row0, const int32_t *chunk_len, const int32_t *token_seq,
                             const int32_t *slot, const int32_t *token_pos, int n_chunks, int Hq, int Hkv,
                             int capacity, int sliding_window) {
    if (n_chunks == 0)
        return LZ_OK;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)WD); // softmax in exp2: log2(e) / sqrt(d)
    attention_wgmma_kernel<<<dim3(Hq / 2, n_chunks), WTHREADS, WSMEM, c->stream>>>(
        out, q, kc, vc, chunk_row0, chunk_len, token_seq, slot, token_pos, n_chunks, Hq, Hkv, capacity, sliding_window,
        scale_log2);
    LZ_LAUNCH_CHECK("attention (wgmma)");
    return LZ_OK;
}
