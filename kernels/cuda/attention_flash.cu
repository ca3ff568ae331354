// attention_flash.cu - the prompt path of retained softmax layers, FlashAttention-2
// style on warp-level tensor-core instructions (mma.sync m16n8k16, bf16 in, fp32
// accumulation). A block owns one chunk (up to 64 consecutive rows of one
// sequence) and one query head, or two heads of one GQA group that then share
// each K/V tile; 4 warps per head, each owning 16 query rows. Q
// fragments, the scores S and the output O stay in registers; the online softmax
// runs on the S accumulators (row max and sum over the 4 lanes of a quad), and P
// goes from the S accumulators straight into the A operand of O += P V. K and V
// tiles of 64 keys are double-buffered in shared memory through cp.async (rows
// XOR-swizzled in 16-byte units, so ldmatrix reads without bank conflicts).
// Keys are walked from the diagonal down: the first tile ends at the chunk's last
// position, so only it, and the tiles that the sliding window or the first key
// cut, need a mask. The same function as attention_tc_kernel (attention_tc.cu),
// which stays as the fallback (head_dim other than 64 or 128).
#include "cuda_kernels.cuh" // lz_cuda_ctx, checks
#include "flash_fragments.cuh" // the masking, online softmax and store both flash kernels share
#include "ptx.cuh"          // lz_cp_async16, lz_ldsm_x4, lz_mma_bf16

typedef __nv_bfloat16 bf16;

namespace {

constexpr int FB = 64;                 // query rows per block and head, keys per tile
constexpr int WARPS_PER_HEAD = FB / 16; // a warp per 16 query rows

// HPB query heads of one GQA group per block share each K/V tile (half the K/V
// traffic from L2 when HPB = 2): warps 4 hh .. 4 hh + 3 take head hh.
template <int HPB> __host__ __device__ constexpr int flash_threads() { return 32 * WARPS_PER_HEAD * HPB; }
template <int D, int HPB> constexpr size_t flash_smem() { // Q[HPB], K[2], V[2]
    return sizeof(bf16) * (HPB + 4) * FB * (size_t)D;
}

// Byte offset of 16-byte unit u of row r in a [FB][D] bf16 tile. The unit index is
// XOR-ed with the row's low 3 bits: the 8 rows an ldmatrix reads at one column
// fall into 8 different 16-byte bank groups (rows are 128 or 256 bytes).
template <int D> __device__ __forceinline__ uint32_t swz(int r, int u) {
    return (uint32_t)(r * D * 2 + ((u ^ (r & 7)) << 4));
}

// ldmatrix x4 into four named registers (this file's fragments are scalars)
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    uint32_t r[4];
    lz_ldsm_x4(r, addr);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    uint32_t r[4];
    lz_ldsm_x4_trans(r, addr);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

// grid (Hq / HPB, chunks), block flash_threads<HPB>(). Chunks run last first: the latest
// rows see the most keys, so the heaviest blocks start first and the short ones fill the tail.
template <int D, int HPB>
__global__ void __launch_bounds__(flash_threads<HPB>(), 2 / HPB)
    attention_flash_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, const int32_t *chunk_row0,
                           const int32_t *chunk_len, const int32_t *token_seq, const int32_t *slot,
                           const int32_t *token_pos, int n_chunks, int Hq, int Hkv, int capacity, int sw,
                           float scale_log2) {
    constexpr uint32_t TILE = sizeof(bf16) * FB * D; // bytes of one [FB][D] tile
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int NT = flash_threads<HPB>();
    const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(smem), sK0 = sQ + HPB * TILE, sV0 = sK0 + 2 * TILE;
    const int c = n_chunks - 1 - (int)blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const int hh = (tid >> 5) / WARPS_PER_HEAD, warp = (tid >> 5) % WARPS_PER_HEAD; // head in block, warp in head
    const int h0 = blockIdx.x * HPB, h = h0 + hh;
    const flash_chunk<FB, D> ch(c, h0 / (Hq / Hkv), kc, vc, chunk_row0, chunk_len, token_seq, slot, token_pos, Hkv,
                                capacity, sw);
    const auto sw_tile = [](int r, int u) { return swz<D>(r, u); };
    flash_load_q<NT, HPB>(ch, q, Hq, h0, tid, sQ, TILE, sw_tile);
    flash_load_kv<NT>(ch, 0, tid, sK0, sV0, sw_tile);
    lz_cp_async_commit();

    const int gr = lane >> 2, qd = lane & 3;            // the quad (row) and the lane in it (column pair)
    const int rA = warp * 16 + gr, pA = ch.p0 + rA; // this lane's rows rA and rA + 8, rA's position
    uint32_t qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f}; // running max (raw scores), this lane's sum

    for (int j = 0; j < ch.n_tiles; j++) {
        const int buf = j & 1;
        // the next tile streams in while this one is computed
        flash_next_tile<NT>(ch, j, tid, sK0, sV0, TILE, sw_tile);
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                ldsm_x4(sQ + hh * TILE + swz<D>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)),
                        qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
        }
        const uint32_t sK = sK0 + buf * TILE, sV = sV0 + buf * TILE;

        // S = Q K^T: s[n] holds keys 8n .. 8n + 7 of the tile
        float s[FB / 8][4];
