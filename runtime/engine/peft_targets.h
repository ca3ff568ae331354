/* peft_targets.h - which modules a PEFT LoRA config puts an adapter on, decided
 * as PEFT's check_target_module_exists decides it (PEFT 0.13 to 0.17), for a
 * module key as PEFT names it in a LLaMA-style model
 * ("model.layers.3.self_attn.q_proj"):
 *   exclude_modules   a regex string (full match) or a list (a key equal to an
 *                     item or ending in "." + item): such a module has none;
 *   target_modules    a regex string (full match; layers_to_transform is then
 *                     not consulted), "all-linear" (every projection), or a list:
 *                     a key equal to an item has one; a key ending in "." + item
 *                     has one if layers_to_transform (an int or a list; none or
 *                     [] means every layer) holds the layer index, read from the
 *                     key by ".*\.[^.]*\.(\d+)\." or, with layers_pattern P (a
 *                     string or a list), by ".*\.P\.(\d+)\.".
 * Regular expressions run on PCRE2, whose syntax is Python's for the forms
 * PEFT configs use (classes, groups, alternation, \d, quantifiers); a pattern
 * PCRE2 cannot compile is refused by name. */
#ifndef LZ_PEFT_TARGETS_H
#define LZ_PEFT_TARGETS_H

#include <stdbool.h> // bool

#include <jansson.h> // json_t

#include "error.h" // lz_status

typedef struct lz_peft_targets lz_peft_targets;

/* Reads the four fields of the config object `config`; errors name `path` and the field. */
lz_status lz_peft_targets_read(const json_t *config, const char *path, lz_peft_targets **out);
void lz_peft_targets_free(lz_peft_targets *t);

/* *hit: PEFT puts a LoRA on module `key`; otherwise *why says why not (a
 * phrase naming the field). Fails only when a regex cannot run on the key. */
lz_status lz_peft_targets_match(const lz_peft_targets *t, const char *key, bool *hit, const char **why);

#endif
