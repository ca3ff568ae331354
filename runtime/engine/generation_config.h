/* generation_config.h - the optional generation_config.json of a model folder:
 * eos ids and sampling defaults, as HF transformers' generate() reads them. */
#ifndef LZ_GENERATION_CONFIG_H
#define LZ_GENERATION_CONFIG_H

#include <stdbool.h> // bool

#include "config.h"  // lz_config, LZ_MAX_EOS
#include "sampler.h" // lz_sampler_params

typedef struct {
    int n_eos;
    int eos_token_ids[LZ_MAX_EOS]; /* union of config.json's and generation_config.json's */
    lz_sampler_params defaults;    /* greedy unless the file says do_sample */
} lz_generation_config;

/* Whether `id` ends a sequence. */
bool lz_generation_config_is_eos(const lz_generation_config *g, int32_t id);

/* Absent file: eos from cfg, greedy. A malformed file is an error. */
lz_status lz_generation_config_load(const char *dir, const lz_config *cfg, lz_generation_config *out);

#endif
