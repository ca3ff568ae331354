/* cpu_gemm.c - cpu_gemm.h. */
#include <stdlib.h> // malloc, free, abort
#include <string.h> // memcpy, memset

#include <cblas.h> // cblas_sgemm

#include "cpu_gemm.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for

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

typedef struct {
    bool trans_a, trans_b;
    int m, n, k, lda, ldb, ldc, full, tail, row_tiles;
    float alpha, beta;
    const float *A, *B, *pad;
    float *C;
} gemm_job;

// tiles [begin, end): tile i is row tile i % row_tiles of column tile i / row_tiles
static void tiles(void *ctx, size_t begin, size_t end, int worker) {
    const gemm_job *j = ctx;
    for (size_t i = begin; i < end; i++) {
        const int ct = (int)(i / (size_t)j->row_tiles), rt = (int)(i % (size_t)j->row_tiles);
        const int c0 = ct * W, cols = j->n - c0 < W ? j->n - c0 : W, r0 = rt * R;
        const float *Bt = j->trans_b ? j->B + (size_t)c0 * j->ldb : j->B + c0;
        float *Ct = j->C + (size_t)r0 * j->ldc + c0;
        if (rt < j->full) {
            tile(j->trans_a, j->trans_b, cols, j->k, j->alpha, j->trans_a ? j->A + r0 : j->A + (size_t)r0 * j->lda,
                 j->lda, Bt, j->ldb, j->beta, Ct, j->ldc);
            continue;
        }
        float part[R * W]; // the tail's rows of C, then zero rows
        memset(part, 0, sizeof part);
        for (int r = 0; j->beta != 0.0f && r < j->tail; r++)
            memcpy(part + (size_t)r * cols, Ct + (size_t)r * j->ldc, sizeof(float) * cols);
        tile(j->trans_a, j->trans_b, cols, j->k, j->alpha, j->pad, j->trans_a ? R : j->k, Bt, j->ldb, j->beta, part,
             cols);
        for (int r = 0; r < j->tail; r++)
            memcpy(Ct + (size_t)r * j->ldc, part + (size_t)r * cols, sizeof(float) * cols);
    }
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
    gemm_job j = {trans_a, trans_b, m, n, k, lda, ldb, ldc, full, tail, row_tiles, alpha, beta, A, B, pad, C};
    const size_t n_tiles = (size_t)row_tiles * col_tiles;
    lz_cpu_parallel(n_tiles, lz_cpu_threads_for(n_tiles, (size_t)row_tiles * R * n * k, LZ_GRAIN_GEMM), tiles, &j);
    free(pad);
}
