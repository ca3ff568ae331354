/* plan.h - placement plans: which rank owns each decoder layer, the
 * embedding and the LM head (with the final norm), and what that costs each
 * rank in device bytes.
 *
 * Costs come from the config alone (no tensors needed, so a 70B shape plans
 * without files): weights in bf16, the KV cache of a retained softmax layer
 * (bf16, grows with the context), the state of a Lizard layer (S, z in fp32 and
 * the ring of the last w keys and values in bf16: constant). A rank's memory
 * need is weights + batch x state-per-sequence; it must fit the rank's free
 * bytes.
 *
 * Planners: balanced (contiguous stages minimising the largest rank's need),
 * by-type (softmax and Lizard layers on disjoint ranks) and a text file
 * (plan_text.c); plan_proto.c carries a plan as a PipelinePlan message. */
#ifndef LZ_PLAN_H
#define LZ_PLAN_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint64_t, uint8_t
#include <stdio.h>   // FILE

#include "config.h" // lz_config, LZ_MAX_LAYERS
#include "error.h"  // lz_status

enum { LZ_MAX_RANKS = 256, LZ_PLAN_VERSION = 1 };

/* Per-layer costs of a model at a target context (from lz_plan_costs_from_config). */
typedef struct {
    int n_layers;
    bool softmax[LZ_MAX_LAYERS];
    uint64_t layer_weight[LZ_MAX_LAYERS]; /* bytes of the layer's weights (bf16) */
    uint64_t layer_state[LZ_MAX_LAYERS];  /* bytes of one sequence's state at `context` */
    double layer_flops[LZ_MAX_LAYERS];    /* FLOPs per token at `context` */
    uint64_t embed_weight, head_weight;   /* embedding; final norm + LM head */
    double head_flops;
    bool tied;                            /* LM head = embedding (one copy if on one rank) */
    uint64_t context;
    int batch;                            /* sequences each rank must hold state for */
} lz_plan_costs;

typedef struct {
    int n_ranks, n_layers;
    int layer_rank[LZ_MAX_LAYERS]; /* -1: unassigned (an invalid plan) */
    int embed_rank, head_rank;     /* -1: unassigned */
    char placement[16];            /* "balanced", "by-type", "file" */
    uint64_t context;
    int batch;
    /* per rank, filled by lz_plan_account (or received in a message) */
    uint64_t weight_bytes[LZ_MAX_RANKS];
    uint64_t state_bytes[LZ_MAX_RANKS]; /* one sequence at `context` */
    uint64_t free_bytes[LZ_MAX_RANKS];
    double compute_share[LZ_MAX_RANKS];
} lz_plan;

/* Bytes one decoder layer's state needs per sequence at `positions` tokens. */
uint64_t lz_plan_layer_state_bytes(const lz_config *cfg, int layer, uint64_t positions);

/* Costs of every layer of `cfg` at `context` positions, `batch` sequences. */
lz_status lz_plan_costs_from_config(const lz_config *cfg, uint64_t context, int batch, lz_plan_costs *out);

/* A rank's memory need: weight_bytes + batch x state_bytes. */
uint64_t lz_plan_rank_total(const lz_plan *p, int rank);

/* Planners. free_bytes[n_ranks]: what each rank may use. They fail with
 * LZ_ERR_INPUT naming the rank that cannot fit when no plan fits. */
lz_status lz_plan_balanced(const lz_plan_costs *c, int n_ranks, const uint64_t *free_bytes, lz_plan *out);
lz_status lz_plan_by_type(const lz_plan_costs *c, int n_ranks, const uint64_t *free_bytes, lz_plan *out);
/* "balanced" or "by-type". */
lz_status lz_plan_make(const char *placement, const lz_plan_costs *c, int n_ranks, const uint64_t *free_bytes,
                       lz_plan *out);

/* A job's plan: the file's assignment (its rank count must be n_ranks),
 * else `placement` (NULL: balanced); accounted and validated either way. */
lz_status lz_plan_choose(const lz_plan_costs *c, const char *placement, const char *plan_file, int n_ranks,
                         const uint64_t *free_bytes, lz_plan *out);

/* Fills weight_bytes, state_bytes, compute_share (from the layer_rank,
 * embed_rank, head_rank already set), free_bytes, context and batch. */
void lz_plan_account(lz_plan *p, const lz_plan_costs *c, const uint64_t *free_bytes);

/* Every layer exactly once, ranks in 0..n_ranks-1, embedding and head
 * assigned, every rank owns a layer, every rank's need fits its free bytes.
 * Each violation is an LZ_ERR_INPUT naming the layer or rank. */
lz_status lz_plan_validate(const lz_plan *p);

/* A run: layers [first, first + count) owned by one rank. */
typedef struct {
    int first, count;
} lz_layer_run;

/* One visit of the activations to a rank, in the order they flow. `run` is
 * the index into the rank's own runs (lz_plan_runs), or -1 for a visit that
 * only embeds (before layer 0) or only applies the head (after the last). */
typedef struct {
    int rank, run, first, count;
    bool embed, head; /* this visit embeds the tokens first / applies the head last */
} lz_plan_visit;

/* The maximal runs of `rank`, in layer order: *n of them (at most cap are written). */
void lz_plan_runs(const lz_plan *p, int rank, lz_layer_run *runs, int cap, int *n);
/* The global visit order: *n visits (at most cap written; n_layers + 2 always suffices). */
void lz_plan_visit_order(const lz_plan *p, lz_plan_visit *visits, int cap, int *n);

/* Text form (plan_text.c):
 *   # comments and blank lines ignored
 *   rank 0: embed 0-15
 *   rank 1: 16-31, 40 head
 * Items are separated by commas and/or spaces: A-B, A, embed, head. Every
 * rank 0..N-1 has one line. Errors name "path:line". */
lz_status lz_plan_write_text(const lz_plan *p, FILE *out);
/* Parses text into layer_rank, embed_rank, head_rank, n_ranks (= number of
 * rank lines), placement "file"; n_layers from the model. Not validated
 * beyond what the text itself says: call lz_plan_account and lz_plan_validate. */
lz_status lz_plan_parse_text(const char *text, size_t len, const char *path, int n_layers, lz_plan *out);
lz_status lz_plan_load_text(const char *path, int n_layers, lz_plan *out);

/* PipelinePlan message (plan_proto.c). *buf is malloc'd. Unpack checks the
 * version, sizes, ranks in range and every rank's cost entry, then validates. */
lz_status lz_plan_pack(const lz_plan *p, uint8_t **buf, size_t *len);
lz_status lz_plan_unpack(const uint8_t *buf, size_t len, lz_plan *out);

#endif
