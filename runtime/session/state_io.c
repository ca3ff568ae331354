/* state_io.c - saving and restoring a slot's layer state. */
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy

#include "dtype.h"    // lz_bf16_to_f32, lz_f32_to_bf16
#include "state_io.h"

/* A payload of `bytes` from one backend range. */
static lz_state_piece one_range(const void *src, size_t bytes) {
    return (lz_state_piece){{src, NULL}, {bytes, 0}, false, 0};
}

/* The ring's rows for positions pos-rows .. pos-1, oldest first: one range,
 * or two when they wrap past the ring's end. */
static lz_state_piece ring_piece(const lz_model *m, const lz_layer *ly, const void *ring, int slot, int pos) {
    const int w = ly->dims.window, rows = pos < w ? pos : w, first = (pos - rows) % w;
    const size_t row = lz_layer_kv_row_elems(ly) * m->ops->act_size;
    const char *base = (const char *)ring + (size_t)slot * w * row;
    const int head = rows < w - first ? rows : w - first; // rows before the wrap
    return (lz_state_piece){{base + (size_t)first * row, base}, {(size_t)head * row, (size_t)(rows - head) * row},
                            false, 0};
}

static size_t piece_len(const lz_state_piece *p) {
    const size_t src = p->bytes[0] + p->bytes[1];
    return p->to_bf16 ? src / 2 : src;
}

/* The record's payload `b` stands for piece p until it is fetched (empty ones are left out). */
static void point_at(ProtobufCBinaryData *b, lz_state_piece *p) {
    b->len = piece_len(p);
    b->data = b->len ? (uint8_t *)p : NULL;
}

/* Pieces k, v, s, z of one layer record. */
static void plan_layer(const lz_model *m, const lz_state *st, const lz_layer *ly, int slot, int pos, bool state_bf16,
                       Lizard__LayerState *l, lz_state_piece *pc) {
    const lz_layer_state *ls = &st->layers[ly->index];
    l->layer = ly->index;
    l->kind = ly->run_softmax ? LIZARD__LAYER_STATE__KIND__SOFTMAX : LIZARD__LAYER_STATE__KIND__LIZARD;
    l->elem_bytes = (uint32_t)m->ops->act_size;
    if (ly->run_softmax) {
        const size_t row = lz_layer_kv_row_elems(ly) * m->ops->act_size, base = (size_t)slot * st->kv_capacity * row;
        l->rows = (uint32_t)pos;
        pc[0] = one_range((const char *)ls->k_cache + base, (size_t)pos * row);
        pc[1] = one_range((const char *)ls->v_cache + base, (size_t)pos * row);
    } else {
        l->rows = (uint32_t)(pos < ly->dims.window ? pos : ly->dims.window);
        l->state_elem_bytes = state_bf16 ? 2 : 4;
        pc[0] = ring_piece(m, ly, ls->ring_k, slot, pos);
        pc[1] = ring_piece(m, ly, ls->ring_v, slot, pos);
        pc[2] = one_range(ls->S + (size_t)slot * lz_layer_s_elems(ly), sizeof(float) * lz_layer_s_elems(ly));
        pc[3] = one_range(ls->z + (size_t)slot * lz_layer_z_elems(ly), sizeof(float) * lz_layer_z_elems(ly));
        pc[2].to_bf16 = pc[3].to_bf16 = state_bf16;
    }
    point_at(&l->k, &pc[0]), point_at(&l->v, &pc[1]), point_at(&l->s, &pc[2]), point_at(&l->z, &pc[3]);
}

lz_status lz_state_io_plan(const lz_model *m, const lz_state *st, int slot, bool state_bf16, Lizard__StageState *out,
                           lz_state_piece **pieces) {
    lizard__stage_state__init(out);
    *pieces = NULL;
    if (slot < 0 || slot >= st->n_slots)
        return lz_fail(LZ_ERR_INPUT, "session: slot %d out of range", slot);
    int owned = 0;
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        owned += m->parts.layer[i];
    const size_t n = owned ? (size_t)owned : 1;
    Lizard__LayerState *records = calloc(n, sizeof *records);
    out->layers = calloc(n, sizeof(Lizard__LayerState *));
    *pieces = calloc(4 * n, sizeof(lz_state_piece));
    if (!records || !out->layers || !*pieces) {
        free(records), free(out->layers), free(*pieces);
        out->layers = NULL, *pieces = NULL;
        return lz_fail(LZ_ERR_NOMEM, "state: out of memory");
    }
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
        if (!m->parts.layer[i])
            continue;
        Lizard__LayerState *l = &records[out->n_layers];
        lizard__layer_state__init(l);
        plan_layer(m, st, &m->layers[i], slot, st->slot_pos[slot], state_bf16, l, *pieces + 4 * out->n_layers);
        out->layers[out->n_layers++] = l;
    }
    return LZ_OK;
}

