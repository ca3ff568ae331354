/* real.h - the element type of one build of the CPU kernels: float, or double
 * where the including file defines LZ_TRAIN_F64 (the training kernels' build
 * for gradient checks). LZ_R(name) gives the function its _f32/_f64 name.
 * The dot products below are the one order of summation that the inference
 * kernels (gla.c, linear_fp8.c) and the training kernels share. */
#ifndef LZ_CPU_REAL_H
#define LZ_CPU_REAL_H

#include <math.h> // exp, expf, log, logf, log1p, log1pf, sqrt, sqrtf

#ifdef LZ_TRAIN_F64
typedef double real;
#define LZ_R(name) name##_f64
#define R_EXP exp
#define R_LOG log
#define R_LOG1P log1p
#define R_SQRT sqrt
#else
typedef float real;
#define LZ_R(name) name##_f32
#define R_EXP expf
#define R_LOG logf
#define R_LOG1P log1pf
#define R_SQRT sqrtf
#endif

/* a . b over n elements */
static inline real LZ_R(dotr)(const real *a, const real *b, int n) {
    real acc = 0;
    for (int i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

/* out[r] = M_r . x for rows M_r = M + r ld (r < rows), each summed as dotr sums it: four rows at a
 * time, so that four independent sums overlap instead of one waiting on its last add. */
static inline void LZ_R(dots)(real *out, const real *M, size_t ld, const real *x, int rows, int n) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) {
        const real *m0 = M + (size_t)r * ld, *m1 = m0 + ld, *m2 = m1 + ld, *m3 = m2 + ld;
        real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int i = 0; i < n; i++) {
            s0 += m0[i] * x[i];
            s1 += m1[i] * x[i];
            s2 += m2[i] * x[i];
            s3 += m3[i] * x[i];
        }
        out[r] = s0, out[r + 1] = s1, out[r + 2] = s2, out[r + 3] = s3;
    }
    for (; r < rows; r++)
        out[r] = LZ_R(dotr)(M + (size_t)r * ld, x, n);
}

#endif
