/* state_io.c - saving and restoring a slot's layer state. */
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy

#include "dtype.h"    // lz_bf16_to_f32, lz_f32_to_bf16
#include "state_io.h"

static lz_status alloc_bytes(ProtobufCBinaryData *b, size_t len) {
    b->len = len;
    b->data = malloc(len ? len : 1);
    return b->data ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "state: out of memory for %zu bytes", len);
}

static lz_status save_softmax(const lz_model *m, const lz_state *st, const lz_layer *ly, int slot, int pos,
                              Lizard__LayerState *out) {
    const size_t row = lz_layer_kv_row_elems(ly) * m->ops->act_size, base = (size_t)slot * st->kv_capacity * row;
    const lz_layer_state *ls = &st->layers[ly->index];
    out->rows = (uint32_t)pos;
    LZ_TRY(alloc_bytes(&out->k, (size_t)pos * row));
    LZ_TRY(alloc_bytes(&out->v, (size_t)pos * row));
    LZ_TRY(m->ops->copy_to_host(m->be, out->k.data, (const char *)ls->k_cache + base, out->k.len));
    return m->ops->copy_to_host(m->be, out->v.data, (const char *)ls->v_cache + base, out->v.len);
}

/* The ring's rows for positions pos-rows .. pos-1, oldest first. */
static lz_status save_ring(const lz_model *m, const lz_layer *ly, const void *ring, int slot, int pos,
                           ProtobufCBinaryData *out) {
    const int w = ly->dims.window, rows = pos < w ? pos : w;
    const size_t row = lz_layer_kv_row_elems(ly) * m->ops->act_size;
    char *all = malloc((size_t)w * row);
    if (!all)
        return lz_fail(LZ_ERR_NOMEM, "state: out of memory");
    lz_status s = m->ops->copy_to_host(m->be, all, (const char *)ring + (size_t)slot * w * row, (size_t)w * row);
    if (s == LZ_OK)
        s = alloc_bytes(out, (size_t)rows * row);
    for (int r = 0; s == LZ_OK && r < rows; r++)
        memcpy(out->data + (size_t)r * row, all + (size_t)((pos - rows + r) % w) * row, row);
    free(all);
    return s;
}

/* n fp32 values of backend memory into out, as fp32 or (bf16) rounded to bf16. */
static lz_status save_f32(const lz_model *m, const float *src, size_t n, bool bf16, ProtobufCBinaryData *out) {
    LZ_TRY(alloc_bytes(out, n * sizeof(float)));
    LZ_TRY(m->ops->copy_to_host(m->be, out->data, src, out->len));
    if (!bf16)
        return LZ_OK;
    for (size_t i = 0; i < n; i++) { // in place: element i's 2 bytes never overtake element i's 4
        float f;
        memcpy(&f, out->data + 4 * i, 4);
        const uint16_t h = lz_f32_to_bf16(f);
        out->data[2 * i] = (uint8_t)h;
        out->data[2 * i + 1] = (uint8_t)(h >> 8);
    }
    out->len = n * 2;
    return LZ_OK;
}

static lz_status save_lizard(const lz_model *m, const lz_state *st, const lz_layer *ly, int slot, int pos,
                             bool state_bf16, Lizard__LayerState *out) {
    const lz_layer_state *ls = &st->layers[ly->index];
    out->rows = (uint32_t)(pos < ly->dims.window ? pos : ly->dims.window);
    out->state_elem_bytes = state_bf16 ? 2 : 4;
    LZ_TRY(save_f32(m, ls->S + (size_t)slot * lz_layer_s_elems(ly), lz_layer_s_elems(ly), state_bf16, &out->s));
    LZ_TRY(save_f32(m, ls->z + (size_t)slot * lz_layer_z_elems(ly), lz_layer_z_elems(ly), state_bf16, &out->z));
    LZ_TRY(save_ring(m, ly, ls->ring_k, slot, pos, &out->k));
    return save_ring(m, ly, ls->ring_v, slot, pos, &out->v);
}

