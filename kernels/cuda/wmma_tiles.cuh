// wmma_tiles.cuh - the tensor-core piece shared by the prompt kernels:
// out[64][64] (fp32) = A[64][k] . B[64][k]^T for two dense bf16 tiles in shared
// memory (row stride k), the 16 output tiles spread over the block's warps.
#ifndef LZ_WMMA_TILES_CUH
#define LZ_WMMA_TILES_CUH

#include <mma.h> // nvcuda::wmma

#include "cuda_kernels.cuh"

__device__ inline void lz_wmma_abt_64x64(float *out, const __nv_bfloat16 *A, const __nv_bfloat16 *B, int k) {
    using namespace nvcuda;
    const int warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int tile = warp; tile < 16; tile += n_warps) {
        const int ti = tile / 4, tj = tile % 4;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < k; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
            wmma::load_matrix_sync(a, A + ti * 16 * k + kk, k);
            wmma::load_matrix_sync(b, B + tj * 16 * k + kk, k);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(out + ti * 16 * 64 + tj * 16, acc, 64, wmma::mem_row_major);
    }
}

#endif
