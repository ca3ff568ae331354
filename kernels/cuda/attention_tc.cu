// attention_tc.cu - the prompt path of retained softmax layers on tensor cores
// (bf16 in, fp32 accumulation), flash-attention style: a block owns up to 64
// query rows of one sequence and one query head and walks the keys in tiles of
// 64; S = Q K^T on tensor cores, the online softmax in fp32 (one warp per row),
// O = c * O + P V on tensor cores with O kept in fp32 shared memory.
// The same function as attention_tiled_kernel (softmax_attention.cu).
#include <mma.h> // nvcuda::wmma

#include "wmma_tiles.cuh" // lz_wmma_abt_64x64

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

enum { AT = 64 }; // query rows and keys per tile

size_t lz_attention_tc_smem(int d) {
    return sizeof(bf16) * (3 * (size_t)AT * d + AT * AT) + sizeof(float) * (AT * AT + (size_t)AT * d + 3 * AT);
}

// grid (chunks, Hq), block 256
__global__ void attention_tc_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                                    const int32_t *chunk_row0, const int32_t *chunk_len, const int32_t *token_seq,
                                    const int32_t *slot, const int32_t *token_pos, int Hq, int Hkv, int d,
                                    int capacity, int sliding_window) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    bf16 *Qs = (bf16 *)smem_raw, *Ks = Qs + AT * d, *Vs = Ks + AT * d, *Pb = Vs + AT * d;
    float *S = (float *)(Pb + AT * AT), *O = S + AT * AT, *m = O + AT * d, *l = m + AT, *cs = l + AT;
    const int c = blockIdx.x, h = blockIdx.y, g = h / (Hq / Hkv), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n_warps = blockDim.x >> 5, row0 = chunk_row0[c], L = chunk_len[c];
    const int p0 = token_pos[row0], p_last = token_pos[row0 + L - 1];
    const size_t row = (size_t)Hkv * d, base = (size_t)slot[token_seq[row0]] * capacity * row + (size_t)g * d;
    const float scale = rsqrtf((float)d);
    lz_load_tile_rows(Qs, q + ((size_t)row0 * Hq + h) * d, (size_t)Hq * d, d, AT, L);
    for (int e = threadIdx.x; e < AT * d; e += blockDim.x)
        O[e] = 0.0f;
    for (int i = threadIdx.x; i < AT; i += blockDim.x) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const int n_tiles = 4 * (d / 16);
    const int k_first = sliding_window > 0 && p0 - sliding_window + 1 > 0 ? p0 - sliding_window + 1 : 0;
    for (int t0 = k_first; t0 <= p_last; t0 += AT) {
        const int n_keys = min(AT, p_last + 1 - t0);
        __syncthreads(); // the previous tile is consumed
        lz_load_tile_rows(Ks, kc + base + (size_t)t0 * row, row, d, AT, n_keys);
        lz_load_tile_rows(Vs, vc + base + (size_t)t0 * row, row, d, AT, n_keys);
        __syncthreads();
        lz_wmma_abt_64x64(S, Qs, Ks, d); // S = Q K^T
        __syncthreads();
        for (int i = warp; i < AT; i += n_warps) { // online softmax, one warp per row
            const int p = p0 + i;
            float s0 = -INFINITY, s1 = -INFINITY;
            for (int r = 0; r < 2; r++) {
                const int tt = lane + 32 * r, t = t0 + tt;
                const bool visible = i < L && tt < n_keys && t <= p && (sliding_window <= 0 || t > p - sliding_window);
                const float sv = visible ? S[i * AT + tt] * scale : -INFINITY;
                (r ? s1 : s0) = sv;
            }
            const float m_new = fmaxf(m[i], lz_warp_max(fmaxf(s0, s1)));
            const float e0 = m_new == -INFINITY ? 0.0f : expf(s0 - m_new);
            const float e1 = m_new == -INFINITY ? 0.0f : expf(s1 - m_new);
            Pb[i * AT + lane] = __float2bfloat16_rn(e0);
            Pb[i * AT + lane + 32] = __float2bfloat16_rn(e1);
            const float sum = lz_warp_sum(e0 + e1);
            if (lane == 0) {
                const float keep = m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);
                cs[i] = keep;
                l[i] = l[i] * keep + sum;
                m[i] = m_new;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < AT * d; e += blockDim.x)
            O[e] *= cs[e / d];
        __syncthreads();
        for (int tile = warp; tile < n_tiles; tile += n_warps) { // O += P V
            const int ti = tile / (d / 16), tj = tile % (d / 16);
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, O + ti * 16 * d + tj * 16, d, wmma::mem_row_major);
            for (int kk = 0; kk < AT; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
                wmma::load_matrix_sync(a, Pb + ti * 16 * AT + kk, AT);
                wmma::load_matrix_sync(b, Vs + kk * d + tj * 16, d);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(O + ti * 16 * d + tj * 16, acc, d, wmma::mem_row_major);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * d; e += blockDim.x) {
        const int i = e / d, j = e % d;
        out[((size_t)(row0 + i) * Hq + h) * d + j] = __float2bfloat16_rn(O[e] / l[i]);
    }
}

lz_status lz_attention_tc_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(attention_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return LZ_OK;
}

bool lz_attention_tc_fits(const lz_cuda_ctx *c, int d) {
    return d % 16 == 0 && lz_attention_tc_smem(d) <= c->max_smem;
}

lz_status lz_attention_tc(lz_cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                          const int32_t *chunk_row0, const int32_t *chunk_len, const int32_t *token_seq,
                          const int32_t *slot, const int32_t *token_pos, int n_chunks, int Hq, int Hkv, int d,
                          int capacity, int sliding_window) {
    attention_tc_kernel<<<dim3(n_chunks, Hq), 256, lz_attention_tc_smem(d), c->stream>>>(
        out, q, kc, vc, chunk_row0, chunk_len, token_seq, slot, token_pos, Hq, Hkv, d, capacity, sliding_window);
    LZ_LAUNCH_CHECK("attention (tensor cores)");
    return LZ_OK;
}
