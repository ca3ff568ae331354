// backward_common.cuh - what the files of the CUDA backward op table share: the activation type of
// the backend, launch sizes of the element-wise kernels, pieces of the context's scratch, the
// conversion of fp32 values to the activation type, and row-major matrix products through cuBLAS.
#ifndef LZ_BACKWARD_COMMON_CUH
#define LZ_BACKWARD_COMMON_CUH

#include <limits.h> // INT_MAX

#include "backward_cuda.cuh" // struct lz_backend, the entries

enum { LZ_BW_THREADS = 256, LZ_BW_MAX_BLOCKS = 4096 };

static inline bool lz_bw_bf16(const lz_backend *be) { return be->dtype == LZ_DTYPE_BF16; }
static inline size_t lz_bw_act_size(const lz_backend *be) { return lz_bw_bf16(be) ? 2 : 4; }

// Blocks of LZ_BW_THREADS for a grid-stride loop over n elements (at least one block).
static inline unsigned lz_bw_grid(size_t n) {
    const size_t blocks = (n + LZ_BW_THREADS - 1) / LZ_BW_THREADS;
    return blocks < 1 ? 1u : blocks > LZ_BW_MAX_BLOCKS ? (unsigned)LZ_BW_MAX_BLOCKS : (unsigned)blocks;
}

// A weight the op reads as activations: present, in the backend's type.
static inline lz_status lz_bw_check_weight(const lz_backend *be, const lz_weight *w, const char *op) {
    if (!w || !w->data)
        return lz_fail(LZ_ERR_INTERNAL, "%s: the weight has no data", op);
    if (w->dtype != be->dtype)
        return lz_fail(LZ_ERR_INTERNAL, "%s: a weight of type %s on the %s backend", op, lz_dtype_name(w->dtype),
                       lz_dtype_name(be->dtype));
    return LZ_OK;
}

// Lays `count` pieces of bytes[i] one after another in the context's scratch, each 256-byte aligned
// (grown as needed), and points out[i] at them (NULL for a piece of 0 bytes). The pieces are the
// calling op's until it returns.
static inline lz_status lz_bw_scratch(lz_backend *be, int count, const size_t *bytes, void **out) {
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += (bytes[i] + 255) / 256 * 256;
    LZ_TRY(lz_cuda_scratch(&be->ctx, total ? total : 256));
    char *p = (char *)be->ctx.scratch;
    for (int i = 0; i < count; i++) {
        out[i] = bytes[i] ? p : NULL;
        p += (bytes[i] + 255) / 256 * 256;
    }
    return LZ_OK;
}

// dst [n] = src [n] fp32 in T (bf16: rounded to nearest even), on the backend's stream (backward_tensors.cu).
template <typename T> lz_status lz_bw_from_f32(lz_backend *be, T *dst, const float *src, size_t n);

// Row-major C [M, N] (fp32) = alpha op(A) op(B) + beta C: A [M, K] ([K, M] when a_t: op(A) = A^T),
// B [K, N] ([N, K] when b_t), both fp32 (cublasSgemm, in the handle's math mode) or both bf16
// (cublasGemmEx, fp32 accumulation). cuBLAS is column-major: a row-major X is X^T to it, so it
// computes C^T [N, M] = op(B)^T op(A)^T.
static inline lz_status lz_bw_gemm(lz_backend *be, bool a_t, bool b_t, int M, int N, int K, float alpha,
                                   const void *A, const void *B, bool bf16, float beta, float *C) {
    if (M <= 0 || N <= 0)
        return LZ_OK;
    if (K <= 0) { // an empty sum: C = beta C
        if (beta == 0.0f)
            LZ_CUDA_TRY(cudaMemsetAsync(C, 0, sizeof(float) * (size_t)M * (size_t)N, be->ctx.stream));
        return LZ_OK;
    }
    const cublasOperation_t op_b = b_t ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = a_t ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = b_t ? K : N, lda = a_t ? M : K;
    if (!bf16) {
        LZ_CUDA_TRY(cublasSgemm(be->ctx.cublas, op_b, op_a, N, M, K, &alpha, (const float *)B, ldb, (const float *)A,
                                lda, &beta, C, N));
        return LZ_OK;
    }
    LZ_CUDA_TRY(cublasGemmEx(be->ctx.cublas, op_b, op_a, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda,
                             &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return LZ_OK;
}

// Sizes that cuBLAS and the launches take as int.
static inline bool lz_bw_fits_int(int64_t a) { return a >= 0 && a <= INT_MAX; }

#endif