lz_status lz_state_io_save(const lz_model *m, const lz_state *st, int slot, bool state_bf16, Lizard__StageState *out) {
    lizard__stage_state__init(out);
    int owned = 0;
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        owned += m->parts.layer[i];
    out->layers = calloc((size_t)(owned ? owned : 1), sizeof(Lizard__LayerState *));
    if (!out->layers)
        return lz_fail(LZ_ERR_NOMEM, "state: out of memory");
    const int pos = st->slot_pos[slot];
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
        if (!m->parts.layer[i])
            continue;
        const lz_layer *ly = &m->layers[i];
        Lizard__LayerState *l = calloc(1, sizeof *l);
        if (!l)
            return lz_fail(LZ_ERR_NOMEM, "state: out of memory");
        lizard__layer_state__init(l);
        out->layers[out->n_layers++] = l;
        l->layer = i;
        l->kind = ly->run_softmax ? LIZARD__LAYER_STATE__KIND__SOFTMAX : LIZARD__LAYER_STATE__KIND__LIZARD;
        l->elem_bytes = (uint32_t)m->ops->act_size;
        LZ_TRY(ly->run_softmax ? save_softmax(m, st, ly, slot, pos, l)
                               : save_lizard(m, st, ly, slot, pos, state_bf16, l));
    }
    return LZ_OK;
}

void lz_state_io_free(Lizard__StageState *s) {
    for (size_t i = 0; s->layers && i < s->n_layers; i++) {
        Lizard__LayerState *l = s->layers[i];
        free(l->k.data), free(l->v.data), free(l->s.data), free(l->z.data);
        free(l);
    }
    free(s->layers);
    s->layers = NULL;
    s->n_layers = 0;
}

/* Everything a layer record must satisfy before any byte of it is written. */
static lz_status check_record(const lz_model *m, const lz_state *st, const lz_layer *ly, const Lizard__LayerState *l,
                              uint64_t pos) {
    const int i = ly->index;
    const bool softmax = l->kind == LIZARD__LAYER_STATE__KIND__SOFTMAX;
    if (softmax != ly->run_softmax)
        return lz_fail(LZ_ERR_INPUT, "session: layer %d was saved as %s attention but runs as %s", i,
                       softmax ? "softmax" : "Lizard", ly->run_softmax ? "softmax" : "Lizard");
    if (l->elem_bytes != 2 && l->elem_bytes != 4)
        return lz_fail(LZ_ERR_INPUT, "session: layer %d: element size %u", i, l->elem_bytes);
    const size_t row = lz_layer_kv_row_elems(ly) * l->elem_bytes;
    const uint64_t rows = softmax ? pos : (pos < (uint64_t)ly->dims.window ? pos : (uint64_t)ly->dims.window);
    if (l->rows != rows || l->k.len != rows * row || l->v.len != rows * row)
        return lz_fail(LZ_ERR_INPUT, "session: layer %d: %u rows of %zu + %zu bytes, expected %llu rows of %zu bytes",
                       i, l->rows, l->k.len, l->v.len, (unsigned long long)rows, row);
    if (softmax && pos > (uint64_t)st->kv_capacity)
        return lz_fail(LZ_ERR_INPUT, "session: layer %d holds %llu positions; this run's context holds %d", i,
                       (unsigned long long)pos, st->kv_capacity);
    const size_t sz = l->state_elem_bytes == 0 ? 4 : l->state_elem_bytes;
    if (!softmax && sz != 4 && sz != 2)
        return lz_fail(LZ_ERR_INPUT, "session: layer %d: GLA state element size %u", i, l->state_elem_bytes);
    if (!softmax && (l->s.len != sz * lz_layer_s_elems(ly) || l->z.len != sz * lz_layer_z_elems(ly)))
        return lz_fail(LZ_ERR_INPUT, "session: layer %d: GLA state of %zu + %zu bytes, expected %zu + %zu", i,
                       l->s.len, l->z.len, sz * lz_layer_s_elems(ly), sz * lz_layer_z_elems(ly));
    return LZ_OK;
}

/* Rows of k or v into backend memory at row index `first` (ring: position % w),
 * converting fp32 <-> bf16 when the message's element size is not the
 * backend's; the rows go over in at most two copies (a ring wraps once). */
