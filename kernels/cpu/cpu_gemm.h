/* cpu_gemm.h - the CPU backend's matrix products: OpenBLAS's cblas_sgemm on tiles of one shape.
 *
 * A BLAS picks its kernel, its blocking and its threads by the size of the whole product, so the
 * same row of A can come out of a product of one row and of a product of 300 rows rounded
 * differently. Here C is cut into tiles of LZ_GEMM_ROWS rows by LZ_GEMM_COLS columns (the last
 * column tile narrower), each one single-threaded sgemm call of that shape; the last row tile is
 * filled up with zero rows. A row of C is then the same bits whatever the other rows of the
 * product, its place among them and the number of threads that share the tiles: a token's
 * result does not depend on the batch it came in, nor on the machine's cores. */
#ifndef LZ_CPU_GEMM_H
#define LZ_CPU_GEMM_H

#include <stdbool.h> // bool

enum { LZ_GEMM_ROWS = 16, LZ_GEMM_COLS = 64 };

/* C [m, n] = alpha op(A) op(B) + beta C, row-major, as cblas_sgemm: op(A) [m, k] is A [m, k]
 * (lda >= k) or, trans_a, A^T of A [k, m] (lda >= m); op(B) [k, n] is B [k, n] (ldb >= n) or,
 * trans_b, B^T of B [n, k] (ldb >= k). beta 0: C is only written (its old values, NaN included,
 * are not read). */
void lz_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
             int ldb, float beta, float *C, int ldc);

#endif
