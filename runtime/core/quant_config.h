/* quant_config.h - config.json's "quantization_config": which checkpoints of
 * quantized weights lizard reads (FP8 E4M3 with one scale per output channel
 * or per tensor) and, by name, which it refuses. */
#ifndef LZ_QUANT_CONFIG_H
#define LZ_QUANT_CONFIG_H

#include <jansson.h> // json_t

#include "config.h" // lz_config

/* Sets c->quant_method ("" when the block is absent or null); an error names
 * the method, format or strategy that is not read. */
lz_status lz_quant_config_parse(const char *path, json_t *root, lz_config *c);

#endif
