/* real.h - the element type of one build of the training kernels: the
 * including file defines LZ_TRAIN_F64 (double, for gradient checks) or not
 * (float, for training). LZ_R(name) gives the function its _f32/_f64 name. */
#ifndef LZ_TRAIN_REAL_H
#define LZ_TRAIN_REAL_H

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

#endif
