/* grad_check.h - what the gradient checks share: seeded random arrays and the
 * error of an analytic gradient against central finite differences (double). */
#ifndef LZ_GRAD_CHECK_H
#define LZ_GRAD_CHECK_H

#include <math.h>   // fabs
#include <stdlib.h> // malloc

static inline double urand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (double)(*s >> 8) / (double)(1u << 24);
}

static inline double *rnd(size_t n, double lo, double hi, unsigned *seed) {
    double *a = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        a[i] = lo + (hi - lo) * urand(seed);
    return a;
}

static inline double dot(const double *a, const double *b, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

/* max over the entries of |finite difference - analytic| / max |analytic|:
 * the analytic gradient `grad` of loss() with respect to param[0..n). */
typedef double (*loss_fn)(void *ctx);
static inline double gradient_error(loss_fn loss, void *ctx, double *param, const double *grad, size_t n) {
    const double h = 1e-5;
    double worst = 0, scale = 1e-12;
    for (size_t i = 0; i < n; i++)
        scale = fabs(grad[i]) > scale ? fabs(grad[i]) : scale;
    for (size_t i = 0; i < n; i++) {
        const double saved = param[i];
        param[i] = saved + h;
        const double up = loss(ctx);
        param[i] = saved - h;
        const double down = loss(ctx);
        param[i] = saved;
        const double err = fabs((up - down) / (2 * h) - grad[i]) / scale;
        worst = err > worst ? err : worst;
    }
    return worst;
}

#endif
