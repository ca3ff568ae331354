// train_common.cuh - what the training kernels (train_*.cu) share: a block-level
// matrix product over caller-supplied element functors (so one tested routine
// serves every small product of the chunked GLA, whatever the layouts), and
// the launch size. Everything fp32.
#ifndef LZ_TRAIN_COMMON_CUH
#define LZ_TRAIN_COMMON_CUH

#include <mma.h> // nvcuda::wmma (the bf16 products)

#include "cuda_common.cuh" // LZ_CUDA_TRY, LZ_LAUNCH_CHECK, lz_warp_sum, lz_block_sum

extern "C" {
#include "cuda/train_cuda.h" // the C interface these files implement
}

enum { LZ_TB = 256, LZ_MM_TILE = 32 }; // threads per block of every training kernel; product tile

// Floats of shared memory lz_block_mm needs: two padded 32 x 32 fp32 tiles, or for the bf16
// variant two 32 x 40 bf16 tiles and a 32 x 36 fp32 result (2432 floats); 32-byte aligned.
#define LZ_MM_SMEM 2432

/* out(i, j, sum_k A(i, k) B(k, j)) for i < M, j < N, by the whole block (256
 * threads, all of them must call it). Tiles of 32 x 32 go through `tiles`
 * (LZ_MM_SMEM floats); each element is handed to `out` exactly once, by the
 * same thread for the same (M, N), so two products of one shape may
 * read-modify-write the same outputs without a barrier. No barrier after:
 * the caller syncs before reading what `out` wrote to shared memory.
 * AT: A's memory runs along i (else along k); BT: B's runs along k (else
 * along j): neighbouring threads then load neighbouring addresses. */
template <bool AT, bool BT, class FA, class FB, class FO>
__device__ void lz_block_mm(int M, int N, int K, FA A, FB B, FO out, float *tiles) {
    float(*As)[LZ_MM_TILE + 1] = (float(*)[LZ_MM_TILE + 1]) tiles;
    float(*Bs)[LZ_MM_TILE + 1] = (float(*)[LZ_MM_TILE + 1])(tiles + LZ_MM_TILE * (LZ_MM_TILE + 1));
    const int tx = threadIdx.x % LZ_MM_TILE, ty = threadIdx.x / LZ_MM_TILE; // ty < 8: rows ty + 8 q
    for (int i0 = 0; i0 < M; i0 += LZ_MM_TILE)
        for (int j0 = 0; j0 < N; j0 += LZ_MM_TILE) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int k0 = 0; k0 < K; k0 += LZ_MM_TILE) {
                for (int q = 0; q < 4; q++) {
                    const int r = ty + 8 * q;
                    if (AT)
                        As[tx][r] = i0 + tx < M && k0 + r < K ? A(i0 + tx, k0 + r) : 0.0f;
                    else
                        As[r][tx] = i0 + r < M && k0 + tx < K ? A(i0 + r, k0 + tx) : 0.0f;
                    if (BT)
                        Bs[tx][r] = k0 + tx < K && j0 + r < N ? B(k0 + tx, j0 + r) : 0.0f;
                    else
                        Bs[r][tx] = k0 + r < K && j0 + tx < N ? B(k0 + r, j0 + tx) : 0.0f;
                }
                __syncthreads();
                for (int kk = 0; kk < LZ_MM_TILE; kk++) {
                    const float b = Bs[kk][tx];
                    for (int q = 0; q < 4; q++)
                        acc[q] += As[ty + 8 * q][kk] * b;
                }
                __syncthreads();
            }
            for (int q = 0; q < 4; q++)
                if (i0 + ty + 8 * q < M && j0 + tx < N)
                    out(i0 + ty + 8 * q, j0 + tx, acc[q]);
        }
}

/* The same contract with the operands rounded to bf16 and multiplied on the
 * tensor cores (wmma 16 x 16 x 16, fp32 accumulation): warps 0-3 each own one
 * 16 x 16 quarter of the 32 x 32 output tile, all 8 warps load. */
