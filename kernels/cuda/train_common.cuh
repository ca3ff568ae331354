// train_common.cuh - what the training kernels (train_*.cu) share: a block-level
// matrix product over caller-supplied element functors (so one tested routine
// serves every small product of the chunked GLA, whatever the layouts), and
// the launch size. Everything fp32.
#ifndef LZ_TRAIN_COMMON_CUH
#define LZ_TRAIN_COMMON_CUH

#include "cuda_common.cuh" // LZ_CUDA_TRY, LZ_LAUNCH_CHECK, lz_warp_sum, lz_block_sum

extern "C" {
#include "cuda/train_cuda.h" // the C interface these files implement
}

enum { LZ_TB = 256, LZ_MM_TILE = 32 }; // threads per block of every training kernel; product tile

// Floats of shared memory lz_block_mm needs (two padded 32 x 32 tiles).
#define LZ_MM_SMEM (2 * LZ_MM_TILE * (LZ_MM_TILE + 1))

/* out(i, j, sum_k A(i, k) B(k, j)) for i < M, j < N, by the whole block (256
 * threads, all of them must call it). Tiles of 32 x 32 go through `tiles`
 * (LZ_MM_SMEM floats); each element is handed to `out` exactly once, by the
 * same thread for the same (M, N), so two products of one shape may
 * read-modify-write the same outputs without a barrier. No barrier after:
 * the caller syncs before reading what `out` wrote to shared memory. */
template <class FA, class FB, class FO>
__device__ void lz_block_mm(int M, int N, int K, FA A, FB B, FO out, float *tiles) {
    float(*As)[LZ_MM_TILE + 1] = (float(*)[LZ_MM_TILE + 1])tiles;
    float(*Bs)[LZ_MM_TILE + 1] = (float(*)[LZ_MM_TILE + 1])(tiles + LZ_MM_TILE * (LZ_MM_TILE + 1));
    const int tx = threadIdx.x % LZ_MM_TILE, ty = threadIdx.x / LZ_MM_TILE; // ty < 8: rows ty + 8 q
    for (int i0 = 0; i0 < M; i0 += LZ_MM_TILE)
        for (int j0 = 0; j0 < N; j0 += LZ_MM_TILE) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int k0 = 0; k0 < K; k0 += LZ_MM_TILE) {
                for (int q = 0; q < 4; q++) {
                    const int r = ty + 8 * q;
                    As[r][tx] = i0 + r < M && k0 + tx < K ? A(i0 + r, k0 + tx) : 0.0f;
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

// log(sigmoid(l)) without overflow (the CPU reference's formula)
__device__ __forceinline__ float lz_log_sigmoid(float l) {
    return l >= 0.0f ? -log1pf(expf(-l)) : l - log1pf(expf(l));
}

// dst[e] += sum over s < slices of partial[s * n + e], in order (train_feature_map.cu)
lz_status lz_cuda_sum_slices(float *dst, const float *partial, size_t n, int slices);

static inline int lz_div_up(long a, long b) { return (int)((a + b - 1) / b); }

#endif
