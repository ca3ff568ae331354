/* bench_state.c - `lizard bench --state`: how big one sequence's state is
 * as a session message (by layer kind) and how fast it is saved (device ->
 * LayerState messages -> packed SequenceState with its checksum) and
 * restored (unpack + checks -> device), at each --context. */
#include <stdio.h>  // printf, fprintf
#include <stdlib.h> // calloc, free

#include "bench_state.h"
#include "clock.h"    // lz_now_seconds
#include "median.h"   // lz_median
#include "session.h"  // lz_session_pack, lz_session_unpack
#include "state_io.h" // lz_state_io_save, lz_state_io_restore

enum { REPEATS = 5 };

/* One save: the slot's layers to messages, packed with the checksum. */
static lz_status save_once(const lz_model *m, const lz_state *st, int32_t *tokens, int context, uint8_t **buf,
                           size_t *len, size_t *kind_bytes) {
    Lizard__StageState stage;
    LZ_TRY(lz_state_io_save(m, st, 0, false, &stage));
    Lizard__StageState *stages[1] = {&stage};
    Lizard__SequenceState msg = LIZARD__SEQUENCE_STATE__INIT;
    msg.position = (uint64_t)context;
    msg.n_tokens = (size_t)context;
    msg.tokens = tokens;
    msg.n_stages = 1;
    msg.stages = stages;
    lz_status s = lz_session_pack(&msg, buf, len);
    for (size_t i = 0; kind_bytes && i < stage.n_layers; i++) {
        const Lizard__LayerState *l = stage.layers[i];
        kind_bytes[l->kind == LIZARD__LAYER_STATE__KIND__SOFTMAX ? 0 : 1] += l->k.len + l->v.len + l->s.len + l->z.len;
    }
    lz_state_io_free(&stage);
    return s;
}

/* One restore: checks, then the layers back into the slot. */
static lz_status restore_once(const lz_model *m, lz_state *st, const uint8_t *buf, size_t len, int context) {
    Lizard__SequenceState *msg = NULL;
    LZ_TRY(lz_session_unpack(buf, len, "bench state", NULL, &msg));
    lz_status s = lz_state_io_restore(m, st, 0, (uint64_t)context, msg->stages[0]->layers, msg->stages[0]->n_layers);
    lizard__sequence_state__free_unpacked(msg, NULL);
    return s == LZ_OK ? m->ops->sync(m->be) : s;
}

lz_status lz_bench_state(const lz_model *m, int context, FILE *json) {
    lz_state st;
    lz_status s = lz_state_create(&st, m, 1, context + 1);
    if (s != LZ_OK) {
        printf("state   context %7d  does not fit: %s\n", context, lz_error_message());
        lz_error_clear();
        return LZ_OK;
    }
    st.slot_pos[0] = context; // as if `context` tokens were prefilled: the message has their size
    int32_t *tokens = calloc((size_t)context + 1, sizeof(int32_t));
    double t_save[REPEATS], t_restore[REPEATS];
    size_t len = 0, kind_bytes[2] = {0, 0};
    s = tokens ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
    for (int r = 0; s == LZ_OK && r < REPEATS; r++) {
        uint8_t *buf = NULL;
        double t0 = lz_now_seconds();
        s = save_once(m, &st, tokens, context, &buf, &len, r == 0 ? kind_bytes : NULL);
        t_save[r] = lz_now_seconds() - t0;
        t0 = lz_now_seconds();
        if (s == LZ_OK)
            s = restore_once(m, &st, buf, len, context);
        t_restore[r] = lz_now_seconds() - t0;
        free(buf);
    }
    if (s == LZ_OK) {
        const double save = lz_median(t_save, REPEATS), restore = lz_median(t_restore, REPEATS);
        printf("state   context %7d  message %10zu bytes (softmax KV %zu, Lizard %zu)  save %6.2f GB/s  restore %6.2f "
               "GB/s\n",
               context, len, kind_bytes[0], kind_bytes[1], len / save / 1e9, len / restore / 1e9);
        if (json)
            fprintf(json,
                    "{\"kind\": \"state\", \"context\": %d, \"message_bytes\": %zu, \"softmax_bytes\": %zu, "
                    "\"lizard_bytes\": %zu, \"save_gb_s\": %.3f, \"restore_gb_s\": %.3f}\n",
                    context, len, kind_bytes[0], kind_bytes[1], len / save / 1e9, len / restore / 1e9);
    }
    free(tokens);
    lz_state_free(&st, m);
    return s;
}
