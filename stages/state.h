/* state.h - per-sequence state of every layer of a stage, in slots.
 *
 * Softmax layer: a KV cache of kv_capacity positions per slot (grows with
 * context: bytes used = positions x 2 x Hkv x head_dim x element size).
 * Lizard layer: S [Hs, 2f, head_dim] and z [Hs, 2f] in fp32 plus a ring of
 * the last w keys and values: a constant size whatever the context. */
#ifndef LZ_STATE_H
#define LZ_STATE_H

#include <stddef.h> // size_t
#include <stdint.h> // int32_t

#include "model.h" // lz_model, lz_layer_state

typedef struct {
    int n_slots;
    int kv_capacity;         /* positions per slot in softmax layers' caches */
    lz_layer_state *layers;  /* [num_hidden_layers] */
    int32_t *slot_pos;       /* [n_slots] tokens each slot holds (host) */
} lz_state;

lz_status lz_state_create(lz_state *st, const lz_model *m, int n_slots, int kv_capacity);
void lz_state_free(lz_state *st, const lz_model *m);
/* Empties a slot for a new sequence (S, z zeroed; position 0). */
lz_status lz_state_reset_slot(lz_state *st, const lz_model *m, int slot);

/* Bytes one sequence holds at `positions` tokens, by layer kind. */
typedef struct {
    size_t softmax_kv;      /* KV cache bytes in use (grows with positions) */
    size_t lizard_gla;      /* S and z (constant) */
    size_t lizard_window;   /* ring of the last w keys and values (constant) */
    int n_softmax, n_lizard;
} lz_state_bytes;

lz_state_bytes lz_state_bytes_at(const lz_model *m, int positions);

/* Element counts of one sequence's state in a layer: a K or V row (one
 * position), S [Hs, 2f, head_dim] and z [Hs, 2f]. */
static inline size_t lz_layer_kv_row_elems(const lz_layer *ly) {
    return (size_t)ly->dims.n_kv_heads * ly->dims.head_dim;
}
static inline size_t lz_layer_z_elems(const lz_layer *ly) {
    return (size_t)ly->dims.n_state_heads * 2 * ly->dims.feature_dim;
}
static inline size_t lz_layer_s_elems(const lz_layer *ly) { return lz_layer_z_elems(ly) * ly->dims.head_dim; }

#endif
