/* dropout_rule.h - which elements LoRA's input dropout drops, written once so
 * that the CPU reference and the CUDA kernels drop the same ones: element i of
 * a stream is dropped when its uniform (splitmix64 of the stream and i, the
 * 53 high bits, runtime/train's lz_stream_uniform) is below p. Integer
 * arithmetic and one exact comparison in double: the same bits everywhere. */
#ifndef LZ_DROPOUT_RULE_H
#define LZ_DROPOUT_RULE_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint64_t

#ifdef __CUDACC__
#define LZ_DR_FN static __host__ __device__ __forceinline__
#else
#define LZ_DR_FN static inline
#endif

LZ_DR_FN uint64_t lz_dropout_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Element i of `stream` is dropped with probability p. */
LZ_DR_FN bool lz_dropout_drops(uint64_t stream, uint64_t i, double p) {
    const uint64_t u53 = lz_dropout_mix(stream + (i + 1) * 0x9E3779B97F4A7C15ULL) >> 11;
    return (double)u53 * 0x1.0p-53 < p; /* u53 < 2^53: exact in double */
}

#endif
