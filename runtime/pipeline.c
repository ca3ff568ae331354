/* pipeline.c - plan agreement, step broadcast, and the flow of activations. */
#include <limits.h> // INT_MAX
#include <mpi.h>    // MPI_Bcast, MPI_Isend, MPI_Recv
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free, getenv
#include <string.h> // memset, strcmp

#include "lizard.pb-c.h" // Lizard__StepHeader
#include "mpi_world.h"   // LZ_MPI_TRY
#include "state_io.h"    // lz_state_io_save, lz_state_io_restore
#include "step_header_check.h" // lz_step_header_check
#include "pipeline.h"
#include "clock.h" // lz_now_seconds

/* LIZARD_TRACE=1: one stderr line per pipeline event with a host-wide clock,
 * to see on a timeline whether the stages overlap. */
static void trace(const lz_pipeline *p, const char *event, uint64_t step) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("LIZARD_TRACE");
        on = v && *v && strcmp(v, "0") != 0;
    }
    if (on)
        fprintf(stderr, "trace rank %d %.6f %-14s step %llu\n", p->rank, lz_now_seconds(), event,
                (unsigned long long)step);
}

enum { TAG_ACTIVATIONS = 11, TAG_LOGITS = 12, TAG_IDS = 13, TAG_HEADER = 14 };
enum { STEP_FLAG_STOP = 1, STEP_FLAG_SAVE = 2, STEP_FLAG_RESTORE = 4, STEP_FLAG_GREEDY = 8, STEP_FLAG_SEEK = 16,
       STEP_FLAG_STATS = 32, STEP_FLAG_REPLAN = 64, STEP_FLAG_STATE_BF16 = 128 };

