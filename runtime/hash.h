/* hash.h - FNV-1a (64-bit) over bytes: cheap, stable identities for tensor
 * names (random-weight streams), step signatures and session fingerprints. */
#ifndef LZ_HASH_H
#define LZ_HASH_H

#include <stddef.h> // size_t
#include <stdint.h> // uint64_t, uint8_t

#define LZ_FNV1A_INIT 0xcbf29ce484222325ull

/* Continues hash h over n bytes (start from LZ_FNV1A_INIT). */
static inline uint64_t lz_fnv1a(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Continues hash h over n bytes, 32 at a time in four independent
 * multiply-xor lanes (FNV-1a's one byte per multiply runs at ~1 GB/s; this
 * runs at memory speed): the checksum of multi-megabyte session states. */
static inline uint64_t lz_hash_wide(uint64_t h, const void *data, size_t n) {
    if (n == 0)
        return h;
    const uint8_t *p = (const uint8_t *)data;
    uint64_t lane[4] = {h, h ^ 0x9E3779B97F4A7C15ull, h ^ 0xC2B2AE3D27D4EB4Full, h ^ 0x165667B19E3779F9ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w = 0;
            for (int b = 0; b < 8; b++) // little-endian load, whatever the host
                w |= (uint64_t)p[i + 8 * (size_t)k + (size_t)b] << (8 * b);
            lane[k] = (lane[k] ^ w) * 0x100000001b3ull;
            lane[k] ^= lane[k] >> 29;
        }
    for (int k = 0; k < 4; k++)
        h = (h ^ lane[k]) * 0x100000001b3ull;
    return lz_fnv1a(h ^ (uint64_t)n, p + i, n - i);
}

#endif
