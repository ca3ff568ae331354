/* test_step_header_check.c - lz_step_header_check: a consistent StepHeader
 * passes (also after a pack / unpack round trip), and every refusal names
 * the field (and index) at fault. */
#include <math.h>   // INFINITY, NAN
#include <stdint.h> // int32_t, INT32_MAX
#include <stdlib.h> // malloc, free

#include "lizard.pb-c.h" // Lizard__StepHeader
#include "step_header_check.h"
#include "test_util.h"

enum { SLOTS = 4, VOCAB = 100, MAX_TOKENS = 64 };

/* Two sequences: slot 1 prefills 3 tokens from position 0, slot 3 decodes
 * one token at position 9; logits of rows 2 and 3 go back. */
typedef struct {
    int32_t seq_ids[2], positions[2], token_counts[2], token_ids[4], logit_rows[2];
    Lizard__StepHeader h;
} fixture;

static void make(fixture *f) {
    const fixture init = {{1, 3}, {0, 9}, {3, 1}, {5, 6, 7, 99}, {2, 3}, LIZARD__STEP_HEADER__INIT};
    *f = init;
    Lizard__StepHeader *h = &f->h;
    h->step_id = 7;
    h->n_seq_ids = h->n_positions = h->n_token_counts = 2;
    h->seq_ids = f->seq_ids, h->positions = f->positions, h->token_counts = f->token_counts;
    h->n_token_ids = 4, h->token_ids = f->token_ids;
    h->n_logit_rows = 2, h->logit_rows = f->logit_rows;
    h->phase = LIZARD__STEP_HEADER__PHASE__MIXED;
}

static void valid(void) {
    fixture f;
    make(&f);
    lz_error_clear();
    CHECK_MSG(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK, "%s", lz_error_message());
    /* the same header after the wire */
    size_t len = lizard__step_header__get_packed_size(&f.h);
    uint8_t *buf = malloc(len);
    CHECK(buf != NULL);
    if (!buf)
        return;
    lizard__step_header__pack(&f.h, buf);
    Lizard__StepHeader *h = lizard__step_header__unpack(NULL, len, buf);
    free(buf);
    CHECK(h != NULL);
    if (h) {
        CHECK_MSG(lz_step_header_check(h, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK, "%s", lz_error_message());
        lizard__step_header__free_unpacked(h, NULL);
    }
    /* an empty step (the STOP header) and a position at the int32 limit */
    Lizard__StepHeader empty = LIZARD__STEP_HEADER__INIT;
    empty.flags = 1;
    CHECK(lz_step_header_check(&empty, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK);
    make(&f);
    f.positions[1] = INT32_MAX - 1; /* its one token at INT32_MAX - 1 */
    CHECK_MSG(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK, "%s", lz_error_message());
    /* no logit rows is fine */
    make(&f);
    f.h.n_logit_rows = 0;
    CHECK(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK);
}

static void refusals(void) {
    fixture f;
    make(&f);
    f.h.n_positions = 1;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "positions has 1 entries");
    make(&f);
    f.h.n_token_counts = 3;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "token_counts has 3 entries");
    make(&f);
    f.h.n_seq_ids = 1;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "for 1 seq_ids");
    make(&f);
    f.token_counts[1] = 0;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "token_counts[1] = 0");
    make(&f);
    f.token_counts[0] = -2;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "token_counts[0] = -2");
    make(&f);
    f.token_counts[0] = 2; /* 2 + 1 = 3 counted, 4 sent */
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL,
                     "token_counts add up to 3 but token_ids has 4 entries");
    make(&f);
    f.h.n_token_ids = 5;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL,
                     "token_counts add up to 4 but token_ids has 5 entries");
    make(&f);
    f.token_ids[3] = VOCAB;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "token_ids[3] = 100, out of range");
    make(&f);
    f.token_ids[0] = -1;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "token_ids[0] = -1");
    make(&f);
    f.seq_ids[1] = SLOTS;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "seq_ids[1] = 4, out of range");
    make(&f);
    f.seq_ids[0] = -3;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "seq_ids[0] = -3");
    make(&f);
    f.logit_rows[1] = 4;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "logit_rows[1] = 4, out of range");
    make(&f);
    f.logit_rows[0] = -1;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "logit_rows[0] = -1");
    make(&f);
    f.positions[0] = -1;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "positions[0] = -1, negative");
    make(&f);
    f.positions[0] = INT32_MAX - 2; /* 3 tokens: the last at INT32_MAX, one past wraps */
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "positions[0] = 2147483645");
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "overflows");
    make(&f);
    f.positions[0] = INT32_MAX - 3; /* the last of 3 tokens at INT32_MAX - 1: fine */
    CHECK_MSG(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK, "%s", lz_error_message());
    CHECK_FAILS_WITH(lz_step_header_check(NULL, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "no header");
    /* no slots, no vocabulary: nothing is in range */
    make(&f);
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, 0, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "seq_ids[0]");
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, 0, MAX_TOKENS), LZ_ERR_INTERNAL, "token_ids[0]");
    /* ids kept on rank 0 (it embeds): the counts size the step, logit rows still checked against them */
    make(&f);
    f.h.n_token_ids = 0, f.h.token_ids = NULL;
    CHECK_MSG(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK, "%s", lz_error_message());
    f.logit_rows[1] = 4;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "logit_rows[1] = 4, out of range");
    make(&f);
    f.h.n_token_ids = 0, f.h.token_ids = NULL;
    f.token_counts[0] = INT32_MAX / 2, f.positions[0] = 0;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "more than the 64 tokens");
    make(&f); /* with ids too: a step larger than the receiver's workspace */
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, 3), LZ_ERR_INTERNAL, "add up to 4, more than the 3");
    lz_error_clear();
}

/* SAMPLE: one draw per logit row, each parameter in range; none without the flag. */
static void draws(void) {
    fixture f;
    double t[2] = {0.8, 0.0}, p[2] = {0.9, 1.0};
    int32_t k[2] = {0, 40};
    uint64_t seeds[2] = {7, 8}, n[2] = {0, 12};
#define SAMPLED()                                                                   \
    do {                                                                            \
        make(&f);                                                                   \
        f.h.flags = 256;                                                            \
        f.h.n_temperatures = f.h.n_top_ks = f.h.n_top_ps = f.h.n_seeds = f.h.n_draws = 2; \
        f.h.temperatures = t, f.h.top_ks = k, f.h.top_ps = p, f.h.seeds = seeds, f.h.draws = n; \
    } while (0)
    SAMPLED();
    CHECK_MSG(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS) == LZ_OK, "%s", lz_error_message());
    f.h.n_top_ps = 1;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "top_ps has 1 entries for 2");
    SAMPLED();
    f.h.flags = 0; /* arrays without the flag */
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "no SAMPLE flag");
    SAMPLED();
    t[1] = -0.5;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "temperatures[1] = -0.5");
    t[1] = INFINITY;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "temperatures[1] = inf");
    t[1] = 0.0;
    k[0] = -1;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "top_ks[0] = -1");
    k[0] = 0;
    p[0] = 0.0;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "top_ps[0] = 0");
    p[0] = NAN;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "top_ps[0] = ");
    p[0] = 1.5;
    CHECK_FAILS_WITH(lz_step_header_check(&f.h, SLOTS, VOCAB, MAX_TOKENS), LZ_ERR_INTERNAL, "top_ps[0] = 1.5");
#undef SAMPLED
}

int main(void) {
    valid();
    refusals();
    draws();
    return lz_test_finish("test_step_header_check");
}
