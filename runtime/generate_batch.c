/* generate_batch.c - batched generation on one engine. */
#include <stdlib.h> // malloc, calloc, free

#include "clock.h" // lz_now_seconds
#include "generate_batch.h"

typedef struct {
    lz_sampler *samplers;
    float *logits;        /* [n, vocab] */
    int32_t *slots, *ids; /* the running sequences of the next decode step */
    int *index;           /* running position -> sequence */
} batch_scratch;

static void free_scratch(batch_scratch *b, int n) {
    if (b->samplers)
        for (int i = 0; i < n; i++)
            lz_sampler_free(&b->samplers[i]);
    free(b->samplers), free(b->logits), free(b->slots), free(b->ids), free(b->index);
}

static lz_status alloc_scratch(batch_scratch *b, int n, int vocab, int max_tokens, const lz_sampler_params *params,
                               lz_completion *out) {
    b->samplers = calloc((size_t)n, sizeof(lz_sampler));
    b->logits = malloc(sizeof(float) * (size_t)n * vocab);
    b->slots = malloc(sizeof(int32_t) * (size_t)n);
    b->ids = malloc(sizeof(int32_t) * (size_t)n);
    b->index = malloc(sizeof(int) * (size_t)n);
    if (!b->samplers || !b->logits || !b->slots || !b->ids || !b->index)
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

/* Samples the next token of running sequence r from its logits; false when it is done. */
static bool take_token(batch_scratch *b, int r, int vocab, int max_tokens, const lz_generation_config *gen,
                       bool ignore_eos, lz_completion *out) {
    const int i = b->index[r];
    const int32_t id = lz_sampler_next(&b->samplers[i], b->logits + (size_t)r * vocab);
    out[i].ids[out[i].n++] = id;
    b->ids[r] = id;
    out[i].stopped_at_eos = !ignore_eos && lz_generation_config_is_eos(gen, id);
    return !out[i].stopped_at_eos && out[i].n < max_tokens;
}

/* One token for every running sequence: in one step, or, through a pipeline
 * that allows it, as several micro-batches in flight so that every stage
 * works at once (all are started, then finished in order). */
static lz_status decode_round(lz_engine *e, batch_scratch *b, int running, int vocab) {
    int groups = lz_engine_overlap(e);
    groups = groups < running ? groups : running;
    if (groups < 2)
        return lz_engine_decode(e, running, b->slots, b->ids, b->logits);
    for (int g = 0; g < groups; g++) {
        const int r0 = running * g / groups, r1 = running * (g + 1) / groups;
        LZ_TRY(lz_engine_decode_start(e, r1 - r0, b->slots + r0, b->ids + r0));
    }
    for (int g = 0; g < groups; g++)
        LZ_TRY(lz_engine_decode_finish(e, b->logits + (size_t)(running * g / groups) * vocab));
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
    }
    if (s == LZ_OK) // every prompt's last logits into row i
        s = lz_engine_prefill_many(e, n, b.slots, ids, lens, b.logits);
    free(ids), free(lens);
    timing->prefill_seconds = lz_now_seconds() - t0;
    int running = 0;
    for (int i = 0; s == LZ_OK && i < n; i++) {
        b.index[running] = i;
        b.slots[running] = i;
        if (take_token(&b, running, vocab, max_tokens, gen, ignore_eos, out))
            running++;
    }
    t0 = lz_now_seconds();
    while (s == LZ_OK && running > 0) {
        s = decode_round(e, &b, running, vocab);
        int kept = 0;
        for (int r = 0; s == LZ_OK && r < running; r++) {
            // compact the running set in place: row r's logits move down with it
            b.index[kept] = b.index[r];
            b.slots[kept] = b.slots[r];
            if (kept != r)
                for (int v = 0; v < vocab; v++)
                    b.logits[(size_t)kept * vocab + v] = b.logits[(size_t)r * vocab + v];
            if (take_token(&b, kept, vocab, max_tokens, gen, ignore_eos, out))
                kept++;
        }
        running = kept;
    }
    timing->decode_seconds = lz_now_seconds() - t0;
    for (int i = 0; i < n; i++)
        timing->generated_tokens += out[i].ids ? out[i].n : 0;
    free_scratch(&b, n);
    return s;
}
