/* generate_batch.c - batched generation on one engine. */
#include <stdlib.h> // malloc, calloc, free

#include "clock.h" // lz_now_seconds
#include "generate_batch.h"

typedef struct {
    lz_sampler *samplers;
    int32_t *slots, *ids; /* the running sequences: the slots and inputs of their next decode step */
    int32_t *next;        /* the ids the device chose, one per running row */
    lz_sample_draw *draws; /* each running row's draw for its next step */
    int *index;           /* running row -> sequence */
    bool greedy;          /* every sequence greedy: the device takes the argmax (no draws sent) */
} batch_scratch;

static void free_scratch(batch_scratch *b, int n) {
    if (b->samplers)
        for (int i = 0; i < n; i++)
            lz_sampler_free(&b->samplers[i]);
    free(b->samplers), free(b->slots), free(b->ids), free(b->next), free(b->draws), free(b->index);
}

static lz_status alloc_scratch(batch_scratch *b, int n, int vocab, int max_tokens, const lz_sampler_params *params,
                               lz_completion *out) {
    b->samplers = calloc((size_t)n, sizeof(lz_sampler));
    b->slots = malloc(sizeof(int32_t) * (size_t)n);
    b->ids = malloc(sizeof(int32_t) * (size_t)n);
    b->next = malloc(sizeof(int32_t) * (size_t)n);
    b->draws = malloc(sizeof(lz_sample_draw) * (size_t)n);
    b->index = malloc(sizeof(int) * (size_t)n);
    b->greedy = params->temperature == 0;
    if (!b->samplers || !b->slots || !b->ids || !b->next || !b->draws || !b->index)
        return lz_fail(LZ_ERR_NOMEM, "generate: out of memory for %d sequences", n);
    for (int i = 0; i < n; i++) {
        lz_sampler_params p = *params;
        p.seed += (uint64_t)i;
        LZ_TRY(lz_sampler_init(&b->samplers[i], &p, vocab));
        out[i] = (lz_completion){malloc(sizeof(int32_t) * (size_t)(max_tokens > 0 ? max_tokens : 1)), 0, false};
        if (!out[i].ids)
            return lz_fail(LZ_ERR_NOMEM, "generate: out of memory for %d sequences", n);
    }
    return LZ_OK;
}

/* Records the next token of running row r (the id the device chose);
 * false when its sequence is done. */
static bool take_token(batch_scratch *b, int r, int max_tokens, const lz_generation_config *gen, bool ignore_eos,
                       lz_completion *out) {
    const int i = b->index[r];
    const int32_t id = b->next[r];
    out[i].ids[out[i].n++] = id;
    b->ids[r] = id;
    out[i].stopped_at_eos = !ignore_eos && lz_generation_config_is_eos(gen, id);
    return !out[i].stopped_at_eos && out[i].n < max_tokens;
}

/* Rows [r0, r0 + *count) after their step: each takes its token; the ones
 * still running move down to stay contiguous, and *count shrinks to them. */
static void take_tokens(batch_scratch *b, int r0, int *count, int max_tokens, const lz_generation_config *gen,
                        bool ignore_eos, lz_completion *out) {
    int kept = r0;
    for (int r = r0; r < r0 + *count; r++) {
        if (!take_token(b, r, max_tokens, gen, ignore_eos, out))
            continue;
        b->index[kept] = b->index[r];
        b->slots[kept] = b->slots[r];
        b->ids[kept] = b->ids[r];
        kept++;
    }
    *count = kept - r0;
}

/* Rows [r0, r0 + count) draw their next token (the device samples it): each
 * sampler counts it, greedy or not, as the host's lz_sampler_next would. */
static const lz_sample_draw *draw_rows(batch_scratch *b, int r0, int count) {
    for (int r = r0; r < r0 + count; r++)
        b->draws[r] = lz_sampler_draw(&b->samplers[b->index[r]]);
    return b->greedy ? NULL : b->draws + r0;
}

static lz_status start_group(lz_engine *e, batch_scratch *b, int r0, int count) {
    return lz_engine_decode_start(e, count, b->slots + r0, b->ids + r0, true, draw_rows(b, r0, count));
}

static lz_status finish_group(lz_engine *e, batch_scratch *b, int r0) {
    return lz_engine_decode_finish(e, NULL, b->next + r0);
}

