/* knobs.h - the LIZARD_* environment variables: the process's own in one struct, read and checked
 * in one place (lz_knobs_load), and the table reader that the CUDA backend's knobs use too
 * (kernels/cuda/cuda_knobs.h, read when the backend is created). main checks every table at start
 * (lz_knobs_check): unset or empty gives the default; any other value that is not one the variable
 * takes, or a LIZARD_* name that no table reads, is an input error naming the variable.
 * Users' knobs are in docs/running.md, the kernels' in docs/knobs.md. */
#ifndef LZ_KNOBS_H
#define LZ_KNOBS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdio.h>   // FILE

#include "error.h" // lz_status

/* A table of knobs: each row a variable, what it takes, its default and where it goes (offsetof into
 * a struct of `size` bytes). */
typedef enum {
    LZ_KNOB_BOOL,    /* 0 or 1 */
    LZ_KNOB_INT,     /* lo .. hi */
    LZ_KNOB_SECONDS, /* lo .. hi, a double */
    LZ_KNOB_BYTES,   /* lo .. hi, a size_t (def 0: unset) */
    LZ_KNOB_BF16,    /* fp32 or bf16, a bool: bf16 */
    LZ_KNOB_PATH,    /* a file (NULL: unset) */
} lz_knob_kind;
typedef struct {
    const char *name;
    lz_knob_kind kind;
    long lo, hi, def; /* LZ_KNOB_BOOL: def */
    size_t offset;
} lz_knob;
typedef struct {
    const lz_knob *rows;
    int n;
    size_t size; /* of the struct the rows' offsets point into */
} lz_knob_table;

/* Reads a table's variables from the environment into `fields`: defaults where unset or empty. On a
 * value a variable does not take, LZ_ERR_INPUT naming it, and `fields` as it was. given (t->n flags,
 * or NULL): which variables were set. */
lz_status lz_knob_table_read(const lz_knob_table *t, void *fields, bool *given);

/* The process's knobs: what more than one layer reads, or a user sets (docs/running.md). */
typedef struct {
    bool profile;               /* LIZARD_PROFILE: time every CUDA op, print the table (and every knob) */
    bool no_graphs;             /* LIZARD_NO_GRAPHS: decode steps run eagerly, not as recorded graphs */
    double step_timeout;        /* LIZARD_STEP_TIMEOUT: seconds a pipeline rank may wait inside a step (0: off) */
    bool step_trace;            /* LIZARD_STEP_TRACE: a stderr line per pipeline message on every rank */
    size_t session_chunk_bytes; /* LIZARD_SESSION_CHUNK_BYTES: 0 unset, else every session chunked by it */
    bool train_gla_bf16;        /* LIZARD_TRAIN_GLA=bf16: the training GLA's chunk products in bf16 (docs/knobs.md) */
    int checkpoint_kill;        /* LIZARD_CHECKPOINT_KILL: SIGKILL at a checkpoint writer's Nth write (0: never) */
    int local_rank;             /* the launcher's OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or LOCAL_RANK */
    int local_size;             /* its OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE or LOCAL_WORLD_SIZE (1 without) */
} lz_knobs;

/* Reads the environment into the process's knobs (again, if called again: tests that setenv).
 * On a bad value the knobs keep their earlier values and the error names the variable. */
lz_status lz_knobs_load(void);
/* At start (main): lz_knobs_load, every other table's values (the CUDA backend's, in every build:
 * a bad value is refused before anything runs, whatever the device), and any LIZARD_* variable that
 * no table reads (a typo, or a knob retired) refused, so that it is not silently ignored. */
lz_status lz_knobs_check(const lz_knob_table *const *others, int n_others);
/* The process's knobs; the first call loads them if lz_knobs_load was not called (a bad value:
 * the defaults, and the error stays for lz_knobs_status). */
const lz_knobs *lz_knobs_get(void);
/* LZ_OK, or the status of the load that lz_knobs_get did on its own (with its message set again). */
lz_status lz_knobs_status(void);
/* True when the environment set the process knob `name` (else it holds its default). */
bool lz_knobs_given(const char *name);
/* One line per knob of the process's table and then of the others: "knob NAME value", and
 * "(default)" where it is unset. */
void lz_knobs_print(FILE *out, const lz_knob_table *const *others, int n_others);

#endif
