/* generation_loop.c - rounds of prefill and decode over the live sequences. */
#include <limits.h> // INT_MAX
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, calloc, free

#include "generation_loop.h"

lz_status lz_gen_init(lz_gen_loop *g, lz_engine *e, const lz_generation_config *gen, const lz_gen_callbacks *cb) {
    const size_t n = (size_t)e->state.n_slots;
    *g = (lz_gen_loop){.e = e, .gen = gen, .cb = *cb};
    g->seqs = calloc(n, sizeof(lz_gen_seq));
    g->slot = malloc(sizeof(int32_t) * 4 * n); // slot, ids, next, decoding
    g->lens = malloc(sizeof(int) * n);
    g->feeds = malloc(sizeof(int32_t *) * n);
    g->draws = malloc(sizeof(lz_sample_draw) * n);
    if (g->seqs && g->slot && g->lens && g->feeds && g->draws) {
        g->ids = g->slot + n, g->next = g->slot + 2 * n, g->decoding = g->slot + 3 * n;
        return LZ_OK;
    }
    lz_gen_free(g);
    return lz_fail(LZ_ERR_NOMEM, "generation: out of memory for %zu sequences", n);
}

void lz_gen_free(lz_gen_loop *g) {
    free(g->seqs), free(g->slot), free(g->lens), free(g->feeds), free(g->draws), free(g->logits);
    *g = (lz_gen_loop){0};
}

lz_status lz_gen_start(lz_gen_loop *g, int slot, lz_gen_seq q) {
    if (slot < 0 || slot >= g->e->state.n_slots)
        return lz_fail(LZ_ERR_INPUT, "sequence slot %d out of range (%d slots)", slot, g->e->state.n_slots);
    if (q.n_feed < 1)
        return lz_fail(LZ_ERR_INPUT, "sequence %d: nothing to feed", slot);
    q.live = true, q.fed = 0, q.n_generated = 0;
    g->seqs[slot] = q;
    return LZ_OK;
}

void lz_gen_stop(lz_gen_loop *g, int slot) { g->seqs[slot].live = false; }

int lz_gen_live(const lz_gen_loop *g) {
    int n = 0;
    for (int i = 0; i < g->e->state.n_slots; i++)
        n += g->seqs[i].live;
    return n;
}

bool lz_gen_prefilling(const lz_gen_loop *g, int slot) {
    return g->seqs[slot].live && g->seqs[slot].fed < g->seqs[slot].n_feed;
}

/* Hands sequence `slot` its new token; false once the sequence is over. */
static bool take(lz_gen_loop *g, int slot, int32_t id) {
    lz_gen_seq *q = &g->seqs[slot];
    if (!q->live || q->fed < q->n_feed) // stopped, or started anew, while its step was in flight
        return false;
    q->last = id;
    q->n_generated++;
    const lz_gen_end end = !q->ignore_eos && lz_generation_config_is_eos(g->gen, id) ? LZ_GEN_EOS
                           : q->n_generated >= q->max_tokens                        ? LZ_GEN_LENGTH
                                                                                    : LZ_GEN_GOES_ON;
    const bool on = g->cb.on_token(g->cb.ctx, slot, id, end) && end == LZ_GEN_GOES_ON;
    q->live = q->live && on; // the callback may have stopped it too
    return q->live;
}

/* Row r's token: the one chosen where the logits are, or picked here from its logits row. */
static int32_t row_token(lz_gen_loop *g, int r, bool host) {
    if (!host)
        return g->next[r];
    lz_gen_seq *q = &g->seqs[g->slot[r]];
    float *logits = g->logits + (size_t)r * (size_t)lz_engine_config(g->e)->vocab_size;
    if (q->host_logits && g->cb.on_logits)
        g->cb.on_logits(g->cb.ctx, g->slot[r], logits);
    return lz_sampler_next(&q->sampler, logits);
}

/* Rows [r0, r0 + *count) take their tokens; those still going move down to
 * stay contiguous, fed their token next, and *count shrinks to them. */
static void take_rows(lz_gen_loop *g, int r0, int *count, bool host) {
    int kept = r0;
    for (int r = r0; r < r0 + *count; r++) {
        const int32_t slot = g->slot[r], id = row_token(g, r, host);
        if (take(g, slot, id))
            g->slot[kept] = slot, g->ids[kept++] = id;
    }
    *count = kept - r0;
}

/* Rows [r0, r0 + n) draw their next token (its sampler counts it, greedy or
 * not); NULL when every row is greedy, so that the argmax needs no draws.
 * With `pieces` (a prefill, row r feeding g->lens[r] tokens) a row whose
 * piece does not end its input draws nothing: its id goes unused. */
static const lz_sample_draw *draw_rows(lz_gen_loop *g, int r0, int n, bool pieces) {
    bool greedy = true;
    for (int r = r0; r < r0 + n; r++) {
        lz_gen_seq *q = &g->seqs[g->slot[r]];
        lz_sampler *s = &q->sampler;
        const bool ends = !pieces || q->fed + g->lens[r] == q->n_feed;
        g->draws[r] = ends ? lz_sampler_draw(s) : (lz_sample_draw){s->p, s->n};
        greedy &= s->p.temperature == 0;
    }
    return greedy ? NULL : g->draws + r0;
}

/* Whether rows [0, n) need their logits here (a logit_bias), and room for them. */
static lz_status host_rows(lz_gen_loop *g, int n, bool *host) {
    *host = false;
    for (int r = 0; r < n; r++)
        *host |= g->seqs[g->slot[r]].host_logits;
    const size_t size = sizeof(float) * (size_t)g->e->state.n_slots * (size_t)lz_engine_config(g->e)->vocab_size;
    if (*host && !g->logits && !(g->logits = malloc(size)))
        return lz_fail(LZ_ERR_NOMEM, "generation: out of memory for logits");
    return LZ_OK;
}

