/* session_buf.c - session messages in one pass: the packed layout first, then
 * the backend's bytes straight into it; parsing in place on the way back. */
#include <errno.h>    // errno
#include <stdint.h>   // uintptr_t, SIZE_MAX, INT32_MAX
#include <stdio.h>    // FILE, fopen, fread
#include <stdlib.h>   // malloc, calloc, free
#include <string.h>   // memcpy, strerror
#include <sys/stat.h> // fstat

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
enum { CHECKSUM_TAG = 9 << 3 | 1 }; // field 9, fixed64: the message's last 9 bytes

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

static lz_status fill_holes(const lz_model *m, Lizard__StageState *stage, lz_session_buf *buf) {
    for (size_t i = 0; i < stage->n_layers; i++) {
        Lizard__LayerState *l = stage->layers[i];
        LZ_TRY(fill_hole(m, &l->k, buf));
        LZ_TRY(fill_hole(m, &l->v, buf));
        LZ_TRY(fill_hole(m, &l->s, buf));
        LZ_TRY(fill_hole(m, &l->z, buf));
    }
    return m->ops->sync(m->be); // the queued copies
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
    if (lb.len != len || len < 9 || buf->data[len - 9] != CHECKSUM_TAG)
        return lz_fail(LZ_ERR_INTERNAL, "session: packed %zu bytes of %zu, or the checksum is not last", lb.len, len);
    return LZ_OK;
}

lz_status lz_session_save_slot(const lz_model *m, const lz_state *st, int slot, bool state_bf16,
                               Lizard__SequenceState *msg, lz_session_buf *b) {
    if (msg->n_stages)
        return lz_fail(LZ_ERR_INTERNAL, "session: save_slot writes the layers itself");
    Lizard__StageState stage;
    lz_state_piece *pieces;
    LZ_TRY(lz_state_io_plan(m, st, slot, state_bf16, &stage, &pieces));
    Lizard__StageState *stages[1] = {&stage};
    msg->stages = stages;
    msg->n_stages = 1;
    msg->magic = LZ_SESSION_MAGIC;
    msg->version = LZ_SESSION_VERSION;
    msg->checksum = CHECKSUM_HOLE;
    lz_status s = pack_layout(msg, pieces, 4 * stage.n_layers, b);
    if (s == LZ_OK)
        s = fill_holes(m, &stage, b);
    if (s == LZ_OK) { // over the bytes where they now lie, and into the checksum's place (little-endian)
        msg->checksum = lz_session_checksum(msg);
        for (int i = 0; i < 8; i++)
            b->data[b->len - 8 + (size_t)i] = (uint8_t)(msg->checksum >> (8 * i));
    }
    msg->stages = NULL;
    msg->n_stages = 0;
    lz_state_io_free_plan(&stage, pieces);
    return s;
}

/* ---- reading in place ----------------------------------------------------------- */

/* One field of a protobuf message as it lies in the bytes. */
typedef struct {
    uint32_t number;
    int wire;                  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
    const uint8_t *start, *end; // the whole field, its tag included
    const uint8_t *data;       // wire 2: the contents
    size_t len;
} pb_field;

