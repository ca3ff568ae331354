/* engine_session.c - saving and restoring a slot through an engine. */
#include <stdlib.h> // malloc, calloc, free

#include "engine_session.h"
#include "state_io.h" // lz_state_io_save

/* This process's layers of `slot` as msg's one stage, without packing them
 * and parsing them back: the records are malloc'd as protobuf-c's default
 * allocator would, so lz_engine_free_stages frees them like parsed ones. */
static lz_status save_local(lz_engine *e, int slot, Lizard__SequenceState *msg) {
    msg->stages = calloc(1, sizeof(Lizard__StageState *));
    Lizard__StageState *stage = malloc(sizeof *stage);
    if (!msg->stages || !stage) {
        free(stage);
        return lz_fail(LZ_ERR_NOMEM, "session: out of memory");
    }
    const lz_status s = lz_state_io_save(&e->model, &e->state, slot, e->opt.session_state_bf16, stage);
    msg->stages[0] = stage; // freed with what it holds, whether or not it is whole
    msg->n_stages = 1;
    return s;
}

/* Every rank's StageState, gathered packed and parsed here. */
static lz_status save_pipelined(lz_engine *e, int slot, Lizard__SequenceState *msg) {
    uint8_t **parts = NULL;
    size_t *lens = NULL;
    const size_t n = (size_t)e->pipe.n_ranks;
    lz_status s = lz_pipeline_save(&e->pipe, &e->model, &e->state, slot, e->opt.session_state_bf16, &parts, &lens);
    msg->stages = s == LZ_OK ? calloc(n, sizeof(Lizard__StageState *)) : NULL;
    if (s == LZ_OK && !msg->stages)
        s = lz_fail(LZ_ERR_NOMEM, "session: out of memory");
    for (size_t r = 0; s == LZ_OK && r < n; r++) {
        msg->stages[r] = lizard__stage_state__unpack(NULL, lens[r], parts[r]);
        if (!msg->stages[r])
            s = lz_fail(LZ_ERR_INTERNAL, "session: stage %zu sent a malformed state", r);
        else
            msg->n_stages++;
    }
    for (size_t r = 0; parts && r < n; r++)
        free(parts[r]);
    free(parts), free(lens);
    return s;
}

lz_status lz_engine_save_stages(lz_engine *e, int slot, Lizard__SequenceState *msg) {
    return e->pipelined ? save_pipelined(e, slot, msg) : save_local(e, slot, msg);
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
    lz_status s;
    if (!e->pipelined) {
        s = lz_state_io_restore(&e->model, &e->state, slot, msg->position, all.layers, all.n_layers);
    } else {
        size_t len = lizard__stage_state__get_packed_size(&all);
        uint8_t *buf = malloc(len ? len : 1);
        s = buf ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "session: out of memory");
        if (s == LZ_OK) {
            lizard__stage_state__pack(&all, buf);
            s = lz_pipeline_restore(&e->pipe, &e->model, &e->state, slot, msg->position, buf, len);
        }
        free(buf);
    }
    free(all.layers); // the records belong to msg
    return s;
}
