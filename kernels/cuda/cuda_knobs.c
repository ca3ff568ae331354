/* cuda_knobs.c - the CUDA backend's knob table (cuda_knobs.h): the variable, what it takes, its default. */
#include <limits.h> // INT_MAX
#include <stddef.h> // offsetof

#include "cuda_knobs.h"
#include "knobs.h" // lz_knob_table, lz_knob_table_read
#include "ops.h"   // lz_cuda_knob_table

#define F(field) offsetof(lz_cuda_knobs, field)
static const lz_knob ROWS[] = {
    {"LIZARD_WGMMA", LZ_KNOB_BOOL, 0, 1, 1, F(wgmma)},
    {"LIZARD_GEMV_TOKENS", LZ_KNOB_INT, 1, 8, 1, F(gemv_tokens)},
    {"LIZARD_FUSE_TOKENS", LZ_KNOB_INT, 1, 8, 1, F(fuse_tokens)},
    {"LIZARD_STREAM_TOKENS", LZ_KNOB_INT, 0, 64, 7, F(stream_tokens)},
    {"LIZARD_STREAM_SPLIT", LZ_KNOB_INT, 0, 8, 0, F(stream_split)},
    {"LIZARD_JOIN_TOKENS", LZ_KNOB_INT, 0, 1024, 256, F(join_tokens)},
    {"LIZARD_FORK_TOKENS", LZ_KNOB_INT, 1, INT_MAX, 32, F(fork_tokens)},
    {"LIZARD_GLA_STREAM_MIN", LZ_KNOB_INT, 0, INT_MAX, 8, F(gla_stream_min)},
    {"LIZARD_GLA_SPREAD", LZ_KNOB_INT, 0, INT_MAX, 2, F(gla_spread)},
    {"LIZARD_GLA_RING_BLOCKS", LZ_KNOB_INT, 0, INT_MAX, 0, F(gla_ring_blocks)},
    {"LIZARD_WINDOW_RING", LZ_KNOB_INT, 0, INT_MAX, 8, F(window_ring)},
    {"LIZARD_WINDOW_RING_BLOCKS", LZ_KNOB_INT, 0, INT_MAX, 0, F(window_ring_blocks)},
    {"LIZARD_WINDOW_SPLIT_MIN", LZ_KNOB_INT, 1, INT_MAX, 16, F(window_split_min)},
    {"LIZARD_DECODE_ATTN", LZ_KNOB_INT, 1, 64, -1, F(decode_attn)},
    {"LIZARD_TRACE", LZ_KNOB_PATH, 0, 0, 0, F(trace)},
    {"LIZARD_TRACE_US", LZ_KNOB_INT, 1, INT_MAX, 10000, F(trace_us)},
};
#undef F

const lz_knob_table lz_cuda_knob_table = {ROWS, sizeof ROWS / sizeof ROWS[0], sizeof(lz_cuda_knobs)};

lz_status lz_cuda_knobs_read(lz_cuda_knobs *k) { return lz_knob_table_read(&lz_cuda_knob_table, k, NULL); }
