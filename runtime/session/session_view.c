/* session_view.c - a SequenceState read in place: the message's small fields
 * are parsed by protobuf-c from a copy without the layers' payloads, and the
 * payloads (LayerState k, v, s, z) point into the caller's bytes. */
#include <stdint.h> // uintptr_t, INT32_MAX
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy

#include "session.h"

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
    if (f->number == 0) // as lz_pb_has_field_zero refuses it
        return false;
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
