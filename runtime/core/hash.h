/* hash.h - FNV-1a (64-bit) over bytes: cheap, stable identities for tensor
 * names (random-weight streams), step signatures and session fingerprints. */
#ifndef LZ_HASH_H
#define LZ_HASH_H

#include <stddef.h> // size_t
#include <stdint.h> // uint64_t, uint8_t
#include <string.h> // memcpy

#define LZ_FNV1A_INIT 0xcbf29ce484222325ull

/* Continues hash h over n bytes (start from LZ_FNV1A_INIT). */
static inline uint64_t lz_fnv1a(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* 8 bytes as a little-endian word, whatever the host (one load on x86/ARM). */
static inline uint64_t lz_load_le64(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

/* Continues hash h over n bytes, 32 at a time in four independent
 * multiply-xor lanes (FNV-1a's one byte per multiply runs at ~1 GB/s; this
 * runs at memory speed): the checksum of multi-megabyte session states.
 * The lanes are separate variables with one load each so that the compiler
 * keeps them in registers (an indexed lane array halved the rate). */
static inline uint64_t lz_hash_wide(uint64_t h, const void *data, size_t n) {
    if (n == 0)
        return h;
    const uint8_t *p = (const uint8_t *)data;
    const uint64_t prime = 0x100000001b3ull;
    uint64_t l0 = h, l1 = h ^ 0x9E3779B97F4A7C15ull, l2 = h ^ 0xC2B2AE3D27D4EB4Full, l3 = h ^ 0x165667B19E3779F9ull;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        l0 = (l0 ^ lz_load_le64(p + i)) * prime, l0 ^= l0 >> 29;
        l1 = (l1 ^ lz_load_le64(p + i + 8)) * prime, l1 ^= l1 >> 29;
        l2 = (l2 ^ lz_load_le64(p + i + 16)) * prime, l2 ^= l2 >> 29;
        l3 = (l3 ^ lz_load_le64(p + i + 24)) * prime, l3 ^= l3 >> 29;
    }
    h = (h ^ l0) * prime;
    h = (h ^ l1) * prime;
    h = (h ^ l2) * prime;
    h = (h ^ l3) * prime;
    return lz_fnv1a(h ^ (uint64_t)n, p + i, n - i);
}

#endif
