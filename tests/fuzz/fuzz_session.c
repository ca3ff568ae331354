/* fuzz_session.c - the SequenceState decoder (runtime/session.c) on any bytes:
 * it must refuse or accept without crashing, and what it accepts must be
 * self-consistent (tokens = position + pending) and pack again to a message
 * it accepts. The in-place reader (runtime/session_view.c) must give the same
 * verdict and the same layers. */
#include <stdint.h> // uint8_t
#include <stdlib.h> // abort, free

#include <string.h> // memcmp

#include "session.h" // lz_session_unpack, lz_session_view

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const uint8_t fingerprint[LZ_FINGERPRINT_BYTES] = {1, 2, 3};
    for (int with_fp = 0; with_fp < 2; with_fp++) {
        Lizard__SequenceState *m = NULL, *view = NULL;
        lz_error_clear();
        const bool ok = lz_session_unpack(data, size, "fuzz", with_fp ? fingerprint : NULL, &m) == LZ_OK;
        const bool view_ok = lz_session_view(data, size, "fuzz", with_fp ? fingerprint : NULL, &view) == LZ_OK;
        if (ok != view_ok || (ok && !same_layers(m, view)))
            abort(); // the two readers disagree
        lz_session_view_free(view);
        if (!ok)
            continue;
        if (m->n_tokens != m->position + (m->has_pending ? 1 : 0))
            abort();
        uint8_t *buf = NULL;
        size_t len = 0;
        Lizard__SequenceState *again = NULL;
        if (lz_session_pack(m, &buf, &len) != LZ_OK ||
            lz_session_unpack(buf, len, "fuzz", with_fp ? fingerprint : NULL, &again) != LZ_OK)
            abort(); // what was accepted must survive a round trip
        lizard__sequence_state__free_unpacked(again, NULL);
        lizard__sequence_state__free_unpacked(m, NULL);
        free(buf);
    }
    return 0;
}
