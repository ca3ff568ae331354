/* test_dtype.c - dtype names and sizes; bf16/f16 <-> fp32 conversions (bit patterns, ties, subnormals, inf, nan). */
#include <math.h>   // isnan, isinf, isfinite, ldexpf, fabs, INFINITY
#include <stdint.h> // uint16_t, uint32_t
#include <stdio.h>  // fprintf
#include <string.h> // memcpy

#include "dtype.h"     // the code under test
#include "test_util.h" // CHECK, lz_test_finish

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Small deterministic generator (xorshift32). */
static uint32_t rng_state = 0x12345678u;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void test_names(void) {
    static const char *const names[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8",
                                        "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};
    static const size_t sizes[] = {4, 2, 2, 8, 8, 4, 2, 1, 8, 4, 2, 1, 1, 1, 1};
    CHECK(sizeof names / sizeof *names == LZ_DTYPE_COUNT);
    for (int i = 0; i < LZ_DTYPE_COUNT; i++) {
        CHECK_MSG(lz_dtype_from_name(names[i]) == i, "%s", names[i]);
        CHECK(strcmp(lz_dtype_name((lz_dtype)i), names[i]) == 0);
        CHECK_MSG(lz_dtype_size((lz_dtype)i) == sizes[i], "%s", names[i]);
    }
    CHECK(lz_dtype_from_name("f32") == -1); /* case matters, as in safetensors */
    CHECK(lz_dtype_from_name("F33") == -1);
    CHECK(lz_dtype_from_name("") == -1);
    CHECK(lz_dtype_from_name(NULL) == -1);
    CHECK(lz_dtype_is_float_weight(LZ_DTYPE_F32) && lz_dtype_is_float_weight(LZ_DTYPE_F16) &&
          lz_dtype_is_float_weight(LZ_DTYPE_BF16));
    CHECK(!lz_dtype_is_float_weight(LZ_DTYPE_F64) && !lz_dtype_is_float_weight(LZ_DTYPE_I64) &&
          !lz_dtype_is_float_weight(LZ_DTYPE_F8_E4M3));
}

static void test_bf16_known(void) {
    CHECK(lz_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(lz_f32_to_bf16(-2.0f) == 0xc000);
    CHECK(lz_f32_to_bf16(0.0f) == 0x0000);
    CHECK(lz_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(lz_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(lz_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(lz_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(lz_bf16_to_f32(0xc0a0) == -5.0f);
    CHECK(isinf(lz_bf16_to_f32(0x7f80)));
    CHECK(isnan(lz_bf16_to_f32(0x7fc0)));
    /* NaN stays NaN even when its payload lives only in the dropped low bits */
    uint16_t n = lz_f32_to_bf16(from_bits(0x7f800001u));
    CHECK_MSG((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0, "0x%04x", n);
    CHECK((lz_f32_to_bf16(from_bits(0xff800001u)) & 0x8000) != 0);
    /* ties: 1 + half a bf16 ulp goes to even (down), odd + half goes up */
    CHECK(lz_f32_to_bf16(from_bits(0x3f808000u)) == 0x3f80);
    CHECK(lz_f32_to_bf16(from_bits(0x3f818000u)) == 0x3f82);
    CHECK(lz_f32_to_bf16(from_bits(0x3f808001u)) == 0x3f81);
    CHECK(lz_f32_to_bf16(from_bits(0x3f807fffu)) == 0x3f80);
    /* overflow rounds to inf; subnormals keep their bits */
    CHECK(lz_f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80);
    CHECK(lz_f32_to_bf16(from_bits(0x00010000u)) == 0x0001);
    CHECK(to_bits(lz_bf16_to_f32(0x0001)) == 0x00010000u);
}

static void test_f16_known(void) {
    CHECK(lz_f32_to_f16(1.0f) == 0x3c00);
    CHECK(lz_f32_to_f16(-2.0f) == 0xc000);
    CHECK(lz_f32_to_f16(0.5f) == 0x3800);
    CHECK(lz_f32_to_f16(-0.0f) == 0x8000);
    CHECK(lz_f32_to_f16(65504.0f) == 0x7bff); /* largest finite */
    CHECK(lz_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(lz_f32_to_f16(65520.0f) == 0x7c00); /* tie at the top rounds to inf */
    CHECK(lz_f32_to_f16(1e9f) == 0x7c00);
    CHECK(lz_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(lz_f32_to_f16(ldexpf(1.0f, -14)) == 0x0400); /* smallest normal */
    CHECK(lz_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001); /* smallest subnormal */
    CHECK(lz_f32_to_f16(ldexpf(1023.0f, -24)) == 0x03ff);
    CHECK(lz_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);           /* tie to even: 0 */
    CHECK(lz_f32_to_f16(ldexpf(1.0f, -25) * 1.0001f) == 0x0001); /* just above the tie */
    CHECK(lz_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002);           /* 1.5 ulp: tie to even 2 */
    CHECK(lz_f32_to_f16(ldexpf(5.0f, -25)) == 0x0002);           /* 2.5 ulp: tie to even 2 */
    CHECK(lz_f32_to_f16(ldexpf(2047.0f, -25)) == 0x0400);        /* rounds up into the normals */
    CHECK(lz_f32_to_f16(ldexpf(1.0f, -30)) == 0x0000);
    CHECK(lz_f32_to_f16(from_bits(0x00000001u)) == 0x0000); /* f32 subnormal */
    CHECK(lz_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00);      /* tie, even below */
    CHECK(lz_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02);  /* tie, odd below */
    uint16_t n = lz_f32_to_f16(from_bits(0x7f800001u));
    CHECK_MSG((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0, "0x%04x", n);
    CHECK(lz_f16_to_f32(0x3c00) == 1.0f);
    CHECK(lz_f16_to_f32(0xc000) == -2.0f);
    CHECK(lz_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(lz_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(lz_f16_to_f32(0x83ff) == -ldexpf(1023.0f, -24));
    CHECK(to_bits(lz_f16_to_f32(0x8000)) == 0x80000000u);
    CHECK(isinf(lz_f16_to_f32(0x7c00)) && lz_f16_to_f32(0xfc00) < 0);
    CHECK(isnan(lz_f16_to_f32(0x7e00)) && isnan(lz_f16_to_f32(0x7c01)));
}

/* Every 16-bit pattern survives 16 -> 32 -> 16 (NaNs stay NaN). */
static void test_round_trips(void) {
    int bad_f16 = 0, bad_bf16 = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = lz_f16_to_f32((uint16_t)h);
        uint16_t back = lz_f32_to_f16(f);
        if (isnan(f) ? !isnan(lz_f16_to_f32(back)) : back != h)
            bad_f16++;
        float g = lz_bf16_to_f32((uint16_t)h);
        uint16_t back_b = lz_f32_to_bf16(g);
        if (isnan(g) ? !isnan(lz_bf16_to_f32(back_b)) : back_b != h)
            bad_bf16++;
    }
    CHECK_MSG(bad_f16 == 0, "%d f16 patterns", bad_f16);
    CHECK_MSG(bad_bf16 == 0, "%d bf16 patterns", bad_bf16);
}

/* 1 if `h` is the value nearest to x, ties to even h. x is finite and
 * positive; `dec` decodes the 16-bit format, `inf_bits` is its +inf. */
static int is_nearest(float x, uint16_t h, float (*dec)(uint16_t), uint16_t inf_bits) {
    uint16_t max = (uint16_t)(inf_bits - 1); /* largest finite */
    double top = dec(max), ulp = top - dec((uint16_t)(max - 1));
    if (h == inf_bits) /* odd `max` loses the tie, so the halfway point goes to inf */
        return (double)x >= top + ulp / 2;
    if (h > max)
        return 0;
    double d = fabs((double)x - dec(h));
    double d_down = h > 0 ? fabs((double)x - dec((uint16_t)(h - 1))) : INFINITY;
    double d_up = fabs((double)x - (h < max ? (double)dec((uint16_t)(h + 1)) : top + ulp));
    if (d > d_up || d > d_down)
        return 0;
    return !((d == d_up || d == d_down) && (h & 1));
}

static int report(const char *what, float x, uint16_t h, int bad) {
    if (bad < 5)
        fprintf(stderr, "%s: %a -> 0x%04x is not the nearest (ties even)\n", what, x, h);
    return bad + 1;
}

/* Random fp32 values: the conversion is the correctly rounded nearest value. */
static void test_nearest_random(void) {
    int bad_f16 = 0, bad_bf16 = 0;
    for (int i = 0; i < 2000000; i++) {
        /* exponents from below the f16 subnormals to past its overflow */
        float x = from_bits((rng() & 0x007fffffu) | ((uint32_t)(95 + rng() % 50) << 23));
        uint16_t h = lz_f32_to_f16(x);
        if (!is_nearest(x, h, lz_f16_to_f32, 0x7c00) || lz_f32_to_f16(-x) != (h | 0x8000))
            bad_f16 = report("f16", x, h, bad_f16);
        float y = from_bits(rng() & 0x7fffffffu); /* any positive fp32 */
        uint16_t b = lz_f32_to_bf16(y);
        if (isfinite(y) && !is_nearest(y, b, lz_bf16_to_f32, 0x7f80))
            bad_bf16 = report("bf16", y, b, bad_bf16);
    }
    CHECK_MSG(bad_f16 == 0, "%d f16 conversions", bad_f16);
    CHECK_MSG(bad_bf16 == 0, "%d bf16 conversions", bad_bf16);
}

/* Source at an odd address, little-endian bytes. */
static void test_convert_unaligned(void) {
    unsigned char raw[64 + 1];
    unsigned char *p = raw + 1;
    float want[4] = {1.5f, -2.0f, 0.0f, 65504.0f};
    for (int i = 0; i < 4; i++) {
        uint32_t u = to_bits(want[i]);
        for (int b = 0; b < 4; b++)
            p[4 * i + b] = (unsigned char)(u >> (8 * b));
    }
    float out[4];
    lz_convert_to_f32(out, p, LZ_DTYPE_F32, 4);
    for (int i = 0; i < 4; i++)
        CHECK(out[i] == want[i]);

    const uint16_t h16[4] = {0x3e00, 0xc000, 0x0001, 0x7bff}; /* 1.5, -2, 2^-24, 65504 */
    const float w16[4] = {1.5f, -2.0f, ldexpf(1.0f, -24), 65504.0f};
    for (int i = 0; i < 4; i++)
        p[2 * i] = (unsigned char)(h16[i] & 0xff), p[2 * i + 1] = (unsigned char)(h16[i] >> 8);
    lz_convert_to_f32(out, p, LZ_DTYPE_F16, 4);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(out[i] == w16[i], "f16[%d] %g", i, out[i]);

    const uint16_t hb[3] = {0x3fc0, 0xc000, 0x4049}; /* 1.5, -2, 3.140625 */
    const float wb[3] = {1.5f, -2.0f, 3.140625f};
    for (int i = 0; i < 3; i++)
        p[2 * i] = (unsigned char)(hb[i] & 0xff), p[2 * i + 1] = (unsigned char)(hb[i] >> 8);
    lz_convert_to_f32(out, p, LZ_DTYPE_BF16, 3);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(out[i] == wb[i], "bf16[%d] %g", i, out[i]);
    out[0] = 7.0f;
    lz_convert_to_f32(out, p, LZ_DTYPE_I8, 1); /* not a float weight: zeros, not garbage */
    CHECK(out[0] == 0.0f);
}

int main(void) {
    test_names();
    test_bf16_known();
    test_f16_known();
    test_round_trips();
    test_nearest_random();
    test_convert_unaligned();
    return lz_test_finish("test_dtype");
}
