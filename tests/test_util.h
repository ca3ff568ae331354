/* test_util.h - minimal checks for the C test programs: every failed check is
 * printed with file:line, counted, and makes the program exit non-zero. */
#ifndef LZ_TEST_UTIL_H
#define LZ_TEST_UTIL_H

#include <math.h>   // fabs
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc
#include <string.h> // strstr

static int lz_test_failures;
static int lz_test_checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        lz_test_checks++;                                                            \
        if (!(cond)) {                                                               \
            lz_test_failures++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                        \
    do {                                                                            \
        lz_test_checks++;                                                           \
        if (!(cond)) {                                                              \
            lz_test_failures++;                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, "\n");                                                  \
        }                                                                           \
    } while (0)

#define CHECK_NEAR(a, b, tol) CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g", (double)(a), (double)(b))

/* Checks that a call failed with `status` and that the error message
 * contains `needle` (the thing it must name). */
#define CHECK_FAILS_WITH(call, status, needle)                                                    \
    do {                                                                                          \
        lz_error_clear();                                                                         \
        lz_status st_ = (call);                                                                   \
        CHECK_MSG(st_ == (status), "status %d, expected %d (%s)", (int)st_, (int)(status),        \
                  lz_error_message());                                                            \
        CHECK_MSG(strstr(lz_error_message(), (needle)) != NULL, "message '%s' lacks '%s'",         \
                  lz_error_message(), (needle));                                                  \
        lz_error_clear();                                                                         \
    } while (0)

/* n floats uniform on [lo, hi) from a 16-bit LCG draw: lo + (hi - lo) * u / 65536, exact in float
 * where the range is a power of two */
static inline float *lz_test_uniform_array(size_t n, double lo, double hi, unsigned *seed) {
    float *a = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; a && i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        a[i] = (float)(lo + (hi - lo) * (double)((*seed >> 8) & 0xffff) / 65536.0);
    }
    return a;
}

/* n NaNs: an output buffer that a kernel must write whole */
static inline float *lz_test_nan_array(size_t n) {
    float *a = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; a && i < n; i++)
        a[i] = NAN;
    return a;
}

static inline int lz_test_finish(const char *name) {
    if (lz_test_checks == 0) {
        fprintf(stderr, "%s: no checks ran\n", name);
        return 1;
    }
    fprintf(stderr, "%s: %d checks, %d failed\n", name, lz_test_checks, lz_test_failures);
    return lz_test_failures ? 1 : 0;
}

#endif
