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

/* Fills out->layers with the owned layers of `slot` (free with lz_state_io_free).
 * state_bf16: the Lizard layers' S and z as bf16 (half their bytes; the
 * continuation is then no longer bit-exact), else fp32. */
lz_status lz_state_io_save(const lz_model *m, const lz_state *st, int slot, bool state_bf16, Lizard__StageState *out);
void lz_state_io_free(Lizard__StageState *s);

/* Restores every layer in `layers` that this process owns into `slot` and
 * sets the slot's position; checks kinds, shapes and capacity first, so a
 * refused message changes nothing. Layers of other stages are ignored; every
 * owned layer must be present. */
lz_status lz_state_io_restore(const lz_model *m, lz_state *st, int slot, uint64_t position,
                              Lizard__LayerState *const *layers, size_t n_layers);

#endif
