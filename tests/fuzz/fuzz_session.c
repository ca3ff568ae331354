/* fuzz_session.c - the SequenceState decoders on any bytes: they must refuse
 * or accept without crashing, and what they accept must be self-consistent
 * (tokens = position + pending) and survive a round trip. Version 2: the
 * decoder (runtime/session/session.c) and the in-place reader (session_view.c) give
 * the same verdict, the same layers and the same sampler (SamplerState or record). Version 3 (session_chunks.c, reached
 * through session_file.c): what it accepts, written again chunked (in
 * chunks of a size taken from the input), reads back to the same layers, and
 * the in-memory writer (lz_session_pack_chunked, the serve store's) gives the
 * file writer's bytes. */
#include <stdint.h> // uint8_t
#include <stdio.h>  // open_memstream, fclose
#include <stdlib.h> // abort, free

#include <string.h> // memcmp

#include "session.h"        // lz_session_unpack, lz_session_view
#include "session_chunks.h" // lz_session_write_chunked_to, lz_session_pack_chunked
#include "session_file.h"   // lz_session_parse

static bool same_bytes(const ProtobufCBinaryData *a, const ProtobufCBinaryData *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* The view's layers are the decoder's, field by field. */
static bool same_layers(const Lizard__SequenceState *a, const Lizard__SequenceState *b) {
    if (a->n_stages != b->n_stages)
        return false;
    for (size_t i = 0; i < a->n_stages; i++) {
        if (a->stages[i]->n_layers != b->stages[i]->n_layers)
            return false;
        for (size_t j = 0; j < a->stages[i]->n_layers; j++) {
            const Lizard__LayerState *x = a->stages[i]->layers[j], *y = b->stages[i]->layers[j];
            if (x->layer != y->layer || x->kind != y->kind || x->elem_bytes != y->elem_bytes || x->rows != y->rows ||
                x->state_elem_bytes != y->state_elem_bytes || !same_bytes(&x->k, &y->k) ||
                !same_bytes(&x->v, &y->v) || !same_bytes(&x->s, &y->s) || !same_bytes(&x->z, &y->z))
                return false;
        }
    }
    return true;
}

/* The saved sampler (a SamplerState, or an earlier record) reads the same from both. */
static bool same_sampler(const Lizard__SequenceState *a, const Lizard__SequenceState *b) {
    lz_sampler_params pa, pb;
    uint64_t da = 0, db = 0;
    const lz_status sa = lz_session_sampler_load(a, "fuzz", &pa, &da), sb = lz_session_sampler_load(b, "fuzz", &pb, &db);
    lz_error_clear();
    return sa == sb && (sa != LZ_OK || (memcmp(&pa.temperature, &pb.temperature, sizeof(double)) == 0 &&
                                        memcmp(&pa.top_p, &pb.top_p, sizeof(double)) == 0 && pa.top_k == pb.top_k &&
                                        pa.seed == pb.seed && da == db));
}

static void version2(const uint8_t *data, size_t size, const uint8_t *fp) {
    Lizard__SequenceState *m = NULL, *view = NULL;
    lz_error_clear();
    const bool ok = lz_session_unpack(data, size, "fuzz", fp, &m) == LZ_OK;
    const bool view_ok = lz_session_view(data, size, "fuzz", fp, &view) == LZ_OK;
    if (ok != view_ok || (ok && (!same_layers(m, view) || !same_sampler(m, view))))
        abort(); // the two readers disagree
    lz_session_view_free(view);
    if (!ok)
        return;
    if (m->n_tokens != m->position + (m->has_pending ? 1 : 0))
        abort();
    uint8_t *buf = NULL;
    size_t len = 0;
    Lizard__SequenceState *again = NULL;
    if (lz_session_pack(m, &buf, &len) != LZ_OK || lz_session_unpack(buf, len, "fuzz", fp, &again) != LZ_OK ||
        !same_sampler(m, again))
        abort(); // what was accepted must survive a round trip
    lizard__sequence_state__free_unpacked(again, NULL);
    lizard__sequence_state__free_unpacked(m, NULL);
    free(buf);
}

static void version3(const uint8_t *data, size_t size, const uint8_t *fp) {
    lz_session_loaded l, again;
    lz_error_clear();
    if (lz_session_parse(data, size, "fuzz", fp, &l) != LZ_OK) {
        if (l.msg || !lz_error_message()[0])
            abort(); // refused: nothing returned, and a message
        return;
    }
    if (l.msg->n_tokens != l.msg->position + (l.msg->has_pending ? 1 : 0))
        abort();
    if (l.view) { // version 2: checked above
        lz_session_loaded_free(&l);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    const size_t chunk = 1 + (size ? data[size - 1] : 0);
    if (!f || lz_session_write_chunked_to(f, l.msg, chunk, "fuzz") != LZ_OK || fclose(f) != 0)
        abort();
    if (lz_session_parse((const uint8_t *)buf, len, "fuzz", fp, &again) != LZ_OK || again.view ||
        !same_layers(l.msg, again.msg))
        abort(); // what was accepted must survive a round trip
    uint8_t *mem = NULL;
    size_t mem_len = 0;
    if (lz_session_pack_chunked(l.msg, chunk, &mem, &mem_len) != LZ_OK || mem_len != len || memcmp(mem, buf, len))
        abort(); // the store's bytes are the file's
    free(mem);
    lz_session_loaded_free(&again);
    lz_session_loaded_free(&l);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const uint8_t fingerprint[LZ_FINGERPRINT_BYTES] = {1, 2, 3};
    for (int with_fp = 0; with_fp < 2; with_fp++) {
        version2(data, size, with_fp ? fingerprint : NULL);
        version3(data, size, with_fp ? fingerprint : NULL);
    }
    return 0;
}
