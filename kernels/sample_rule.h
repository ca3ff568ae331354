/* sample_rule.h - the arithmetic of sample_rows that the CPU reference
 * (kernels/cpu/sample_rows.c) and the CUDA kernel (kernels/cuda/sample_rows.cu)
 * share, written so that both get the same bits: the order key of a logit, a
 * token's weight as a fixed-point integer (exp2 by a fixed polynomial with
 * separately rounded float operations, no library exp, no fused multiply-add),
 * and integer fractions of a mass. Masses are integers, so sums do not depend
 * on their order: the GPU's parallel sums equal the CPU's loop exactly.
 *
 * The rule (for one row, temperature T > 0, top_k k, top_p p, uniform u):
 *   order:  by logit, high first; equal logits by index, low first (NaN last,
 *           -0 = +0);
 *   weight: w_i = round-down(2^40 * exp((x_i - max) / T)), computed as below;
 *   top-k:  K = the first k tokens in that order (k = 0 or >= vocab: all);
 *   top-p:  of K, the shortest prefix in that order whose weight reaches
 *           floor(Z * p) (at least 1), Z = the weight of K (p >= 1: all of K);
 *   pick:   target = floor(M * u), M = the kept weight; the id is the first
 *           kept token, in index order, whose running kept weight exceeds it.
 * T = 0 (or a row whose largest logit is -inf / NaN): the first index of the
 * largest key, i.e. argmax_rows' choice for rows without NaN. */
#ifndef LZ_SAMPLE_RULE_H
#define LZ_SAMPLE_RULE_H

#include <math.h>   // floorf
#include <stdint.h> // uint32_t, uint64_t
#include <string.h> // memcpy

#ifdef __CUDACC__
#define LZ_SR_FN static __host__ __device__ __forceinline__
#else
#define LZ_SR_FN static inline
#endif

/* Separately rounded float operations: nvcc would otherwise fuse a * b + c. */
#ifdef __CUDA_ARCH__
#define LZ_SR_MUL(a, b) __fmul_rn((a), (b))
#define LZ_SR_ADD(a, b) __fadd_rn((a), (b))
#else
#define LZ_SR_MUL(a, b) ((a) * (b))
#define LZ_SR_ADD(a, b) ((a) + (b))
#endif

/* The largest token weighs 2^40 (each at most 2^40.5): a row of up to
 * LZ_SAMPLE_MAX_VOCAB tokens sums below 2^63. */
enum { LZ_SAMPLE_MASS_BITS = 40, LZ_SAMPLE_MAX_VOCAB = 1 << 22 };

/* Logit -> unsigned key with the same order; NaN -> 0 (lowest), -0 -> +0. */
LZ_SR_FN uint32_t lz_sample_key(float x) {
    if (x != x)
        return 0;
    if (x == 0.0f)
        x = 0.0f;
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* Key -> the logit it stands for (key 0: NaN). */
LZ_SR_FN float lz_sample_key_value(uint32_t key) {
    const uint32_t b = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* The fixed-point weight of logit x in a row whose largest logit is m, with
 * c = (float)(log2(e) / T): 2^(40 + y), y = (x - m) * c <= 0, as 2^n * q(f)
 * (n = nearest integer to y, f = y - n in [-1/2, 1/2], q Cephes' exp2f
 * polynomial, relative error ~2e-7); below 2^-64 of the top weight: 0. */
LZ_SR_FN uint64_t lz_sample_mass(float x, float m, float c) {
    const float y = x == m ? 0.0f : LZ_SR_MUL(LZ_SR_ADD(x, -m), c);
    if (!(y >= -64.0f)) // NaN too
        return 0;
    const float n = floorf(LZ_SR_ADD(y, 0.5f)), f = LZ_SR_ADD(y, -n); // f exact: y and n are close
    float q = 1.535336188319500e-4f;
    q = LZ_SR_ADD(LZ_SR_MUL(q, f), 1.339887440266574e-3f);
    q = LZ_SR_ADD(LZ_SR_MUL(q, f), 9.618437357674640e-3f);
    q = LZ_SR_ADD(LZ_SR_MUL(q, f), 5.550332471162809e-2f);
    q = LZ_SR_ADD(LZ_SR_MUL(q, f), 2.402264791363012e-1f);
    q = LZ_SR_ADD(LZ_SR_MUL(q, f), 6.931472028550421e-1f);
    q = LZ_SR_ADD(LZ_SR_MUL(q, f), 1.0f); // 2^f in [0.70, 1.42]: 24 significant bits
    const uint64_t mant = (uint64_t)LZ_SR_MUL(q, 16777216.0f); // exact: q * 2^24 is an integer
    const int shift = (int)n + LZ_SAMPLE_MASS_BITS - 24;     // in [-48, 16]
    return shift >= 0 ? mant << shift : mant >> -shift;
}

/* The weights' scale for a temperature > 0: (float)(log2(e) / T), the
 * largest float for a T so small that it would not fit. */
LZ_SR_FN float lz_sample_scale(double temperature) {
    const double c = 1.4426950408889634 / temperature;
    return c < 3.4028234663852886e38 ? (float)c : 3.4028234663852886e38f;
}

/* floor(a * f / 2^53) for f <= 2^53 (a fraction of a mass), exactly. */
LZ_SR_FN uint64_t lz_sample_frac53(uint64_t a, uint64_t f) {
#ifdef __CUDA_ARCH__
    const uint64_t hi = __umul64hi(a, f), lo = a * f;
#else
    const unsigned __int128 prod = (unsigned __int128)a * f;
    const uint64_t hi = (uint64_t)(prod >> 64), lo = (uint64_t)prod;
#endif
    return (hi << 11) | (lo >> 53);
}

/* A probability or uniform in [0, 1] as a 53-bit fraction (NaN, < 0 -> 0). */
LZ_SR_FN uint64_t lz_sample_to53(double v) {
    const double two53 = 9007199254740992.0;
    if (!(v > 0))
        return 0;
    return v >= 1 ? (uint64_t)two53 : (uint64_t)(v * two53);
}

#endif
