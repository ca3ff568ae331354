/* sampler.c - parameters, the counter-based uniform, and host sampling
 * through the CPU reference of sample_rows. */
#include <math.h>   // isfinite
#include <stdlib.h> // malloc, free

#include "ops.h" // sample_row
#include "sampler.h"

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double lz_sample_uniform(uint64_t seed, uint64_t n) {
    // two rounds, so that (seed + 1, n) and (seed, n + 1) share nothing (batches use seeds S, S + 1, ...)
    const uint64_t key = mix64(seed + 0x9E3779B97F4A7C15ull);
    const uint64_t z = mix64(key ^ mix64((n + 1) * 0xD1B54A32D192ED03ull));
    return (double)(z >> 11) * 0x1.0p-53;
}

lz_sample_row lz_sample_row_of(const lz_sample_draw *d) {
    return (lz_sample_row){d->p.temperature, d->p.top_k, d->p.top_p,
                           d->p.temperature > 0 ? lz_sample_uniform(d->p.seed, d->n) : 0.0};
}

lz_status lz_sampler_init(lz_sampler *s, const lz_sampler_params *p, int vocab) {
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return lz_fail(LZ_ERR_INPUT, "--temperature must be >= 0, got %g", p->temperature);
    if (p->top_k < 0)
        return lz_fail(LZ_ERR_INPUT, "--top-k must be >= 0, got %d", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return lz_fail(LZ_ERR_INPUT, "--top-p must be in (0, 1], got %g", p->top_p);
    *s = (lz_sampler){*p, 0, vocab};
    return LZ_OK;
}

lz_sample_draw lz_sampler_draw(lz_sampler *s) { return (lz_sample_draw){s->p, s->n++}; }

int32_t lz_sampler_next(lz_sampler *s, const float *logits) {
    const lz_sample_draw d = lz_sampler_draw(s);
    const lz_sample_row row = lz_sample_row_of(&d);
    int32_t *scratch = malloc(sizeof(int32_t) * (size_t)s->vocab); // NULL: the same id, more slowly
    const int32_t id = sample_row(logits, s->vocab, &row, scratch);
    free(scratch);
    return id;
}
