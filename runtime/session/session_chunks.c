/* session_chunks.c - version-3 session files: a header, then the layers'
 * payloads in chunks of at most 256 MiB, checked as strictly as a message. */
#include <stdint.h> // INT32_MAX
#include <stdio.h>  // FILE, fwrite
#include <stdlib.h> // malloc, free
#include <string.h> // memcpy

#include "atomic_file.h" // lz_atomic_open
#include "hash.h"        // lz_fnv1a, lz_hash_wide
#include "knobs.h"       // lz_knobs_get
#include "layer_payloads.h" // lz_layer_payload, lz_layer_declared
#include "session_chunks.h"

enum { DEFAULT_CHUNK_BYTES = 256 << 20 };

size_t lz_session_chunk_bytes(void) {
    const size_t n = lz_knobs_get()->session_chunk_bytes;
    return n ? n : DEFAULT_CHUNK_BYTES;
}

bool lz_session_chunks_forced(void) { return lz_knobs_get()->session_chunk_bytes != 0; }

static const char *const TENSOR_NAME[LZ_LAYER_PAYLOADS] = {"k", "v", "s", "z"};

/* ---- walking the payloads in file order --------------------------------------- */

typedef struct {
    size_t stage, record;
    int tensor;
    uint64_t offset;
} cursor;

static uint64_t size_at(const Lizard__SequenceState *h, const cursor *c) {
    return lz_layer_declared(h->stages[c->stage]->layers[c->record], c->tensor);
}

/* The cursor past finished and empty payloads; false when none is left. */
static bool settle(const Lizard__SequenceState *h, cursor *c) {
    for (; c->stage < h->n_stages; c->stage++, c->record = 0)
        for (; c->record < h->stages[c->stage]->n_layers; c->record++, c->tensor = 0)
            for (; c->tensor < LZ_LAYER_PAYLOADS; c->tensor++, c->offset = 0)
                if (c->offset < size_at(h, c))
                    return true;
    return false;
}

/* ---- the checksum: the header's fields, then every chunk in order ------------- */

static uint64_t header_hash(const Lizard__SequenceState *h) {
    uint64_t sum = lz_session_checksum_head(h); // position, tokens, sampler (as version 2)
    sum = lz_fnv1a(sum, h->fingerprint.data, h->fingerprint.len);
    const uint64_t top[3] = {h->has_pending, h->n_chunks, h->n_stages};
    sum = lz_fnv1a(sum, top, sizeof top);
    for (size_t i = 0; i < h->n_stages; i++)
        for (size_t j = 0; j < h->stages[i]->n_layers; j++) {
            const Lizard__LayerState *l = h->stages[i]->layers[j];
            const uint64_t f[11] = {i, j, (uint64_t)(int64_t)l->layer, (uint64_t)l->kind, l->elem_bytes, l->rows,
                                    l->state_elem_bytes, l->k_bytes, l->v_bytes, l->s_bytes, l->z_bytes};
            sum = lz_fnv1a(sum, f, sizeof f);
        }
    return sum;
}

static uint64_t chunk_hash(uint64_t sum, const Lizard__SessionChunk *c) {
    const uint64_t f[5] = {c->stage, c->record, (uint64_t)c->tensor, c->offset, c->data.len};
    return lz_hash_wide(lz_fnv1a(sum, f, sizeof f), c->data.data, c->data.len);
}

/* ---- writing ------------------------------------------------------------------- */

/* msg's shape without its bytes: each layer's payload lengths in k_bytes .. z_bytes. */
typedef struct {
    Lizard__SequenceState head;
    Lizard__StageState *stages, **stage_ptrs;
    Lizard__LayerState *layers, **layer_ptrs;
} header_copy;

