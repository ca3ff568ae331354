/* fp8_rule.h - FP8 weights, written once so that the loader (host), the CPU
 * reference and the CUDA kernels read and make the same bytes.
 *
 * E4M3 ("e4m3fn", the hub's F8_E4M3): 1 sign, 4 exponent (bias 7), 3 mantissa
 * bits; no infinities; S.1111.111 is NaN; the largest value 448 (S.1111.110);
 * subnormals m * 2^-9. A linear layer's weight W [out, in] is held as codes
 * q [out, in] and one fp32 scale per row (output channel), W[o][i] = s_o * q[o][i]:
 *
 *   s_o    = max_i |W[o][i]| / 448, rounded to fp32; a row whose s_o is 0 (a
 *            zero row, or one so small that the quotient underflows): s_o = 1
 *   q[o][i] = the E4M3 code nearest to W[o][i] / s_o (the exact quotient; ties
 *            to the even mantissa), saturating: beyond ±448 -> ±448; NaN -> NaN
 *
 * and a linear layer computes y[t][o] = s_o * sum_i x[t][i] * q[o][i] (+ b[o]):
 * the codes are exact in fp32, the scale enters once per output.
 *
 * The quotient is taken in double: W and s_o are fp32, so the exact quotient is
 * never within 2^-53 of an E4M3 rounding midpoint unless it is one, and
 * rounding the double to E4M3 gives the code of the exact quotient. */
#ifndef LZ_FP8_RULE_H
#define LZ_FP8_RULE_H

#include <math.h>   // frexp, ldexp, rint, ldexpf, fabs, fabsf, signbit
#include <stdint.h> // uint8_t, uint32_t
#include <string.h> // memcpy

#ifdef __CUDACC__
#define LZ_F8_FN static __host__ __device__ __forceinline__
#else
#define LZ_F8_FN static inline
#endif

enum { LZ_E4M3_NAN = 0x7F, LZ_E4M3_MAX_CODE = 0x7E };
#define LZ_E4M3_MAX 448.0f

/* The value of a code (NaN for S.1111.111). */
LZ_F8_FN float lz_e4m3_to_float(uint8_t c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float mag;
    if (e == 15 && m == 7) {
        const uint32_t nan_bits = 0x7FC00000u;
        memcpy(&mag, &nan_bits, sizeof mag);
    } else if (e == 0) {
        mag = ldexpf((float)m, -9); // subnormal: m * 2^-9
    } else {
        mag = ldexpf((float)(8 + m), e - 10); // (1 + m/8) * 2^(e - 7)
    }
    return (c & 0x80) ? -mag : mag;
}

/* The code nearest to v (ties to even), saturating at ±448; NaN -> NaN. */
LZ_F8_FN uint8_t lz_e4m3_from_double(double v) {
    const uint8_t sign = signbit(v) ? 0x80 : 0; // -0 and -NaN keep their sign
    if (v != v)
        return (uint8_t)(sign | LZ_E4M3_NAN);
    const double a = fabs(v);
    if (a >= 448.0) // 448 and beyond (ties between 448 and 480 go to 448's even mantissa)
        return (uint8_t)(sign | LZ_E4M3_MAX_CODE);
    int e2;
    frexp(a, &e2); // a = f * 2^e2, f in [0.5, 1): a's binade is 2^(e2 - 1)
    int E = e2 - 1 < -6 ? -6 : e2 - 1; // below 2^-6 the spacing stays 2^-9 (subnormals)
    int m = (int)rint(ldexp(a, 3 - E)); // in units of the spacing 2^(E - 3): exact scaling, then to nearest even
    if (m == 16) { // rounded up into the next binade
        m = 8;
        E++;
    }
    if (m < 8) // subnormal (E = -6) or zero
        return (uint8_t)(sign | m);
    return (uint8_t)(sign | ((E + 7) << 3) | (m - 8));
}

/* The scale of a row whose largest magnitude is max_abs (finite, >= 0). */
LZ_F8_FN float lz_fp8_row_scale(float max_abs) {
#ifdef __CUDA_ARCH__
    const float s = __fdiv_rn(max_abs, LZ_E4M3_MAX);
#else
    const float s = max_abs / LZ_E4M3_MAX;
#endif
    return s > 0.0f ? s : 1.0f;
}

/* The code of w in a row of scale s. */
LZ_F8_FN uint8_t lz_fp8_encode(float w, float s) { return lz_e4m3_from_double((double)w / (double)s); }

/* One row of n finite weights -> codes; returns the row's scale. */
LZ_F8_FN float lz_fp8_quantize_row(const float *w, int64_t n, uint8_t *codes) {
    float max_abs = 0.0f;
    for (int64_t i = 0; i < n; i++)
        max_abs = fabsf(w[i]) > max_abs ? fabsf(w[i]) : max_abs;
    const float s = lz_fp8_row_scale(max_abs);
    for (int64_t i = 0; i < n; i++)
        codes[i] = lz_fp8_encode(w[i], s);
    return s;
}

#endif
