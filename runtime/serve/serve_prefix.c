/* serve_prefix.c - the prefix cache (see serve_prefix.h). */
#include "serve_prefix.h"

#include <stdlib.h> // calloc, malloc, free
#include <string.h> // memcmp, memcpy

lz_status serve_prefix_init(serve_prefix *p, int entries) {
    *p = (serve_prefix){0};
    if (entries <= 0)
        return LZ_OK;
    p->entries = calloc((size_t)entries, sizeof(serve_prefix_entry));
    if (!p->entries)
        return lz_fail(LZ_ERR_NOMEM, "--prefix-cache: out of memory for %d entries", entries);
    p->cap = entries;
    return LZ_OK;
}

static void clear_entry(serve_prefix_entry *e) {
    free(e->tokens);
    free(e->buf);
    *e = (serve_prefix_entry){0};
}

void serve_prefix_free(serve_prefix *p) {
    for (int i = 0; i < p->cap; i++)
        clear_entry(&p->entries[i]);
    free(p->entries);
    *p = (serve_prefix){0};
}

const serve_prefix_entry *serve_prefix_find(serve_prefix *p, const int32_t *ids, int n) {
    serve_prefix_entry *best = NULL;
    for (int i = 0; i < p->cap; i++) {
        serve_prefix_entry *e = &p->entries[i];
        if (e->n > 0 && e->n < n && (!best || e->n > best->n) && memcmp(e->tokens, ids, sizeof(int32_t) * (size_t)e->n) == 0)
            best = e;
    }
    if (best)
        best->used = ++p->clock;
    return best;
}

bool serve_prefix_has(const serve_prefix *p, const int32_t *ids, int n) {
    for (int i = 0; i < p->cap; i++)
        if (p->entries[i].n == n && memcmp(p->entries[i].tokens, ids, sizeof(int32_t) * (size_t)n) == 0)
            return true;
    return false;
}

lz_status serve_prefix_put(serve_prefix *p, const int32_t *ids, int n, uint8_t *buf, size_t len) {
    if (p->cap == 0 || n <= 0) {
        free(buf);
        return LZ_OK;
    }
    serve_prefix_entry *slot = &p->entries[0];
    for (int i = 0; i < p->cap; i++) { // a free entry, else the least recently used
        if (p->entries[i].n == 0) {
            slot = &p->entries[i];
            break;
        }
        if (p->entries[i].used < slot->used)
            slot = &p->entries[i];
    }
    clear_entry(slot);
    slot->tokens = malloc(sizeof(int32_t) * (size_t)n);
    if (!slot->tokens) {
        free(buf);
        return lz_fail(LZ_ERR_NOMEM, "prefix cache: out of memory");
    }
    memcpy(slot->tokens, ids, sizeof(int32_t) * (size_t)n);
    *slot = (serve_prefix_entry){slot->tokens, n, buf, len, ++p->clock};
    return LZ_OK;
}
