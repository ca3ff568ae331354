/* session_file.h - a session file of either format read and checked whole:
 * version 2 (one SequenceState message) is read in place (lz_session_view:
 * the layers' payloads point into the file's bytes), version 3 (chunked,
 * session_chunks.h) is streamed into one buffer per payload. */
#ifndef LZ_SESSION_FILE_H
#define LZ_SESSION_FILE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t

#include "session.h" // Lizard__SequenceState, LZ_FINGERPRINT_BYTES

typedef struct {
    Lizard__SequenceState *msg;
    uint8_t *bytes; /* version 2: the file, which msg's payloads point into (owned) */
    bool view;      /* msg is freed with lz_session_view_free */
} lz_session_loaded;

/* Checks everything, the fingerprint too unless it is NULL. */
lz_status lz_session_load_file(const char *path, const uint8_t fingerprint[LZ_FINGERPRINT_BYTES],
                               lz_session_loaded *out);
/* The same over bytes in memory (not copied for version 2: they must outlive *out). */
lz_status lz_session_parse(const uint8_t *buf, size_t len, const char *what,
                           const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], lz_session_loaded *out);
void lz_session_loaded_free(lz_session_loaded *l);

#endif
