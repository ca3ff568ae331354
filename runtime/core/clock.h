/* clock.h - monotonic wall time in seconds, for reports and benchmarks. */
#ifndef LZ_CLOCK_H
#define LZ_CLOCK_H

#include <time.h> // clock_gettime, CLOCK_MONOTONIC

static inline double lz_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