#pragma unroll
        for (int n = 0; n < FB / 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
            for (int np = 0; np < FB / 16; np++) { // keys 16 np .. 16 np + 15: two n-tiles
                uint32_t b0, b1, b2, b3;
                ldsm_x4(sK + swz<D>(16 * np + (lane & 7) + (lane >> 4) * 8, 2 * kk + ((lane >> 3) & 1)), b0, b1, b2,
                        b3);
                lz_mma_bf16(s[2 * np], qf[kk], b0, b1);
                lz_mma_bf16(s[2 * np + 1], qf[kk], b2, b3);
            }
        }

        flash_mask<FB / 8>(s, ch.t0(j), ch.p0, ch.p_last, ch.k_first, sw, pA, qd);
        flash_online_softmax<FB / 8, D / 8>(s, o, m_r, l_r, scale_log2);

        // O += P V: P's A fragment for keys 16 kk .. 16 kk + 15 is n-tiles 2 kk and 2 kk + 1 of S
#pragma unroll
        for (int kk = 0; kk < FB / 16; kk++) {
            uint32_t a[4];
            flash_pack_p<FB / 8>(s, kk, a);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) { // output columns 16 dp .. 16 dp + 15: two n-tiles
                uint32_t b0, b1, b2, b3;
                ldsm_x4_trans(sV + swz<D>(16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * dp + (lane >> 4)), b0, b1,
                              b2, b3);
                lz_mma_bf16(o[2 * dp], a, b0, b1);
                lz_mma_bf16(o[2 * dp + 1], a, b2, b3);
            }
        }
        __syncthreads(); // every warp is done with this buffer before the next iteration refills it
    }

    flash_store_rows<D>(out, o, l_r, ch.row0, ch.L, rA, Hq, h, qd);
}

} // namespace

template <int D, int HPB> static lz_status flash_attr(lz_cuda_ctx *c) {
    if (flash_smem<D, HPB>() <= c->max_smem)
        LZ_CUDA_TRY(cudaFuncSetAttribute(attention_flash_kernel<D, HPB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)flash_smem<D, HPB>()));
    return LZ_OK;
}

lz_status lz_attention_flash_init(lz_cuda_ctx *c) {
    LZ_TRY((flash_attr<64, 1>(c)));
    LZ_TRY((flash_attr<64, 2>(c)));
    LZ_TRY((flash_attr<128, 1>(c)));
    LZ_TRY((flash_attr<128, 2>(c)));
    return LZ_OK;
}

// Two heads per block where the GQA group pairs them, else one.
static int flash_heads(const lz_cuda_ctx *c, int Hq, int Hkv) {
    return (Hq / Hkv) % 2 == 0 ? 2 : 1;
}

bool lz_attention_flash_fits(const lz_cuda_ctx *c, int d, int Hq, int Hkv, int n_chunks) {
    const bool two = flash_heads(c, Hq, Hkv) == 2;
    const size_t smem = d == 64 ? (two ? flash_smem<64, 2>() : flash_smem<64, 1>())
                                : (two ? flash_smem<128, 2>() : flash_smem<128, 1>());
    return (d == 64 || d == 128) && smem <= c->max_smem && n_chunks <= 65535;
}

template <int D, int HPB>
static void flash_launch(lz_cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                         const int32_t *chunk_row0, const int32_t *chunk_len, const int32_t *token_seq,
                         const int32_t *slot, const int32_t *token_pos, int n_chunks, int Hq, int Hkv, int capacity,
                         int sliding_window) {
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D); // softmax in exp2: log2(e) / sqrt(d)
    attention_flash_kernel<D, HPB><<<dim3(Hq / HPB, n_chunks), flash_threads<HPB>(), flash_smem<D, HPB>(), c->stream>>>(
        out, q, kc, vc, chunk_row0, chunk_len, token_seq, slot, token_pos, n_chunks, Hq, Hkv, capacity, sliding_window,
        scale_log2);
}

lz_status lz_attention_flash(lz_cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                             const int32_t *chunk_row0, const int32_t *chunk_len, const int32_t *token_seq,
                             const int32_t *slot, const int32_t *token_pos, int n_chunks, int Hq, int Hkv, int d,
                             int capacity, int sliding_window) {
    if (n_chunks == 0)
        return LZ_OK;
    const bool two = flash_heads(c, Hq, Hkv) == 2;
    auto launch = d == 64 ? (two ? flash_launch<64, 2> : flash_launch<64, 1>)
                          : (two ? flash_launch<128, 2> : flash_launch<128, 1>);
    launch(c, out, q, kc, vc, chunk_row0, chunk_len, token_seq, slot, token_pos, n_chunks, Hq, Hkv, capacity,
           sliding_window);
    LZ_LAUNCH_CHECK("attention (flash)");
    return LZ_OK;
}