static lz_status copy_header(const Lizard__SequenceState *msg, header_copy *hc) {
    size_t n = 0;
    for (size_t i = 0; i < msg->n_stages; i++)
        n += msg->stages[i]->n_layers;
    hc->head = *msg;
    hc->stages = calloc(msg->n_stages + 1, sizeof *hc->stages);
    hc->stage_ptrs = calloc(msg->n_stages + 1, sizeof *hc->stage_ptrs);
    hc->layers = calloc(n + 1, sizeof *hc->layers);
    hc->layer_ptrs = calloc(n + 1, sizeof *hc->layer_ptrs);
    if (!hc->stages || !hc->stage_ptrs || !hc->layers || !hc->layer_ptrs)
        return lz_fail(LZ_ERR_NOMEM, "session: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < msg->n_stages; i++) {
        lizard__stage_state__init(&hc->stages[i]);
        hc->stages[i].layers = hc->layer_ptrs + k;
        hc->stages[i].n_layers = msg->stages[i]->n_layers;
        hc->stage_ptrs[i] = &hc->stages[i];
        for (size_t j = 0; j < msg->stages[i]->n_layers; j++, k++) {
            Lizard__LayerState *l = &hc->layers[k];
            *l = *msg->stages[i]->layers[j];
            lz_layer_to_header(l);
            hc->layer_ptrs[k] = l;
        }
    }
    hc->head.stages = hc->stage_ptrs;
    return LZ_OK;
}

static void free_header(header_copy *hc) {
    free(hc->stages), free(hc->stage_ptrs), free(hc->layers), free(hc->layer_ptrs);
}

/* The next chunk of at most `chunk` bytes, its data in msg's payload; false at the end. */
static bool next_chunk(const Lizard__SequenceState *h, Lizard__SequenceState *msg, cursor *cur, size_t chunk,
                       Lizard__SessionChunk *c) {
    if (!settle(h, cur))
        return false;
    const uint64_t left = size_at(h, cur) - cur->offset, n = left < chunk ? left : chunk;
    lizard__session_chunk__init(c);
    c->stage = (uint32_t)cur->stage;
    c->record = (uint32_t)cur->record;
    c->tensor = (Lizard__SessionChunk__Tensor)cur->tensor;
    c->offset = cur->offset;
    const ProtobufCBinaryData *p = lz_layer_payload(msg->stages[cur->stage]->layers[cur->record], cur->tensor);
    c->data = (ProtobufCBinaryData){n, p->data + cur->offset};
    cur->offset += n;
    return true;
}

/* Where the writer's bytes go: a file, or a buffer of cap bytes. */
typedef struct {
    ProtobufCBuffer base;
    FILE *fp;
    uint8_t *mem;
    size_t len, cap;
    bool ok;
} sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
    sink *f = (sink *)b;
    if (f->fp)
        f->ok = f->ok && fwrite(data, 1, len, f->fp) == len;
    else if ((f->ok = f->ok && len <= f->cap - f->len))
        memcpy(f->mem + f->len, data, len);
    f->len += len;
}

/* Bytes of len as a varint. */
static size_t varint_size(uint64_t len) {
    size_t n = 1;
    for (; len > 0x7f; len >>= 7)
        n++;
    return n;
}

/* One length-delimited message: its length as a varint, then it. */
static void put_message(sink *f, const ProtobufCMessage *m) {
    uint8_t v[10];
    size_t n = 0;
    for (uint64_t len = protobuf_c_message_get_packed_size(m);; len >>= 7) {
        v[n++] = (uint8_t)((len & 0x7f) | (len > 0x7f ? 0x80 : 0));
        if (len <= 0x7f)
            break;
    }
    sink_append(&f->base, n, v);
    protobuf_c_message_pack_to_buffer(m, &f->base);
}

/* hc's header (magic, version, n_chunks, checksum) for msg's payloads. */
static lz_status chunked_header(Lizard__SequenceState *msg, size_t chunk_bytes, header_copy *hc, const char *what) {
    LZ_TRY(copy_header(msg, hc));
    Lizard__SequenceState *h = &hc->head;
    Lizard__SessionChunk c;
    cursor cur = {0};
    h->magic = LZ_SESSION_MAGIC;
    h->version = LZ_SESSION_VERSION_CHUNKED;
    h->n_chunks = 0;
    while (next_chunk(h, msg, &cur, chunk_bytes, &c))
        h->n_chunks++;
    uint64_t sum = header_hash(h); // a pass over the bytes before any is written: the header comes first
    for (cur = (cursor){0}; next_chunk(h, msg, &cur, chunk_bytes, &c);)
        sum = chunk_hash(sum, &c);
    h->checksum = sum;
    if (lizard__sequence_state__get_packed_size(h) > (size_t)INT32_MAX)
        return lz_fail(LZ_ERR_INPUT, "%s: the session header alone is over 2 GiB (%zu tokens)", what, h->n_tokens);
    return LZ_OK;
}

