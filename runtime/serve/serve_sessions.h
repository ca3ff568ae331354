/* serve_sessions.h - saved sequences by name, as the bytes of a session file
 * (one SequenceState message, or the chunked stream beyond 2 GiB): in memory
 * up to a byte budget, the least recently used spilled to DIR/NAME.lzs (that
 * file, as is) beyond it (or dropped, with a line on stderr, without a DIR).
 * Used by the engine thread only. */
#ifndef LZ_SERVE_SESSIONS_H
#define LZ_SERVE_SESSIONS_H

#include <stddef.h> // size_t
#include <stdint.h> // uint8_t

#include "error.h" // lz_status

typedef struct {
    char *name;
    uint8_t *buf;
    size_t len;
    unsigned long used; /* LRU clock */
} serve_session_entry;

typedef struct {
    serve_session_entry *entries;
    int n, cap;
    size_t bytes, budget;
    const char *dir; /* NULL: no spilling */
    long on_disk;
    unsigned long clock;
} serve_sessions;

/* dir (may be NULL) must exist; its *.lzs files are sessions of an earlier run. */
lz_status serve_sessions_init(serve_sessions *s, size_t budget, const char *dir);
void serve_sessions_free(serve_sessions *s);

/* Takes a session out of the store (memory, else DIR): *buf is malloc'd and
 * the caller's, or NULL when there is no such session. */
lz_status serve_sessions_take(serve_sessions *s, const char *name, uint8_t **buf, size_t *len);
/* Stores (owning buf), then spills the least recently used beyond the budget. */
lz_status serve_sessions_put(serve_sessions *s, const char *name, uint8_t *buf, size_t len);
/* Writes every session held in memory to DIR (at shutdown). */
lz_status serve_sessions_flush(serve_sessions *s);

#endif
