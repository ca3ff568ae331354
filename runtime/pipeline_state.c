/* pipeline_state.c - the collectives rank 0 asks for between steps: a
 * sequence's state gathered from or scattered to the stages, slots moved to
 * a position (benchmarks), every rank's counters. */
#include <mpi.h>    // MPI_Gather, MPI_Gatherv
#include <stdlib.h> // malloc, calloc, free
#include <string.h> // memcpy

#include "mpi_world.h" // LZ_MPI_TRY
#include "pipeline_internal.h"
#include "state_io.h" // lz_state_io_save, lz_state_io_restore

/* Every rank's StageState of `slot`, gathered on rank 0 as packed bytes per rank. */
static lz_status save_collective(lz_pipeline *p, lz_model *m, lz_state *st, int slot, bool state_bf16,
                                 uint8_t ***parts, size_t **lens) {
    Lizard__StageState stage;
    lz_status s = lz_state_io_save(m, st, slot, state_bf16, &stage);
    size_t len = s == LZ_OK ? lizard__stage_state__get_packed_size(&stage) : 0;
    uint8_t *mine = malloc(len ? len : 1);
    if (s == LZ_OK && !mine)
        s = lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory", p->rank);
    if (s == LZ_OK)
        lizard__stage_state__pack(&stage, mine);
    lz_state_io_free(&stage);
    if (s != LZ_OK) {
        free(mine);
        return s;
    }
    int n = (int)len, *counts = NULL, *displs = NULL;
    uint8_t *all = NULL;
    if (p->rank == 0) {
        counts = calloc((size_t)p->n_ranks, sizeof(int));
        displs = calloc((size_t)p->n_ranks, sizeof(int));
    }
    int rc = MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t total = 0;
    for (int r = 0; rc == MPI_SUCCESS && p->rank == 0 && r < p->n_ranks; r++) {
        displs[r] = (int)total;
        total += (size_t)counts[r];
    }
    if (rc == MPI_SUCCESS && p->rank == 0)
        all = malloc(total ? total : 1);
    if (rc == MPI_SUCCESS)
        rc = MPI_Gatherv(mine, n, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(mine);
    if (rc != MPI_SUCCESS) {
        free(counts), free(displs), free(all);
        return lz_world_mpi_error(rc, "MPI_Gatherv(stage state)", __FILE__, __LINE__);
    }
    if (p->rank == 0) { // split the gathered bytes per rank
        *parts = calloc((size_t)p->n_ranks, sizeof(uint8_t *));
        *lens = calloc((size_t)p->n_ranks, sizeof(size_t));
        for (int r = 0; *parts && *lens && r < p->n_ranks; r++) {
            (*parts)[r] = malloc(counts[r] ? (size_t)counts[r] : 1);
            if ((*parts)[r])
                memcpy((*parts)[r], all + displs[r], (size_t)counts[r]);
            (*lens)[r] = (size_t)counts[r];
        }
    }
    free(counts), free(displs), free(all);
    return LZ_OK;
}

/* Rank 0's StageState bytes (every layer) to all; each rank restores the layers it owns. */
static lz_status restore_collective(lz_pipeline *p, lz_model *m, lz_state *st, int slot, uint64_t position,
                                    uint8_t *bytes, size_t len) {
    lz_status s = lz_pipeline_broadcast_bytes(&bytes, &len, p->rank);
    Lizard__StageState *stage = s == LZ_OK ? lizard__stage_state__unpack(NULL, len, bytes) : NULL;
    if (p->rank != 0)
        free(bytes);
    if (s != LZ_OK)
        return s;
    if (!stage)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a malformed StageState came from rank 0", p->rank);
    s = lz_state_io_restore(m, st, slot, position, stage->layers, stage->n_layers);
    lizard__stage_state__free_unpacked(stage, NULL);
    return s;
}

lz_status lz_pipeline_save(lz_pipeline *p, lz_model *m, lz_state *st, int slot, bool state_bf16, uint8_t ***parts,
                           size_t **lens) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    int32_t s32 = slot;
    h.flags = STEP_FLAG_SAVE | (state_bf16 ? STEP_FLAG_STATE_BF16 : 0);
    h.n_seq_ids = 1;
    h.seq_ids = &s32;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    return save_collective(p, m, st, slot, state_bf16, parts, lens);
}

lz_status lz_pipeline_restore(lz_pipeline *p, lz_model *m, lz_state *st, int slot, uint64_t position,
                              uint8_t *stage_bytes, size_t len) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    int32_t s32 = slot, pos32 = (int32_t)position;
    h.flags = STEP_FLAG_RESTORE;
    h.n_seq_ids = h.n_positions = 1;
    h.seq_ids = &s32;
    h.positions = &pos32;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    return restore_collective(p, m, st, slot, position, stage_bytes, len);
}

/* A save or restore asked for by rank 0 (the slot and position are in the header). */
lz_status lz_pipeline_serve_state(lz_pipeline *p, lz_model *m, lz_state *st, const Lizard__StepHeader *h) {
    if (h->n_seq_ids != 1 || ((h->flags & STEP_FLAG_RESTORE) && h->n_positions != 1))
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a malformed state request", p->rank);
    if (h->flags & STEP_FLAG_SAVE)
        return save_collective(p, m, st, h->seq_ids[0], (h->flags & STEP_FLAG_STATE_BF16) != 0, NULL, NULL);
    return restore_collective(p, m, st, h->seq_ids[0], (uint64_t)h->positions[0], NULL, 0);
}

/* The slots and positions of a SEEK header, on this rank. */
lz_status lz_pipeline_seek_here(lz_pipeline *p, lz_state *st, const Lizard__StepHeader *h) {
    if (h->n_seq_ids != h->n_positions)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a seek of %zu slots with %zu positions", p->rank, h->n_seq_ids,
                       h->n_positions);
    for (size_t i = 0; i < h->n_seq_ids; i++)
        if (h->seq_ids[i] < 0 || h->seq_ids[i] >= st->n_slots || h->positions[i] < 0)
            return lz_fail(LZ_ERR_INTERNAL, "rank %d: seek of slot %d to %d", p->rank, h->seq_ids[i], h->positions[i]);
    for (size_t i = 0; i < h->n_seq_ids; i++)
        st->slot_pos[h->seq_ids[i]] = h->positions[i];
    return LZ_OK;
}

lz_status lz_pipeline_seek(lz_pipeline *p, lz_state *st, int n, const int32_t *slots, const int32_t *positions) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    h.flags = STEP_FLAG_SEEK;
    h.n_seq_ids = h.n_positions = (size_t)n;
    h.seq_ids = (int32_t *)slots;
    h.positions = (int32_t *)positions;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    return lz_pipeline_seek_here(p, st, &h);
}

/* Every rank's counters to rank 0 (all: rank 0's array, NULL elsewhere). */
lz_status lz_pipeline_gather_stats(lz_pipeline *p, lz_model *m, lz_rank_stats *all) {
    lz_rank_stats mine = p->stats;
    size_t free_b = 0, total = 0;
    if (m->ops->memory_info && m->ops->memory_info(m->be, &free_b, &total) == LZ_OK) {
        mine.mem_used = total - free_b;
        mine.mem_total = total;
    }
    LZ_MPI_TRY(MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD));
    return LZ_OK;
}

lz_status lz_pipeline_stats(lz_pipeline *p, lz_model *m, lz_rank_stats *all) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    h.flags = STEP_FLAG_STATS;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    return lz_pipeline_gather_stats(p, m, all);
}