/* What put_chunked writes, in bytes, from the messages' packed sizes (nothing packed). */
static size_t chunked_size(header_copy *hc, Lizard__SequenceState *msg, size_t chunk_bytes) {
    Lizard__SessionChunk c;
    size_t n = lizard__sequence_state__get_packed_size(&hc->head);
    size_t total = varint_size(n) + n;
    for (cursor cur = {0}; next_chunk(&hc->head, msg, &cur, chunk_bytes, &c);) {
        n = lizard__session_chunk__get_packed_size(&c);
        total += varint_size(n) + n;
    }
    return total;
}

/* The header, then every chunk, to out. */
static void put_chunked(sink *out, header_copy *hc, Lizard__SequenceState *msg, size_t chunk_bytes) {
    Lizard__SessionChunk c;
    put_message(out, &hc->head.base);
    for (cursor cur = {0}; out->ok && next_chunk(&hc->head, msg, &cur, chunk_bytes, &c);)
        put_message(out, &c.base);
}

lz_status lz_session_write_chunked_to(FILE *fp, Lizard__SequenceState *msg, size_t chunk_bytes, const char *what) {
    header_copy hc;
    lz_status s = chunked_header(msg, chunk_bytes, &hc, what);
    sink out = {{.append = sink_append}, fp, NULL, 0, 0, true};
    if (s == LZ_OK)
        put_chunked(&out, &hc, msg, chunk_bytes);
    if (s == LZ_OK && !out.ok)
        s = lz_fail(LZ_ERR_IO, "%s: write failed", what);
    free_header(&hc);
    return s;
}

lz_status lz_session_pack_chunked(Lizard__SequenceState *msg, size_t chunk_bytes, uint8_t **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    header_copy hc;
    lz_status s = chunked_header(msg, chunk_bytes, &hc, "session");
    const size_t size = s == LZ_OK ? chunked_size(&hc, msg, chunk_bytes) : 0;
    if (s == LZ_OK && !(*buf = malloc(size ? size : 1)))
        s = lz_fail(LZ_ERR_NOMEM, "session: out of memory for %zu bytes", size);
    sink out = {{.append = sink_append}, NULL, *buf, 0, size, true};
    if (s == LZ_OK)
        put_chunked(&out, &hc, msg, chunk_bytes);
    if (s == LZ_OK && (!out.ok || out.len != size))
        s = lz_fail(LZ_ERR_INTERNAL, "session: wrote %zu chunked bytes of %zu", out.len, size);
    free_header(&hc);
    if (s != LZ_OK) {
        free(*buf);
        *buf = NULL;
        return s;
    }
    *len = out.len;
    return LZ_OK;
}

lz_status lz_session_pack_any(Lizard__SequenceState *msg, uint8_t **buf, size_t *len) {
    msg->magic = LZ_SESSION_MAGIC; // as lz_session_pack fills them: in the size
    msg->version = LZ_SESSION_VERSION;
    if (lz_session_chunks_forced() || lizard__sequence_state__get_packed_size(msg) + 9 > (size_t)INT32_MAX) // + checksum
        return lz_session_pack_chunked(msg, lz_session_chunk_bytes(), buf, len);
    return lz_session_pack(msg, buf, len);
}

lz_status lz_session_write_chunked(const char *path, Lizard__SequenceState *msg, size_t chunk_bytes) {
    lz_atomic_file f;
    LZ_TRY(lz_atomic_open(&f, path));
    const lz_status s = lz_session_write_chunked_to(f.fp, msg, chunk_bytes, path);
    const lz_status c = lz_atomic_commit(&f, s == LZ_OK); // removes the temp file when s failed
    return s != LZ_OK ? s : c;
}

/* ---- reading ------------------------------------------------------------------- */

typedef struct {
    lz_byte_source *src;
    uint64_t left; /* of src->total */
    uint8_t *buf;  /* the message being read */
    size_t cap;
} reader;

static bool take(reader *r, void *dst, uint64_t n) {
    if (n > r->left)
        return false;
    const size_t got = n ? r->src->read(r->src->ctx, dst, (size_t)n) : 0;
    r->left -= got;
    return got == n;
}