/* A failed step leaves the state of its n rows undefined: each of their sequences ends. */
static lz_status fail_rows(lz_gen_loop *g, int n, lz_status s) {
    char why[256];
    snprintf(why, sizeof why, "%s", lz_error_message());
    for (int r = 0; r < n; r++) {
        g->seqs[g->slot[r]].live = false;
        if (g->cb.on_fail) { // each gets the step's message (the callback may clear it)
            lz_error_clear();
            lz_fail(s, "%s", why);
            g->cb.on_fail(g->cb.ctx, g->slot[r]);
        }
    }
    if (!g->cb.on_fail)
        return s;
    lz_error_clear();
    return LZ_OK;
}

/* The next piece of every pending input, within the budget, in one step. */
static lz_status prefill(lz_gen_loop *g) {
    int n = 0, budget = g->prefill_budget > 0 ? g->prefill_budget : INT_MAX;
    for (int i = 0; i < g->e->state.n_slots && budget > 0; i++) {
        const lz_gen_seq *q = &g->seqs[i];
        if (!lz_gen_prefilling(g, i))
            continue;
        g->slot[n] = i, g->feeds[n] = q->feed + q->fed;
        g->lens[n] = q->n_feed - q->fed < budget ? q->n_feed - q->fed : budget;
        budget -= g->lens[n++];
    }
    if (n == 0)
        return LZ_OK;
    bool host;
    lz_status s = host_rows(g, n, &host);
    const lz_step_out out = host ? (lz_step_out){.logits = g->logits}
                                 : (lz_step_out){.ids = g->next, .draws = draw_rows(g, 0, n, true)};
    if (s == LZ_OK) // one input alone: its chunks overlap through a pipeline
        s = n == 1 ? lz_engine_prefill(g->e, g->slot[0], g->feeds[0], g->lens[0], NULL, out)
                   : lz_engine_prefill_many(g->e, n, g->slot, g->feeds, g->lens, out);
    if (s != LZ_OK)
        return fail_rows(g, n, s);
    for (int r = 0; r < n; r++) {
        lz_gen_seq *q = &g->seqs[g->slot[r]];
        if ((q->fed += g->lens[r]) == q->n_feed)
            take(g, g->slot[r], row_token(g, r, host));
    }
    return LZ_OK;
}

static lz_status start_group(lz_gen_loop *g, int k) {
    const int r0 = g->r0[k];
    return lz_engine_decode_start(g->e, g->count[k], g->slot + r0, g->ids + r0, true,
                                  draw_rows(g, r0, g->count[k], false));
}

/* Each circulating group in turn comes back and takes its tokens; with
 * `again` its next step starts at once, while the others are still in the
 * pipeline (steps finish in the order they started). */
static lz_status turn_groups(lz_gen_loop *g, bool again) {
    int in_flight = 0;
    for (int k = 0; k < g->n_groups; k++) {
        if (g->count[k] == 0)
            continue;
        LZ_TRY(lz_engine_decode_finish(g->e, NULL, g->next + g->r0[k]));
        take_rows(g, g->r0[k], &g->count[k], false);
        if (!again)
            g->count[k] = 0;
        else if (g->count[k] > 0) {
            LZ_TRY(start_group(g, k));
            in_flight++;
        }
    }
    g->n_groups = in_flight > 0 ? g->n_groups : 0;
    return LZ_OK;
}

/* The sequences listed in g->decoding (those decoding when the round began) take one token each. */
static lz_status decode(lz_gen_loop *g, int listed) {
    if (g->n_groups > 0)
        return turn_groups(g, true);
    int n = 0;
    for (int k = 0; k < listed; k++)
        if (g->seqs[g->decoding[k]].live)
            g->slot[n] = g->decoding[k], g->ids[n++] = g->seqs[g->decoding[k]].last;
    if (n == 0)
        return LZ_OK;
    bool host;
    lz_status s = host_rows(g, n, &host);
    const int groups = lz_engine_groups(g->e, n);
    if (s == LZ_OK && g->circulate && !host && groups >= 2) {
        for (int k = 0; k < groups; k++) {
            g->r0[k] = lz_engine_group_first(n, groups, k);
            g->count[k] = lz_engine_group_first(n, groups, k + 1) - g->r0[k];
            LZ_TRY(start_group(g, k));
        }
        g->n_groups = groups;
        return turn_groups(g, true);
    }
    const lz_sample_draw *draws = host ? NULL : draw_rows(g, 0, n, false);
    const lz_step_out out = host ? (lz_step_out){.logits = g->logits, .overlap = true}
                                 : (lz_step_out){.ids = g->next, .draws = draws, .overlap = true};
    if (s == LZ_OK)
        s = lz_engine_decode(g->e, n, g->slot, g->ids, out);
    if (s != LZ_OK)
        return fail_rows(g, n, s);
    take_rows(g, 0, &n, host);
    return LZ_OK;
}

lz_status lz_gen_round(lz_gen_loop *g) {
    bool pending = false;
    int n = 0;
    for (int i = 0; i < g->e->state.n_slots; i++)
        pending |= lz_gen_prefilling(g, i);
    if (pending && g->n_groups > 0) // nothing in flight while inputs are fed
        LZ_TRY(turn_groups(g, false));
    for (int i = 0; i < g->e->state.n_slots; i++)
        if (g->seqs[i].live && !lz_gen_prefilling(g, i))
            g->decoding[n++] = i;
    if (pending)
        LZ_TRY(prefill(g));
    return decode(g, n);
}
