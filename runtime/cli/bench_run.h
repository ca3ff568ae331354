/* bench_run.h - `lizard bench`'s prompt and decode runs, in one process or
 * under mpirun -np N alike (one process is a pipeline plan of one rank):
 * each configuration through an engine, reported beside one device's bound
 * (bench_report.h). */
#ifndef LZ_BENCH_RUN_H
#define LZ_BENCH_RUN_H

#include <stdbool.h> // bool
#include <stdint.h>  // int32_t
#include <stdio.h>   // FILE

#include "error.h" // lz_status

typedef struct {
    const char *shape, *model, *device, *dtype; /* one of shape and model */
    const char *placement, *plan_file;
    long steps, chunk, seed;
    bool no_ceilings;
    bool linear_shapes, state; /* one process only (cmd_bench.c refuses them under mpirun) */
    const int32_t *prompts, *batches, *contexts;
    int n_prompts, n_batches, n_contexts;
    FILE *json; /* rank 0's, or NULL */
} lz_bench_args;

/* Collective: every rank calls it with the same arguments; rank 0 prints. */
lz_status lz_bench_run(const lz_bench_args *a);

#endif
