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
// which stays as the fallback (LIZARD_FLASH=0, head_dim other than 64 or 128).
#include "cuda_kernels.cuh" // lz_cuda_ctx, checks
#include "ptx.cuh"          // lz_cp_async16, lz_ldsm_x4, lz_mma_bf16, lz_fast_exp2

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
    constexpr int UPR = D / 8;                        // 16-byte units per row
    constexpr uint32_t TILE = sizeof(bf16) * FB * D; // bytes of one [FB][D] tile
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int NT = flash_threads<HPB>();
    const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(smem), sK0 = sQ + HPB * TILE, sV0 = sK0 + 2 * TILE;
    const int c = n_chunks - 1 - (int)blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const int hh = (tid >> 5) / WARPS_PER_HEAD, warp = (tid >> 5) % WARPS_PER_HEAD; // head in block, warp in head
    const int h0 = blockIdx.x * HPB, h = h0 + hh;
    const int row0 = chunk_row0[c], L = chunk_len[c];
    const int p0 = token_pos[row0], p_last = token_pos[row0 + L - 1];
    const int k_first = sw > 0 && p0 - sw + 1 > 0 ? p0 - sw + 1 : 0;
    const int n_tiles = (p_last - k_first) / FB + 1; // tile j: keys p_last - 64 j - 63 .. p_last - 64 j
    const size_t kv_row = (size_t)Hkv * D;
    const size_t kv_base = (size_t)slot[token_seq[row0]] * capacity * kv_row + (size_t)(h0 / (Hq / Hkv)) * D;
    const bf16 *kb = kc + kv_base, *vb = vc + kv_base;

    // K, V of tile j into buffer buf; keys before k_first (or before 0) become zeros
    auto load_kv = [&](int j, int buf) {
        const int t0 = p_last - (FB - 1) - FB * j;
#pragma unroll
        for (int i = 0; i < FB * UPR / NT; i++) {
            const int e = tid + i * NT, r = e / UPR, u = e % UPR, t = t0 + r;
            const bool ok = t >= k_first;
            const size_t off = ok ? (size_t)t * kv_row + u * 8 : 0;
            const uint32_t dst = buf * TILE + swz<D>(r, u);
            lz_cp_async16(sK0 + dst, kb + off, ok);
            lz_cp_async16(sV0 + dst, vb + off, ok);
        }
    };
#pragma unroll
    for (int i = 0; i < HPB * FB * UPR / NT; i++) { // Q rows past the chunk become zeros
        const int e = tid + i * NT, qh = e / (FB * UPR), r = e / UPR % FB, u = e % UPR;
        const bool ok = r < L;
        lz_cp_async16(sQ + qh * TILE + swz<D>(r, u), q + (ok ? ((size_t)(row0 + r) * Hq + h0 + qh) * D + u * 8 : 0), ok);
    }
    load_kv(0, 0);
    lz_cp_async_commit();

    const int gr = lane >> 2, qd = lane & 3;            // the quad (row) and the lane in it (column pair)
    const int rA = warp * 16 + gr, pA = p0 + rA, pB = pA + 8; // this lane's rows rA, rA + 8 and their positions
    uint32_t qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f}; // running max (log2 units), this lane's sum

    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1;
        if (j + 1 < n_tiles) { // the next tile streams in while this one is computed
            load_kv(j + 1, buf ^ 1);
            lz_cp_async_commit();
            lz_cp_async_wait<1>();
        } else {
            lz_cp_async_wait<0>();
        }
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

        // scale into log2 units; mask where some key of the tile is past a row, before k_first or out of the window
        const int t0 = p_last - (FB - 1) - FB * j;
        const bool masked = t0 + FB - 1 > p0 || t0 < k_first || (sw > 0 && t0 <= p_last - sw);
        if (masked) {
#pragma unroll
            for (int n = 0; n < FB / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int t = t0 + 8 * n + 2 * qd + (e & 1), p = e < 2 ? pA : pB;
                    const bool visible = t >= k_first && t <= p && (sw <= 0 || t > p - sw);
                    s[n][e] = visible ? s[n][e] * scale_log2 : -INFINITY;
                }
        } else {
#pragma unroll
            for (int n = 0; n < FB / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[n][e] *= scale_log2;
        }

        // online softmax: the row max over the quad, rescale the running sum and O
        float mx[2] = {m_r[0], m_r[1]};
#pragma unroll
        for (int n = 0; n < FB / 8; n++) {
            mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
        }
        float base[2], alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            base[r] = mx[r] == -INFINITY ? 0.0f : mx[r]; // a row with no visible key yet: every p is 0
            alpha[r] = lz_fast_exp2(m_r[r] - base[r]);
            m_r[r] = mx[r];
        }
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < FB / 8; n++) {
            s[n][0] = lz_fast_exp2(s[n][0] - base[0]);
            s[n][1] = lz_fast_exp2(s[n][1] - base[0]);
            s[n][2] = lz_fast_exp2(s[n][2] - base[1]);
            s[n][3] = lz_fast_exp2(s[n][3] - base[1]);
            sum[0] += s[n][0] + s[n][1];
            sum[1] += s[n][2] + s[n][3];
        }
        l_r[0] = l_r[0] * alpha[0] + sum[0];
        l_r[1] = l_r[1] * alpha[1] + sum[1];
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }

        // O += P V: P's A fragment for keys 16 kk .. 16 kk + 15 is n-tiles 2 kk and 2 kk + 1 of S
#pragma unroll
        for (int kk = 0; kk < FB / 16; kk++) {
            const uint32_t a[4] = {lz_pack_bf16(s[2 * kk][0], s[2 * kk][1]), lz_pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                   lz_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   lz_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
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

    // O / l for the rows of the chunk (every one of them saw its own key, so l > 0)
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
        inv[r] = 1.0f / l_r[r];
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = rA + 8 * r;
        if (i >= L)
            continue;
        bf16 *orow = out + ((size_t)(row0 + i) * Hq + h) * D + 2 * qd;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *(__nv_bfloat162 *)(orow + 8 * n) = __floats2bfloat162_rn(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
    }
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

// Two heads per block where the GQA group pairs them (LIZARD_FLASH=1: one, for comparison).
static int flash_heads(const lz_cuda_ctx *c, int Hq, int Hkv) {
    return (Hq / Hkv) % 2 == 0 && !c->flash_one_head ? 2 : 1;
}

bool lz_attention_flash_fits(const lz_cuda_ctx *c, int d, int Hq, int Hkv, int n_chunks) {
    const bool two = flash_heads(c, Hq, Hkv) == 2;
    const size_t smem = d == 64 ? (two ? flash_smem<64, 2>() : flash_smem<64, 1>())
                                : (two ? flash_smem<128, 2>() : flash_smem<128, 1>());
    return !c->tc_off && !c->flash_off && (d == 64 || d == 128) && smem <= c->max_smem && n_chunks <= 65535;
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
