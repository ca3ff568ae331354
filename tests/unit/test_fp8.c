/* test_fp8.c - the FP8 rule (kernels/fp8_rule.h) against a brute-force search
 * over the 256 E4M3 codes, and the CPU reference's FP8 linear layer.
 *
 * The codes' values are built here a second way (a table of the positive
 * values in increasing order: 7 subnormals k * 2^-9, then 1 + m/8 times each
 * power of two from 2^-6 to 2^8, cut at 448), and the code of a value is the
 * nearest table entry by search, ties to the even code: the rule's arithmetic
 * (frexp, scaling, rint) is checked against what it must equal.
 * tests/cli/fp8_test.sh checks the same rule against Python's exact fractions. */
#include <math.h>   // isnan, ldexp, fabs, nextafter, INFINITY, NAN
#include <stdint.h> // uint8_t, uint32_t
#include <stdlib.h> // malloc, free
#include <string.h> // memcpy

#include "cpu_kernels.h" // linear_fp8_forward, linear_forward
#include "fp8_rule.h"    // the code under test
#include "test_util.h"   // CHECK, lz_test_finish

static double positive[127]; /* the value of code c for c = 0 .. 0x7E */

static void build_table(void) {
    int n = 0;
    for (int k = 0; k < 8; k++) // zero and the subnormals
        positive[n++] = k * ldexp(1.0, -9);
    for (int e = -6; e <= 8; e++)
        for (int m = 0; m < 8 && n < 127; m++)
            positive[n++] = (1.0 + m / 8.0) * ldexp(1.0, e);
}

/* The code of v by search: the nearest value, ties to the even code, beyond 448 saturated. */
static uint8_t search_code(double v) {
    const uint8_t sign = signbit(v) ? 0x80 : 0;
    if (isnan(v))
        return sign | 0x7F;
    const double a = fabs(v);
    int best = 0;
    for (int c = 1; c < 127; c++) {
        const double d = fabs(positive[c] - a), db = fabs(positive[best] - a);
        if (d < db || (d == db && (c & 1) == 0))
            best = c;
    }
    return (uint8_t)(sign | best);
}

static uint32_t rng_state = 0x2545F491u;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void test_decode(void) {
    for (int c = 0; c < 127; c++) {
        CHECK_MSG(lz_e4m3_to_float((uint8_t)c) == (float)positive[c], "code 0x%02x: %g, expected %g", c,
                  (double)lz_e4m3_to_float((uint8_t)c), positive[c]);
        CHECK_MSG(lz_e4m3_to_float((uint8_t)(c | 0x80)) == -(float)positive[c], "code 0x%02x", c | 0x80);
    }
    CHECK(positive[126] == 448.0 && lz_e4m3_to_float(LZ_E4M3_MAX_CODE) == LZ_E4M3_MAX);
    CHECK(positive[1] == ldexp(1.0, -9) && positive[8] == ldexp(1.0, -6));
    CHECK(isnan(lz_e4m3_to_float(0x7F)) && isnan(lz_e4m3_to_float(0xFF)));
    CHECK(signbit(lz_e4m3_to_float(0x80)) && lz_e4m3_to_float(0x80) == 0.0f);
    for (int c = 1; c < 127; c++)
        CHECK(positive[c] > positive[c - 1]);
}

static void check_encode(double v) {
    const uint8_t got = lz_e4m3_from_double(v), want = search_code(v);
    CHECK_MSG(got == want, "%.17g -> 0x%02x, expected 0x%02x", v, got, want);
}

static void test_encode(void) {
    for (int c = 0; c < 127; c++) { // every value, its neighbours and the midpoints (ties)
        const double v = positive[c];
        check_encode(v), check_encode(-v);
        check_encode(nextafter(v, 0.0)), check_encode(nextafter(v, 1e9));
        if (c < 126) {
            const double mid = (v + positive[c + 1]) / 2;
            check_encode(mid), check_encode(-mid);
            check_encode(nextafter(mid, 0.0)), check_encode(nextafter(mid, 1e9));
        }
    }
    for (int c = 0; c < 256; c++) // round trips (NaN aside)
        if ((c & 0x7F) != 0x7F)
            CHECK_MSG(lz_e4m3_from_double(lz_e4m3_to_float((uint8_t)c)) == c, "code 0x%02x", c);
    for (int i = 0; i < 200000; i++) { // random magnitudes from 2^-14 to 2^10
        const double v = ldexp((double)rng() / 4294967296.0, (int)(rng() % 25) - 14);
        check_encode(rng() & 1 ? v : -v);
    }
    // saturation, the largest value's tie, infinities, NaN, zeros and values below the smallest subnormal
    CHECK(lz_e4m3_from_double(448.0) == 0x7E && lz_e4m3_from_double(464.0) == 0x7E);
    CHECK(lz_e4m3_from_double(479.99) == 0x7E && lz_e4m3_from_double(1e30) == 0x7E);
    CHECK(lz_e4m3_from_double(-1e30) == 0xFE && lz_e4m3_from_double(INFINITY) == 0x7E);
    CHECK(lz_e4m3_from_double(-INFINITY) == 0xFE);
    CHECK(lz_e4m3_from_double(NAN) == 0x7F && lz_e4m3_from_double(-NAN) == 0xFF);
    CHECK(lz_e4m3_from_double(0.0) == 0x00 && lz_e4m3_from_double(-0.0) == 0x80);
    CHECK(lz_e4m3_from_double(ldexp(1.0, -10)) == 0x00);                    // the tie with 0 goes to 0
    CHECK(lz_e4m3_from_double(nextafter(ldexp(1.0, -10), 1.0)) == 0x01);    // just above it: 2^-9
    CHECK(lz_e4m3_from_double(ldexp(3.0, -10)) == 0x02);                    // 1.5 * 2^-9: to 2 * 2^-9 (even)
    CHECK(lz_e4m3_from_double(1.0 + 1.0 / 16) == 0x38 && lz_e4m3_from_double(1.0 + 3.0 / 16) == 0x3A);
    CHECK(lz_e4m3_from_double(3.875) == 0x48); // the tie between 3.75 (0x47) and 4 (0x48) goes to the even code
}

