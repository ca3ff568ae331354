/* fuzz_session.c - the SequenceState decoder (runtime/session.c) on any bytes:
 * it must refuse or accept without crashing, and what it accepts must be
 * self-consistent (tokens = position + pending) and pack again to a message
 * it accepts. */
#include <stdint.h> // uint8_t
#include <stdlib.h> // abort, free

#include "session.h" // lz_session_unpack

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const uint8_t fingerprint[LZ_FINGERPRINT_BYTES] = {1, 2, 3};
    for (int with_fp = 0; with_fp < 2; with_fp++) {
        Lizard__SequenceState *m = NULL;
        lz_error_clear();
        if (lz_session_unpack(data, size, "fuzz", with_fp ? fingerprint : NULL, &m) != LZ_OK)
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
