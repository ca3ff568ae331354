/* bench_pipeline.h - `lizard bench` under mpirun -np N (N > 1): throughput
 * through the pipeline, every rank's memory, load time and bytes sent. */
#ifndef LZ_BENCH_PIPELINE_H
#define LZ_BENCH_PIPELINE_H

#include <stdbool.h> // bool
#include <stdint.h>  // int32_t
#include <stdio.h>   // FILE

#include "error.h" // lz_status

typedef struct {
    const char *shape, *model, *device, *dtype;
    const char *placement, *plan_file;
    long steps, chunk, seed;
    bool no_ceilings;
    FILE *json; /* or NULL */
} lz_bench_pipeline_args;

/* Collective: every rank calls it with the same arguments. */
lz_status lz_bench_pipeline(const lz_bench_pipeline_args *a, const int32_t *prompts, int np, const int32_t *batches,
                            int nb, const int32_t *contexts, int nc);

#endif
