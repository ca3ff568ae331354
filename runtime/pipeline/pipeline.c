/* pipeline.c - plan agreement, the steps (headers, visits, activations, results), the serve loop. */
#include <mpi.h>    // MPI_Send, MPI_Recv
#include <stdio.h>  // fopen, fread
#include <stdlib.h> // malloc, free
#include <string.h> // memset

#include "handoff.h"           // lz_handoff_send, lz_handoff_recv
#include "hash.h"              // lz_fnv1a
#include "heartbeat.h"         // lz_heartbeat_host
#include "mpi_world.h"         // LZ_MPI_TRY, lz_world_gather_u64
#include "pipeline_internal.h" // lz_pipeline_send_header, STEP_FLAG_*
#include "step_header_check.h" // lz_step_header_check
#include "watchdog.h"          // lz_watchdog_arm

/* What every rank must agree on before they share a model: its shape, the
 * kind each layer runs as, and the Lizard block (field by field: no padding). */
static uint64_t config_identity(const lz_config *c) {
    const int64_t ints[] = {c->vocab_size, c->hidden_size, c->intermediate_size, c->num_hidden_layers,
                            c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->tie_word_embeddings,
                            c->attention_bias, c->mlp_bias, c->has_lizard, c->lizard.feature_dim,
                            c->lizard.feature_map, c->lizard.window_size, c->lizard.num_meta_tokens,
                            c->lizard.gla_normalize, c->rope.type};
    const double reals[] = {c->rms_norm_eps, c->rope.theta, c->rope.factor};
    uint64_t h = lz_fnv1a(LZ_FNV1A_INIT, ints, sizeof ints);
    h = lz_fnv1a(h, reals, sizeof reals);
    for (int i = 0; i < c->num_hidden_layers && i < LZ_MAX_LAYERS; i++)
        h = lz_fnv1a(h, &c->softmax_layer[i], sizeof(bool));
    return h;
}

/* The bytes of this rank's executable: ranks of different lizard builds (an
 * old copy on one node) would disagree on messages; 0 where unreadable. */
static uint64_t build_identity(void) {
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f)
        return 0;
    static uint8_t buf[1 << 16];
    uint64_t h = LZ_FNV1A_INIT;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = lz_fnv1a(h, buf, n);
    fclose(f);
    return h;
}

/* A world of one: every layer, the embedding and the head on rank 0; nothing
 * to agree on and nothing to fit (one process loads what it is given). */
static void plan_whole(const lz_config *cfg, uint64_t context, int batch, lz_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->n_ranks = 1;
    plan->n_layers = cfg->num_hidden_layers;
    snprintf(plan->placement, sizeof plan->placement, "whole");
    plan->context = context;
    plan->batch = batch;
}

/* The plan's consequences on this rank: what it loads, its visits, whether steps may overlap. */
static void take_plan(lz_pipeline *p, int n_layers, lz_stage_parts *parts) {
    memset(parts, 0, sizeof *parts);
    for (int i = 0; i < n_layers; i++)
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
}

