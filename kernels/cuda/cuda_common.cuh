// cuda_common.cuh - what every CUDA kernel file shares: the one check of a
// call (every CUDA / cuBLAS / NCCL call names itself, the device, the rank and
// file:line in the error), element conversions for the two activation types (bf16, fp32),
// and warp/block reductions.
#ifndef LZ_CUDA_COMMON_CUH
#define LZ_CUDA_COMMON_CUH

#include <stdint.h>       // uintptr_t

#include <cublas_v2.h>    // cublasStatus_t
#include <cuda_bf16.h>    // __nv_bfloat16
#include <cuda_runtime.h> // cudaError_t

extern "C" {
#include "error.h" // lz_fail, lz_status
#include "ops.h"   // lz_batch, lz_attn_dims
}

// What went wrong, or NULL: one overload per library's status type (nccl_p2p.cu adds NCCL's).
static inline const char *lz_gpu_error(cudaError_t e) { return e == cudaSuccess ? NULL : cudaGetErrorString(e); }
static inline const char *lz_gpu_error(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? NULL : cublasGetStatusString(s);
}
// The error of a failed call: "[rank R (host): ]cuda device D: [launch of ]WHAT failed: WHY (file:line)".
static inline lz_status lz_gpu_fail(bool launch, const char *what, const char *why, const char *file, int line) {
    int dev = -1;
    cudaGetDevice(&dev);
    return lz_fail_at(LZ_ERR_INTERNAL, file, line, "cuda device %d: %s%s failed: %s", dev, launch ? "launch of " : "",
                      what, why);
}

#define LZ_GPU_CHECK_(status, launch, what)                                                                 \
    do {                                                                                                    \
        const char *lz_why_ = lz_gpu_error(status);                                                         \
        if (lz_why_)                                                                                        \
            return lz_gpu_fail(launch, what, lz_why_, __FILE__, __LINE__);                                  \
    } while (0)

// The one check of the CUDA backend: a CUDA, cuBLAS or NCCL call that fails returns its error.
#define LZ_CUDA_TRY(call) LZ_GPU_CHECK_(call, false, #call)
// The same check of a launch's own status (cudaLaunchKernelEx), named by its kernel (a string).
#define LZ_LAUNCH_TRY(launch, kernel) LZ_GPU_CHECK_(launch, true, kernel)
// After every launch (kernel: its name): a bad configuration shows up here, a fault at the next sync.
#define LZ_LAUNCH_CHECK(kernel) LZ_GPU_CHECK_(cudaGetLastError(), true, kernel)

// The check of a call whose failure the caller answers itself, with its own status or by doing
// without (an allocation that finds the device full, a machine without a GPU): what went wrong, or
// NULL, and the error cleared: a failed allocation is not sticky, but it stays the last error, which
// the next LZ_LAUNCH_CHECK would report as its own.
static inline const char *lz_gpu_error_cleared(cudaError_t e) {
    if (e == cudaSuccess)
        return NULL;
    (void)cudaGetLastError();
    return cudaGetErrorString(e);
}

__device__ __forceinline__ float lz_to_float(float x) { return x; }
__device__ __forceinline__ float lz_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T lz_from_float(float x);
template <> __device__ __forceinline__ float lz_from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 lz_from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// (from = 8: the sum over each half of the warp, lanes 0-15 and 16-31, in every lane of the half)
__device__ __forceinline__ float lz_warp_sum(float v, int from = 16) {
    for (int o = from; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float lz_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ __forceinline__ float lz_block_sum(float v, float *smem32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = lz_warp_sum(v);
    __syncthreads(); // smem32 may still be read by a previous reduction
    if (lane == 0)
        smem32[warp] = v;
    __syncthreads();
    v = lane < n_warps ? smem32[lane] : 0.0f;
    return lz_warp_sum(v);
}
__device__ __forceinline__ float lz_block_max(float v, float *smem32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = lz_warp_max(v);
    __syncthreads();
    if (lane == 0)
        smem32[warp] = v;
    __syncthreads();
    v = lane < n_warps ? smem32[lane] : -INFINITY;
    return lz_warp_max(v);
}

// 16 bytes as floats: 8 bf16 or 4 fp32 (the source 16-byte aligned)
template <typename T> struct vec16;
template <> struct vec16<__nv_bfloat16> {
    static constexpr int N = 8;
    __device__ static void load(float *dst, const __nv_bfloat16 *src) {
        const uint4 raw = *(const uint4 *)src;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
        for (int i = 0; i < 4; i++) {
            const float2 f = __bfloat1622float2(h[i]);
            dst[2 * i] = f.x;
            dst[2 * i + 1] = f.y;
        }
    }
};
template <> struct vec16<float> {
    static constexpr int N = 4;
    __device__ static void load(float *dst, const float *src) {
        const float4 f = *(const float4 *)src;
        dst[0] = f.x, dst[1] = f.y, dst[2] = f.z, dst[3] = f.w;
    }
};

// a / b rounded up (grid sizes, padded row counts; the result fits an int)
static inline int lz_div_up(long a, long b) { return (int)((a + b - 1) / b); }

// Whether every given pointer is 16-byte aligned (the vector kernels' loads and stores)
static inline bool lz_aligned16(const void *a, const void *b = NULL, const void *c = NULL) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

// 16 bytes of floats back to T (the destination 16-byte aligned)
__device__ __forceinline__ void store16(float *dst, const float *v) { *(float4 *)dst = make_float4(v[0], v[1], v[2], v[3]); }
__device__ __forceinline__ void store16(__nv_bfloat16 *dst, const float *v) {
    uint4 raw;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&raw;
#pragma unroll
    for (int i = 0; i < 4; i++)
        h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *(uint4 *)dst = raw;
}

// The MLP's activation: silu(gate) * up (the CPU reference's arithmetic)
__device__ __forceinline__ float lz_swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// Copies a tile of `rows` rows of `width` 16-bit elements (width % 8 == 0,
// 16-byte vectors) from rows `stride` elements apart into a dense shared-memory
// tile; rows at and past `valid` become zeros (the padding of a partial tile).
template <typename T>
__device__ void lz_load_tile_rows(T *dst, const T *src, size_t stride, int width, int rows, int valid) {
    const int vecs = width / 8;
    for (int e = threadIdx.x; e < rows * vecs; e += blockDim.x) {
        const int t = e / vecs, c = e % vecs;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (t < valid)
            val = ((const uint4 *)(src + (size_t)t * stride))[c];
        ((uint4 *)(dst + (size_t)t * width))[c] = val;
    }
}

// Device copies of the current step's batch (uploaded once per step by begin_step).
struct lz_cuda_batch {
    const int32_t *slot, *start, *len, *pos, *token_pos, *token_seq, *ids, *rows;
    // GLA chunks of 64 rows: chunk -> first row and length; sequence -> first chunk and count
    const int32_t *chunk_row0, *chunk_len, *seq_chunk0, *seq_chunks;
    int n_chunks;
    int max_len; // longest sequence of the step
    int max_end; // largest pos + len of the step
};

#endif
