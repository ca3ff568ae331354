/* sampler.h - next-token choice: greedy, temperature, top-k, top-p; seeded
 * and reproducible (the same seed and logits give the same ids on any machine). */
#ifndef LZ_SAMPLER_H
#define LZ_SAMPLER_H

#include <stdint.h> // uint64_t, int32_t

#include "error.h" // lz_status

typedef struct {
    double temperature; /* 0 = greedy */
    int top_k;          /* 0 = off */
    double top_p;       /* 1 = off */
    uint64_t seed;
} lz_sampler_params;

typedef struct {
    float logit;
    int32_t id;
} lz_candidate;

typedef struct {
    lz_sampler_params p;
    uint64_t rng[4]; /* xoshiro256** state */
    int vocab;
    lz_candidate *order; /* [vocab] scratch */
    float *probs;    /* [vocab] scratch */
} lz_sampler;

lz_status lz_sampler_init(lz_sampler *s, const lz_sampler_params *p, int vocab);
void lz_sampler_free(lz_sampler *s);
/* Picks the next id from logits [vocab] (logits are not modified). */
int32_t lz_sampler_next(lz_sampler *s, const float *logits);
/* A uniform double in [0, 1) from the sampler's stream. */
double lz_sampler_uniform(lz_sampler *s);

#endif
