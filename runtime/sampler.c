/* sampler.c - greedy / temperature / top-k / top-p sampling with xoshiro256**
 * seeded through splitmix64. Candidates are ordered by logit (ties: lower id
 * first), so the result does not depend on the sort's stability. */
#include <math.h>   // expf
#include <stdlib.h> // malloc, free, qsort

#include "sampler.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t *s) {
    const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lz_sampler_uniform(lz_sampler *s) { return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53; }

lz_status lz_sampler_init(lz_sampler *s, const lz_sampler_params *p, int vocab) {
    if (p->temperature < 0)
        return lz_fail(LZ_ERR_INPUT, "--temperature must be >= 0, got %g", p->temperature);
    if (p->top_k < 0)
        return lz_fail(LZ_ERR_INPUT, "--top-k must be >= 0, got %d", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return lz_fail(LZ_ERR_INPUT, "--top-p must be in (0, 1], got %g", p->top_p);
    s->p = *p;
    s->vocab = vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    s->order = malloc(sizeof(lz_candidate) * (size_t)vocab);
    s->probs = malloc(sizeof(float) * (size_t)vocab);
    if (!s->order || !s->probs) {
        lz_sampler_free(s);
        return lz_fail(LZ_ERR_NOMEM, "sampler: out of memory for %d logits", vocab);
    }
    return LZ_OK;
}

void lz_sampler_free(lz_sampler *s) {
    free(s->order);
    free(s->probs);
    s->order = NULL;
    s->probs = NULL;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int by_logit_desc(const void *a, const void *b) {
    const lz_candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

int32_t lz_sampler_next(lz_sampler *s, const float *logits) {
    if (s->p.temperature == 0)
        return argmax(logits, s->vocab);
    for (int i = 0; i < s->vocab; i++)
        s->order[i] = (lz_candidate){logits[i], i};
    qsort(s->order, (size_t)s->vocab, sizeof(lz_candidate), by_logit_desc);
    int n = s->p.top_k > 0 && s->p.top_k < s->vocab ? s->p.top_k : s->vocab;
    const float inv_t = (float)(1.0 / s->p.temperature), top = s->order[0].logit;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += s->probs[i] = expf((s->order[i].logit - top) * inv_t);
    if (s->p.top_p < 1) { // smallest prefix whose probability reaches top_p
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += s->probs[i] / sum;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += s->probs[i];
    }
    const double u = lz_sampler_uniform(s) * sum;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->probs[i];
        if (u < acc)
            return s->order[i].id;
    }
    return s->order[n - 1].id;
}
