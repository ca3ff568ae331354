/* serve_sessions.h - saved sequences by name, as the bytes of a session file
 * (one SequenceState message, or the chunked stream beyond 2 GiB): in memory
 * up to a byte budget, the least recently used spilled to DIR/NAME.lzs (that
 * file, as is) beyond it (or dropped, with a line on stderr, without a DIR).
 *
 * A file in DIR is only ever replaced (atomic_file.h: temp file, fsync,
 * rename, fsync of DIR), never removed: a session taken to be continued
 * stays on disk, so that a crash before its successor is written leaves the
 * last durable version. Errors name the session as the client gave it, never
 * a path (the path goes to stderr, for the operator).
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
    serve_session_entry *entries; /* one per name */
    int n, cap;
    size_t bytes, budget;
    const char *dir; /* NULL: no spilling */
    long on_disk;    /* DIR's NAME.lzs files */
    unsigned long clock;
} serve_sessions;

/* dir (may be NULL) must exist; its *.lzs files are sessions of an earlier
 * run, and the temp files of writers killed mid-save there are removed. */
lz_status serve_sessions_init(serve_sessions *s, size_t budget, const char *dir);
void serve_sessions_free(serve_sessions *s);

/* A session's bytes to continue it (from memory, which it leaves, else from
 * DIR, where the file stays): *buf is malloc'd and the caller's, or NULL
 * when there is no such session. */
lz_status serve_sessions_take(serve_sessions *s, const char *name, uint8_t **buf, size_t *len);
/* Stores (owning buf, replacing a session of that name), then spills the
 * least recently used beyond the budget. When a spill fails, this session
 * is not kept (an error naming it) and every other stays where it was. */
lz_status serve_sessions_put(serve_sessions *s, const char *name, uint8_t *buf, size_t len);
/* A taken session back as it was (a failed request), without spilling:
 * never fails but for memory, and then the session is dropped. */
void serve_sessions_put_back(serve_sessions *s, const char *name, uint8_t *buf, size_t len);
/* Writes every session held in memory to DIR (at shutdown); one that cannot
 * be written stays in memory, the others are written all the same. */
lz_status serve_sessions_flush(serve_sessions *s);

/* With --session-per-key, the name a request's session is stored under:
 * "HASH+NAME", HASH the hex SHA-256 of the request's API key (the key itself
 * is never stored). *out is malloc'd. */
lz_status serve_session_keyed_name(const char *key, const char *name, char **out);
/* The name as the client gave it (what follows "HASH+", if any). */
const char *serve_session_shown(const char *name);

#endif
