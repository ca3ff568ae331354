// gla_decode_common.cuh - the read-out the GLA decode kernels end with (gla_decode.cu's split
// kernel, gla_decode_stream.cu's stream kernel, gla_decode_ring.cu's ring kernel): each thread holds the numerators of one column
// quad for each query head of the group, summed over the state rows it walked; the rows are summed
// across a warp's lanes, then across partial rows in shared memory, and divided by the denominators.
#ifndef LZ_GLA_DECODE_COMMON_CUH
#define LZ_GLA_DECODE_COMMON_CUH

#include "cuda_kernels.cuh" // lz_from_float, lz_warp_sum

// One row a of this thread's column quad: S_new = gamma S + phi_k[a] v (returned, for the caller to
// store), and its share phi_q_g[a] S_new of each query head's numerator (phis: the group's phi_q, F a head).
template <int G>
__device__ __forceinline__ float4 gd_update_row(float4 st, float gamma, float pk_a, float4 v, const float *phis, int F,
                                                int a, int group, float (&acc)[G][4]) {
    float4 sv;
    sv.x = gamma * st.x + pk_a * v.x;
    sv.y = gamma * st.y + pk_a * v.y;
    sv.z = gamma * st.z + pk_a * v.z;
    sv.w = gamma * st.w + pk_a * v.w;
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g < group) {
            const float w = phis[g * F + a];
            acc[g][0] += w * sv.x, acc[g][1] += w * sv.y, acc[g][2] += w * sv.z, acc[g][3] += w * sv.w;
        }
    }
    return sv;
}

// The denominators phi_q_g . z of the group's query heads into dens, a warp per head (this thread's
// warp and lane of the block's n_warps; phis: the group's phi_q, F a head).
__device__ __forceinline__ void gd_denominators(float *dens, const float *phis, const float *zs, int F, int group,
                                                int warp, int lane, int n_warps) {
    for (int g = warp; g < group; g += n_warps) {
        float acc = 0.0f;
        for (int a = lane; a < F; a += 32)
            acc += phis[g * F + a] * zs[a];
        acc = lz_warp_sum(acc);
        if (lane == 0)
            dens[g] = acc;
    }
}

// Sums acc over the lanes of a warp that hold the same column quad (lanes qpr, 2 qpr, ... apart;
// qpr a power of two below 32): afterwards lanes [0, qpr) hold the warp's sums.
template <int G> __device__ __forceinline__ void gd_sum_over_warp(float (&acc)[G][4], int qpr) {
    for (int off = qpr; off < 32; off <<= 1) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            acc[g][0] += __shfl_xor_sync(0xffffffffu, acc[g][0], off);
            acc[g][1] += __shfl_xor_sync(0xffffffffu, acc[g][1], off);
            acc[g][2] += __shfl_xor_sync(0xffffffffu, acc[g][2], off);
            acc[g][3] += __shfl_xor_sync(0xffffffffu, acc[g][3], off);
        }
    }
}

// Partial row r of red ([rows][group][cols] floats): this thread's column quad cq.
template <int G>
__device__ __forceinline__ void gd_store_partial(float *red, const float (&acc)[G][4], int r, int group, int cols, int cq) {
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g < group) {
            float *dst = red + ((size_t)r * group + g) * cols + cq * 4;
            dst[0] = acc[g][0], dst[1] = acc[g][1], dst[2] = acc[g][2], dst[3] = acc[g][3];
        }
    }
}

// out[g * d + c] = (sum of the n_rows partial rows) / dens[g] (or the sum, !normalize), for the
// group's query heads g and the block's cols columns; threads 0 .. n_threads - 1 of the block (by
// default all) take a share. out points at column c0 of the group's first query head of this sequence.
template <typename T>
__device__ __forceinline__ void gd_write_out(T *out, int d, const float *red, int n_rows, int group, int cols,
                                             const float *dens, bool normalize, int n_threads = blockDim.x) {
    for (int e = threadIdx.x; e < group * cols; e += n_threads) {
        const int g = e / cols, c = e % cols;
        float num = 0.0f;
        for (int i = 0; i < n_rows; i++)
            num += red[((size_t)i * group + g) * cols + c];
        out[(size_t)g * d + c] = lz_from_float<T>(normalize ? num / dens[g] : num);
    }
}

#endif
