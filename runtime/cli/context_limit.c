/* context_limit.c - see context_limit.h. */
#include "context_limit.h"

#include "config.h" // lz_config_load, lz_config_count_softmax

lz_status lz_check_context(const char *dir, const char *softmax_layers, long context, bool allow) {
    lz_config cfg;
    LZ_TRY(lz_config_load(dir, &cfg));
    if (softmax_layers)
        LZ_TRY(lz_config_set_softmax_layers(&cfg, softmax_layers));
    const int softmax = lz_config_count_softmax(&cfg);
    if (allow || softmax == 0 || context <= cfg.max_position_embeddings)
        return LZ_OK;
    return lz_fail(LZ_ERR_INPUT,
                   "context %ld exceeds max_position_embeddings %d of a model with %d softmax layers "
                   "(--allow-long-context runs it anyway; pure Lizard models have no limit)",
                   context, cfg.max_position_embeddings, softmax);
}
