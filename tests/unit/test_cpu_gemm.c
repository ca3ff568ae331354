/* test_cpu_gemm.c - the CPU backend's products (kernels/cpu/cpu_gemm.h): each of the three shapes the
 * backend uses (x W^T, dy W, dy^T x) against a sum in double; a row of C the same bits computed alone,
 * in a product of any number of rows and at any place among them; the same bits on 1, 2 and 3
 * threads; beta 0 never reads C (NaN there stays out), beta 1 adds to it. */
#include <math.h>   // fabs, NAN, isnan
#include <stdbool.h> // bool
#include <stdlib.h> // malloc, free
#include <string.h> // memcmp, memcpy

#include "cpu_gemm.h"    // lz_gemm
#include "cpu_threads.h" // lz_cpu_set_threads
#include "test_util.h"   // CHECK, CHECK_MSG

// element (r, c) of op(A) op(B) in double
static double exact(bool ta, bool tb, const float *A, int lda, const float *B, int ldb, int r, int c, int k) {
    double acc = 0;
    for (int i = 0; i < k; i++)
        acc += (double)(ta ? A[(size_t)i * lda + r] : A[(size_t)r * lda + i]) *
               (tb ? B[(size_t)c * ldb + i] : B[(size_t)i * ldb + c]);
    return acc;
}

/* C = alpha op(A) op(B) + beta C of m x n x k: against double, on 1, 2 and 3 threads the same bits. */
static void check_product(bool ta, bool tb, int m, int n, int k, float alpha, float beta, unsigned seed) {
    const int lda = ta ? m + 3 : k + 2, ldb = tb ? k + 1 : n + 5, ldc = n + 4; // strides wider than the rows
    const size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    float *A = lz_test_uniform_array(na, -1, 1, &seed);
    float *B = lz_test_uniform_array(nb, -1, 1, &seed);
    float *C0 = lz_test_uniform_array(nc, -1, 1, &seed);
    float *C[3];
    for (int t = 0; t < 3; t++) {
        C[t] = beta == 0.0f ? lz_test_nan_array(nc) : malloc(sizeof(float) * nc);
        if (beta != 0.0f)
            memcpy(C[t], C0, sizeof(float) * nc);
        lz_cpu_set_threads(t + 1);
        lz_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C[t], ldc);
    }
    double worst = 0;
    bool written = true;
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) {
            const double want = alpha * exact(ta, tb, A, lda, B, ldb, r, c, k) + beta * (double)C0[(size_t)r * ldc + c];
            const float got = C[0][(size_t)r * ldc + c];
            written &= !isnan(got);
            worst = fabs(got - want) > worst ? fabs(got - want) : worst;
        }
    CHECK_MSG(written && worst <= 1e-5 * (k + 1), "%c%c m %d n %d k %d beta %g: off by %g", ta ? 'T' : 'N',
              tb ? 'T' : 'N', m, n, k, beta, worst);
    for (int r = 0; r < m; r++) // rows only: the padding between them is not C's
        CHECK_MSG(memcmp(C[0] + (size_t)r * ldc, C[1] + (size_t)r * ldc, sizeof(float) * n) == 0 &&
                      memcmp(C[0] + (size_t)r * ldc, C[2] + (size_t)r * ldc, sizeof(float) * n) == 0,
                  "%c%c m %d n %d k %d: row %d differs between 1, 2 and 3 threads", ta ? 'T' : 'N', tb ? 'T' : 'N',
                  m, n, k, r);
    free(A), free(B), free(C0), free(C[0]), free(C[1]), free(C[2]);
}

/* op(A) with rows (no trans: the batch's tokens): every run of rows [off, off + len) gives the rows of
 * the whole product, bit for bit. */
static void check_rows_alone(bool tb, int m, int n, int k, unsigned seed) {
    const int ldb = tb ? k : n;
    float *A = lz_test_uniform_array((size_t)m * k, -1, 1, &seed);
    float *B = lz_test_uniform_array((size_t)(tb ? n : k) * ldb, -1, 1, &seed);
    float *whole = lz_test_nan_array((size_t)m * n), *part = lz_test_nan_array((size_t)m * n);
    lz_cpu_set_threads(2);
    lz_gemm(false, tb, m, n, k, 1.0f, A, k, B, ldb, 0.0f, whole, n);
    const int lens[] = {1, 2, 5, 15, 16, 17, 33};
    int differ = 0;
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (int off = 0; off + lens[i] <= m; off += lens[i] + 3) {
            lz_gemm(false, tb, lens[i], n, k, 1.0f, A + (size_t)off * k, k, B, ldb, 0.0f, part, n);
            differ += memcmp(part, whole + (size_t)off * n, sizeof(float) * lens[i] * n) != 0;
        }
    CHECK_MSG(differ == 0, "N%c m %d n %d k %d: %d runs of rows differ from the whole product", tb ? 'T' : 'N', m, n,
              k, differ);
    free(A), free(B), free(whole), free(part);
}

int main(void) {
    const int ks[] = {1, 7, 64, 256, 500, 768}, ns[] = {1, 3, 64, 65, 200, 512};
    unsigned seed = 1;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            check_rows_alone(true, 70, ns[j], ks[i], seed++);  // x W^T: linear, scores, logits
            check_rows_alone(false, 70, ns[j], ks[i], seed++); // dy W: the input's gradient
        }
    check_product(false, true, 37, 130, 96, 1.0f, 0.0f, 101);
    check_product(false, true, 16, 64, 256, 0.5f, 1.0f, 102);
    check_product(false, false, 50, 70, 33, 1.0f, 0.0f, 103);
    check_product(false, false, 3, 300, 129, 1.0f, 1.0f, 104);
    check_product(true, false, 40, 8, 77, 2.0f, 1.0f, 105); // dy^T u: LoRA's dB
    check_product(true, false, 8, 100, 19, 1.0f, 0.0f, 106);
    check_product(false, true, 5, 9, 0, 1.0f, 0.0f, 107); // no terms: C = 0
    return lz_test_finish("test_cpu_gemm");
}