lz_status lz_pipeline_plan(lz_pipeline *p, const lz_config *cfg, const char *placement, const char *plan_file,
                           uint64_t context, int batch, uint64_t free_bytes, lz_stage_parts *parts) {
    const lz_world *w = lz_world_get();
    memset(p, 0, sizeof *p);
    p->rank = w->rank;
    p->n_ranks = w->size;
    if (w->size == 1) {
        plan_whole(cfg, context, batch, &p->plan);
        take_plan(p, cfg->num_hidden_layers, parts);
        return LZ_OK;
    }
    LZ_TRY(lz_watchdog_start());
    // every rank's free bytes, build and model identity (a rank that runs another build or read another
    // config.json is named, not trusted)
    static uint64_t build = 0;
    if (build == 0)
        build = build_identity();
    uint64_t mine[3] = {free_bytes, build, config_identity(cfg)};
    uint64_t *gathered = malloc(sizeof(uint64_t) * 3 * (size_t)w->size);
    uint64_t *free_all = malloc(sizeof(uint64_t) * (size_t)w->size);
    if (!free_all || !gathered) {
        free(free_all), free(gathered);
        return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory", w->rank);
    }
    lz_status s = lz_world_gather_u64(mine, 3, gathered);
    for (int r = 0; s == LZ_OK && r < w->size; r++) {
        free_all[r] = gathered[3 * r];
        if (gathered[3 * r + 1] != gathered[1] && w->rank == 0)
            s = lz_fail(LZ_ERR_INPUT, "rank %d (%s) runs a different lizard build than rank 0 (%s): every rank must "
                        "run the same executable", r, lz_heartbeat_host(r), w->host);
        else if (gathered[3 * r + 2] != gathered[2] && w->rank == 0)
            s = lz_fail(LZ_ERR_INPUT, "rank %d loaded a different model than rank 0 (config.json or --softmax-layers "
                        "differ): every rank must see the same model folder", r);
    }
    free(gathered);
    uint8_t *msg = NULL;
    size_t len = 0;
    if (s == LZ_OK && p->rank == 0) { // rank 0 plans, then everyone receives the same message
        lz_plan_costs costs;
        s = lz_plan_costs_from_config(cfg, context, batch, &costs);
        if (s == LZ_OK)
            s = lz_plan_choose(&costs, placement, plan_file, w->size, free_all, &p->plan);
        if (s == LZ_OK)
            s = lz_plan_pack(&p->plan, &msg, &len);
    }
    free(free_all);
    if (s != LZ_OK)
        return s; // rank 0 ends the job (MPI_Abort) before anyone waits on the broadcast
    s = lz_pipeline_broadcast_bytes(&msg, &len, p->rank);
    if (s == LZ_OK && p->rank != 0)
        s = lz_plan_unpack(msg, len, &p->plan);
    free(msg);
    if (s != LZ_OK)
        return s;
    take_plan(p, cfg->num_hidden_layers, parts);
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
    if (!ops->p2p_init || p->n_ranks < 2)
        return LZ_OK; // activations go through host memory and MPI, or go nowhere
    uint8_t id[256], *msg = id; // the other ranks receive a malloc'd copy (p2p_init checks its length)
    size_t len = sizeof id;
    if (p->rank == 0)
        LZ_TRY(ops->p2p_id(be, id, &len));
    lz_status s = lz_pipeline_broadcast_bytes(&msg, &len, p->rank);
    if (s == LZ_OK)
        s = ops->p2p_init(be, msg, len, p->rank, p->n_ranks);
    if (msg != id)
        free(msg);
    p->device_p2p = s == LZ_OK;
    return s;
}

/* The last stage's result: logits rows, or their ids (the argmax, or sampled
 * with sample[row] when given), to rank 0. */
static lz_status run_head(lz_pipeline *p, lz_model *m, lz_workspace *ws, int n_rows, bool ids_back,
                          const lz_sample_row *sample, float *logits, int32_t *out_ids) {
    const int vocab = m->cfg.vocab_size;
    if (ids_back) {
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
        LZ_TRY(lz_step_result(m, ws, n_rows, (lz_head_out){.ids = dst, .sample = sample}));
        if (p->rank != 0 && n_rows > 0) {
            p->stats.bytes_results += sizeof(int32_t) * (size_t)n_rows;
            LZ_MPI_TRY(MPI_Send(dst, n_rows, MPI_INT32_T, 0, LZ_TAG_IDS, MPI_COMM_WORLD));
        }
        return LZ_OK;
    }
    float *out = p->rank == 0 ? logits : NULL;
    if (!out) {
        LZ_TRY(grow_xfer(p, (size_t)n_rows * vocab));
        out = p->xfer;
    }
    LZ_TRY(lz_step_result(m, ws, n_rows, (lz_head_out){.logits = out}));
    if (p->rank != 0 && n_rows > 0) {
        p->stats.bytes_results += sizeof(float) * (size_t)n_rows * vocab;
        LZ_MPI_TRY(MPI_Send(out, n_rows * vocab, MPI_FLOAT, 0, LZ_TAG_LOGITS, MPI_COMM_WORLD));
    }
    return LZ_OK;
}

