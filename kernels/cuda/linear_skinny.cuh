// linear_skinny.cuh - linear layers of decode steps of 2 to 64 tokens (linear_skinny.cu): bf16, code
// built for sm_90 or later (the copy engine's tensor copies), one persistent launch whatever the
// layers' shapes. Off unless LIZARD_SKINNY_TOKENS says otherwise: on the H200 it is still slower
// than cuBLAS at every batch (docs/benchmarks.md, session 22); it stays for the work that follows.
#ifndef LZ_LINEAR_SKINNY_CUH
#define LZ_LINEAR_SKINNY_CUH

#include "cuda_kernels.cuh"

#include <cuda_bf16.h>

// The most layers of one input in a launch (q, k, v and the Lizard gate); the largest step; the
// largest the launchers give it unless LIZARD_SKINNY_TOKENS says otherwise (0: none).
enum { LZ_SKINNY_MAX_SEGMENTS = 4, LZ_SKINNY_MAX_TOKENS = 64, LZ_SKINNY_TOKENS_DEFAULT = 0 };

// out[n][m] = x[n][k] . w[m][k]^T (+ bias[m]); with accumulate, out += that instead.
struct lz_skinny_segment {
    __nv_bfloat16 *out;
    const __nv_bfloat16 *w, *bias;
    int m;
};

// Whether the kernel takes a step of n tokens with k inputs from x for these layers: LIZARD_SKINNY_TOKENS
// (and not LIZARD_GEMV=0: cuBLAS for every layer), the driver's tensor-map encoder, alignment, and not
// on a side stream (its partial sums and counters are the main stream's).
bool linear_skinny_takes(const lz_cuda_ctx *c, int count, const lz_skinny_segment *seg, const __nv_bfloat16 *x,
                         int n, int k);
lz_status linear_skinny_forward(lz_cuda_ctx *c, int count, const lz_skinny_segment *seg, const __nv_bfloat16 *x,
                                int n, int k, bool accumulate);
// Once per bf16 backend: shared memory limits, the partial sums and tile counters; free with _destroy.
lz_status linear_skinny_init(lz_cuda_ctx *c);
void linear_skinny_destroy(lz_cuda_ctx *c);

#endif