/* A varint of at most max_bytes bytes. */
static bool pb_varint(const uint8_t **p, const uint8_t *end, int max_bytes, uint64_t *v) {
    uint64_t r = 0;
    for (int i = 0; i < max_bytes && *p < end; i++) {
        const uint8_t byte = *(*p)++;
        r |= (uint64_t)(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* The field at *p, which moves past it; false if it is malformed or runs
 * past end. Tags and lengths are read as protobuf-c reads them (at most 5
 * bytes; a first byte without field bits refused), so the two readers
 * accept the same messages. */
static bool pb_next(const uint8_t **p, const uint8_t *end, pb_field *f) {
    uint64_t tag, n;
    f->start = *p;
    f->data = NULL;
    f->len = 0;
    if (*p >= end || (**p & 0xf8) == 0 || !pb_varint(p, end, 5, &tag))
        return false;
    f->number = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    switch (f->wire) {
    case 0:
        if (!pb_varint(p, end, 10, &n))
            return false;
        break;
    case 1:
    case 5:
        if ((size_t)(end - *p) < (f->wire == 1 ? 8u : 4u))
            return false;
        *p += f->wire == 1 ? 8 : 4;
        break;
    case 2:
        if (!pb_varint(p, end, 5, &n) || n > (uint64_t)INT32_MAX || n > (uint64_t)(end - *p))
            return false;
        f->data = *p;
        f->len = (size_t)n;
        *p += n;
        break;
    default: // groups and reserved types: never in our messages
        return false;
    }
    f->end = *p;
    return true;
}

/* Fields lo..hi of a message are length-delimited and handed back one by one
 * by the caller's loop; the rest are copied out one after another into
 * *rest (itself a valid message of those fields), *rest_len bytes. */
static bool split_fields(const uint8_t *data, size_t len, uint32_t lo, uint32_t hi, uint8_t **rest, size_t *rest_len) {
    const uint8_t *p = data, *end = data + len;
    size_t n = 0;
    pb_field f;
    while (p < end) { // sizes first
        if (!pb_next(&p, end, &f) || (f.number >= lo && f.number <= hi && f.wire != 2))
            return false;
        if (f.number < lo || f.number > hi)
            n += (size_t)(f.end - f.start);
    }
    *rest = malloc(n ? n : 1);
    if (!*rest)
        return false;
    *rest_len = 0;
    for (p = data; p < end;) {
        pb_next(&p, end, &f); // checked above
        if (f.number < lo || f.number > hi) {
            memcpy(*rest + *rest_len, f.start, (size_t)(f.end - f.start));
            *rest_len += (size_t)(f.end - f.start);
        }
    }
    return true;
}

static void drop_payloads(Lizard__LayerState *l) {
    l->k = l->v = l->s = l->z = (ProtobufCBinaryData){0, NULL};
}

/* A LayerState whose k, v, s, z (fields 5..8) point into data. */
static Lizard__LayerState *view_layer(const uint8_t *data, size_t len) {
    uint8_t *rest;
    size_t rest_len;
    if (!split_fields(data, len, 5, 8, &rest, &rest_len))
        return NULL;
    Lizard__LayerState *l = lizard__layer_state__unpack(NULL, rest_len, rest);
    free(rest);
    if (!l)
        return NULL;
    ProtobufCBinaryData *payload[4] = {&l->k, &l->v, &l->s, &l->z};
    pb_field f;
    for (const uint8_t *p = data, *end = data + len; p < end && pb_next(&p, end, &f);)
        if (f.number >= 5 && f.number <= 8) // a repeated one: the last wins, as protobuf-c reads it
            *payload[f.number - 5] = (ProtobufCBinaryData){f.len, f.len ? (uint8_t *)(uintptr_t)f.data : NULL};
    return l;
}

static void free_stage_view(Lizard__StageState *s) {
    for (size_t i = 0; i < s->n_layers; i++) {
        drop_payloads(s->layers[i]);
        lizard__layer_state__free_unpacked(s->layers[i], NULL);
    }
    free(s->layers);
    free(s);
}

/* A StageState of viewed layers (field 1); other fields are ignored. */
static Lizard__StageState *view_stage(const uint8_t *data, size_t len) {
    const uint8_t *p = data, *end = data + len;
    size_t n = 0;
    pb_field f;
    while (p < end) {
        if (!pb_next(&p, end, &f) || (f.number == 1 && f.wire != 2))
            return NULL;
        n += f.number == 1;
    }
    Lizard__StageState *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    lizard__stage_state__init(s);
    s->layers = calloc(n ? n : 1, sizeof(Lizard__LayerState *));
    for (p = data; s->layers && p < end;) {
        pb_next(&p, end, &f); // checked above
        if (f.number != 1)
            continue;
        if (!(s->layers[s->n_layers] = view_layer(f.data, f.len)))
            break;
        s->n_layers++;
    }
    if (!s->layers || s->n_layers != n) {
        free_stage_view(s);
        return NULL;
    }
    return s;
}

void lz_session_view_free(Lizard__SequenceState *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->n_stages; i++)
        free_stage_view(m->stages[i]);
    free(m->stages);
    m->stages = NULL; // the rest was unpacked by protobuf-c
    m->n_stages = 0;
    lizard__sequence_state__free_unpacked(m, NULL);
}

/* The message without its stages (protobuf-c), then each stage (field 8) in place. */
static Lizard__SequenceState *view_message(const uint8_t *buf, size_t len) {
    uint8_t *rest;
    size_t rest_len;
    if (!split_fields(buf, len, 8, 8, &rest, &rest_len))
        return NULL;
    Lizard__SequenceState *m = lizard__sequence_state__unpack(NULL, rest_len, rest);
    free(rest);
    if (!m)
        return NULL;
    size_t n = 0;
    pb_field f;
    for (const uint8_t *p = buf, *end = buf + len; p < end && pb_next(&p, end, &f);)
        n += f.number == 8;
    m->stages = calloc(n ? n : 1, sizeof(Lizard__StageState *));
    for (const uint8_t *p = buf, *end = buf + len; m->stages && p < end && pb_next(&p, end, &f);) {
        if (f.number != 8)
            continue;
        if (!(m->stages[m->n_stages] = view_stage(f.data, f.len)))
            break;
        m->n_stages++;
    }
    if (!m->stages || m->n_stages != n) {
        lz_session_view_free(m);
        return NULL;
    }
    return m;
}

lz_status lz_session_view(const uint8_t *buf, size_t len, const char *what,
                          const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], Lizard__SequenceState **out) {
    *out = NULL;
    Lizard__SequenceState *m = view_message(buf, len);
    if (!m)
        return lz_fail(LZ_ERR_INPUT, "%s: not a lizard session (truncated or corrupted message)", what);
    const lz_status s = lz_session_check(m, what, fingerprint);
    if (s != LZ_OK) {
        lz_session_view_free(m);
        return s;
    }
    *out = m;
    return LZ_OK;
}

/* ---- files --------------------------------------------------------------------- */

lz_status lz_session_buf_read_file(const char *path, lz_session_buf *b) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    lz_status s = fstat(fileno(f), &sb) == 0 ? LZ_OK : lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    if (s == LZ_OK && (sb.st_size <= 0 || sb.st_size > ((off_t)1 << 40)))
        s = lz_fail(LZ_ERR_INPUT, "%s: a session file of %lld bytes", path, (long long)sb.st_size);
    if (s == LZ_OK)
        s = lz_session_buf_reserve(b, (size_t)sb.st_size);
    if (s == LZ_OK && fread(b->data, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size)
        s = lz_fail(LZ_ERR_IO, "%s: short read", path);
    b->len = s == LZ_OK ? (size_t)sb.st_size : 0;
    fclose(f);
    return s;
}
