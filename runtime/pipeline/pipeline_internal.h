/* pipeline_internal.h - what the pipeline's files share: header flags, and
 * the header / broadcast plumbing (pipeline_messages.c). */
#ifndef LZ_PIPELINE_INTERNAL_H
#define LZ_PIPELINE_INTERNAL_H

#include "lizard.pb-c.h" // Lizard__StepHeader
#include "mpi_world.h"   // LZ_TAG_*
#include "pipeline.h"

enum { STEP_FLAG_STOP = 1, STEP_FLAG_SAVE = 2, STEP_FLAG_RESTORE = 4, STEP_FLAG_GREEDY = 8, STEP_FLAG_SEEK = 16,
       STEP_FLAG_STATS = 32, STEP_FLAG_REPLAN = 64, STEP_FLAG_STATE_BF16 = 128, STEP_FLAG_SAMPLE = 256,
       STEP_FLAG_RESET = 512 };

/* LIZARD_STEP_TRACE=1: one stderr line per pipeline event with a host-wide clock,
 * to see on a timeline whether the stages overlap. */
void lz_pipeline_trace(const lz_pipeline *p, const char *event, uint64_t step);
/* Bytes from rank 0 to all (collective): the length, then the bytes; other ranks get a malloc'd copy. */
lz_status lz_pipeline_broadcast_bytes(uint8_t **buf, size_t *len, int rank);
/* Rank 0: a header to every other rank without waiting for them (see pipeline_messages.c). */
lz_status lz_pipeline_send_header(lz_pipeline *p, Lizard__StepHeader *h);
/* Rank 0: waits for the oldest header sends (all of them when `all`). */
lz_status lz_pipeline_retire_headers(lz_pipeline *p, bool all);
/* Other ranks: the next header's bytes from rank 0 (malloc'd). */
lz_status lz_pipeline_receive_header(lz_pipeline *p, uint8_t **buf, size_t *len);

/* Rank 0: the per-row sampling fields of a header (SAMPLE), in arrays the
 * header points at until lz_pipeline_free_draws; nothing when draws is NULL. */
typedef struct {
    double *temperatures, *top_ps;
    int32_t *top_ks;
    uint64_t *seeds, *counts;
} lz_header_draws;
lz_status lz_pipeline_header_draws(Lizard__StepHeader *h, const lz_sample_draw *draws, int n, lz_header_draws *a);
void lz_pipeline_free_draws(lz_header_draws *a);
/* The last stage: sample_rows' parameters from a SAMPLE header (*rows NULL
 * without SAMPLE; the caller frees them). */
lz_status lz_pipeline_sample_rows(const Lizard__StepHeader *h, lz_sample_row **rows);

/* Other ranks, for a header rank 0 sent (pipeline_state.c): a save or
 * restore, a seek, a reset, or the counters. */
lz_status lz_pipeline_serve_state(lz_pipeline *p, lz_model *m, lz_state *st, const Lizard__StepHeader *h);
lz_status lz_pipeline_seek_here(lz_pipeline *p, lz_state *st, const Lizard__StepHeader *h);
lz_status lz_pipeline_reset_here(lz_pipeline *p, lz_model *m, lz_state *st, const Lizard__StepHeader *h);
lz_status lz_pipeline_gather_stats(lz_pipeline *p, lz_model *m, lz_rank_stats *all);

#endif