static void test_rows(void) {
    const float zero[5] = {0, 0, -0.0f, 0, 0};
    uint8_t q[5];
    CHECK(lz_fp8_quantize_row(zero, 5, q) == 1.0f);
    CHECK(q[0] == 0 && q[1] == 0 && q[2] == 0x80 && q[3] == 0 && q[4] == 0);
    const float tiny[2] = {1e-44f, -1e-45f}; // the scale underflows: 1, and the codes are 0
    CHECK(lz_fp8_quantize_row(tiny, 2, q) == 1.0f && q[0] == 0 && q[1] == 0x80);
    const float row[4] = {0.5f, -3.0f, 1e-9f, 2.9f};
    const float s = lz_fp8_quantize_row(row, 4, q);
    CHECK(s == 3.0f / 448.0f);
    CHECK(q[1] == 0xFE && q[2] == 0x00); // the row's largest magnitude: -448; 1e-9 / s is below 2^-10: 0
    for (int i = 0; i < 4; i++)
        CHECK(q[i] == search_code((double)row[i] / (double)s));
    CHECK(lz_fp8_encode(3.2f, s) == 0x7E && lz_fp8_encode(-1e6f, s) == 0xFE); // beyond 448 s: saturated
    // dequantized, each weight is within half a step of its code's spacing
    for (int i = 0; i < 2000; i++) {
        float w[16];
        for (int j = 0; j < 16; j++)
            w[j] = ldexpf((float)(rng() % 2000001) / 1e6f - 1.0f, (int)(rng() % 20) - 10);
        uint8_t c[16];
        const float sc = lz_fp8_quantize_row(w, 16, c);
        for (int j = 0; j < 16; j++) {
            const double x = fabs((double)w[j] / sc), err = fabs((double)sc * lz_e4m3_to_float(c[j]) - w[j]);
            const double step = x < ldexp(1.0, -6) ? ldexp(1.0, -9) : ldexp(1.0, (int)floor(log2(x)) - 3);
            CHECK_MSG(err <= sc * step / 2 * (1 + 1e-12), "w %g scale %g code 0x%02x", (double)w[j], (double)sc, c[j]);
        }
    }
}

/* The CPU's FP8 linear layer against s * sum x q in double, every output written, the same bits for any T. */
static void test_linear(void) {
    enum { T = 7, IN = 37, OUT = 5 };
    float x[T * IN], scale[OUT], bias[OUT], out[T * OUT], one[OUT];
    uint8_t q[OUT * IN];
    for (int i = 0; i < T * IN; i++)
        x[i] = (float)(rng() % 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < OUT * IN; i++)
        q[i] = (uint8_t)(rng() % 256);
    for (int i = 0; i < OUT * IN; i++)
        if ((q[i] & 0x7F) == 0x7F)
            q[i] ^= 1; // no NaN
    for (int o = 0; o < OUT; o++)
        scale[o] = (float)(rng() % 1000 + 1) / 3e5f, bias[o] = (float)(rng() % 100) / 50.0f - 1.0f;
    for (int pass = 0; pass < 2; pass++) {
        const float *b = pass ? bias : NULL;
        for (int i = 0; i < T * OUT; i++)
            out[i] = NAN;
        CHECK(linear_fp8_forward(out, x, q, scale, b, T, IN, OUT) == LZ_OK);
        for (int t = 0; t < T; t++) {
            for (int o = 0; o < OUT; o++)
                one[o] = NAN;
            CHECK(linear_fp8_forward(one, x + t * IN, q, scale, b, 1, IN, OUT) == LZ_OK);
            for (int o = 0; o < OUT; o++) {
                double ref = 0;
                for (int i = 0; i < IN; i++)
                    ref += (double)x[t * IN + i] * lz_e4m3_to_float(q[o * IN + i]);
                ref = ref * scale[o] + (b ? b[o] : 0.0);
                CHECK_MSG(fabs(out[t * OUT + o] - ref) <= 1e-5 * (fabs(ref) + 1e-3), "t %d o %d: %g vs %g", t, o,
                          (double)out[t * OUT + o], ref);
                CHECK(memcmp(&one[o], &out[t * OUT + o], sizeof(float)) == 0);
            }
        }
    }
}

int main(void) {
    build_table();
    test_decode();
    test_encode();
    test_rows();
    test_linear();
    return lz_test_finish("test_fp8");
}
