/* test_generation_loop.c - the generation loop on the CPU: sequences of mixed
 * prompt lengths advanced together get exactly the ids each gets alone
 * (greedy and sampled, sequence i with seed + i), also when their logits come
 * to the host (a logit_bias) and when one starts in a freed slot while the
 * others decode; a callback that ends a sequence frees its slot; an eos id
 * ends a sequence unless eos is ignored. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv
#include <string.h> // memcmp

#include "generation_loop.h" // lz_gen_loop
#include "test_util.h"       // CHECK

enum { N = 4, MAX = 9, SEED = 11 };
static const int32_t prompt_ids[] = {305, 265, 245, 226, 40, 81, 264, 106, 271, 56, 111, 312, 163, 267, 192, 21, 108, 160};
static const int lens[N] = {18, 3, 11, 1};
static const int32_t *prompt(int i) { return prompt_ids + (18 - lens[i]); }

typedef struct {
    int32_t ids[N][MAX];
    int n[N], stop_at[N]; /* stop_at: the callback ends the sequence at that many tokens (0: never) */
    lz_gen_end end[N];
    int biased;           /* on_logits calls */
} record;

static bool on_token(void *ctx, int slot, int32_t id, lz_gen_end end) {
    record *r = ctx;
    r->ids[slot][r->n[slot]++] = id;
    r->end[slot] = end;
    return r->n[slot] != r->stop_at[slot];
}

static void on_logits(void *ctx, int slot, float *logits) {
    (void)slot, (void)logits;
    ((record *)ctx)->biased++;
}

typedef struct {
    const char *dir;
    double temperature;
    bool host, ignore_eos;
    int32_t eos; /* or -1 */
} setup;

static lz_gen_seq seq_of(const setup *t, int prompt_index, uint64_t seed, int vocab) {
    lz_gen_seq q = {.feed = prompt(prompt_index), .n_feed = lens[prompt_index], .max_tokens = MAX,
                    .ignore_eos = t->ignore_eos, .host_logits = t->host};
    lz_sampler_init(&q.sampler, &(lz_sampler_params){t->temperature, 0, 1.0, seed}, vocab);
    return q;
}

/* Prompts [first, first + n) in slots 0.. of an engine of n slots, sequence i
 * with seed SEED + first + i; with swap_in, prompt 2 starts in slot 1 once the
 * callback has ended sequence 1 (r->stop_at[1]). */
static lz_status run(const setup *t, int first, int n, bool swap_in, record *r) {
    lz_engine e;
    lz_engine_options o = {.model_dir = t->dir, .device = "cpu", .n_slots = n, .max_context = 64, .prefill_chunk = 7};
    LZ_TRY(lz_engine_open(&e, &o));
    lz_generation_config gen = {.n_eos = t->eos >= 0, .eos_token_ids = {t->eos}};
    lz_gen_loop g;
    lz_status s = lz_gen_init(&g, &e, &gen, &(lz_gen_callbacks){on_token, on_logits, NULL, r});
    for (int i = 0; s == LZ_OK && i < n; i++)
        s = lz_gen_start(&g, i, seq_of(t, first + i, SEED + (uint64_t)(first + i), e.model.cfg.vocab_size));
    while (s == LZ_OK && lz_gen_live(&g) > 0) {
        s = lz_gen_round(&g);
        if (s == LZ_OK && swap_in && !g.seqs[1].live) { // its slot is free: the next sequence goes there
            CHECK(lz_gen_live(&g) == n - 1);
            swap_in = false;
            r->n[1] = 0, r->stop_at[1] = 0;
            s = lz_state_reset_slot(&e.state, &e.model, 1);
            if (s == LZ_OK)
                s = lz_gen_start(&g, 1, seq_of(t, 2, SEED + 2, e.model.cfg.vocab_size));
        }
    }
    lz_gen_free(&g);
    lz_engine_close(&e);
    return s;
}

static void check_same(const char *what, const record *a, int i, const record *b, int j) {
    CHECK_MSG(a->n[i] == b->n[j] && memcmp(a->ids[i], b->ids[j], sizeof(int32_t) * (size_t)a->n[i]) == 0,
              "%s: sequence %d (%d ids) differs from sequence %d alone (%d ids)", what, i, a->n[i], j, b->n[j]);
}

static void check_model(const char *fixtures, const char *name, double temperature) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s/model", fixtures, name);
    setup t = {dir, temperature, false, true, -1};
    record alone[N] = {0}, together = {0}, host = {0}, swapped = {.stop_at = {0, 3}};
    for (int i = 0; i < N; i++)
        CHECK_MSG(run(&t, i, 1, false, &alone[i]) == LZ_OK, "%s: %s", name, lz_error_message());
    CHECK_MSG(run(&t, 0, N, false, &together) == LZ_OK, "%s: %s", name, lz_error_message());
    t.host = true;
    CHECK_MSG(run(&t, 0, N, false, &host) == LZ_OK, "%s: %s", name, lz_error_message());
    t.host = false;
    CHECK_MSG(run(&t, 0, 2, true, &swapped) == LZ_OK, "%s: %s", name, lz_error_message());
    for (int i = 0; i < N; i++) {
        CHECK(alone[i].n[0] == MAX && alone[i].end[0] == LZ_GEN_LENGTH);
        check_same(name, &together, i, &alone[i], 0);
        check_same("logits on the host", &host, i, &alone[i], 0);
    }
    CHECK(host.biased == N * MAX);
    check_same("beside a sequence that started later", &swapped, 0, &alone[0], 0);
    check_same("started in a freed slot", &swapped, 1, &alone[2], 0);
    // a token of the run as the eos id: the sequence ends at its first occurrence
    t.eos = alone[0].ids[0][4], t.ignore_eos = false;
    int first = 0;
    while (alone[0].ids[0][first] != t.eos)
        first++;
    record eos = {0};
    CHECK(run(&t, 0, 1, false, &eos) == LZ_OK);
    CHECK_MSG(eos.n[0] == first + 1 && eos.end[0] == LZ_GEN_EOS, "%s: %d ids at eos", name, eos.n[0]);
}

int main(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    CHECK(fixtures != NULL);
    if (!fixtures)
        return lz_test_finish("test_generation_loop");
    check_model(fixtures, "hybrid50", 0.0);
    check_model(fixtures, "lizard_perhead", 0.0);
    check_model(fixtures, "hybrid50", 0.8);
    return lz_test_finish("test_generation_loop");
}
