/* fuzz_plan.c - libFuzzer target for the pipeline's message decoders: the
 * input as a PipelinePlan (lz_plan_unpack, then what an accepted plan must
 * satisfy: it validates, packs and unpacks to itself, and its runs and visit
 * order cover every layer once), and the same bytes as a StepHeader
 * (lizard__step_header__unpack, lz_step_header_check, then the arrays
 * pipeline.c's step_from_header builds from an accepted header, and with
 * SAMPLE each row's draw sampled from a small row, as the last stage does). */
#include <math.h>    // INFINITY
#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t, int32_t
#include <stdlib.h>  // abort, malloc, free
#include <string.h>  // strcmp, strncmp, strstr

#include "lizard.pb-c.h"       // Lizard__StepHeader
#include "plan.h"              // lz_plan_unpack, lz_plan_pack, lz_plan_validate
#include "sampler.h"           // lz_sample_row_of
#include "cpu/cpu_kernels.h"   // sample_row
#include "step_header_check.h" // lz_step_header_check

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_plan(const lz_plan *a, const lz_plan *b) {
    if (a->n_ranks != b->n_ranks || a->n_layers != b->n_layers || a->embed_rank != b->embed_rank ||
        a->head_rank != b->head_rank || a->context != b->context || a->batch != b->batch ||
        strcmp(a->placement, b->placement) != 0)
        return false;
    for (int i = 0; i < a->n_layers; i++)
        if (a->layer_rank[i] != b->layer_rank[i])
            return false;
    for (int r = 0; r < a->n_ranks; r++)
        if (a->weight_bytes[r] != b->weight_bytes[r] || a->state_bytes[r] != b->state_bytes[r] ||
            a->free_bytes[r] != b->free_bytes[r] || a->compute_share[r] != b->compute_share[r])
            return false;
    return true;
}

static void plan_invariants(const lz_plan *p) {
    static lz_plan again; /* ~10 KB: keep it off the stack */
    lz_error_clear();
    if (lz_plan_validate(p) != LZ_OK)
        abort(); /* unpack returned a plan that does not validate */
    uint8_t *buf = NULL;
    size_t len = 0;
    if (lz_plan_pack(p, &buf, &len) != LZ_OK)
        abort();
    lz_status s = lz_plan_unpack(buf, len, &again);
    free(buf);
    if (s != LZ_OK || !same_plan(p, &again))
        abort(); /* an accepted plan survives a round trip */
    /* every layer in exactly one run of its rank and one visit, in order */
    static lz_layer_run runs[LZ_MAX_LAYERS];
    int covered = 0;
    for (int r = 0; r < p->n_ranks; r++) {
        int n = 0;
        lz_plan_runs(p, r, runs, LZ_MAX_LAYERS, &n);
        if (n < 1 || n > p->n_layers)
            abort();
        for (int k = 0; k < n; k++) {
            if (runs[k].count < 1 || runs[k].first < 0 || runs[k].first + runs[k].count > p->n_layers)
                abort();
            for (int i = runs[k].first; i < runs[k].first + runs[k].count; i++)
                if (p->layer_rank[i] != r)
                    abort();
            covered += runs[k].count;
        }
    }
    if (covered != p->n_layers)
        abort();
    static lz_plan_visit visits[LZ_MAX_LAYERS + 2];
    int n = 0, next = 0, embeds = 0, heads = 0;
    lz_plan_visit_order(p, visits, LZ_MAX_LAYERS + 2, &n);
    if (n < 1 || n > p->n_layers + 2)
        abort();
    for (int v = 0; v < n; v++) {
        if (visits[v].rank < 0 || visits[v].rank >= p->n_ranks || visits[v].first != next)
            abort();
        next += visits[v].count;
        embeds += visits[v].embed, heads += visits[v].head;
    }
    if (next != p->n_layers || embeds != 1 || heads != 1)
        abort();
}

/* What step_from_header does with an accepted header, with the checks that
 * must never fire once lz_step_header_check passed. */
static void step_arrays(const Lizard__StepHeader *h) {
    const int S = (int)h->n_seq_ids;
    int T = (int)h->n_token_ids;
    if (T == 0) // the ids stayed on rank 0: the counts size the step
        for (int q = 0; q < S; q++)
            T += h->token_counts[q];
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)(4 * S + T + 1));
    if (!slot)
        return;
    int32_t *start = slot + S, *len = start + S, *pos = len + S, *token_pos = pos + S;
    int t = 0;
    for (int q = 0; q < S; q++) {
        slot[q] = h->seq_ids[q];
        start[q] = t;
        len[q] = h->token_counts[q];
        pos[q] = h->positions[q];
        for (int i = 0; i < len[q] && t < T; i++)
            token_pos[t++] = pos[q] + i; /* UBSan: no overflow */
    }
    if (t != T)
        abort();
    free(slot);
}

/* What pipeline_sample.c and the last stage do with an accepted SAMPLE
 * header: one draw per logit row, sampled from a row with ties and -inf. */
static void sample_draws(const Lizard__StepHeader *h) {
    if (!(h->flags & 256)) // STEP_FLAG_SAMPLE
        return;
    static const float row[8] = {1.0f, 3.0f, 3.0f, -INFINITY, 0.5f, 2.0f, 3.0f, -2.0f};
    for (size_t r = 0; r < h->n_logit_rows; r++) {
        const lz_sample_draw d = {{h->temperatures[r], h->top_ks[r], h->top_ps[r], h->seeds[r]}, h->draws[r]};
        const lz_sample_row p = lz_sample_row_of(&d);
        int32_t scratch[8];
        const int32_t id = sample_row(row, 8, &p, r % 2 ? scratch : NULL);
        if (id < 0 || id >= 8 || id == 3)
            abort(); /* an id outside the row, or one of probability 0 */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lz_plan plan;
    lz_error_clear();
    if (lz_plan_unpack(data, size, &plan) == LZ_OK)
        plan_invariants(&plan);
    else if (strstr(lz_error_message(), "PipelinePlan") == NULL && strstr(lz_error_message(), "plan:") == NULL)
        abort(); /* a refusal names the message */

    Lizard__StepHeader *h = lizard__step_header__unpack(NULL, size, data);
    if (!h)
        return 0;
    static const int shapes[][3] = {{1, 1, 1}, {8, 256, 512}, {64, 128256, 8192}}; // slots, vocab, step tokens
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        lz_error_clear();
        if (lz_step_header_check(h, shapes[k][0], shapes[k][1], shapes[k][2]) == LZ_OK)
            step_arrays(h), sample_draws(h);
        else if (strncmp(lz_error_message(), "StepHeader: ", 12) != 0)
            abort(); /* a refusal names the field */
    }
    lizard__step_header__free_unpacked(h, NULL);
    return 0;
}