/* Every running sequence until each stops. Through a pipeline that allows
 * it, the rows are split into as many groups as there are stages and the
 * groups circulate: when group g's step comes back, its tokens are taken and
 * its next step starts at once while the other groups are still in the
 * pipeline, so that every stage stays busy (steps finish in start order). */
static lz_status decode_all(lz_engine *e, batch_scratch *b, int running, int max_tokens,
                            const lz_generation_config *gen, bool ignore_eos, lz_completion *out) {
    int groups = lz_engine_overlap(e);
    groups = groups < running ? groups : running;
    if (groups < 2) { // ids come back from where the logits are, greedy or sampled
        while (running > 0) {
            const lz_sample_draw *draws = draw_rows(b, 0, running);
            LZ_TRY(lz_engine_decode(e, running, b->slots, b->ids, (lz_step_out){.ids = b->next, .draws = draws}));
            take_tokens(b, 0, &running, max_tokens, gen, ignore_eos, out);
        }
        return LZ_OK;
    }
    int r0[LZ_MAX_INFLIGHT], count[LZ_MAX_INFLIGHT], in_flight = 0;
    groups = groups < LZ_MAX_INFLIGHT ? groups : LZ_MAX_INFLIGHT;
    for (int g = 0; g < groups; g++) {
        r0[g] = running * g / groups;
        count[g] = running * (g + 1) / groups - r0[g];
        LZ_TRY(start_group(e, b, r0[g], count[g]));
        in_flight++;
    }
    for (int g = 0; in_flight > 0; g = (g + 1) % groups) {
        if (count[g] == 0)
            continue; // finished for good: not in flight
        LZ_TRY(finish_group(e, b, r0[g]));
        take_tokens(b, r0[g], &count[g], max_tokens, gen, ignore_eos, out);
        if (count[g] > 0)
            LZ_TRY(start_group(e, b, r0[g], count[g]));
        else
            in_flight--;
    }
    return LZ_OK;
}

lz_status lz_generate_batch(lz_engine *e, const lz_prompt *prompts, int n, int max_tokens,
                            const lz_sampler_params *params, const lz_generation_config *gen, bool ignore_eos,
                            lz_completion *out, lz_batch_timing *timing) {
    const int vocab = e->model.cfg.vocab_size;
    if (n > e->state.n_slots)
        return lz_fail(LZ_ERR_INPUT, "generate: %d sequences for %d state slots", n, e->state.n_slots);
    batch_scratch b = {0};
    *timing = (lz_batch_timing){0};
    lz_status s = alloc_scratch(&b, n, vocab, max_tokens, params, out);
    // prefill: each prompt into its slot, its last logits into row i
    double t0 = lz_now_seconds();
    const int32_t **ids = malloc(sizeof(int32_t *) * (size_t)n);
    int *lens = malloc(sizeof(int) * (size_t)n);
    if (s == LZ_OK && (!ids || !lens))
        s = lz_fail(LZ_ERR_NOMEM, "generate: out of memory");
    for (int i = 0; s == LZ_OK && i < n; i++) {
        s = lz_state_reset_slot(&e->state, &e->model, i);
        b.slots[i] = i;
        ids[i] = prompts[i].ids;
        lens[i] = prompts[i].n;
        timing->prompt_tokens += prompts[i].n;
        b.index[i] = i;
    }
    const lz_sample_draw *first = s == LZ_OK ? draw_rows(&b, 0, n) : NULL;
    if (s == LZ_OK) // every prompt's first id into row i, chosen where the logits are
        s = lz_engine_prefill_many(e, n, b.slots, ids, lens, (lz_step_out){.ids = b.next, .draws = first});
    free(ids), free(lens);
    timing->prefill_seconds = lz_now_seconds() - t0;
    int running = 0;
    for (int i = 0; s == LZ_OK && i < n; i++) {
        b.index[running] = i;
        b.slots[running] = i;
        b.next[running] = b.next[i]; // the prompt's first id is in row i (rows of sequences done are skipped)
        if (take_token(&b, running, max_tokens, gen, ignore_eos, out))
            running++;
    }
    t0 = lz_now_seconds();
    if (s == LZ_OK)
        s = decode_all(e, &b, running, max_tokens, gen, ignore_eos, out);
    timing->decode_seconds = lz_now_seconds() - t0;
    for (int i = 0; i < n; i++)
        timing->generated_tokens += out[i].ids ? out[i].n : 0;
    free_scratch(&b, n);
    return s;
}
