/* cuda_knobs.h - the CUDA backend's knobs: which kernel takes a step of a given size, for tests that
 * reach a path at small sizes and for tuning on a new GPU (docs/knobs.md), and the kernel timeline's
 * file. Read from the environment when the backend is created (lz_cuda_backend_create). Plain C
 * without CUDA, built in every build: main checks them at start whatever the device and the build
 * (lz_knobs_check with lz_cuda_knob_table, kernels/ops.h). */
#ifndef LZ_CUDA_KNOBS_H
#define LZ_CUDA_KNOBS_H

#include <stdbool.h> // bool

#include "error.h" // lz_status

typedef struct {
    bool wgmma;             /* LIZARD_WGMMA=0: the prompt attention on the flash kernel on Hopper too */
    int gemv_tokens;        /* LIZARD_GEMV_TOKENS: largest step the decode GEMV takes */
    int fuse_tokens;        /* LIZARD_FUSE_TOKENS: largest step the fused GEMVs take */
    int stream_tokens;      /* LIZARD_STREAM_TOKENS: largest step of linear_stream.cu (0: none) */
    int stream_split;       /* LIZARD_STREAM_SPLIT: its shares of k (0: by the launch's size) */
    int join_tokens;        /* LIZARD_JOIN_TOKENS: largest step of the joined products (0: not joined) */
    int fork_tokens;        /* LIZARD_FORK_TOKENS: largest step whose products run on side streams */
    int gla_stream_min;     /* LIZARD_GLA_STREAM_MIN: batch from which the GLA decode streams its state */
    int gla_spread;         /* LIZARD_GLA_SPREAD: largest batch whose GLA kernel is spread over more SMs */
    int gla_ring_blocks;    /* LIZARD_GLA_RING_BLOCKS: the GLA ring kernel's grid (0: one block an SM) */
    int window_ring;        /* LIZARD_WINDOW_RING: batch from which the window runs on the ring kernel */
    int window_ring_blocks; /* LIZARD_WINDOW_RING_BLOCKS: that kernel's grid (0: one block an SM) */
    int window_split_min;   /* LIZARD_WINDOW_SPLIT_MIN: batch from which the window takes the split kernel */
    int decode_attn;        /* LIZARD_DECODE_ATTN: decode attention blocks an SM (-1: by the batch) */
    const char *trace;      /* LIZARD_TRACE: the kernel timeline's file (cmake -DLIZARD_TRACE=ON builds) */
    int trace_us;           /* LIZARD_TRACE_US: the microseconds of timeline written */
} lz_cuda_knobs;

/* The knobs from the environment: defaults where unset or empty; a value a variable does not take is
 * LZ_ERR_INPUT naming it, with *k as it was. */
lz_status lz_cuda_knobs_read(lz_cuda_knobs *k);

#endif
