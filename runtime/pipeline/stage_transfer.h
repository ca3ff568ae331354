/* stage_transfer.h - a StageState between ranks as a small packed header (the
 * records without their bytes: their lengths in k_bytes..z_bytes, as in a
 * version-3 session) followed by the payloads point to point, in pieces of at
 * most lz_session_chunk_bytes(): no message nears the 2 GiB an MPI count or a
 * protobuf message can hold, whatever the state's size (a hybrid's KV cache at
 * 32K context is over 2 GB). */
#ifndef LZ_STAGE_TRANSFER_H
#define LZ_STAGE_TRANSFER_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t

#include "error.h"       // lz_status
#include "lizard.pb-c.h" // Lizard__StageState

/* `s` packed without its payloads (*buf malloc'd). */
lz_status lz_stage_pack_header(const Lizard__StageState *s, uint8_t **buf, size_t *len);
/* A header from rank `from`, unpacked (free with lizard__stage_state__free_unpacked). */
lz_status lz_stage_unpack_header(const uint8_t *buf, size_t len, int from, Lizard__StageState **out);
/* The payloads of layers[i] for which wanted[i] (all when wanted is NULL), in order, to rank `to`. */
lz_status lz_stage_send_payloads(Lizard__LayerState *const *layers, size_t n, const bool *wanted, int to, int tag);
/* The matching receive into the records of an unpacked header: each wanted
 * record gets malloc'd payloads of its declared lengths (which are then set
 * to 0, so the record is an ordinary in-memory one that free_unpacked frees).
 * Out of memory: the pieces are still received (and dropped), so the sender
 * finishes, and the error is returned. */
lz_status lz_stage_recv_payloads(Lizard__LayerState *const *layers, size_t n, const bool *wanted, int from, int tag);

#endif