/* Rank 0: the result of a step whose last stage is another rank. */
static int recv_result(lz_pipeline *p, lz_model *m, int n_rows, bool ids_back, float *logits, int32_t *out_ids) {
    if (n_rows <= 0)
        return MPI_SUCCESS;
    if (ids_back)
        return MPI_Recv(out_ids, n_rows, MPI_INT32_T, p->plan.head_rank, LZ_TAG_IDS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return MPI_Recv(logits, n_rows * m->cfg.vocab_size, MPI_FLOAT, p->plan.head_rank, LZ_TAG_LOGITS, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE);
}

/* A step's arguments, for each of this rank's visits. */
typedef struct {
    lz_pipeline *p;
    lz_model *m;
    lz_state *st;
    lz_workspace *ws;
    const int32_t *ids, *rows;
    const lz_batch *b;
    int n_rows;
    bool ids_back;
    const lz_sample_row *sample;
    float *logits;
    int32_t *out_ids;
} step_visit;

static lz_status run_visit(void *ctx, const lz_plan_visit *vis) {
    step_visit *a = ctx;
    const lz_step_part part = {vis->embed, vis->first, vis->first + vis->count, vis->head};
    LZ_TRY(lz_step_part_run(a->m, a->st, a->ws, a->ids, a->b, &part, a->rows, a->n_rows));
    return vis->head ? run_head(a->p, a->m, a->ws, a->n_rows, a->ids_back, a->sample, a->logits, a->out_ids) : LZ_OK;
}

/* This rank's part of one step: its visits in the global order (the same
 * walk as distillation's teacher), ws->x handed between ranks; with async
 * (rank 0's overlapped steps through host memory) its send does not wait. */
static lz_status run_visits(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids,
                            const lz_batch *b, const int32_t *rows, int n_rows, bool ids_back,
                            const lz_sample_row *sample, float *logits, int32_t *out_ids, lz_inflight *async) {
    const size_t n = (size_t)b->n_tokens * m->cfg.hidden_size;
    LZ_TRY(grow_xfer(p, p->device_p2p ? 0 : n)); // (run_head may grow it again: the head's visit is the last)
    const lz_handoff h = {m->ops, m->be, false, p->device_p2p, p->xfer, async ? &async->send : NULL,
                          async ? &async->buf : NULL, &p->stats.bytes_activations};
    step_visit a = {p, m, st, ws, ids, rows, b, n_rows, ids_back, sample, logits, out_ids};
    LZ_TRY(lz_handoff_walk(p->visits, p->n_visits, p->rank, &h, ws->x, n, p->step_id, run_visit, &a));
    p->stats.steps++;
    p->stats.tokens += (uint64_t)b->n_tokens;
    if (async)
        return LZ_OK; // no wait here: the result is received by lz_pipeline_step_finish
    if (p->rank == 0 && p->plan.head_rank != 0) {
        lz_watchdog_arm("for the result from", p->step_id, p->plan.head_rank);
        int rc = recv_result(p, m, n_rows, ids_back, logits, out_ids);
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

/* One step on this rank. own: rank 0's batch, which the header was made from
 * (lz_step_begin checks it with the user's words); the other ranks check the
 * header that came over the wire and rebuild the batch from it. */
static lz_status run_step(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const Lizard__StepHeader *h,
                          const lz_batch *own, float *logits, int32_t *out_ids, lz_inflight *async) {
    step_arrays a = {0};
    lz_sample_row *sample = NULL;
    lz_status s = LZ_OK;
    if (!own) {
        s = lz_step_header_check(h, st->n_slots, m->cfg.vocab_size, ws->max_tokens); // before any array is built
        if (s == LZ_OK && m->parts.embed && h->n_token_ids == 0)
            s = lz_fail(LZ_ERR_INTERNAL, "rank %d embeds the tokens but the StepHeader carries none", p->rank);
        if (s == LZ_OK)
            s = step_from_header(h, &a);
    }
    const lz_batch *b = own ? own : &a.b;
    if (s == LZ_OK && m->parts.head)
        s = lz_pipeline_sample_rows(h, &sample);
    const int32_t *ids = h->token_ids, *rows = h->logit_rows;
    const int n_rows = (int)h->n_logit_rows;
    lz_pipeline_trace(p, "header", h->step_id);
    p->step_id = h->step_id; // the other ranks learn it here (rank 0 numbers the steps)
    lz_watchdog_arm("a step", h->step_id, -1);
    if (s == LZ_OK)
        s = lz_step_begin(m, st, ws, ids, b, rows, n_rows);
    lz_pipeline_trace(p, "begun", h->step_id);
    if (s == LZ_OK)
        s = run_visits(p, m, st, ws, ids, b, rows, n_rows, (h->flags & (STEP_FLAG_GREEDY | STEP_FLAG_SAMPLE)) != 0,
                       sample, logits, out_ids, async);
    lz_pipeline_trace(p, "visited", h->step_id);
    if (s == LZ_OK)
        lz_step_end(st, b);
    lz_watchdog_disarm();
    free(a.slot);
    free(sample);
    return s;
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
                           int32_t *out_ids, const lz_sample_draw *draws) {
    if (p->n_inflight > 0)
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: a step while %d started steps are unfinished", p->n_inflight);
    Lizard__StepHeader h;
    lz_header_draws hd;
    LZ_TRY(make_header(p, ids, batch, logit_rows, n_logit_rows, &h));
    h.flags = out_ids && !draws ? STEP_FLAG_GREEDY : 0;
    LZ_TRY(lz_pipeline_header_draws(&h, out_ids ? draws : NULL, n_logit_rows, &hd));
    lz_status s = lz_pipeline_send_header(p, &h);
    if (s == LZ_OK)
        s = run_step(p, m, st, ws, &h, batch, logits, out_ids, NULL);
    lz_pipeline_free_draws(&hd);
    return s;
}

lz_status lz_pipeline_step_start(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids,
                                 const lz_batch *batch, const int32_t *logit_rows, int n_logit_rows, bool ids_back,
                                 const lz_sample_draw *draws) {
    if (!p->overlap_ok || p->n_inflight == LZ_MAX_INFLIGHT)
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: cannot start another overlapping step");
    lz_inflight *f = &p->inflight[(p->inflight_head + p->n_inflight) % LZ_MAX_INFLIGHT];
    *f = (lz_inflight){MPI_REQUEST_NULL, NULL, n_logit_rows, ids_back};
    Lizard__StepHeader h;
    lz_header_draws hd;
    LZ_TRY(make_header(p, ids, batch, logit_rows, n_logit_rows, &h));
    h.flags = ids_back && !draws ? STEP_FLAG_GREEDY : 0;
    LZ_TRY(lz_pipeline_header_draws(&h, ids_back ? draws : NULL, n_logit_rows, &hd));
    lz_status s = lz_pipeline_send_header(p, &h);
    if (s == LZ_OK) {
        p->n_inflight++;
        s = run_step(p, m, st, ws, &h, batch, NULL, NULL, f);
    }
    lz_pipeline_free_draws(&hd);
    return s;
}

lz_status lz_pipeline_step_finish(lz_pipeline *p, lz_model *m, float *logits, int32_t *out_ids) {
    if (p->n_inflight == 0)
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: no started step to finish");
    lz_inflight *f = &p->inflight[p->inflight_head];
    if (f->ids_back != (out_ids != NULL))
        return lz_fail(LZ_ERR_INTERNAL, "pipeline: a step started %s is finished %s", f->ids_back ? "for ids" : "for logits",
                       out_ids ? "for ids" : "for logits");
    p->inflight_head = (p->inflight_head + 1) % LZ_MAX_INFLIGHT;
    p->n_inflight--;
    // results of one head rank arrive in the order the steps started (MPI keeps order per sender and tag)
    lz_pipeline_trace(p, "finish", 0);
    lz_watchdog_arm("for the result from", p->step_id - (uint64_t)p->n_inflight, p->plan.head_rank);
    int rc = recv_result(p, m, f->n_rows, f->ids_back, logits, out_ids);
    lz_pipeline_trace(p, "finished", 0);
    if (rc == MPI_SUCCESS && f->send != MPI_REQUEST_NULL)
        rc = MPI_Wait(&f->send, MPI_STATUS_IGNORE);
    lz_watchdog_disarm();
    free(f->buf);
    f->buf = NULL;
    if (rc != MPI_SUCCESS)
        return lz_world_mpi_error(rc, "MPI_Recv/Wait (a started step)", __FILE__, __LINE__);
    return LZ_OK;
}

lz_status lz_pipeline_serve(lz_pipeline *p, lz_model *m, lz_state *st, lz_workspace *ws) {
    for (;;) {
        uint8_t *buf = NULL;
        size_t len = 0;
        LZ_TRY(lz_pipeline_receive_header(p, &buf, &len));
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
        const uint32_t f = h->flags;
        lz_status s = stop                                      ? LZ_OK
                      : f & (STEP_FLAG_SAVE | STEP_FLAG_RESTORE) ? lz_pipeline_serve_state(p, m, st, h)
                      : f & STEP_FLAG_SEEK                       ? lz_pipeline_seek_here(p, st, h)
                      : f & STEP_FLAG_RESET                      ? lz_pipeline_reset_here(p, m, st, h)
                      : f & STEP_FLAG_STATS                      ? lz_pipeline_gather_stats(p, m, NULL)
                                                                 : run_step(p, m, st, ws, h, NULL, NULL, NULL, NULL);
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
    LZ_TRY(lz_pipeline_send_header(p, &h));
    return lz_pipeline_retire_headers(p, true);
}

lz_status lz_pipeline_close(lz_pipeline *p) {
    Lizard__StepHeader h = LIZARD__STEP_HEADER__INIT;
    h.flags = STEP_FLAG_STOP;
    LZ_TRY(lz_pipeline_send_header(p, &h));
    return lz_pipeline_retire_headers(p, true);
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
