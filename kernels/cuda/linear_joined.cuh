// linear_joined.cuh - linear layers of one input whose weights lie one after another in memory (a
// layer's q, k, v and a Lizard layer's gate; the MLP's gate, up: joined at load by lz_join_weights) as
// one cuBLAS product at decode-sized steps (linear_joined.cu).
#ifndef LZ_LINEAR_JOINED_CUH
#define LZ_LINEAR_JOINED_CUH

#include "cuda_kernels.cuh"

// ROW_ALIGN: a joined block's rows are padded to a multiple of it (16 bytes of bf16, 32 of fp32).
enum { LZ_JOIN_MAX_LAYERS = 4, LZ_JOIN_ROW_ALIGN = 8 };

// Moves ws[0 .. count - 1] (same width and type, each owning its memory) into one allocation, in
// order, followed by zero rows up to a multiple of LZ_JOIN_ROW_ALIGN (ws[0]->block_rows says how many
// in all), and grows ctx->joined_out to take their product at LIZARD_JOIN_TOKENS tokens. Best effort:
// with too little memory, or weights it cannot join, they stay as they were.
lz_status lz_join_weights(lz_cuda_ctx *c, int count, lz_weight *const *ws, size_t elem_size);
void lz_joined_destroy(lz_cuda_ctx *c);

// How many of the first layers run as one product at this step: 0, or 2 .. count layers of one
// joined block (ws[0] begins it), without biases, at 1 .. LIZARD_JOIN_TOKENS tokens, on the main
// stream; a layer whose rows are not whole 16-byte vectors (the Lizard gate) can only end a run.
template <typename T>
int linear_joined_run(const lz_cuda_ctx *c, int count, void *const *outs, const lz_weight *const *ws,
                      const lz_weight *const *biases, int n);
// outs[i] = x . W_i^T for the first `run` layers (linear_joined_run's answer): one product into
// ctx->joined_out, then one kernel hands each layer its columns.
template <typename T>
lz_status linear_joined_forward(lz_cuda_ctx *c, int run, void *const *outs, const T *x, const lz_weight *const *ws,
                                int n);
// out = silu(x . Wg^T) * (x . Wu^T) with gate and up joined: one product, then SwiGLU reading both
// halves of its rows. takes: whether it applies (joined, no biases, a decode-sized step).
template <typename T>
bool swiglu_joined_takes(const lz_cuda_ctx *c, T *out, const lz_weight *wg, const lz_weight *bg, const lz_weight *wu,
                         const lz_weight *bu, int n);
template <typename T>
lz_status swiglu_joined_forward(lz_cuda_ctx *c, T *out, const T *x, const lz_weight *wg, int n);

#endif
