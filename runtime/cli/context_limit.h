/* context_limit.h - how far a command may take a sequence: a model that runs softmax layers (RoPE,
 * trained up to max_position_embeddings) is refused a longer context unless the user allows it
 * (--allow-long-context); a model that runs every layer as Lizard has no position limit. */
#ifndef LZ_CONTEXT_LIMIT_H
#define LZ_CONTEXT_LIMIT_H

#include <stdbool.h> // bool

#include "error.h" // lz_status

/* The model in `dir` as run with `softmax_layers` (NULL: its own list) at `context` positions. */
lz_status lz_check_context(const char *dir, const char *softmax_layers, long context, bool allow);

#endif
