/* pipeline.h - one model as a pipeline of MPI ranks.
 *
 * Rank 0 is the frontend: it decides every step and broadcasts it as a
 * StepHeader (proto/lizard.proto); every rank runs the layers its plan gives
 * it, in layer order, revisiting a rank for each of its runs; activations
 * [tokens, hidden] go from rank to rank, and the last stage's logits come
 * back to rank 0. The other ranks serve steps until rank 0 closes the
 * pipeline. All ranks keep the same per-slot positions, so the same checks
 * pass or fail everywhere. */
#ifndef LZ_PIPELINE_H
#define LZ_PIPELINE_H

#include <mpi.h>    // MPI_Request
#include <stdint.h> // int32_t, uint64_t

#include "lizard.pb-c.h" // Lizard__StageState
#include "model.h" // lz_model, lz_stage_parts, lz_ops
#include "plan.h"  // lz_plan
#include "sampler.h" // lz_sample_draw
#include "state.h" // lz_state
#include "step.h"  // lz_workspace

enum { LZ_MAX_INFLIGHT = 16 };

/* A step rank 0 has started and not yet finished (its activations may still be on the way). */
typedef struct {
    MPI_Request send;   /* the host copy of x going to the next stage (CPU ranks), or MPI_REQUEST_NULL */
    float *buf;
    int n_rows;         /* logits rows to receive */
    bool ids_back;      /* their ids (argmax or sampled) rather than the rows */
} lz_inflight;

/* What one rank reports (lz_pipeline_stats). */
typedef struct {
    double load_seconds;          /* opening its stage: weights, state, scratch */
    uint64_t mem_used, mem_total; /* device memory (0 on the CPU) */
    uint64_t bytes_activations;   /* activations this rank sent to the next stage */
    uint64_t bytes_results;       /* logits or ids this rank sent to rank 0 */
    uint64_t steps, tokens;       /* steps run and their tokens */
} lz_rank_stats;

typedef struct {
    int rank, n_ranks;
    bool overlap_ok;  /* rank 0's visits all come first and the head is elsewhere: steps may overlap */
    lz_inflight inflight[LZ_MAX_INFLIGHT];
    int inflight_head, n_inflight;
    lz_plan plan;
    lz_plan_visit visits[LZ_MAX_LAYERS + 2];
    int n_visits;
    uint64_t step_id;
    bool device_p2p;  /* activations move device to device (the backend's p2p ops) */
    float *xfer;      /* host staging for activations and logits */
    size_t xfer_cap;  /* floats */
    int32_t *ids_xfer; /* the head's ids */
    int ids_cap;
    lz_rank_stats stats; /* this rank's counters */
    /* rank 0: step headers still being sent (MPI_Isend to every other rank),
     * so that rank 0 never waits for a busy stage to take its next header */
    struct {
        uint8_t *buf;
        MPI_Request *reqs; /* n_ranks - 1 */
    } headers[LZ_MAX_INFLIGHT];
    int n_headers;
    bool replan; /* other ranks: rank 0 asked for a new plan (lz_pipeline_serve returned for it) */
} lz_pipeline;

/* Agrees on a plan: rank 0 makes it (`plan_file`, or `placement` over the
 * ranks' free bytes gathered from all) and broadcasts it; every rank checks
 * it. Fills *parts with what this rank must load. */
lz_status lz_pipeline_plan(lz_pipeline *p, const lz_config *cfg, const char *placement, const char *plan_file,
                           uint64_t context, int batch, uint64_t free_bytes, lz_stage_parts *parts);

/* Sets up device-to-device transfers when the backend has them (NCCL: the
 * unique id made on rank 0 and broadcast over MPI). Collective. */
lz_status lz_pipeline_connect(lz_pipeline *p, const lz_ops *ops, lz_backend *be);

/* Rank 0: one step through the whole pipeline: lz_step's pieces, each rank
 * running its parts (the same contract as lz_step; with out_ids non-NULL the
 * last stage returns ids: the argmax, or sampled with draws [n_logit_rows]). */
lz_status lz_pipeline_step(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids,
                           const lz_batch *batch, const int32_t *logit_rows, int n_logit_rows, float *logits,
                           int32_t *out_ids, const lz_sample_draw *draws);
/* Rank 0, for several independent micro-batches in flight (overlap_ok):
 * start a step (broadcast, rank 0's own layers, activations on their way)
 * and return at once; finish the oldest started step (its logits, or with
 * ids_back its ids: the argmax, or sampled with draws when given). Steps
 * finish in the order they started. */
lz_status lz_pipeline_step_start(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids,
                                 const lz_batch *batch, const int32_t *logit_rows, int n_logit_rows, bool ids_back,
                                 const lz_sample_draw *draws);
lz_status lz_pipeline_step_finish(lz_pipeline *p, lz_model *m, float *logits, int32_t *out_ids);

/* Rank 0: slots[i] of every rank jump to positions[i], their state left as
 * it is (benchmarks: the cost of a step at a context without prefilling it). */
lz_status lz_pipeline_seek(lz_pipeline *p, lz_state *st, int n, const int32_t *slots, const int32_t *positions);
/* Rank 0: the sequence in `slot` starts afresh on every rank (its layers'
 * state zeroed, position 0). */
lz_status lz_pipeline_reset(lz_pipeline *p, lz_model *m, lz_state *st, int slot);
/* Rank 0: every rank's counters, all[n_ranks]. */
lz_status lz_pipeline_stats(lz_pipeline *p, lz_model *m, lz_rank_stats *all);

/* Other ranks: run the steps rank 0 sends until it closes the pipeline. */
lz_status lz_pipeline_serve(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws);
/* Rank 0: every rank's StageState of `slot` with its payloads, one per rank
 * (*stages[r]; free each with lizard__stage_state__free_unpacked, then the
 * array). No message between ranks nears 2 GiB (stage_transfer.h). */
lz_status lz_pipeline_save(lz_pipeline *p, lz_model *m, lz_state *st, int slot, bool state_bf16,
                           Lizard__StageState ***stages);
/* Rank 0: `all` (records of every layer, with payloads) to the ranks, each
 * rank only its own layers' bytes; each restores its own layers. */
lz_status lz_pipeline_restore(lz_pipeline *p, lz_model *m, lz_state *st, int slot, uint64_t position,
                              const Lizard__StageState *all);
/* Rank 0: tells the other ranks to leave their serve loop with p->replan
 * set: every rank then plans again (lz_pipeline_plan) and loads its new stage. */
lz_status lz_pipeline_request_replan(lz_pipeline *p);
/* Rank 0: tells the other ranks to stop. */
lz_status lz_pipeline_close(lz_pipeline *p);
void lz_pipeline_free(lz_pipeline *p);

#endif