/* A length prefix: 1 read, 0 the source ended before it, -1 malformed or cut. */
static int read_length(reader *r, uint64_t *len) {
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        uint8_t b;
        if (!take(r, &b, 1))
            return i == 0 ? 0 : -1;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *len = v;
            return v <= (uint64_t)INT32_MAX && v <= r->left ? 1 : -1;
        }
    }
    return -1;
}

/* The next message's bytes into r->buf: as read_length, -1 also when cut short. */
static int read_message(reader *r, uint64_t *len) {
    const int got = read_length(r, len);
    if (got != 1)
        return got;
    if (*len > r->cap) {
        free(r->buf);
        r->cap = 0;
        if (!(r->buf = malloc((size_t)*len)))
            return -1;
        r->cap = (size_t)*len;
    }
    return take(r, r->buf, *len) ? 1 : -1;
}

/* Everything the header must satisfy before a byte is allocated for it. */
static lz_status check_header(const Lizard__SequenceState *h, const char *what,
                              const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], uint64_t left) {
    if (lz_pb_has_field_zero(&h->base))
        return lz_fail(LZ_ERR_INPUT, "%s: not a lizard session (a field numbered 0)", what);
    if (h->magic != LZ_SESSION_MAGIC)
        return lz_fail(LZ_ERR_INPUT, "%s: not a lizard session (magic %08x)", what, h->magic);
    if (h->version != LZ_SESSION_VERSION_CHUNKED)
        return lz_fail(LZ_ERR_INPUT, "%s: session version %u in a chunked file (expected %d)", what, h->version,
                       LZ_SESSION_VERSION_CHUNKED);
    if (fingerprint && lz_session_check_fingerprint(h, fingerprint, what) != LZ_OK)
        return LZ_ERR_INPUT;
    if (h->n_tokens != h->position + (h->has_pending ? 1 : 0) || h->position > (uint64_t)INT32_MAX)
        return lz_fail(LZ_ERR_INPUT, "%s: %zu tokens for position %llu", what, h->n_tokens,
                       (unsigned long long)h->position);
    uint64_t total = 0;
    for (size_t i = 0; i < h->n_stages; i++)
        for (size_t j = 0; j < h->stages[i]->n_layers; j++) {
            Lizard__LayerState *l = h->stages[i]->layers[j];
            for (int t = 0; t < LZ_LAYER_PAYLOADS; t++) {
                if (lz_layer_payload(l, t)->len)
                    return lz_fail(LZ_ERR_INPUT, "%s: stage %zu record %zu carries %s bytes in the header", what, i, j,
                                   TENSOR_NAME[t]);
                if (lz_layer_declared(l, t) > left - total) // more than the file holds
                    return lz_fail(LZ_ERR_INPUT, "%s: truncated: layer %d's %s bytes (%llu) are not in the file", what,
                                   l->layer, TENSOR_NAME[t], (unsigned long long)lz_layer_declared(l, t));
                total += lz_layer_declared(l, t);
            }
        }
    if (h->n_chunks > left)
        return lz_fail(LZ_ERR_INPUT, "%s: truncated: %llu chunks in %llu bytes", what,
                       (unsigned long long)h->n_chunks, (unsigned long long)left);
    return LZ_OK;
}

/* A buffer of its declared length for every payload (freed with the header). */
static lz_status alloc_payloads(Lizard__SequenceState *h) {
    for (size_t i = 0; i < h->n_stages; i++)
        for (size_t j = 0; j < h->stages[i]->n_layers; j++)
            for (int t = 0; t < LZ_LAYER_PAYLOADS; t++) {
                Lizard__LayerState *l = h->stages[i]->layers[j];
                const uint64_t n = lz_layer_declared(l, t);
                if (!n)
                    continue;
                if (!(lz_layer_payload(l, t)->data = malloc((size_t)n)))
                    return lz_fail(LZ_ERR_NOMEM, "session: out of memory for %llu bytes", (unsigned long long)n);
                lz_layer_payload(l, t)->len = (size_t)n;
            }
    return LZ_OK;
}

