// gla_tc.cu - the chunk output of the chunked GLA (see gla.cu) on tensor cores,
// bf16 in, fp32 out, for F = 2f and head_dim multiples of 16:
//   A   = Q K^T                      (64 x 64, then decayed by exp(G_i - G_t) <= 1 and masked, in fp32)
//   Y   = A V                        (A rounded to bf16)
//   X   = Q S_prev                   (S_prev, the fp32 state before the chunk, rounded to bf16 64 rows at a time)
//   out = (exp(G_i) X + Y) / (exp(G_i) q_i . z_prev + sum_t A_it)
// the same function as chunk_output_kernel; the fp32 state itself stays fp32.
#include <mma.h> // nvcuda::wmma

#include "wmma_tiles.cuh" // lz_wmma_abt_64x64

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

enum { TC_CHUNK = 64, TC_MAX_TILES = 8 }; // a warp owns at most 8 of the 4 x (d / 16) output tiles (d <= 256)

struct tc_shape {
    int Hq, Hkv, Hs, d, F;
};

size_t lz_gla_tc_smem(int F, int d) {
    return sizeof(bf16) * (2 * (size_t)TC_CHUNK * F + 2 * (size_t)TC_CHUNK * d + TC_CHUNK * TC_CHUNK) +
           sizeof(float) * (TC_CHUNK * TC_CHUNK + 2 * (size_t)TC_CHUNK * d + 3 * TC_CHUNK);
}

// grid (chunks, Hq), block 256 (8 warps)
__global__ void chunk_output_tc_kernel(bf16 *out, const bf16 *phi_q, const bf16 *phi_k, const bf16 *v,
                                       const bf16 *log_gamma, const float *S_prev, const float *z_prev,
                                       const int32_t *chunk_row0, const int32_t *chunk_len, tc_shape sh,
                                       bool normalize) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int F = sh.F, d = sh.d, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    bf16 *Qs = (bf16 *)smem_raw, *Ks = Qs + TC_CHUNK * F, *Vs = Ks + TC_CHUNK * F, *Sb = Vs + TC_CHUNK * d;
    bf16 *Ab = Sb + TC_CHUNK * d;
    float *A = (float *)(Ab + TC_CHUNK * TC_CHUNK), *X = A + TC_CHUNK * TC_CHUNK, *Y = X + TC_CHUNK * d;
    float *g = Y + TC_CHUNK * d, *den = g + TC_CHUNK, *lg = den + TC_CHUNK;
    const int c = blockIdx.x, h = blockIdx.y, row0 = chunk_row0[c], L = chunk_len[c];
    const int s = sh.Hs == sh.Hq ? h : h / (sh.Hq / sh.Hs);
    const int vh = sh.Hs == sh.Hkv ? s : s / (sh.Hq / sh.Hkv);

    lz_load_tile_rows(Qs, phi_q + ((size_t)row0 * sh.Hq + h) * F, (size_t)sh.Hq * F, F, TC_CHUNK, L);
    lz_load_tile_rows(Ks, phi_k + ((size_t)row0 * sh.Hs + s) * F, (size_t)sh.Hs * F, F, TC_CHUNK, L);
    lz_load_tile_rows(Vs, v + ((size_t)row0 * sh.Hkv + vh) * d, (size_t)sh.Hkv * d, d, TC_CHUNK, L);
    for (int i = threadIdx.x; i < TC_CHUNK; i += blockDim.x)
        lg[i] = i < L ? __bfloat162float(log_gamma[row0 + i]) : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) { // chunk-local cumulative log gates
        float acc = 0.0f;
        for (int i = 0; i < TC_CHUNK; i++)
            g[i] = (acc += lg[i]);
    }
    lz_wmma_abt_64x64(A, Qs, Ks, F); // A = Q K^T
    __syncthreads();
    // causal mask and decay, in fp32; a bf16 copy for A V
    for (int e = threadIdx.x; e < TC_CHUNK * TC_CHUNK; e += blockDim.x) {
        const int i = e / TC_CHUNK, t = e % TC_CHUNK;
        const float a = (t <= i && i < L) ? A[e] * expf(g[i] - g[t]) : 0.0f;
        A[e] = a;
        Ab[e] = __float2bfloat16_rn(a);
    }
    __syncthreads();
    const float *Sp = S_prev + ((size_t)c * sh.Hs + s) * F * d, *zp = z_prev + ((size_t)c * sh.Hs + s) * F;
    for (int i = warp; i < L; i += n_warps) { // den_i: one warp per row
        float inter = 0.0f, intra = 0.0f;
        for (int a = threadIdx.x & 31; a < F; a += 32)
            inter += __bfloat162float(Qs[i * F + a]) * zp[a];
        for (int t = threadIdx.x & 31; t <= i; t += 32)
            intra += A[i * TC_CHUNK + t];
        const float total = expf(g[i]) * lz_warp_sum(inter) + lz_warp_sum(intra);
        if ((threadIdx.x & 31) == 0)
            den[i] = total;
    }
    // output tiles (4 x d/16): warp w owns tiles w, w + 8, ...
    const int n_tiles = 4 * (d / 16);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> xs[TC_MAX_TILES], ys[TC_MAX_TILES];
