/* generation_loop.h - the loop every generation runs (`lizard generate`, one
 * sequence or a batch, and the server): the live sequences, one per state
 * slot, advanced together a round at a time. A round feeds every sequence
 * with input pending (one prefill step for all of them; a sequence whose
 * input is all fed takes its first token there, sampled where later ones
 * are) and gives every other sequence one decode step (together, in groups
 * that overlap through a pipeline). Each new token goes to the caller's
 * callback, which handles text, stop strings and sessions, and may end the
 * sequence. */
#ifndef LZ_GENERATION_LOOP_H
#define LZ_GENERATION_LOOP_H

#include <stdbool.h> // bool
#include <stdint.h>  // int32_t

#include "engine.h"            // lz_engine, LZ_MAX_INFLIGHT
#include "generation_config.h" // lz_generation_config
#include "sampler.h"           // lz_sampler

typedef enum { LZ_GEN_GOES_ON, LZ_GEN_EOS, LZ_GEN_LENGTH } lz_gen_end;

/* One sequence. The caller fills feed to host_logits and lz_gen_start the
 * rest; a sequence that ended keeps its fields until its slot starts again. */
typedef struct {
    const int32_t *feed; /* input to prefill (the caller's, kept until the first token) */
    int n_feed;
    lz_sampler sampler;  /* one draw per token, the first included */
    int max_tokens;
    bool ignore_eos;
    bool host_logits;    /* its logits come here (on_logits), then lz_sampler_next picks: a logit_bias */
    bool live;
    int fed, n_generated;
    int32_t last;        /* the newest token, fed by the next decode step */
} lz_gen_seq;

typedef struct {
    /* Token number n_generated of sequence `slot`; with end set the loop ends
     * the sequence after this call. Returning false ends it now. */
    bool (*on_token)(void *ctx, int slot, int32_t id, lz_gen_end end);
    /* A host_logits sequence's logits [vocab] before they are sampled (or NULL). */
    void (*on_logits)(void *ctx, int slot, float *logits);
    /* Or NULL. When set, a failed step ends each of its sequences through it
     * (the step's message set) and the round goes on; else the round fails. */
    void (*on_fail)(void *ctx, int slot);
    void *ctx;
} lz_gen_callbacks;

typedef struct {
    lz_engine *e;
    const lz_generation_config *gen;
    lz_gen_callbacks cb;
    int prefill_budget; /* pending tokens one round feeds, over all sequences (0: all of them) */
    /* decode groups stay in the pipeline from one round to the next, so that
     * every stage stays busy; callbacks and the caller between rounds must
     * then leave the engine alone (a round with input to feed first brings
     * the groups back) */
    bool circulate;
    lz_gen_seq *seqs; /* [e->state.n_slots]: the sequence in slot i */
    /* a step's rows: row r is sequence slot[r] (while groups circulate, rows [r0, r0 + count) of group k) */
    int32_t *slot, *ids, *next, *decoding;
    int *lens;
    const int32_t **feeds;
    lz_sample_draw *draws;
    float *logits; /* [n_slots, vocab], made when a host_logits sequence first needs it */
    int r0[LZ_MAX_INFLIGHT], count[LZ_MAX_INFLIGHT], n_groups;
} lz_gen_loop;

lz_status lz_gen_init(lz_gen_loop *g, lz_engine *e, const lz_generation_config *gen, const lz_gen_callbacks *cb);
void lz_gen_free(lz_gen_loop *g);

/* q (feed to host_logits) goes live in `slot`, whose state it continues from
 * (fresh, restored or a cached prefix). */
lz_status lz_gen_start(lz_gen_loop *g, int slot, lz_gen_seq q);
void lz_gen_stop(lz_gen_loop *g, int slot);
int lz_gen_live(const lz_gen_loop *g);
/* Whether the sequence in `slot` still has input to feed. */
bool lz_gen_prefilling(const lz_gen_loop *g, int slot);

/* One round: sequences live at its start with input pending are fed (each a
 * piece within prefill_budget), the others take one token. */
lz_status lz_gen_round(lz_gen_loop *g);

#endif