/* Chunk i must be the next piece of the next payload, exactly. */
static lz_status place_chunk(Lizard__SequenceState *h, cursor *cur, const Lizard__SessionChunk *c, const char *what,
                             uint64_t i) {
    if (!settle(h, cur))
        return lz_fail(LZ_ERR_INPUT, "%s: chunk %llu is one too many: every payload is complete", what,
                       (unsigned long long)i);
    if (c->stage != cur->stage || c->record != cur->record || (int)c->tensor != cur->tensor || c->offset != cur->offset)
        return lz_fail(LZ_ERR_INPUT,
                       "%s: chunk %llu holds stage %u record %u tensor %d at offset %llu, expected stage %zu record %zu "
                       "%s at offset %llu (a chunk missing, repeated or out of order)",
                       what, (unsigned long long)i, c->stage, c->record, (int)c->tensor,
                       (unsigned long long)c->offset, cur->stage, cur->record, TENSOR_NAME[cur->tensor],
                       (unsigned long long)cur->offset);
    const uint64_t room = size_at(h, cur) - cur->offset;
    if (c->data.len == 0 || c->data.len > room)
        return lz_fail(LZ_ERR_INPUT, "%s: chunk %llu has %zu bytes, its payload has %llu left", what,
                       (unsigned long long)i, c->data.len, (unsigned long long)room);
    memcpy(lz_layer_payload(h->stages[cur->stage]->layers[cur->record], cur->tensor)->data + cur->offset, c->data.data,
           c->data.len);
    cur->offset += c->data.len;
    return LZ_OK;
}

static lz_status read_chunks(reader *r, Lizard__SequenceState *h, const char *what) {
    cursor cur = {0};
    uint64_t sum = header_hash(h), len;
    for (uint64_t i = 0; i < h->n_chunks; i++) {
        const int got = read_message(r, &len);
        if (got != 1)
            return lz_fail(LZ_ERR_INPUT, "%s: truncated: chunk %llu of %llu is %s", what, (unsigned long long)i,
                           (unsigned long long)h->n_chunks, got == 0 ? "missing" : "cut short or malformed");
        Lizard__SessionChunk *c = lizard__session_chunk__unpack(NULL, (size_t)len, r->buf);
        if (c && lz_pb_has_field_zero(&c->base)) {
            lizard__session_chunk__free_unpacked(c, NULL);
            c = NULL;
        }
        if (!c)
            return lz_fail(LZ_ERR_INPUT, "%s: chunk %llu of %llu is not a SessionChunk message", what,
                           (unsigned long long)i, (unsigned long long)h->n_chunks);
        const lz_status s = place_chunk(h, &cur, c, what, i);
        sum = chunk_hash(sum, c);
        lizard__session_chunk__free_unpacked(c, NULL);
        LZ_TRY(s);
    }
    if (settle(h, &cur))
        return lz_fail(LZ_ERR_INPUT, "%s: %llu chunks end before stage %zu record %zu's %s bytes from offset %llu", what,
                       (unsigned long long)h->n_chunks, cur.stage, cur.record, TENSOR_NAME[cur.tensor],
                       (unsigned long long)cur.offset);
    uint8_t extra;
    if (r->left || r->src->read(r->src->ctx, &extra, 1) == 1)
        return lz_fail(LZ_ERR_INPUT, "%s: trailing bytes after the last of %llu chunks", what,
                       (unsigned long long)h->n_chunks);
    if (sum != h->checksum)
        return lz_fail(LZ_ERR_INPUT, "%s: checksum mismatch: the state is corrupted", what);
    return LZ_OK;
}

lz_status lz_session_read_chunked(lz_byte_source *src, const char *what,
                                  const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], Lizard__SequenceState **out) {
    *out = NULL;
    reader r = {src, src->total, NULL, 0};
    uint64_t len;
    Lizard__SequenceState *h = NULL;
    lz_status s = LZ_OK;
    if (read_message(&r, &len) != 1 || !(h = lizard__sequence_state__unpack(NULL, (size_t)len, r.buf)))
        s = lz_fail(LZ_ERR_INPUT, "%s: not a lizard session (truncated or corrupted message)", what);
    if (s == LZ_OK)
        s = check_header(h, what, fingerprint, r.left);
    if (s == LZ_OK)
        s = alloc_payloads(h);
    if (s == LZ_OK)
        s = read_chunks(&r, h, what);
    free(r.buf);
    if (s != LZ_OK) {
        if (h)
            lizard__sequence_state__free_unpacked(h, NULL);
        return s;
    }
    *out = h;
    return LZ_OK;
}
