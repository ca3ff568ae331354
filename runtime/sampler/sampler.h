/* sampler.h - next-token choice: greedy, temperature, top-k, top-p; seeded
 * and reproducible. The rule is sample_rows' (kernels/sample_rule.h), so ids
 * sampled on the host, on the CPU backend and on the GPU agree. The uniform
 * of a sequence's n-th generated token is a pure function of (seed, n): a
 * sequence's random state is its seed and its count, and the last stage of a
 * pipeline draws it from the two numbers in the step header. */
#ifndef LZ_SAMPLER_H
#define LZ_SAMPLER_H

#include <stdint.h> // uint64_t, int32_t

#include "error.h" // lz_status
#include "ops.h"   // lz_sample_row

typedef struct {
    double temperature; /* 0 = greedy */
    int top_k;          /* 0 = off */
    double top_p;       /* 1 = off */
    uint64_t seed;
} lz_sampler_params;

/* One token's draw: its sequence's parameters and the token's index n among
 * those the sequence generated (what a step header carries per row). */
typedef struct {
    lz_sampler_params p;
    uint64_t n;
} lz_sample_draw;

typedef struct {
    lz_sampler_params p;
    uint64_t n; /* tokens drawn so far */
    int vocab;
} lz_sampler;

/* The uniform in [0, 1) (53 bits) of token n of the sequence seeded `seed`:
 * splitmix64 finalisers over the seed, then over the count. */
double lz_sample_uniform(uint64_t seed, uint64_t n);
/* The op's parameters for a draw (its uniform included). */
lz_sample_row lz_sample_row_of(const lz_sample_draw *d);

/* Checks the parameters (errors name the flag: --temperature, --top-k, --top-p). */
lz_status lz_sampler_init(lz_sampler *s, const lz_sampler_params *p, int vocab);
/* The next token's draw, for a device that samples it; the sampler moves on. */
lz_sample_draw lz_sampler_draw(lz_sampler *s);
/* Picks the next id from host logits [vocab] (not modified): the same id the
 * device would pick from them with lz_sampler_draw's draw. */
int32_t lz_sampler_next(lz_sampler *s, const float *logits);

#endif
