/* serve_prefix.h - the state at the end of recently seen prompts (packed
 * SequenceState messages), least recently used out: a prompt that starts
 * with a cached one restores that state and prefills only the rest. Used by
 * the engine thread only. */
#ifndef LZ_SERVE_PREFIX_H
#define LZ_SERVE_PREFIX_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h> // int32_t, uint8_t

#include "error.h" // lz_status

typedef struct {
    int32_t *tokens;
    int n;
    uint8_t *buf;
    size_t len;
    unsigned long used;
} serve_prefix_entry;

typedef struct {
    serve_prefix_entry *entries; /* [cap]; n == 0 marks a free entry */
    int cap;
    unsigned long clock;
} serve_prefix;

lz_status serve_prefix_init(serve_prefix *p, int entries);
void serve_prefix_free(serve_prefix *p);

/* The longest cached prompt that is a proper prefix of ids[0..n), or NULL. */
const serve_prefix_entry *serve_prefix_find(serve_prefix *p, const int32_t *ids, int n);
bool serve_prefix_has(const serve_prefix *p, const int32_t *ids, int n);
/* Keeps the state (owning buf) of prompt ids[0..n). */
lz_status serve_prefix_put(serve_prefix *p, const int32_t *ids, int n, uint8_t *buf, size_t len);

#endif
