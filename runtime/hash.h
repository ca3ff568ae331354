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

#endif
