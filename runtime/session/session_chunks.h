/* session_chunks.h - session format version 3, for states of 2 GiB or more
 * (protobuf readers refuse such a message): length-delimited messages in one
 * file, a SequenceState header whose layers carry only their payloads'
 * lengths, then SessionChunk messages with the bytes (proto/lizard.proto).
 * The writer streams the chunks to a file (or one buffer) from the records; the
 * reader streams them from the file into one buffer per payload: neither
 * holds the state twice. */
#ifndef LZ_SESSION_CHUNKS_H
#define LZ_SESSION_CHUNKS_H

#include <stddef.h> // size_t
#include <stdio.h>  // FILE
#include <stdint.h> // uint8_t, uint64_t

#include "session.h" // Lizard__SequenceState, LZ_FINGERPRINT_BYTES

enum { LZ_SESSION_VERSION_CHUNKED = 3 };

/* Payload bytes per chunk: 256 MiB, or LIZARD_SESSION_CHUNK_BYTES (a test
 * knob: when set, every session is written as version 3). */
size_t lz_session_chunk_bytes(void);
bool lz_session_chunks_forced(void);

/* msg (magic, version, n_chunks and checksum are filled here) to `path` as
 * version 3, atomically; its layers' payloads stay where they are. */
lz_status lz_session_write_chunked(const char *path, Lizard__SequenceState *msg, size_t chunk_bytes);
/* The same to an open stream (what names it in errors). */
lz_status lz_session_write_chunked_to(FILE *fp, Lizard__SequenceState *msg, size_t chunk_bytes, const char *what);

/* The same into one malloc'd buffer of *len bytes (sized from the messages'
 * packed sizes first): the bytes a version-3 file holds. */
lz_status lz_session_pack_chunked(Lizard__SequenceState *msg, size_t chunk_bytes, uint8_t **buf, size_t *len);
/* msg as a session file's bytes: one message (lz_session_pack) when it holds
 * under 2 GiB, else (or when chunks are forced) the version-3 stream; both
 * read back with lz_session_parse (session_file.h). */
lz_status lz_session_pack_any(Lizard__SequenceState *msg, uint8_t **buf, size_t *len);

/* Where a version-3 reader gets its bytes: up to n into dst, the count read. */
typedef struct {
    size_t (*read)(void *ctx, uint8_t *dst, size_t n);
    void *ctx;
    uint64_t total; /* bytes the source holds (bounds every length before it is allocated) */
} lz_byte_source;

/* A version-3 file from src, checked whole (counts, order, offsets, sizes,
 * no trailing bytes, checksum; the fingerprint unless NULL) before it is
 * returned; *out's payloads are its own (lizard__sequence_state__free_unpacked). */
lz_status lz_session_read_chunked(lz_byte_source *src, const char *what,
                                  const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], Lizard__SequenceState **out);

#endif
