/* generate_batch.h - many sequences at once: each prompt prefilled into its own
 * state slot, then one decode step per token for every sequence still running,
 * each with its own sampler (its own seed). */
#ifndef LZ_GENERATE_BATCH_H
#define LZ_GENERATE_BATCH_H

#include <stdbool.h> // bool
#include <stdint.h>  // int32_t

#include "engine.h"            // lz_engine
#include "generation_config.h" // lz_generation_config
#include "sampler.h"           // lz_sampler_params

typedef struct {
    const int32_t *ids;
    int n;
} lz_prompt;

typedef struct {
    int32_t *ids; /* generated ids (malloc'd) */
    int n;
    bool stopped_at_eos;
} lz_completion;

typedef struct {
    double prefill_seconds, decode_seconds;
    long prompt_tokens, generated_tokens;
} lz_batch_timing;

/* The engine must have at least n slots and a context of the longest prompt
 * plus max_tokens. Sequence i samples with params->seed + i. */
lz_status lz_generate_batch(lz_engine *e, const lz_prompt *prompts, int n, int max_tokens,
                            const lz_sampler_params *params, const lz_generation_config *gen, bool ignore_eos,
                            lz_completion *out, lz_batch_timing *timing);

#endif
