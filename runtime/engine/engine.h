/* engine.h - a model ready to run, in one process or as a pipeline of MPI
 * ranks (one runner: a process alone is a plan of one rank): config (with
 * overrides), backend, this rank's weights, state slots and scratch; prefill
 * and decode through the stages. The CLI commands and the tests drive models
 * through this. */
#ifndef LZ_ENGINE_H
#define LZ_ENGINE_H

#include <stdbool.h> // bool
#include <stdint.h>  // int32_t

#include "model_load.h" // lz_model, lz_model_load
#include "pipeline.h" // lz_pipeline
#include "sampler.h"  // lz_sample_draw
#include "state.h" // lz_state
#include "step.h"  // lz_workspace

typedef struct {
    const char *model_dir;
    const char *adapter_dir;     /* a PEFT LoRA adapter merged into the weights at load, or NULL */
    const char *shape;           /* or a preset name (model_presets.h): random weights, no files (benchmarks) */
    uint64_t seed;               /* of those random weights */
    const char *device;          /* "cpu" (default) or "cuda" */
    const char *dtype;           /* CUDA: "bf16" (default) or "fp32", the CPU's activations always fp32; "fp8":
                                    the linear layers' weights as FP8 E4M3 with row scales (CUDA: bf16 activations) */
    const char *softmax_layers;  /* NULL, "all", "none" or "0,2,..." */
    int n_slots;                 /* concurrent sequences (default 1) */
    int max_context;             /* positions per sequence in KV caches */
    int prefill_chunk;           /* tokens per prefill step (default 512) */
    /* under mpirun -np N (N > 1): how layers are placed on the ranks */
    const char *placement;       /* "balanced" (default) or "by-type" */
    const char *plan_file;       /* or a hand-written plan (docs/running.md) */
    bool session_state_bf16;     /* saved states keep the Lizard layers' S and z in bf16 (half the bytes) */
} lz_engine_options;

typedef struct {
    lz_engine_options opt;
    bool worker;      /* a rank other than 0: it has served every step already; the command just ends */
    lz_pipeline pipe;
    lz_backend *be;
    const lz_ops *ops;
    lz_model model;
    lz_state state;
    lz_workspace ws;
    lz_config cfg;       /* the model's, with the overrides */
    double load_seconds; /* lz_engine_open on this rank */
} lz_engine;

/* "cpu" | "cuda" (NULL: cpu) and "bf16" | "fp32" (NULL: bf16; CUDA only). */
lz_status lz_open_backend(const char *device, const char *dtype, lz_backend **be, const lz_ops **ops);
/* The same for inference, which also takes "fp8" (*fp8 set: the caller loads the linear layers' weights
 * as FP8, lz_config.fp8_weights), with the backend's activations (CUDA: bf16). */
lz_status lz_open_inference_backend(const char *device, const char *dtype, lz_backend **be, const lz_ops **ops,
                                    bool *fp8);

/* The model runs as a pipeline of the job's ranks (one process: a plan of one
 * rank that holds every layer). Rank 0 returns from lz_engine_open ready to
 * drive it; every other rank serves the steps inside lz_engine_open and
 * returns with e->worker set once rank 0 has closed its engine. */
lz_status lz_engine_open(lz_engine *e, const lz_engine_options *opt);
void lz_engine_close(lz_engine *e);

/* What a step gives back for its n rows: logits [n, vocab], or ids [n]
 * chosen where the logits are (the device; the last stage of a pipeline), so
 * that only ids come back: greedy, or row i sampled with draws[i]
 * (sample_rows). overlap (decode): through a pipeline that allows it, the
 * rows go as one group per stage, all started and then finished in order, so
 * that every stage works (a prompt overlaps its chunks by itself). */
typedef struct {
    float *logits;               /* [n, vocab], when ids is NULL */
    int32_t *ids;                /* [n], or NULL for logits */
    const lz_sample_draw *draws; /* with ids: [n], or NULL for greedy */
    bool overlap;
} lz_step_out;

/* Feeds n ids to the sequence in `slot` (from its current position), in
 * chunks of prefill_chunk tokens. logits_all [n, vocab] (may be NULL) gets
 * every position's logits; `last` the last position's logits or next id
 * (one row; nothing when both of its pointers are NULL). */
lz_status lz_engine_prefill(lz_engine *e, int slot, const int32_t *ids, int n, float *logits_all, lz_step_out last);

/* Prompts of n sequences (slots[i], ids[i], lens[i] tokens) fed together:
 * each step carries whole chunks of several sequences (each sequence cut
 * where lz_engine_prefill would cut it, so the arithmetic is the same);
 * `last` gets each prompt's last row: logits [n, vocab] or ids [n]. */
lz_status lz_engine_prefill_many(lz_engine *e, int n, const int32_t *slots, const int32_t *const *ids,
                                 const int *lens, lz_step_out last);


/* One token for each of n sequences (slots[i] is fed ids[i]). */
lz_status lz_engine_decode(lz_engine *e, int n, const int32_t *slots, const int32_t *ids, lz_step_out out);

/* Micro-batches in flight through a pipeline, for callers that schedule the
 * groups themselves: how many can overlap (the number of stages when the
 * plan allows it, else 1), then start a decode step and, later and in the
 * same order, finish it (its logits, or with ids_back its ids: greedy, or
 * sampled with draws [n] when given). With one micro-batch this is
 * lz_engine_decode. */
int lz_engine_overlap(const lz_engine *e);
/* n decode rows as groups through the pipeline: one per stage that can
 * overlap, at most LZ_MAX_INFLIGHT, at most n (1: one step, nothing to
 * overlap); group k is rows [first(k), first(k + 1)). */
int lz_engine_groups(const lz_engine *e, int n);
static inline int lz_engine_group_first(int n, int groups, int k) { return (int)((int64_t)n * k / groups); }
lz_status lz_engine_decode_start(lz_engine *e, int n, const int32_t *slots, const int32_t *ids, bool ids_back,
                                 const lz_sample_draw *draws);
lz_status lz_engine_decode_finish(lz_engine *e, float *logits, int32_t *out_ids);

/* Rank 0, under mpirun: moves every live sequence to another placement
 * (placement "balanced" / "by-type", or a plan file) without stopping the
 * job: each sequence's state is gathered from its stages, every rank loads
 * its part of the new plan, and the states go to their new stages; the
 * continuation is the same as without the move (a server drains a rank
 * this way). */
lz_status lz_engine_replan(lz_engine *e, const char *placement, const char *plan_file);

/* Benchmarks: slots[i] jump to positions[i] on every rank, state untouched
 * (a decode step then costs what it costs at that context). */
lz_status lz_engine_seek(lz_engine *e, int n, const int32_t *slots, const int32_t *positions);
/* What callers read of an open engine: the model's config (with the
 * overrides) and how many tokens the sequence in `slot` holds. */
static inline const lz_config *lz_engine_config(const lz_engine *e) { return &e->cfg; }
static inline int lz_engine_position(const lz_engine *e, int slot) { return e->state.slot_pos[slot]; }
/* The sequence in `slot` starts afresh on every stage (state zeroed, position 0). */
lz_status lz_engine_reset_slot(lz_engine *e, int slot);
/* Counters of every rank (all[n_ranks]; one entry for one process). */
int lz_engine_ranks(const lz_engine *e);
lz_status lz_engine_stats(lz_engine *e, lz_rank_stats *all);

#endif
