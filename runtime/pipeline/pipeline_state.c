/* pipeline_state.c - the collectives rank 0 asks for between steps: a
 * sequence's state gathered from or scattered to the stages, slots moved to
 * a position (benchmarks), every rank's counters. */
#include <mpi.h>    // MPI_Gather, MPI_Gatherv
#include <stdlib.h> // malloc, calloc, free

#include "mpi_world.h"      // LZ_MPI_TRY
#include "pipeline_internal.h"
#include "stage_transfer.h" // lz_stage_pack_header, lz_stage_send_payloads
#include "state_io.h"       // lz_state_io_save, lz_state_io_restore
#include "watchdog.h"       // lz_watchdog_arm

/* Every rank's StageState of `slot` on rank 0 (*out: one per rank): the
 * headers gathered, then each rank's payloads in pieces (stage_transfer.h). */
static lz_status save_collective(lz_pipeline *p, lz_model *m, lz_state *st, int slot, bool state_bf16,
                                 Lizard__StageState ***out) {
    Lizard__StageState *mine = malloc(sizeof *mine); // freed by free_unpacked, as state_io's records are
    lz_status s = mine ? lz_state_io_save(m, st, slot, state_bf16, mine)
                       : lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory", p->rank);
    if (s == LZ_OK && p->n_ranks == 1) { // the one stage is this one
        *out = calloc(1, sizeof **out);
        if (*out) {
            (*out)[0] = mine;
            return LZ_OK;
        }
        s = lz_fail(LZ_ERR_NOMEM, "session: out of memory");
    }
    uint8_t *head = NULL;
    size_t len = 0;
    if (s == LZ_OK)
        s = lz_stage_pack_header(mine, &head, &len);
    if (s != LZ_OK) {
        if (mine)
            lizard__stage_state__free_unpacked(mine, NULL);
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
        rc = MPI_Gatherv(head, n, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(head);
    if (rc != MPI_SUCCESS)
        s = lz_world_mpi_error(rc, "MPI_Gatherv(stage state headers)", __FILE__, __LINE__);
    if (s == LZ_OK && p->rank != 0)
        s = lz_stage_send_payloads(mine->layers, mine->n_layers, NULL, 0, LZ_TAG_STATE);
    if (s == LZ_OK && p->rank == 0) {
        Lizard__StageState **stages = calloc((size_t)p->n_ranks, sizeof *stages);
        s = stages ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "session: out of memory");
        if (s == LZ_OK)
            stages[0] = mine, mine = NULL;
        for (int r = 1; s == LZ_OK && r < p->n_ranks; r++) {
            s = lz_stage_unpack_header(all + displs[r], (size_t)counts[r], r, &stages[r]);
            if (s == LZ_OK)
                s = lz_stage_recv_payloads(stages[r]->layers, stages[r]->n_layers, NULL, r, LZ_TAG_STATE);
        }
        if (s == LZ_OK)
            *out = stages;
        for (int r = 0; s != LZ_OK && stages && r < p->n_ranks; r++)
            if (stages[r])
                lizard__stage_state__free_unpacked(stages[r], NULL);
        if (s != LZ_OK)
            free(stages);
    }
    if (mine)
        lizard__stage_state__free_unpacked(mine, NULL);
    free(counts), free(displs), free(all);
    return s;
}

/* The plan's rank for each record of `s` (-1: no such layer). */
static void owned_by(const lz_pipeline *p, const Lizard__StageState *s, int rank, bool *wanted) {
    for (size_t i = 0; i < s->n_layers; i++) {
        const int layer = s->layers[i]->layer;
        wanted[i] = layer >= 0 && layer < LZ_MAX_LAYERS && p->plan.layer_rank[layer] == rank;
    }
}

/* Rank 0's records of every layer (header broadcast, then each rank's own
 * layers' payloads to it); each rank restores its own layers. */
static lz_status restore_collective(lz_pipeline *p, lz_model *m, lz_state *st, int slot, uint64_t position,
                                    const Lizard__StageState *all) {
    if (p->n_ranks == 1) // every record is this rank's
        return lz_state_io_restore(m, st, slot, position, all->layers, all->n_layers);
    uint8_t *head = NULL;
    size_t len = 0;
    if (p->rank == 0)
        LZ_TRY(lz_stage_pack_header(all, &head, &len));
    lz_status s = lz_pipeline_broadcast_bytes(&head, &len, p->rank);
    Lizard__StageState *mine = NULL;
    if (s == LZ_OK && p->rank != 0)
        s = lz_stage_unpack_header(head, len, 0, &mine);
    free(head);
    if (s != LZ_OK)
        return s;
    const Lizard__StageState *records = p->rank == 0 ? all : mine;
    bool *wanted = calloc(records->n_layers ? records->n_layers : 1, sizeof(bool));
    s = wanted ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory", p->rank);
    for (int r = 1; s == LZ_OK && p->rank == 0 && r < p->n_ranks; r++) {
        owned_by(p, all, r, wanted);
        s = lz_stage_send_payloads(all->layers, all->n_layers, wanted, r, LZ_TAG_STATE);
    }
    if (s == LZ_OK && p->rank != 0) {
        owned_by(p, mine, p->rank, wanted);
        s = lz_stage_recv_payloads(mine->layers, mine->n_layers, wanted, 0, LZ_TAG_STATE);
    }
    if (s == LZ_OK)
        s = lz_state_io_restore(m, st, slot, position, records->layers, records->n_layers);
    free(wanted);
    if (mine)
        lizard__stage_state__free_unpacked(mine, NULL);
    return s;
}

/* Ends the watchdog's arm around a collective save or restore (watchdog.h). */
static lz_status disarmed(lz_status s) {
    lz_watchdog_disarm();
    return s;
}

lz_status lz_pipeline_save(lz_pipeline *p, lz_model *m, lz_state *st, int slot, bool state_bf16,
                           Lizard__StageState ***stages) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    int32_t s32 = slot;
    h.flags = STEP_FLAG_SAVE | (state_bf16 ? STEP_FLAG_STATE_BF16 : 0);
    h.n_seq_ids = 1;
    h.seq_ids = &s32;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    lz_watchdog_arm("a session save", 0, -1);
    return disarmed(save_collective(p, m, st, slot, state_bf16, stages));
}

