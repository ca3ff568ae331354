/* knobs.h - every LIZARD_* environment variable the program reads, in one
 * struct, read and checked in one place (lz_knobs_load, which main calls at
 * start). Unset or empty gives the default; any other value that is not one
 * the variable takes is an input error naming the variable and its value.
 * Users' knobs are in docs/running.md, the kernels' in docs/knobs.md. */
#ifndef LZ_KNOBS_H
#define LZ_KNOBS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdio.h>   // FILE

#include "error.h" // lz_status

typedef struct {
    /* docs/running.md */
    bool profile;               /* LIZARD_PROFILE: time every CUDA op, print the table (and these knobs) */
    bool no_graphs;             /* LIZARD_NO_GRAPHS: decode steps run eagerly, not as recorded graphs */
    double step_timeout;        /* LIZARD_STEP_TIMEOUT: seconds a pipeline rank may wait inside a step (0: off) */
    bool step_trace;            /* LIZARD_STEP_TRACE: a stderr line per pipeline message on every rank */
    size_t session_chunk_bytes; /* LIZARD_SESSION_CHUNK_BYTES: 0 unset, else every session chunked by it */
    /* docs/knobs.md: kernel paths and thresholds, for tests and tuning */
    bool wgmma;                 /* LIZARD_WGMMA=0: the prompt attention on the flash kernel on Hopper too */
    int gemv_tokens;            /* LIZARD_GEMV_TOKENS: largest step the decode GEMV takes */
    int fuse_tokens;            /* LIZARD_FUSE_TOKENS: largest step the fused GEMVs take */
    int stream_tokens;          /* LIZARD_STREAM_TOKENS: largest step of linear_stream.cu (0: none) */
    int stream_split;           /* LIZARD_STREAM_SPLIT: its shares of k (0: by the launch's size) */
    int join_tokens;            /* LIZARD_JOIN_TOKENS: largest step of the joined products (0: not joined) */
    int fork_tokens;            /* LIZARD_FORK_TOKENS: largest step whose products run on side streams */
    int gla_stream_min;         /* LIZARD_GLA_STREAM_MIN: batch from which the GLA decode streams its state */
    int gla_spread;             /* LIZARD_GLA_SPREAD: largest batch whose GLA kernel is spread over more SMs */
    int gla_ring_blocks;        /* LIZARD_GLA_RING_BLOCKS: the GLA ring kernel's grid (0: one block an SM) */
    int window_ring;            /* LIZARD_WINDOW_RING: batch from which the window runs on the ring kernel */
    int window_ring_blocks;     /* LIZARD_WINDOW_RING_BLOCKS: that kernel's grid (0: one block an SM) */
    int window_split_min;       /* LIZARD_WINDOW_SPLIT_MIN: batch from which the window takes the split kernel */
    int decode_attn;            /* LIZARD_DECODE_ATTN: decode attention blocks an SM (-1: by the batch) */
    bool train_gla_bf16;        /* LIZARD_TRAIN_GLA=bf16: the training GLA's chunk products in bf16 */
    const char *trace;          /* LIZARD_TRACE: the kernel timeline's file (cmake -DLIZARD_TRACE=ON builds) */
    int trace_us;               /* LIZARD_TRACE_US: the microseconds of timeline written */
    int local_rank;             /* the launcher's OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or LOCAL_RANK */
    int local_size;             /* its OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE or LOCAL_WORLD_SIZE (1 without) */
} lz_knobs;

/* Reads the environment into the process's knobs (again, if called again: tests that setenv).
 * On a bad value the knobs keep their earlier values and the error names the variable. */
lz_status lz_knobs_load(void);
/* The process's knobs; the first call loads them if lz_knobs_load was not called (a bad value:
 * the defaults, and the error stays for lz_knobs_status). */
const lz_knobs *lz_knobs_get(void);
/* LZ_OK, or the status of the load that lz_knobs_get did on its own (with its message set again). */
lz_status lz_knobs_status(void);
/* True when the environment set the knob `name` (else it holds its default). */
bool lz_knobs_given(const char *name);
/* One line per knob: NAME=value, and "(default)" where it is unset. */
void lz_knobs_print(FILE *out);

#endif
