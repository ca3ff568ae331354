/* state_io.h - one sequence's per-layer state as LayerState messages
 * (proto/lizard.proto): only the positions in use (KV rows up to the
 * position; the ring's last min(position, w) rows, oldest first), only the
 * layers this process owns. Activation-typed payloads (KV, ring) convert
 * between fp32 and bf16 on restore, so a session moves between backends. */
#ifndef LZ_STATE_IO_H
#define LZ_STATE_IO_H

#include <stdbool.h> // bool
#include <stddef.h> // size_t
#include <stdint.h> // uint64_t

#include "lizard.pb-c.h" // Lizard__StageState
#include "state.h"       // lz_state, lz_model

/* Where one payload of a layer record comes from in backend memory: one or
 * two byte ranges (a ring whose rows wrap past its end), one after the other
 * in the payload; with to_bf16 the range holds fp32 that the payload narrows. */
typedef struct {
    const void *src[2];
    size_t bytes[2];
    bool to_bf16;
    size_t offset; /* where its bytes go in a packed message (for the packer's use) */
} lz_state_piece;

/* The owned layers' records of `slot` with their sizes but not their bytes:
 * each non-empty payload (k, v, s, z) has data = its piece in *pieces (4 per
 * record, in that order), to be fetched to wherever the bytes belong (a
 * packed message). Free with lz_state_io_free_plan. */
lz_status lz_state_io_plan(const lz_model *m, const lz_state *st, int slot, bool state_bf16, Lizard__StageState *out,
                           lz_state_piece **pieces);
void lz_state_io_free_plan(Lizard__StageState *s, lz_state_piece *pieces);
/* A piece's payload into dst (host memory of its size). Queued: done when
 * m->ops->sync returns (except to_bf16 pieces, which are converted here). */
lz_status lz_state_io_fetch(const lz_model *m, const lz_state_piece *p, uint8_t *dst);

/* Fills out->layers with the owned layers of `slot` (free with lz_state_io_free).
 * state_bf16: the Lizard layers' S and z as bf16 (half their bytes; the
 * continuation is then no longer bit-exact), else fp32. */
lz_status lz_state_io_save(const lz_model *m, const lz_state *st, int slot, bool state_bf16, Lizard__StageState *out);
void lz_state_io_free(Lizard__StageState *s);

/* Restores every layer in `layers` that this process owns into `slot` and
 * sets the slot's position; checks kinds, shapes and capacity first, so a
 * refused message changes nothing. The bytes go to the backend straight
 * from the records (host_alloc'd memory: at the bus rate); returns when the
 * copies are done. Layers of other stages are ignored; every
 * owned layer must be present. */
lz_status lz_state_io_restore(const lz_model *m, lz_state *st, int slot, uint64_t position,
                              Lizard__LayerState *const *layers, size_t n_layers);

#endif