void lz_state_io_free_plan(Lizard__StageState *s, lz_state_piece *pieces) {
    if (s->layers)
        free(s->layers[0]); // the records are one array (layers[0] is its start)
    free(s->layers);
    s->layers = NULL;
    s->n_layers = 0;
    free(pieces);
}

lz_status lz_state_io_fetch(const lz_model *m, const lz_state_piece *p, uint8_t *dst) {
    if (!p->to_bf16) {
        for (int r = 0; r < 2; r++)
            if (p->bytes[r])
                LZ_TRY(m->ops->copy_to_host_async(m->be, dst + (r ? p->bytes[0] : 0), p->src[r], p->bytes[r]));
        return LZ_OK;
    }
    const size_t n = p->bytes[0] / sizeof(float); // S and z: one range of fp32
    float *wide = malloc(p->bytes[0] ? p->bytes[0] : 1);
    if (!wide)
        return lz_fail(LZ_ERR_NOMEM, "state: out of memory");
    lz_status s = m->ops->copy_to_host(m->be, wide, p->src[0], p->bytes[0]);
    for (size_t i = 0; s == LZ_OK && i < n; i++) {
        const uint16_t h = lz_f32_to_bf16(wide[i]);
        dst[2 * i] = (uint8_t)h; // little-endian
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
    free(wide);
    return s;
}

/* Gives payload b bytes of its own, fetched from the piece it stands for. */
static lz_status fetch_owned(const lz_model *m, ProtobufCBinaryData *b) {
    if (!b->data)
        return LZ_OK;
    const lz_state_piece *p = (const lz_state_piece *)b->data;
    b->data = malloc(b->len);
    if (!b->data)
        return lz_fail(LZ_ERR_NOMEM, "state: out of memory for %zu bytes", b->len);
    return lz_state_io_fetch(m, p, b->data);
}

lz_status lz_state_io_save(const lz_model *m, const lz_state *st, int slot, bool state_bf16, Lizard__StageState *out) {
    lz_state_piece *pieces;
    Lizard__StageState plan;
    lizard__stage_state__init(out); // empty, and freeable, if the plan fails
    LZ_TRY(lz_state_io_plan(m, st, slot, state_bf16, &plan, &pieces));
    out->layers = calloc(plan.n_layers ? plan.n_layers : 1, sizeof(Lizard__LayerState *));
    lz_status s = out->layers ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "state: out of memory");
    for (size_t i = 0; s == LZ_OK && i < plan.n_layers; i++) { // records of their own, freed one by one
        Lizard__LayerState *l = malloc(sizeof *l);
        if (!l) {
            s = lz_fail(LZ_ERR_NOMEM, "state: out of memory");
            break;
        }
        *l = *plan.layers[i];
        l->k.data = l->v.data = l->s.data = l->z.data = NULL; // owned from here on: filled below
        out->layers[out->n_layers++] = l;
        const Lizard__LayerState *from = plan.layers[i];
        l->k.data = from->k.data, s = fetch_owned(m, &l->k);
        if (s == LZ_OK)
            l->v.data = from->v.data, s = fetch_owned(m, &l->v);
        if (s == LZ_OK)
            l->s.data = from->s.data, s = fetch_owned(m, &l->s);
        if (s == LZ_OK)
            l->z.data = from->z.data, s = fetch_owned(m, &l->z);
    }
    if (s == LZ_OK)
        s = m->ops->sync(m->be); // the queued copies
    lz_state_io_free_plan(&plan, pieces);
    return s;
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
 * backend's; the rows go over in at most two copies (a ring wraps once),
 * queued straight from the record's bytes when no conversion is needed. */
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
        char *dst = (char *)dst_base + at * out_row;
        s = converted ? m->ops->copy_from_host(m->be, dst, data + r * out_row, run * out_row) // before the free below
                      : m->ops->copy_from_host_async(m->be, dst, data + r * out_row, run * out_row);
        r += run;
    }
    free(converted);
    return s;
}

/* S or z back into fp32 backend memory, widened from bf16 when saved so (check_record sized it). */
static lz_status put_f32(const lz_model *m, float *dst, const ProtobufCBinaryData *src, uint32_t elem_bytes) {
    if (elem_bytes != 2)
        return m->ops->copy_from_host_async(m->be, dst, src->data, src->len);
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
    LZ_TRY(m->ops->sync(m->be)); // the queued copies read the records' bytes: done before the caller frees them
    st->slot_pos[slot] = (int32_t)position;
    return LZ_OK;
}
