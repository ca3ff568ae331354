/* session_buf.h - a sequence's state as a session message in a reusable host
 * buffer, one pass over the bytes each way. Saving computes the packed
 * layout first, then copies each layer's bytes from the backend straight to
 * their place in the message and checksums them there; restoring reads the
 * message in place (lz_session_view: the layers' payloads are not copied out
 * of it), checks it, and copies each payload straight to the backend. The buffer is the
 * backend's host memory (pinned on CUDA) and is kept between uses, so the
 * copies run at the bus rate and no page is faulted in again. The message
 * is the same SequenceState that lz_session_pack / lz_session_unpack write
 * and read. */
#ifndef LZ_SESSION_BUF_H
#define LZ_SESSION_BUF_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t

#include "session.h" // Lizard__SequenceState, LZ_FINGERPRINT_BYTES
#include "state.h"   // lz_state, lz_model

typedef struct {
    const lz_ops *ops;
    lz_backend *be;
    uint8_t *data; /* ops->host_alloc'd */
    size_t len, cap;
} lz_session_buf;

void lz_session_buf_init(lz_session_buf *b, const lz_model *m);
/* Room for `bytes` (the contents are not kept when it grows). */
lz_status lz_session_buf_reserve(lz_session_buf *b, size_t bytes);
void lz_session_buf_free(lz_session_buf *b);

/* msg's own fields (fingerprint, position, tokens, has_pending, sampler) and
 * this process's layers of `slot` as one StageState, packed into b with
 * magic, version and checksum (msg->stages must be empty; it is left so). */
lz_status lz_session_save_slot(const lz_model *m, const lz_state *st, int slot, bool state_bf16,
                               Lizard__SequenceState *msg, lz_session_buf *b);

/* The bytes lz_session_save_slot would pack (msg->stages empty, left so). */
lz_status lz_session_slot_packed_size(const lz_model *m, const lz_state *st, int slot, bool state_bf16,
                                      Lizard__SequenceState *msg, size_t *len);

/* A whole file into b. */
lz_status lz_session_buf_read_file(const char *path, lz_session_buf *b);

#endif
