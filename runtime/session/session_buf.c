/* session_buf.c - session messages in one pass: the packed layout first, then
 * the backend's bytes straight into it (reading in place: session_view.c). */
#include <stdint.h>   // uintptr_t, SIZE_MAX, INT32_MAX
#include <stdio.h>    // FILE, fopen, fread
#include <stdlib.h>   // malloc, calloc, free
#include <string.h>   // memcpy

#include "session_buf.h"
#include "state_io.h" // lz_state_io_plan, lz_state_io_fetch

/* ---- the buffer ------------------------------------------------------------ */

void lz_session_buf_init(lz_session_buf *b, const lz_model *m) {
    *b = (lz_session_buf){m->ops, m->be, NULL, 0, 0};
}

lz_status lz_session_buf_reserve(lz_session_buf *b, size_t bytes) {
    if (bytes <= b->cap)
        return LZ_OK;
    if (b->data)
        b->ops->host_free(b->be, b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    const size_t cap = bytes + bytes / 8 + 4096; // a session grows by a few tokens a turn: not a new buffer each time
    void *p;
    LZ_TRY(b->ops->host_alloc(b->be, cap, &p));
    b->data = p;
    b->cap = cap;
    return LZ_OK;
}

void lz_session_buf_free(lz_session_buf *b) {
    if (b->data)
        b->ops->host_free(b->be, b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- saving ------------------------------------------------------------------ */

/* protobuf-c's output, appended to `out`; a payload that is still a piece of
 * the plan (its data points into [lo, hi)) is left as a hole of its size,
 * and the hole's offset is written into the piece. */
typedef struct {
    ProtobufCBuffer base;
    uint8_t *out;
    size_t len;
    uintptr_t lo, hi;
} layout_buffer;

static void layout_append(ProtobufCBuffer *buffer, size_t len, const uint8_t *data) {
    layout_buffer *b = (layout_buffer *)buffer;
    const uintptr_t at = (uintptr_t)data;
    if (at >= b->lo && at < b->hi)
        ((lz_state_piece *)(uintptr_t)data)->offset = b->len;
    else if (len)
        memcpy(b->out + b->len, data, len);
    b->len += len;
}

/* A nonzero value in the checksum's place while the layout is packed (a
 * proto3 zero would be left out); the real one is written over it. */
static const uint64_t CHECKSUM_HOLE = 0x5A5A5A5A5A5A5A5Aull;
enum { CHECKSUM_TAG = 9 << 3 | 1 }; // field 9, fixed64: last but for the fields numbered above it

/* Payload b of the plan: fetched into its hole, then pointed at it (for the checksum). */
static lz_status fill_hole(const lz_model *m, ProtobufCBinaryData *b, lz_session_buf *buf) {
    if (!b->data)
        return LZ_OK;
    lz_state_piece *p = (lz_state_piece *)b->data;
    if (p->offset == SIZE_MAX || p->offset > buf->len || b->len > buf->len - p->offset)
        return lz_fail(LZ_ERR_INTERNAL, "session: a layer's bytes have no place in the packed message");
    b->data = buf->data + p->offset;
    return lz_state_io_fetch(m, p, b->data);
}

/* A layer's payloads queued into their holes. */
static lz_status fill_layer(const lz_model *m, Lizard__LayerState *l, lz_session_buf *buf) {
    LZ_TRY(fill_hole(m, &l->k, buf));
    LZ_TRY(fill_hole(m, &l->v, buf));
    LZ_TRY(fill_hole(m, &l->s, buf));
    return fill_hole(m, &l->z, buf);
}

/* Every layer into its holes and msg's checksum over them: layer i + 1's
 * copies run while layer i is checksummed (the device's copy engine and the
 * host's one pass overlap). */
static lz_status fill_and_checksum(const lz_model *m, Lizard__SequenceState *msg, Lizard__StageState *stage,
                                   lz_session_buf *buf) {
    uint64_t h = lz_session_checksum_head(msg);
    lz_status s = stage->n_layers ? fill_layer(m, stage->layers[0], buf) : LZ_OK;
    for (size_t i = 0; s == LZ_OK && i < stage->n_layers; i++) {
        s = m->ops->sync(m->be); // layer i is in place
        if (s == LZ_OK && i + 1 < stage->n_layers)
            s = fill_layer(m, stage->layers[i + 1], buf);
        if (s == LZ_OK)
            h = lz_session_checksum_layer(h, stage->layers[i]);
    }
    msg->checksum = h;
    return s;
}

/* Bytes packed after the checksum (field 9): the fields numbered above it. */
static size_t bytes_after_checksum(const Lizard__SequenceState *msg) {
    Lizard__SequenceState tail = LIZARD__SEQUENCE_STATE__INIT;
    tail.n_chunks = msg->n_chunks;
    tail.sampling = msg->sampling;
    return lizard__sequence_state__get_packed_size(&tail);
}

/* msg packed into buf with holes for the plan's payloads. */
static lz_status pack_layout(Lizard__SequenceState *msg, lz_state_piece *pieces, size_t n_pieces,
                             lz_session_buf *buf) {
    const size_t len = lizard__sequence_state__get_packed_size(msg);
    if (len > (size_t)INT32_MAX) // protobuf readers (protobuf-c included) refuse messages of 2 GiB and more
        return lz_fail(LZ_ERR_INPUT, "session: this sequence's state is %.2f GB; a session message holds at most 2 GiB "
                       "(softmax layers' KV cache at this context: save earlier, or use fewer softmax layers)",
                       (double)len / 1e9);
    LZ_TRY(lz_session_buf_reserve(buf, len));
    for (size_t i = 0; i < n_pieces; i++)
        pieces[i].offset = SIZE_MAX;
    layout_buffer lb = {{layout_append}, buf->data, 0, (uintptr_t)pieces, (uintptr_t)(pieces + n_pieces)};
    protobuf_c_message_pack_to_buffer(&msg->base, &lb.base);
    buf->len = lb.len;
    const size_t after = bytes_after_checksum(msg);
    if (lb.len != len || len < 9 + after || buf->data[len - 9 - after] != CHECKSUM_TAG)
        return lz_fail(LZ_ERR_INTERNAL, "session: packed %zu bytes of %zu, or the checksum is not where expected",
                       lb.len, len);
    return LZ_OK;
}

/* The slot's one stage in msg, with the header of a message whose checksum
 * is still to be filled in (its 8 bytes are packed as a hole). */
static void attach_slot_stage(Lizard__SequenceState *msg, Lizard__StageState **stages) {
    msg->stages = stages;
    msg->n_stages = 1;
    msg->magic = LZ_SESSION_MAGIC;
    msg->version = LZ_SESSION_VERSION;
    msg->checksum = CHECKSUM_HOLE;
}

lz_status lz_session_save_slot(const lz_model *m, const lz_state *st, int slot, bool state_bf16,
                               Lizard__SequenceState *msg, lz_session_buf *b) {
    if (msg->n_stages)
        return lz_fail(LZ_ERR_INTERNAL, "session: save_slot writes the layers itself");
    Lizard__StageState stage, *stages[1] = {&stage};
    lz_state_piece *pieces;
    LZ_TRY(lz_state_io_plan(m, st, slot, state_bf16, &stage, &pieces));
    attach_slot_stage(msg, stages);
    lz_status s = pack_layout(msg, pieces, 4 * stage.n_layers, b);
    if (s == LZ_OK)
        s = fill_and_checksum(m, msg, &stage, b);
    if (s == LZ_OK) { // into the checksum's place, little-endian
        const size_t at = b->len - 8 - bytes_after_checksum(msg);
        for (int i = 0; i < 8; i++)
            b->data[at + (size_t)i] = (uint8_t)(msg->checksum >> (8 * i));
    }
    msg->stages = NULL; // the caller's message, as it came
    msg->n_stages = 0;
    lz_state_io_free_plan(&stage, pieces);
    return s;
}

lz_status lz_session_slot_packed_size(const lz_model *m, const lz_state *st, int slot, bool state_bf16,
                                      Lizard__SequenceState *msg, size_t *len) {
    Lizard__StageState stage, *stages[1] = {&stage};
    lz_state_piece *pieces;
    LZ_TRY(lz_state_io_plan(m, st, slot, state_bf16, &stage, &pieces));
    attach_slot_stage(msg, stages);
    *len = lizard__sequence_state__get_packed_size(msg);
    msg->stages = NULL; // the caller's message, as it came
    msg->n_stages = 0;
    lz_state_io_free_plan(&stage, pieces);
    return LZ_OK;
}

/* ---- files --------------------------------------------------------------------- */

lz_status lz_session_buf_read_file(const char *path, lz_session_buf *b) {
    FILE *f;
    size_t size;
    b->len = 0;
    LZ_TRY(lz_session_open_file(path, &f, &size));
    lz_status s = lz_session_buf_reserve(b, size);
    if (s == LZ_OK && fread(b->data, 1, size, f) != size)
        s = lz_fail(LZ_ERR_IO, "%s: short read", path);
    b->len = s == LZ_OK ? size : 0;
    fclose(f);
    return s;
}
