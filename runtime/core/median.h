/* median.h - the median of a few timings (benchmarks repeat a measurement
 * and report the middle one, so that one slow run does not count). */
#ifndef LZ_MEDIAN_H
#define LZ_MEDIAN_H

/* Sorts v[0, n) in place (insertion sort: n is small) and returns v[n / 2]. */
static inline double lz_median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            const double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return v[n / 2];
}

#endif
