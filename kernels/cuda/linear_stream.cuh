// linear_stream.cuh - bf16 linear layers of decode steps of a few tokens (linear_stream.cu): each warp
// streams 16 weight rows straight from memory into tensor-core fragments, no shared-memory stages.
#ifndef LZ_LINEAR_STREAM_CUH
#define LZ_LINEAR_STREAM_CUH

#include "cuda_kernels.cuh"

#include <cuda_bf16.h>

// The most layers of one input in a launch (q, k, v and the Lizard gate); the largest step (the
// launchers give it steps of up to LIZARD_STREAM_TOKENS).
enum { LZ_STREAM_MAX_SEGMENTS = 4, LZ_STREAM_MAX_TOKENS = 64 };

// One layer: out[n][m] = x[n][k] . w[m][k]^T (+ bias[m]).
struct lz_stream_segment {
    __nv_bfloat16 *out;
    const __nv_bfloat16 *w, *bias;
    int m;
};

// What the kernel does with a product:
//   LZ_STREAM_STORE: writes it (every segment into its own out);
//   LZ_STREAM_ACCUMULATE: adds it to out (o and down onto the residual stream), the product rounded
//     to bf16 first, as the GEMV's residual epilogue rounds;
//   LZ_STREAM_SWIGLU: two segments of equal rows (the MLP's gate and up); out of the first =
//     silu(gate) * up, each rounded to bf16 first (the up product never reaches memory).
enum lz_stream_epilogue { LZ_STREAM_STORE, LZ_STREAM_ACCUMULATE, LZ_STREAM_SWIGLU };

// Whether the kernel takes a step of n tokens with k inputs for these layers: 2 <= n <=
// LIZARD_STREAM_TOKENS, k a multiple of 64, x and the weights 16-byte aligned.
bool linear_stream_takes(const lz_cuda_ctx *c, int count, const lz_stream_segment *seg, const __nv_bfloat16 *x,
                         int n, int k, lz_stream_epilogue epilogue);
lz_status linear_stream_forward(lz_cuda_ctx *c, int count, const lz_stream_segment *seg, const __nv_bfloat16 *x,
                                int n, int k, lz_stream_epilogue epilogue);

#endif