lz_status lz_pipeline_restore(lz_pipeline *p, lz_model *m, lz_state *st, int slot, uint64_t position,
                              const Lizard__StageState *all) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    int32_t s32 = slot, pos32 = (int32_t)position;
    h.flags = STEP_FLAG_RESTORE;
    h.n_seq_ids = h.n_positions = 1;
    h.seq_ids = &s32;
    h.positions = &pos32;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    lz_watchdog_arm("a session restore", 0, -1);
    return disarmed(restore_collective(p, m, st, slot, position, all));
}

/* A save or restore asked for by rank 0 (the slot and position are in the header). */
lz_status lz_pipeline_serve_state(lz_pipeline *p, lz_model *m, lz_state *st, const Lizard__StepHeader *h) {
    if (h->n_seq_ids != 1 || ((h->flags & STEP_FLAG_RESTORE) && h->n_positions != 1))
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a malformed state request", p->rank);
    lz_watchdog_arm(h->flags & STEP_FLAG_SAVE ? "a session save" : "a session restore", 0, -1);
    if (h->flags & STEP_FLAG_SAVE)
        return disarmed(save_collective(p, m, st, h->seq_ids[0], (h->flags & STEP_FLAG_STATE_BF16) != 0, NULL));
    return disarmed(restore_collective(p, m, st, h->seq_ids[0], (uint64_t)h->positions[0], NULL));
}

lz_status lz_pipeline_reset(lz_pipeline *p, lz_model *m, lz_state *st, int slot) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    int32_t s32 = slot;
    h.flags = STEP_FLAG_RESET;
    h.n_seq_ids = 1;
    h.seq_ids = &s32;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    return lz_pipeline_reset_here(p, m, st, &h);
}

/* The slot of a RESET header, on this rank: its layers' state zeroed, its position 0. */
lz_status lz_pipeline_reset_here(lz_pipeline *p, lz_model *m, lz_state *st, const Lizard__StepHeader *h) {
    if (h->n_seq_ids != 1 || h->seq_ids[0] < 0 || h->seq_ids[0] >= st->n_slots)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a malformed reset request", p->rank);
    return lz_state_reset_slot(st, m, h->seq_ids[0]);
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
    if (p->n_ranks == 1) {
        *all = mine;
        return LZ_OK;
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