static lz_status put_rows(const lz_model *m, const lz_layer *ly, void *dst_base, const ProtobufCBinaryData *src,
                          uint32_t elem_bytes, uint64_t rows, uint64_t first_pos, int ring_w) {
    const size_t n = lz_layer_kv_row_elems(ly), out_row = n * m->ops->act_size;
    const uint8_t *data = src->data;
    uint8_t *converted = NULL;
    if (elem_bytes != m->ops->act_size) {
        converted = malloc(rows > 0 ? rows * out_row : 1);
        if (!converted)
            return lz_fail(LZ_ERR_NOMEM, "session: out of memory");
        for (size_t e = 0; e < rows * n; e++) { // fp32 <-> bf16, little-endian
            float f;
            if (elem_bytes == 4) {
                memcpy(&f, data + 4 * e, 4);
                uint16_t h = lz_f32_to_bf16(f);
                memcpy(converted + 2 * e, &h, 2);
            } else {
                uint16_t h;
                memcpy(&h, data + 2 * e, 2);
                f = lz_bf16_to_f32(h);
                memcpy(converted + 4 * e, &f, 4);
            }
        }
        data = converted;
    }
    lz_status s = LZ_OK;
    for (uint64_t r = 0; s == LZ_OK && r < rows;) {
        const uint64_t p = first_pos + r, at = ring_w ? p % (uint64_t)ring_w : p;
        uint64_t run = rows - r;
        if (ring_w && at + run > (uint64_t)ring_w)
            run = (uint64_t)ring_w - at;
        s = m->ops->copy_from_host(m->be, (char *)dst_base + at * out_row, data + r * out_row, run * out_row);
        r += run;
    }
    free(converted);
    return s;
}

/* S or z back into fp32 backend memory, widened from bf16 when saved so (check_record sized it). */
static lz_status put_f32(const lz_model *m, float *dst, const ProtobufCBinaryData *src, uint32_t elem_bytes) {
    if (elem_bytes != 2)
        return m->ops->copy_from_host(m->be, dst, src->data, src->len);
    const size_t n = src->len / 2;
    float *wide = malloc(sizeof(float) * (n ? n : 1));
    if (!wide)
        return lz_fail(LZ_ERR_NOMEM, "session: out of memory");
    for (size_t i = 0; i < n; i++)
        wide[i] = lz_bf16_to_f32((uint16_t)(src->data[2 * i] | src->data[2 * i + 1] << 8));
    lz_status s = m->ops->copy_from_host(m->be, dst, wide, n * sizeof(float));
    free(wide);
    return s;
}

static lz_status restore_layer(const lz_model *m, lz_state *st, const lz_layer *ly, const Lizard__LayerState *l,
                               int slot, uint64_t pos) {
    lz_layer_state *ls = &st->layers[ly->index];
    const size_t row = lz_layer_kv_row_elems(ly) * m->ops->act_size;
    if (ly->run_softmax) {
        const size_t base = (size_t)slot * st->kv_capacity * row;
        LZ_TRY(put_rows(m, ly, (char *)ls->k_cache + base, &l->k, l->elem_bytes, l->rows, 0, 0));
        return put_rows(m, ly, (char *)ls->v_cache + base, &l->v, l->elem_bytes, l->rows, 0, 0);
    }
    const int w = ly->dims.window;
    const size_t base = (size_t)slot * w * row;
    LZ_TRY(put_f32(m, ls->S + (size_t)slot * lz_layer_s_elems(ly), &l->s, l->state_elem_bytes));
    LZ_TRY(put_f32(m, ls->z + (size_t)slot * lz_layer_z_elems(ly), &l->z, l->state_elem_bytes));
    LZ_TRY(put_rows(m, ly, (char *)ls->ring_k + base, &l->k, l->elem_bytes, l->rows, pos - l->rows, w));
    return put_rows(m, ly, (char *)ls->ring_v + base, &l->v, l->elem_bytes, l->rows, pos - l->rows, w);
}

lz_status lz_state_io_restore(const lz_model *m, lz_state *st, int slot, uint64_t position,
                              Lizard__LayerState *const *layers, size_t n_layers) {
    if (slot < 0 || slot >= st->n_slots)
        return lz_fail(LZ_ERR_INPUT, "session: slot %d out of range", slot);
    const Lizard__LayerState *found[LZ_MAX_LAYERS] = {0};
    for (size_t k = 0; k < n_layers; k++) {
        const int i = layers[k]->layer;
        if (i < 0 || i >= m->cfg.num_hidden_layers)
            return lz_fail(LZ_ERR_INPUT, "session: layer %d out of range (model has %d layers)", i,
                           m->cfg.num_hidden_layers);
        if (found[i])
            return lz_fail(LZ_ERR_INPUT, "session: layer %d appears twice", i);
        found[i] = layers[k];
    }
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) { // check every owned layer before writing any
        if (!m->parts.layer[i])
            continue;
        if (!found[i])
            return lz_fail(LZ_ERR_INPUT, "session: layer %d is missing", i);
        LZ_TRY(check_record(m, st, &m->layers[i], found[i], position));
    }
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        if (m->parts.layer[i])
            LZ_TRY(restore_layer(m, st, &m->layers[i], found[i], slot, position));
    st->slot_pos[slot] = (int32_t)position;
    return LZ_OK;
}
