/* engine_session.c - saving and restoring a slot through an engine. */
#include <stdint.h> // INT32_MAX
#include <stdlib.h> // malloc, calloc, free

#include "engine_session.h"
#include "session_buf.h"    // lz_session_save_slot
#include "session_chunks.h" // lz_session_write_chunked

/* Every stage's StageState of `slot`, gathered here with their payloads (one process: its own). */
lz_status lz_engine_save_stages(lz_engine *e, int slot, Lizard__SequenceState *msg) {
    Lizard__StageState **stages = NULL;
    LZ_TRY(lz_pipeline_save(&e->pipe, &e->model, &e->state, slot, e->opt.session_state_bf16, &stages));
    msg->stages = stages;
    msg->n_stages = (size_t)e->pipe.n_ranks;
    return LZ_OK;
}

/* A rank that holds every layer: packed straight from the backend into a host buffer of its own
 * (session_buf.c), with no copy of the records in between. */
static lz_status save_one_pass(lz_engine *e, int slot, Lizard__SequenceState *msg, const char *path) {
    lz_session_buf b;
    lz_session_buf_init(&b, &e->model);
    lz_status s = lz_session_save_slot(&e->model, &e->state, slot, e->opt.session_state_bf16, msg, &b);
    if (s == LZ_OK)
        s = lz_session_write_file(path, b.data, b.len);
    lz_session_buf_free(&b);
    return s;
}

lz_status lz_engine_save_file(lz_engine *e, int slot, Lizard__SequenceState *msg, const char *path) {
    const bool chunked = lz_session_chunks_forced();
    const bool whole = e->pipe.n_ranks == 1; // this rank's records are the state
    size_t len = 0;
    if (whole && !chunked)
        LZ_TRY(lz_session_slot_packed_size(&e->model, &e->state, slot, e->opt.session_state_bf16, msg, &len));
    if (whole && !chunked && len <= (size_t)INT32_MAX)
        return save_one_pass(e, slot, msg, path);
    LZ_TRY(lz_engine_save_stages(e, slot, msg)); // the records in host memory once, then to the file
    uint8_t *buf = NULL;
    lz_status s;
    if (!chunked && lizard__sequence_state__get_packed_size(msg) + 9 <= (size_t)INT32_MAX) { // + the checksum
        s = lz_session_pack(msg, &buf, &len);
        if (s == LZ_OK)
            s = lz_session_write_file(path, buf, len);
    } else {
        s = lz_session_write_chunked(path, msg, lz_session_chunk_bytes());
    }
    free(buf);
    lz_engine_free_stages(msg);
    return s;
}

void lz_engine_free_stages(Lizard__SequenceState *msg) {
    for (size_t r = 0; r < msg->n_stages; r++)
        lizard__stage_state__free_unpacked(msg->stages[r], NULL);
    free(msg->stages);
    msg->stages = NULL;
    msg->n_stages = 0;
}

lz_status lz_engine_restore_stages(lz_engine *e, int slot, const Lizard__SequenceState *msg) {
    size_t n = 0;
    for (size_t r = 0; r < msg->n_stages; r++)
        n += msg->stages[r]->n_layers;
    Lizard__StageState all = LIZARD__STAGE_STATE__INIT; // every layer, whichever stage wrote it
    all.layers = calloc(n ? n : 1, sizeof(Lizard__LayerState *));
    if (!all.layers)
        return lz_fail(LZ_ERR_NOMEM, "session: out of memory");
    for (size_t r = 0; r < msg->n_stages; r++)
        for (size_t j = 0; j < msg->stages[r]->n_layers; j++)
            all.layers[all.n_layers++] = msg->stages[r]->layers[j];
    const lz_status s = lz_pipeline_restore(&e->pipe, &e->model, &e->state, slot, msg->position, &all);
    free(all.layers); // the records belong to msg
    return s;
}
