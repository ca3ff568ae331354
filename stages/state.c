/* state.c - allocation and accounting of per-slot layer state. */
#include <stdlib.h> // calloc, free
#include <string.h> // memset

#include "state.h"

static size_t kv_bytes(const lz_model *m, const lz_layer *ly, size_t positions) {
    return 2 * positions * lz_layer_kv_row_elems(ly) * m->ops->act_size;
}
static size_t gla_bytes(const lz_layer *ly) { return sizeof(float) * (lz_layer_s_elems(ly) + lz_layer_z_elems(ly)); }
static size_t ring_bytes(const lz_model *m, const lz_layer *ly) { return kv_bytes(m, ly, (size_t)ly->dims.window); }

static lz_status alloc_layer(lz_state *st, const lz_model *m, const lz_layer *ly, lz_layer_state *ls) {
    const size_t slots = (size_t)st->n_slots;
    if (!m->parts.layer[ly->index])
        return LZ_OK; // another stage keeps this layer's state
    if (ly->run_softmax) {
        LZ_TRY(m->ops->alloc(m->be, slots * kv_bytes(m, ly, (size_t)st->kv_capacity) / 2, &ls->k_cache));
        return m->ops->alloc(m->be, slots * kv_bytes(m, ly, (size_t)st->kv_capacity) / 2, &ls->v_cache);
    }
    LZ_TRY(m->ops->alloc(m->be, slots * sizeof(float) * lz_layer_s_elems(ly), (void **)&ls->S));
    LZ_TRY(m->ops->alloc(m->be, slots * sizeof(float) * lz_layer_z_elems(ly), (void **)&ls->z));
    LZ_TRY(m->ops->alloc(m->be, slots * ring_bytes(m, ly) / 2, &ls->ring_k));
    return m->ops->alloc(m->be, slots * ring_bytes(m, ly) / 2, &ls->ring_v);
}

lz_status lz_state_create(lz_state *st, const lz_model *m, int n_slots, int kv_capacity) {
    memset(st, 0, sizeof *st);
    st->n_slots = n_slots;
    st->kv_capacity = kv_capacity;
    st->layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof(lz_layer_state));
    st->slot_pos = calloc((size_t)n_slots, sizeof(int32_t));
    if (!st->layers || !st->slot_pos) {
        lz_state_free(st, m);
        return lz_fail(LZ_ERR_NOMEM, "state: out of memory for %d slots", n_slots);
    }
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
        lz_status s = alloc_layer(st, m, &m->layers[i], &st->layers[i]);
        if (s != LZ_OK) {
            lz_error_prefix("layer %d state (%d slots, %d positions): ", i, n_slots, kv_capacity);
            lz_state_free(st, m);
            return s;
        }
    }
    for (int s = 0; s < n_slots; s++)
        LZ_TRY(lz_state_reset_slot(st, m, s));
    return LZ_OK;
}

void lz_state_free(lz_state *st, const lz_model *m) {
    if (m->ops && m->ops->graph_reset)
        m->ops->graph_reset(m->be); // recordings may name these buffers
    if (st->layers)
        for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
            lz_layer_state *ls = &st->layers[i];
            void *all[] = {ls->k_cache, ls->v_cache, ls->S, ls->z, ls->ring_k, ls->ring_v};
            for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
                if (all[j])
                    m->ops->free(m->be, all[j]);
        }
    free(st->layers);
    free(st->slot_pos);
    memset(st, 0, sizeof *st);
}

lz_status lz_state_reset_slot(lz_state *st, const lz_model *m, int slot) {
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
        const lz_layer *ly = &m->layers[i];
        if (ly->run_softmax || !m->parts.layer[i])
            continue; // positions >= slot_pos are never read: no need to clear the cache
        const size_t s_elems = lz_layer_s_elems(ly), z_elems = lz_layer_z_elems(ly);
        LZ_TRY(m->ops->zero(m->be, st->layers[i].S + (size_t)slot * s_elems, sizeof(float) * s_elems));
        LZ_TRY(m->ops->zero(m->be, st->layers[i].z + (size_t)slot * z_elems, sizeof(float) * z_elems));
    }
    st->slot_pos[slot] = 0;
    return LZ_OK;
}

lz_state_bytes lz_state_bytes_at(const lz_model *m, int positions) {
    lz_state_bytes b = {0};
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
        const lz_layer *ly = &m->layers[i];
        if (!m->parts.layer[i])
            continue; // counted by the stage that owns it
        if (ly->run_softmax) {
            b.softmax_kv += kv_bytes(m, ly, (size_t)positions);
            b.n_softmax++;
        } else {
            b.lizard_gla += gla_bytes(ly);
            b.lizard_window += ring_bytes(m, ly);
            b.n_lizard++;
        }
    }
    return b;
}
