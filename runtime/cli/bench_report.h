/* bench_report.h - what `lizard bench` prints, one format whatever the
 * number of ranks: the header (the model, its state per sequence, rank 0's
 * ceilings), a line and a JSON row per result with its bound, rank 0's
 * memory and load time, and under mpirun a line per rank.
 *
 * The bounds are one device's ceilings over the whole model (a pipeline's
 * ranks each read only their stage, so this is what one device would do):
 *   decode bound = batch x copy rate / (weight bytes + batch x state bytes a sequence reads per step)
 *   prompt bound = GEMM rate / (2 x matmul params + causal attention FLOPs per token)
 * counted on a description of every layer (model_load.h's lz_model_describe),
 * not on the weights a rank holds. */
#ifndef LZ_BENCH_REPORT_H
#define LZ_BENCH_REPORT_H

#include <stddef.h> // size_t
#include <stdio.h>  // FILE

#include "model.h"    // lz_model
#include "pipeline.h" // lz_rank_stats

typedef struct {
    lz_model whole;              /* every layer described, no weights (with the run's element sizes) */
    double copy_bps, gemm_flops; /* rank 0's ceilings; 0: not measured */
    int ranks;
    const char *placement;       /* "balanced", "by-type" or "file" */
    FILE *json;                  /* or NULL */
} lz_bench_report;

/* The bytes a decode step reads of the weights: every parameter in the activation type, but the linear
 * weights a run with --dtype fp8 holds as FP8 at 1 byte each and 4 bytes a row for the scale. */
double lz_bench_weight_bytes(const lz_model *whole);
/* Tokens/s at the ceilings (0: none measured). */
double lz_bench_decode_bound(const lz_bench_report *r, int batch, int context);
double lz_bench_prompt_bound(const lz_bench_report *r, int prompt);

/* Rank 0: `name` (the shape or folder) on `backend`; free_bytes: one device's free memory (0: it cannot say). */
void lz_bench_print_header(const lz_bench_report *r, const char *name, const char *backend, size_t free_bytes);
/* Rank 0: one result with every rank's counters all[r->ranks] (rank 0's memory and load time on the line;
 * one line per rank too when there are several). */
void lz_bench_print_result(const lz_bench_report *r, const char *kind, int prompt, int batch, int context,
                           double tok_s, const lz_rank_stats *all);

#endif