/* Bytes from rank 0 to all: the length, then the bytes. */
static lz_status broadcast_bytes(uint8_t **buf, size_t *len, int rank) {
    uint64_t n = *len;
    LZ_MPI_TRY(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    if (rank != 0) {
        if (n > ((uint64_t)1 << 31))
            return lz_fail(LZ_ERR_INTERNAL, "rank %d: a broadcast of %llu bytes is not plausible", rank,
                           (unsigned long long)n);
        *buf = malloc(n ? n : 1);
        if (!*buf)
            return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory for a %llu-byte message", rank, (unsigned long long)n);
        *len = n;
    }
    LZ_MPI_TRY(MPI_Bcast(*buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD));
    return LZ_OK;
}

lz_status lz_pipeline_plan(lz_pipeline *p, const lz_config *cfg, const char *placement, const char *plan_file,
                           uint64_t context, int batch, uint64_t free_bytes, lz_stage_parts *parts) {
    const lz_world *w = lz_world_get();
    memset(p, 0, sizeof *p);
    p->rank = w->rank;
    p->n_ranks = w->size;
    uint64_t *free_all = malloc(sizeof(uint64_t) * (size_t)w->size);
    if (!free_all)
        return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory", w->rank);
    lz_status s = LZ_OK;
    int rc = MPI_Allgather(&free_bytes, 1, MPI_UINT64_T, free_all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        s = lz_world_mpi_error(rc, "MPI_Allgather(free bytes)", __FILE__, __LINE__);
    uint8_t *msg = NULL;
    size_t len = 0;
    if (s == LZ_OK && p->rank == 0) { // rank 0 plans, then everyone receives the same message
        lz_plan_costs costs;
        s = lz_plan_costs_from_config(cfg, context, batch, &costs);
        if (s == LZ_OK && plan_file) {
            s = lz_plan_load_text(plan_file, cfg->num_hidden_layers, &p->plan);
            if (s == LZ_OK && p->plan.n_ranks != w->size)
                s = lz_fail(LZ_ERR_INPUT, "--plan %s: the plan has %d ranks, the job %d", plan_file, p->plan.n_ranks,
                            w->size);
            if (s == LZ_OK)
                lz_plan_account(&p->plan, &costs, free_all);
        } else if (s == LZ_OK) {
            s = lz_plan_make(placement ? placement : "balanced", &costs, w->size, free_all, &p->plan);
        }
        if (s == LZ_OK)
            s = lz_plan_validate(&p->plan);
        if (s == LZ_OK)
            s = lz_plan_pack(&p->plan, &msg, &len);
    }
    free(free_all);
    if (s != LZ_OK)
        return s; // rank 0 ends the job (MPI_Abort) before anyone waits on the broadcast
    s = broadcast_bytes(&msg, &len, p->rank);
    if (s == LZ_OK && p->rank != 0)
        s = lz_plan_unpack(msg, len, &p->plan);
    free(msg);
    if (s != LZ_OK)
        return s;
    memset(parts, 0, sizeof *parts);
    for (int i = 0; i < cfg->num_hidden_layers; i++)
        parts->layer[i] = p->plan.layer_rank[i] == p->rank;
    parts->embed = p->plan.embed_rank == p->rank;
    parts->head = p->plan.head_rank == p->rank;
    lz_plan_visit_order(&p->plan, p->visits, LZ_MAX_LAYERS + 2, &p->n_visits);
    // rank 0 never needs activations back within a step when its visits are a prefix of the order
    bool rank0_done = false;
    p->overlap_ok = p->plan.head_rank != 0;
    for (int v = 0; v < p->n_visits; v++) {
        if (p->visits[v].rank != 0)
            rank0_done = true;
        else if (rank0_done)
            p->overlap_ok = false;
    }
    return LZ_OK;
}

static lz_status grow_xfer(lz_pipeline *p, size_t floats) {
    if (floats <= p->xfer_cap)
        return LZ_OK;
    free(p->xfer);
    p->xfer = malloc(sizeof(float) * floats);
    p->xfer_cap = p->xfer ? floats : 0;
    return p->xfer ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory for %zu activations", p->rank, floats);
}

lz_status lz_pipeline_connect(lz_pipeline *p, const lz_ops *ops, lz_backend *be) {
    if (!ops->p2p_init)
        return LZ_OK; // activations go through host memory and MPI
    uint8_t id[256];
    size_t len = sizeof id;
    if (p->rank == 0)
        LZ_TRY(ops->p2p_id(be, id, &len));
    uint64_t n = len;
    LZ_MPI_TRY(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    if (n > sizeof id)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a device communicator id of %llu bytes", p->rank,
                       (unsigned long long)n);
    LZ_MPI_TRY(MPI_Bcast(id, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD));
    LZ_TRY(ops->p2p_init(be, id, (size_t)n, p->rank, p->n_ranks));
    p->device_p2p = true;
    return LZ_OK;
}

/* Activations between stages: device to device where the backend can (NCCL),
 * else through host memory and MPI (fp32, lossless for bf16). */
static lz_status send_x(lz_pipeline *p, lz_model *m, lz_workspace *ws, int n_tokens, int to, lz_inflight *async) {
    const size_t n = (size_t)n_tokens * m->cfg.hidden_size;
    p->stats.bytes_activations += n * (p->device_p2p ? m->ops->act_size : sizeof(float));
    if (p->device_p2p) // stream-ordered: the next step's kernels run after the send
        return m->ops->p2p_send(m->be, ws->x, n * m->ops->act_size, to);
    if (async) { // a copy of its own, sent while rank 0 goes on to the next micro-batch
        async->buf = malloc(sizeof(float) * n);
        if (!async->buf)
            return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory for %zu activations", p->rank, n);
        LZ_TRY(m->ops->act_to_host(m->be, async->buf, ws->x, n));
        LZ_MPI_TRY(MPI_Isend(async->buf, (int)n, MPI_FLOAT, to, TAG_ACTIVATIONS, MPI_COMM_WORLD, &async->send));
        return LZ_OK;
    }
    LZ_TRY(grow_xfer(p, n));
    LZ_TRY(m->ops->act_to_host(m->be, p->xfer, ws->x, n));
    LZ_MPI_TRY(MPI_Send(p->xfer, (int)n, MPI_FLOAT, to, TAG_ACTIVATIONS, MPI_COMM_WORLD));
    return LZ_OK;
}

static lz_status recv_x(lz_pipeline *p, lz_model *m, lz_workspace *ws, int n_tokens, int from) {
    const size_t n = (size_t)n_tokens * m->cfg.hidden_size;
    if (p->device_p2p)
        return m->ops->p2p_recv(m->be, ws->x, n * m->ops->act_size, from);
    LZ_TRY(grow_xfer(p, n));
    LZ_MPI_TRY(MPI_Recv(p->xfer, (int)n, MPI_FLOAT, from, TAG_ACTIVATIONS, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return m->ops->act_from_host(m->be, ws->x, p->xfer, n);
}

/* The last stage's result: logits rows, or their argmax ids (greedy), to rank 0. */
static lz_status run_head(lz_pipeline *p, lz_model *m, lz_workspace *ws, const int32_t *rows, int n_rows, bool greedy,
                          float *logits, int32_t *out_ids) {
    const int vocab = m->cfg.vocab_size;
    if (greedy) {
        int32_t *dst = out_ids;
        if (p->rank != 0) {
            if (n_rows > p->ids_cap) {
                free(p->ids_xfer);
                p->ids_xfer = malloc(sizeof(int32_t) * (size_t)n_rows);
                p->ids_cap = p->ids_xfer ? n_rows : 0;
                if (!p->ids_xfer)
                    return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory for %d ids", p->rank, n_rows);
            }
            dst = p->ids_xfer;
        }
        LZ_TRY(lz_step_head(m, ws, rows, n_rows, NULL, dst));
        if (p->rank != 0 && n_rows > 0) {
            p->stats.bytes_results += sizeof(int32_t) * (size_t)n_rows;
            LZ_MPI_TRY(MPI_Send(dst, n_rows, MPI_INT32_T, 0, TAG_IDS, MPI_COMM_WORLD));
        }
        return LZ_OK;
    }
    float *out = p->rank == 0 ? logits : NULL;
    if (!out) {
        LZ_TRY(grow_xfer(p, (size_t)n_rows * vocab));
        out = p->xfer;
    }
    LZ_TRY(lz_step_head(m, ws, rows, n_rows, out, NULL));
    if (p->rank != 0 && n_rows > 0) {
        p->stats.bytes_results += sizeof(float) * (size_t)n_rows * vocab;
        LZ_MPI_TRY(MPI_Send(out, n_rows * vocab, MPI_FLOAT, 0, TAG_LOGITS, MPI_COMM_WORLD));
    }
    return LZ_OK;
}

/* Rank 0: the result of a step whose last stage is another rank. */
static int recv_result(lz_pipeline *p, lz_model *m, int n_rows, bool greedy, float *logits, int32_t *out_ids) {
    if (n_rows <= 0)
        return MPI_SUCCESS;
    if (greedy)
        return MPI_Recv(out_ids, n_rows, MPI_INT32_T, p->plan.head_rank, TAG_IDS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return MPI_Recv(logits, n_rows * m->cfg.vocab_size, MPI_FLOAT, p->plan.head_rank, TAG_LOGITS, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE);
}

/* This rank's part of one step: its visits in the global order, receiving
 * from the previous visit's rank and sending to the next one's. */
static lz_status run_visits(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids,
                            const lz_batch *b, const int32_t *rows, int n_rows, bool greedy, float *logits,
                            int32_t *out_ids, lz_inflight *async) {
    for (int v = 0; v < p->n_visits; v++) {
        const lz_plan_visit *vis = &p->visits[v];
        if (vis->rank != p->rank)
            continue;
        if (vis->embed)
            LZ_TRY(lz_step_embed(m, ws, ids, b));
        else if (v > 0 && p->visits[v - 1].rank != p->rank)
            LZ_TRY(recv_x(p, m, ws, b->n_tokens, p->visits[v - 1].rank));
        if (vis->count > 0)
            LZ_TRY(lz_step_layers_replayed(m, st, ws, b, vis->first, vis->first + vis->count));
        if (vis->head)
            LZ_TRY(run_head(p, m, ws, rows, n_rows, greedy, logits, out_ids));
        else if (v + 1 < p->n_visits && p->visits[v + 1].rank != p->rank)
            LZ_TRY(send_x(p, m, ws, b->n_tokens, p->visits[v + 1].rank, async));
    }
    p->stats.steps++;
    p->stats.tokens += (uint64_t)b->n_tokens;
    if (async)
        return LZ_OK; // no wait here: the result is received by lz_pipeline_step_finish
    if (p->rank == 0 && p->plan.head_rank != 0) {
        int rc = recv_result(p, m, n_rows, greedy, logits, out_ids);
        if (rc != MPI_SUCCESS)
            return lz_world_mpi_error(rc, "MPI_Recv (the last stage's result)", __FILE__, __LINE__);
    }
    return m->ops->sync(m->be);
}

/* A step as a batch: sequence q's rows follow the previous sequence's. */
typedef struct {
    int32_t *slot, *start, *len, *pos, *token_pos;
    lz_batch b;
} step_arrays;

static lz_status step_from_header(const Lizard__StepHeader *h, step_arrays *a) {
    const int S = (int)h->n_seq_ids;
    if (h->n_positions != (size_t)S || h->n_token_counts != (size_t)S)
        return lz_fail(LZ_ERR_INTERNAL, "StepHeader: %d sequences but %zu positions, %zu counts", S, h->n_positions,
                       h->n_token_counts);
    int T = (int)h->n_token_ids;
    if (T == 0) // the ids stayed on rank 0 (lz_step_header_check bounded the sum)
        for (int q = 0; q < S; q++)
            T += h->token_counts[q];
    a->slot = malloc(sizeof(int32_t) * (size_t)(4 * S + T + 1));
    if (!a->slot)
        return lz_fail(LZ_ERR_NOMEM, "StepHeader: out of memory");
    a->start = a->slot + S, a->len = a->start + S, a->pos = a->len + S, a->token_pos = a->pos + S;
    int t = 0;
    for (int q = 0; q < S; q++) {
        a->slot[q] = h->seq_ids[q];
        a->start[q] = t;
        a->len[q] = h->token_counts[q];
        a->pos[q] = h->positions[q];
        for (int i = 0; i < a->len[q] && t < T; i++)
            a->token_pos[t++] = a->pos[q] + i;
    }
    if (t != T)
        return lz_fail(LZ_ERR_INTERNAL, "StepHeader: token counts add up to %d, %d tokens sent", t, T);
    a->b = (lz_batch){S, T, a->slot, a->start, a->len, a->pos, a->token_pos};
    return LZ_OK;
}

static lz_status run_step(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const Lizard__StepHeader *h,
                          float *logits, int32_t *out_ids, lz_inflight *async) {
    step_arrays a = {0};
    lz_status s = lz_step_header_check(h, st->n_slots, m->cfg.vocab_size, ws->max_tokens); // before any array is built
    if (s == LZ_OK && m->parts.embed && h->n_token_ids == 0)
        s = lz_fail(LZ_ERR_INTERNAL, "rank %d embeds the tokens but the StepHeader carries none", p->rank);
    if (s == LZ_OK)
        s = step_from_header(h, &a);
    const int32_t *ids = h->token_ids, *rows = h->logit_rows;
    const int n_rows = (int)h->n_logit_rows;
    trace(p, "header", h->step_id);
    if (s == LZ_OK)
        s = lz_step_begin(m, st, ws, ids, &a.b, rows, n_rows);
    trace(p, "begun", h->step_id);
    if (s == LZ_OK)
        s = run_visits(p, m, st, ws, ids, &a.b, rows, n_rows, (h->flags & STEP_FLAG_GREEDY) != 0, logits, out_ids,
                       async);
    trace(p, "visited", h->step_id);
    if (s == LZ_OK)
        lz_step_end(st, &a.b);
    free(a.slot);
    return s;
}

/* Rank 0: waits for the oldest header sends (all of them when `all`) and frees them. */
static lz_status retire_headers(lz_pipeline *p, bool all) {
    while (p->n_headers > 0 && (all || p->n_headers == LZ_MAX_INFLIGHT)) {
        int rc = MPI_Waitall(p->n_ranks - 1, p->headers[0].reqs, MPI_STATUSES_IGNORE);
        free(p->headers[0].buf);
        free(p->headers[0].reqs);
        p->n_headers--;
        memmove(&p->headers[0], &p->headers[1], sizeof p->headers[0] * (size_t)p->n_headers);
        if (rc != MPI_SUCCESS)
            return lz_world_mpi_error(rc, "MPI_Waitall(step header sends)", __FILE__, __LINE__);
    }
    return LZ_OK;
}

/* The header to every rank, sent without waiting for the receivers (a
 * broadcast may hold rank 0 until a stage still busy with the previous step
 * joins it, and then no two stages would ever work at once). A step's token
 * ids go only where they are embedded: when that is rank 0 they stay here. */
static lz_status broadcast_header(lz_pipeline *p, Lizard__StepHeader *h) {
    const size_t n_ids = h->n_token_ids;
    if (p->plan.embed_rank == 0)
        h->n_token_ids = 0;
    const size_t len = lizard__step_header__get_packed_size(h);
    uint8_t *buf = malloc(len ? len : 1);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)(p->n_ranks > 1 ? p->n_ranks - 1 : 1));
    if (buf)
        lizard__step_header__pack(h, buf);
    h->n_token_ids = n_ids;
    if (!buf || !reqs || len > (size_t)INT_MAX) {
        free(buf), free(reqs);
        return lz_fail(LZ_ERR_NOMEM, "StepHeader: out of memory for %zu bytes", len);
    }
    LZ_TRY(retire_headers(p, false));
    for (int r = 1; r < p->n_ranks; r++) {
        int rc = MPI_Isend(buf, (int)len, MPI_BYTE, r, TAG_HEADER, MPI_COMM_WORLD, &reqs[r - 1]);
        if (rc != MPI_SUCCESS) {
            for (int q = 1; q < r; q++)
                MPI_Wait(&reqs[q - 1], MPI_STATUS_IGNORE);
            free(buf), free(reqs);
            return lz_world_mpi_error(rc, "MPI_Isend(step header)", __FILE__, __LINE__);
        }
    }
    p->headers[p->n_headers].buf = buf;
    p->headers[p->n_headers].reqs = reqs;
    p->n_headers++;
    return LZ_OK;
}

/* Other ranks: the next header's bytes from rank 0. */
static lz_status receive_header(lz_pipeline *p, uint8_t **buf, size_t *len) {
    MPI_Status st;
    int n = 0;
    LZ_MPI_TRY(MPI_Probe(0, TAG_HEADER, MPI_COMM_WORLD, &st));
    LZ_MPI_TRY(MPI_Get_count(&st, MPI_BYTE, &n));
    if (n < 0)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a step header of unknown size", p->rank);
    *buf = malloc(n ? (size_t)n : 1);
    if (!*buf)
        return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory for a %d-byte header", p->rank, n);
    *len = (size_t)n;
    LZ_MPI_TRY(MPI_Recv(*buf, n, MPI_BYTE, 0, TAG_HEADER, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return LZ_OK;
}

/* The header of a step (pointing into the caller's arrays). */
static lz_status make_header(lz_pipeline *p, const int32_t *ids, const lz_batch *batch, const int32_t *logit_rows,
                             int n_logit_rows, Lizard__StepHeader *h) {
    lizard__step_header__init(h);
    h->step_id = ++p->step_id;
    h->n_seq_ids = h->n_positions = h->n_token_counts = (size_t)batch->n_seqs;
    h->seq_ids = (int32_t *)batch->slot;
    h->positions = (int32_t *)batch->pos;
    h->token_counts = (int32_t *)batch->len;
    h->n_token_ids = (size_t)batch->n_tokens;
    h->token_ids = (int32_t *)ids;
    h->n_logit_rows = (size_t)n_logit_rows;
    h->logit_rows = (int32_t *)logit_rows;
    h->phase = batch->n_tokens == batch->n_seqs ? LIZARD__STEP_HEADER__PHASE__DECODE
                                                : LIZARD__STEP_HEADER__PHASE__PREFILL;
    for (int q = 0; q + 1 < batch->n_seqs; q++) // the receivers rebuild starts as consecutive runs
        if (batch->start[q + 1] != batch->start[q] + batch->len[q])
            return lz_fail(LZ_ERR_INTERNAL, "pipeline: batch rows are not consecutive");
    return LZ_OK;
}

lz_status lz_pipeline_step(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids,
                           const lz_batch *batch, const int32_t *logit_rows, int n_logit_rows, float *logits,
                           int32_t *out_ids) {
    if (p->n_inflight > 0)
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: a step while %d started steps are unfinished", p->n_inflight);
    Lizard__StepHeader h;
    LZ_TRY(make_header(p, ids, batch, logit_rows, n_logit_rows, &h));
    h.flags = out_ids ? STEP_FLAG_GREEDY : 0;
    LZ_TRY(broadcast_header(p, &h));
    return run_step(p, m, st, ws, &h, logits, out_ids, NULL);
}

lz_status lz_pipeline_step_start(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids,
                                 const lz_batch *batch, const int32_t *logit_rows, int n_logit_rows, bool greedy) {
    if (!p->overlap_ok || p->n_inflight == LZ_MAX_INFLIGHT)
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: cannot start another overlapping step");
    lz_inflight *f = &p->inflight[(p->inflight_head + p->n_inflight) % LZ_MAX_INFLIGHT];
    *f = (lz_inflight){MPI_REQUEST_NULL, NULL, n_logit_rows, greedy};
    Lizard__StepHeader h;
    LZ_TRY(make_header(p, ids, batch, logit_rows, n_logit_rows, &h));
    h.flags = greedy ? STEP_FLAG_GREEDY : 0;
    LZ_TRY(broadcast_header(p, &h));
    p->n_inflight++;
    return run_step(p, m, st, ws, &h, NULL, NULL, f);
}

lz_status lz_pipeline_step_finish(lz_pipeline *p, lz_model *m, float *logits, int32_t *out_ids) {
    if (p->n_inflight == 0)
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: no started step to finish");
    lz_inflight *f = &p->inflight[p->inflight_head];
    if (f->greedy != (out_ids != NULL))
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: a step started %s is finished %s", f->greedy ? "greedy" : "with logits",
                       out_ids ? "greedy" : "with logits");
    p->inflight_head = (p->inflight_head + 1) % LZ_MAX_INFLIGHT;
    p->n_inflight--;
    // results of one head rank arrive in the order the steps started (MPI keeps order per sender and tag)
    trace(p, "finish", 0);
    int rc = recv_result(p, m, f->n_rows, f->greedy, logits, out_ids);
    trace(p, "finished", 0);
    if (rc == MPI_SUCCESS && f->send != MPI_REQUEST_NULL)
        rc = MPI_Wait(&f->send, MPI_STATUS_IGNORE);
    free(f->buf);
    f->buf = NULL;
    if (rc != MPI_SUCCESS)
        return lz_world_mpi_error(rc, "MPI_Recv/Wait (a started step)", __FILE__, __LINE__);
    return LZ_OK;
}

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
    lz_status s = broadcast_bytes(&bytes, &len, p->rank);
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
    LZ_TRY(broadcast_header(p, &h));
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
    LZ_TRY(broadcast_header(p, &h));
    return restore_collective(p, m, st, slot, position, stage_bytes, len);
}

/* A save or restore asked for by rank 0 (the slot and position are in the header). */
static lz_status serve_state(lz_pipeline *p, lz_model *m, lz_state *st, const Lizard__StepHeader *h) {
    if (h->n_seq_ids != 1 || ((h->flags & STEP_FLAG_RESTORE) && h->n_positions != 1))
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a malformed state request", p->rank);
    if (h->flags & STEP_FLAG_SAVE)
        return save_collective(p, m, st, h->seq_ids[0], (h->flags & STEP_FLAG_STATE_BF16) != 0, NULL, NULL);
    return restore_collective(p, m, st, h->seq_ids[0], (uint64_t)h->positions[0], NULL, 0);
}

/* The slots and positions of a SEEK header, on this rank. */
static lz_status seek_slots(lz_pipeline *p, lz_state *st, const Lizard__StepHeader *h) {
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
    LZ_TRY(broadcast_header(p, &h));
    return seek_slots(p, st, &h);
}

/* Every rank's counters to rank 0 (all: rank 0's array, NULL elsewhere). */
static lz_status gather_stats(lz_pipeline *p, lz_model *m, lz_rank_stats *all) {
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
    LZ_TRY(broadcast_header(p, &h));
    return gather_stats(p, m, all);
}

lz_status lz_pipeline_serve(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws) {
    for (;;) {
        uint8_t *buf = NULL;
        size_t len = 0;
        LZ_TRY(receive_header(p, &buf, &len));
        Lizard__StepHeader *h = lizard__step_header__unpack(NULL, len, buf);
        free(buf);
        if (!h)
            return lz_fail(LZ_ERR_INTERNAL, "rank %d: a malformed StepHeader came from rank 0", p->rank);
        const bool stop = (h->flags & STEP_FLAG_STOP) != 0;
        p->replan = (h->flags & STEP_FLAG_REPLAN) != 0;
        if (p->replan) {
            lizard__step_header__free_unpacked(h, NULL);
            return LZ_OK; // the engine plans again and comes back
        }
        lz_status s = stop                                               ? LZ_OK
                      : h->flags & (STEP_FLAG_SAVE | STEP_FLAG_RESTORE) ? serve_state(p, m, st, h)
                      : h->flags & STEP_FLAG_SEEK                       ? seek_slots(p, st, h)
                      : h->flags & STEP_FLAG_STATS                      ? gather_stats(p, m, NULL)
                                                                        : run_step(p, m, st, ws, h, NULL, NULL, NULL);
        lizard__step_header__free_unpacked(h, NULL);
        if (s != LZ_OK || stop)
            return s;
    }
}

lz_status lz_pipeline_request_replan(lz_pipeline *p) {
    if (p->n_inflight > 0)
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: a new plan while %d started steps are unfinished", p->n_inflight);
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    h.flags = STEP_FLAG_REPLAN;
    LZ_TRY(broadcast_header(p, &h));
    return retire_headers(p, true);
}

lz_status lz_pipeline_close(lz_pipeline *p) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    h.flags = STEP_FLAG_STOP;
    LZ_TRY(broadcast_header(p, &h));
    return retire_headers(p, true);
}

void lz_pipeline_free(lz_pipeline *p) {
    for (int i = 0; i < LZ_MAX_INFLIGHT; i++) { // steps abandoned by an error
        if (p->inflight[i].send != MPI_REQUEST_NULL && p->inflight[i].buf)
            MPI_Cancel(&p->inflight[i].send);
        free(p->inflight[i].buf);
        p->inflight[i].buf = NULL;
    }
    for (int i = 0; i < p->n_headers; i++) { // sends abandoned by an error: the job is ending
        for (int r = 0; r + 1 < p->n_ranks; r++)
            if (p->headers[i].reqs[r] != MPI_REQUEST_NULL)
                MPI_Cancel(&p->headers[i].reqs[r]);
        free(p->headers[i].buf);
        free(p->headers[i].reqs);
    }
    p->n_headers = 0;
    free(p->xfer);
    free(p->ids_xfer);
    p->xfer = NULL;
    p->ids_xfer = NULL;
    p->xfer_cap = 0;
    p->ids_cap = 0;
}