#pragma unroll
    for (int k = 0; k < TC_MAX_TILES; k++) {
        wmma::fill_fragment(xs[k], 0.0f);
        wmma::fill_fragment(ys[k], 0.0f);
    }
#pragma unroll
    for (int k = 0; k < TC_MAX_TILES; k++) { // Y = A V
        const int tile = warp + k * n_warps, ti = tile / (d / 16), tj = tile % (d / 16);
        if (tile >= n_tiles)
            break;
        for (int kk = 0; kk < TC_CHUNK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
            wmma::load_matrix_sync(a, Ab + ti * 16 * TC_CHUNK + kk, TC_CHUNK);
            wmma::load_matrix_sync(b, Vs + kk * d + tj * 16, d);
            wmma::mma_sync(ys[k], a, b, ys[k]);
        }
    }
    for (int a0 = 0; a0 < F; a0 += TC_CHUNK) { // X = Q S_prev, 64 state rows at a time
        __syncthreads(); // Sb is free
        for (int e = threadIdx.x; e < TC_CHUNK * d; e += blockDim.x)
            Sb[e] = __float2bfloat16_rn(a0 + e / d < F ? Sp[(size_t)a0 * d + e] : 0.0f);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TC_MAX_TILES; k++) {
            const int tile = warp + k * n_warps, ti = tile / (d / 16), tj = tile % (d / 16);
            if (tile >= n_tiles)
                break;
            for (int kk = 0; kk < TC_CHUNK && a0 + kk < F; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
                wmma::load_matrix_sync(a, Qs + ti * 16 * F + a0 + kk, F);
                wmma::load_matrix_sync(b, Sb + kk * d + tj * 16, d);
                wmma::mma_sync(xs[k], a, b, xs[k]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < TC_MAX_TILES; k++) {
        const int tile = warp + k * n_warps, ti = tile / (d / 16), tj = tile % (d / 16);
        if (tile >= n_tiles)
            break;
        wmma::store_matrix_sync(X + ti * 16 * d + tj * 16, xs[k], d, wmma::mem_row_major);
        wmma::store_matrix_sync(Y + ti * 16 * d + tj * 16, ys[k], d, wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * d; e += blockDim.x) {
        const int i = e / d, j = e % d;
        const float num = expf(g[i]) * X[e] + Y[e];
        out[((size_t)(row0 + i) * sh.Hq + h) * d + j] = __float2bfloat16_rn(normalize ? num / den[i] : num);
    }
}

lz_status lz_gla_tc_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(chunk_output_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return lz_gla_prompt_init(c);
}

bool lz_gla_tc_fits(const lz_cuda_ctx *c, int F, int d) {
    return F % 16 == 0 && d % 16 == 0 && d <= 256 && lz_gla_tc_smem(F, d) <= c->max_smem;
}

lz_status lz_gla_tc_output(lz_cuda_ctx *c, bf16 *out, const bf16 *phi_q, const bf16 *phi_k, const bf16 *v,
                           const bf16 *log_gamma, const float *S_prev, const float *z_prev, const int32_t *chunk_row0,
                           const int32_t *chunk_len, int n_chunks, int Hq, int Hkv, int Hs, int d, int F,
                           bool normalize) {
    const tc_shape sh = {Hq, Hkv, Hs, d, F};
    chunk_output_tc_kernel<<<dim3(n_chunks, Hq), 256, lz_gla_tc_smem(F, d), c->stream>>>(
        out, phi_q, phi_k, v, log_gamma, S_prev, z_prev, chunk_row0, chunk_len, sh, normalize);
    LZ_LAUNCH_CHECK("gla chunk_output (tensor cores)");
    return LZ_OK;
}
