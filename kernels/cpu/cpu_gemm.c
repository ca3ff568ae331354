/* cpu_gemm.c - cpu_gemm.h. */
#include <stdlib.h> // malloc, free, abort
#include <string.h> // memcpy, memset

#include <cblas.h> // cblas_sgemm

#include "cpu_gemm.h"
#include "cpu_threads.h" // LZ_PARALLEL_FOR2, lz_cpu_threads_for

enum { R = LZ_GEMM_ROWS, W = LZ_GEMM_COLS };

// the last `rows` rows of op(A) (rows < R), as an op(A) of R rows whose others are zero
static float *padded_rows(bool trans_a, const float *A, int lda, int r0, int rows, int k) {
    float *pad = calloc((size_t)R * (size_t)(k > 0 ? k : 1), sizeof(float));
    if (!pad)
        abort(); // R rows of A: small next to the product's own operands
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < k; c++) {
            const float a = trans_a ? A[(size_t)c * lda + r0 + r] : A[(size_t)(r0 + r) * lda + c];
            if (trans_a)
                pad[(size_t)c * R + r] = a;
            else
                pad[(size_t)r * k + c] = a;
        }
    return pad;
}

static void tile(bool trans_a, bool trans_b, int cols, int k, float alpha, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, R, cols, k,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

void lz_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
             int ldb, float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) { // no terms: C = beta C
        for (int r = 0; r < m; r++)
            for (int c = 0; c < n; c++)
                C[(size_t)r * ldc + c] = beta == 0.0f ? 0.0f : beta * C[(size_t)r * ldc + c];
        return;
    }
    const int full = m / R, tail = m % R, row_tiles = full + (tail > 0), col_tiles = (n + W - 1) / W;
    float *pad = tail ? padded_rows(trans_a, A, lda, full * R, tail, k) : NULL;
    // (a thread for 64K multiply-adds at least)
    LZ_PARALLEL_FOR2(lz_cpu_threads_for((size_t)row_tiles * col_tiles, (size_t)m * n * k, 1 << 16))
    for (int ct = 0; ct < col_tiles; ct++)
        for (int rt = 0; rt < row_tiles; rt++) {
            const int c0 = ct * W, cols = n - c0 < W ? n - c0 : W, r0 = rt * R;
            const float *Bt = trans_b ? B + (size_t)c0 * ldb : B + c0;
            float *Ct = C + (size_t)r0 * ldc + c0;
            if (rt < full) {
                tile(trans_a, trans_b, cols, k, alpha, trans_a ? A + r0 : A + (size_t)r0 * lda, lda, Bt, ldb, beta, Ct,
                     ldc);
                continue;
            }
            float part[R * W]; // the tail's rows of C, then zero rows
            memset(part, 0, sizeof part);
            for (int r = 0; beta != 0.0f && r < tail; r++)
                memcpy(part + (size_t)r * cols, Ct + (size_t)r * ldc, sizeof(float) * cols);
            tile(trans_a, trans_b, cols, k, alpha, pad, trans_a ? R : k, Bt, ldb, beta, part, cols);
            for (int r = 0; r < tail; r++)
                memcpy(Ct + (size_t)r * ldc, part + (size_t)r * cols, sizeof(float) * cols);
        }
    free(pad);
}