template <bool AT, bool BT, class FA, class FB, class FO>
__device__ void lz_block_mm_bf16(int M, int N, int K, FA A, FB B, FO out, float *tiles) {
    using namespace nvcuda;
    enum { LDB = LZ_MM_TILE + 8, LDC = LZ_MM_TILE + 4 }; // wmma: 16-bit rows a multiple of 8, fp32 of 4
    __nv_bfloat16 *As = (__nv_bfloat16 *)tiles, *Bs = As + LZ_MM_TILE * LDB;
    float *Cs = (float *)(Bs + LZ_MM_TILE * LDB);
    const int tx = threadIdx.x % LZ_MM_TILE, ty = threadIdx.x / LZ_MM_TILE, warp = threadIdx.x / 32;
    const int fi = (warp / 2) * 16, fj = (warp % 2) * 16;
    for (int i0 = 0; i0 < M; i0 += LZ_MM_TILE)
        for (int j0 = 0; j0 < N; j0 += LZ_MM_TILE) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int k0 = 0; k0 < K; k0 += LZ_MM_TILE) {
                for (int q = 0; q < 4; q++) {
                    const int r = ty + 8 * q;
                    if (AT)
                        As[tx * LDB + r] = __float2bfloat16_rn(i0 + tx < M && k0 + r < K ? A(i0 + tx, k0 + r) : 0.0f);
                    else
                        As[r * LDB + tx] = __float2bfloat16_rn(i0 + r < M && k0 + tx < K ? A(i0 + r, k0 + tx) : 0.0f);
                    if (BT)
                        Bs[tx * LDB + r] = __float2bfloat16_rn(k0 + tx < K && j0 + r < N ? B(k0 + tx, j0 + r) : 0.0f);
                    else
                        Bs[r * LDB + tx] = __float2bfloat16_rn(k0 + r < K && j0 + tx < N ? B(k0 + r, j0 + tx) : 0.0f);
                }
                __syncthreads();
                if (warp < 4)
                    for (int kk = 0; kk < LZ_MM_TILE; kk += 16) {
                        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                        wmma::load_matrix_sync(a, As + fi * LDB + kk, LDB);
                        wmma::load_matrix_sync(b, Bs + kk * LDB + fj, LDB);
                        wmma::mma_sync(acc, a, b, acc);
                    }
                __syncthreads();
            }
            if (warp < 4)
                wmma::store_matrix_sync(Cs + fi * LDC + fj, acc, LDC, wmma::mem_row_major);
            __syncthreads();
            for (int q = 0; q < 4; q++)
                if (i0 + ty + 8 * q < M && j0 + tx < N)
                    out(i0 + ty + 8 * q, j0 + tx, Cs[(ty + 8 * q) * LDC + tx]);
            __syncthreads(); // Cs is rewritten by the next tile
        }
}

// lz_block_mm or, for the bf16 GLA path, lz_block_mm_bf16
template <bool BF16, bool AT, bool BT, class FA, class FB, class FO>
__device__ __forceinline__ void lz_mm(int M, int N, int K, FA A, FB B, FO out, float *tiles) {
    if constexpr (BF16)
        lz_block_mm_bf16<AT, BT>(M, N, K, A, B, out, tiles);
    else
        lz_block_mm<AT, BT>(M, N, K, A, B, out, tiles);
}

// log(sigmoid(l)) without overflow (the CPU reference's formula)
__device__ __forceinline__ float lz_log_sigmoid(float l) { return l >= 0.0f ? -log1pf(expf(-l)) : l - log1pf(expf(l)); }

// The stream of every training launch, copy and memset (lz_cuda_train_set_stream; train_layer.cu)
cudaStream_t lz_train_stream(void);

// dst[e] += sum over s < slices of partial[s * n + e], in order (train_feature_map.cu)
lz_status lz_cuda_sum_slices(float *dst, const float *partial, size_t n, int slices);

#endif
