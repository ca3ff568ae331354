/* pipeline_sample.c - sampling on the last stage: rank 0 puts each logit
 * row's draw (parameters, seed, count) in the step header; the last stage
 * turns them into sample_rows' parameters, uniforms included, so that only
 * ids come back. */
#include <stdlib.h> // malloc, free

#include "pipeline_internal.h"

lz_status lz_pipeline_header_draws(Lizard__StepHeader *h, const lz_sample_draw *draws, int n, lz_header_draws *a) {
    *a = (lz_header_draws){0};
    if (!draws)
        return LZ_OK;
    const size_t k = (size_t)(n > 0 ? n : 1);
    a->temperatures = malloc(sizeof(double) * k);
    a->top_ps = malloc(sizeof(double) * k);
    a->top_ks = malloc(sizeof(int32_t) * k);
    a->seeds = malloc(sizeof(uint64_t) * k);
    a->counts = malloc(sizeof(uint64_t) * k);
    if (!a->temperatures || !a->top_ps || !a->top_ks || !a->seeds || !a->counts) {
        lz_pipeline_free_draws(a);
        return lz_fail(LZ_ERR_NOMEM, "StepHeader: out of memory for %d draws", n);
    }
    for (int r = 0; r < n; r++) {
        a->temperatures[r] = draws[r].p.temperature;
        a->top_ks[r] = draws[r].p.top_k;
        a->top_ps[r] = draws[r].p.top_p;
        a->seeds[r] = draws[r].p.seed;
        a->counts[r] = draws[r].n;
    }
    h->flags |= STEP_FLAG_SAMPLE;
    h->n_temperatures = h->n_top_ks = h->n_top_ps = h->n_seeds = h->n_draws = (size_t)n;
    h->temperatures = a->temperatures, h->top_ks = a->top_ks, h->top_ps = a->top_ps;
    h->seeds = a->seeds, h->draws = a->counts;
    return LZ_OK;
}

void lz_pipeline_free_draws(lz_header_draws *a) {
    free(a->temperatures), free(a->top_ps), free(a->top_ks), free(a->seeds), free(a->counts);
    *a = (lz_header_draws){0};
}

lz_status lz_pipeline_sample_rows(const Lizard__StepHeader *h, lz_sample_row **rows) {
    *rows = NULL;
    if (!(h->flags & STEP_FLAG_SAMPLE))
        return LZ_OK;
    const size_t n = h->n_logit_rows; // lz_step_header_check: every array has one entry per row
    *rows = malloc(sizeof(lz_sample_row) * (n ? n : 1));
    if (!*rows)
        return lz_fail(LZ_ERR_NOMEM, "StepHeader: out of memory for %zu sampled rows", n);
    for (size_t r = 0; r < n; r++) {
        const lz_sample_draw d = {{h->temperatures[r], h->top_ks[r], h->top_ps[r], h->seeds[r]}, h->draws[r]};
        (*rows)[r] = lz_sample_row_of(&d);
    }
    return LZ_OK;
}
