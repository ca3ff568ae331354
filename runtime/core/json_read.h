/* json_read.h - JSON files as HF writes them, through jansson. Python writes
 * integers of any size (tokenizer_config.json's "model_max_length":
 * 1000000000000000019884624838656), which jansson refuses ("too big
 * integer"). These loaders read such a document again with every integer
 * outside json_int_t's range turned into a real (the nearest double; beyond
 * the double range, the largest one of its sign). Integers in range stay
 * integers, exactly; a document jansson reads as it is is not touched. */
#ifndef LZ_JSON_READ_H
#define LZ_JSON_READ_H

#include <jansson.h> // json_t, json_error_t
#include <stddef.h>  // size_t

/* json_loadb / json_load_file with the same flags and error report. */
json_t *lz_json_loadb(const char *text, size_t len, size_t flags, json_error_t *err);
json_t *lz_json_load_file(const char *path, size_t flags, json_error_t *err);

#endif
