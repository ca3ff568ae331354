/* engine.c - opening a model on a backend and feeding it tokens. */
#include <stdlib.h> // malloc, free
#include <string.h> // strcmp, memset, memcpy
#include <unistd.h> // sysconf

#include "clock.h"         // lz_now_seconds
#include "model_presets.h" // lz_preset_config
#include "engine_session.h"  // lz_engine_save_stages

#include "engine.h"

lz_status lz_open_backend(const char *device, const char *dtype, lz_backend **be, const lz_ops **ops) {
    const char *dev = device ? device : "cpu";
    dtype = dtype ? dtype : "bf16";
    if (strcmp(dtype, "bf16") != 0 && strcmp(dtype, "fp32") != 0)
        return lz_fail(LZ_ERR_INPUT, "--dtype: expected bf16 or fp32, got '%s'", dtype);
    if (strcmp(dev, "cpu") == 0)
        return lz_cpu_backend_create(be, ops); // the reference: always fp32
    if (strcmp(dev, "cuda") == 0) {
#ifdef LIZARD_HAVE_CUDA
        return lz_cuda_backend_create(strcmp(dtype, "fp32") == 0 ? LZ_DTYPE_F32 : LZ_DTYPE_BF16, be, ops);
#else
        return lz_fail(LZ_ERR_INPUT, "--device cuda: this build has no CUDA backend (rebuild with -DLIZARD_CUDA=ON)");
#endif
    }
    return lz_fail(LZ_ERR_INPUT, "--device: unknown device '%s' (expected cpu or cuda)", dev);
}

lz_status lz_open_inference_backend(const char *device, const char *dtype, lz_backend **be, const lz_ops **ops,
                                    bool *fp8) {
    *fp8 = dtype && strcmp(dtype, "fp8") == 0;
    if (!*fp8)
        return lz_open_backend(device, dtype, be, ops);
    return lz_open_backend(device, "bf16", be, ops); // CUDA: bf16 activations; the CPU's are fp32
}

/* What this rank may hold: the device's free memory, or the host's. */
static uint64_t free_bytes(lz_engine *e) {
    size_t free_b = 0, total = 0;
    if (e->ops->memory_info && e->ops->memory_info(e->be, &free_b, &total) == LZ_OK)
        return free_b;
    return (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGE_SIZE);
}

/* One step through the stages (one process: a plan of one rank): logits, or
 * (out_ids) ids: greedy, or sampled with draws [n_rows] where the logits are. */
static lz_status engine_step(lz_engine *e, const int32_t *ids, const lz_batch *b, const int32_t *rows, int n_rows,
                             float *logits, int32_t *out_ids, const lz_sample_draw *draws) {
    return lz_pipeline_step(&e->pipe, &e->model, &e->state, &e->ws, ids, b, rows, n_rows, logits, out_ids, draws);
}

/* This rank's stage under the current plan (or the whole model): weights, state slots, scratch. */
static lz_status load_stage(lz_engine *e, const lz_stage_parts *parts) {
    const lz_engine_options *o = &e->opt;
    lz_status s = o->shape ? lz_model_init_random_stage(&e->model, &e->cfg, e->ops, e->be, parts, o->seed)
                           : lz_model_load_stage(&e->model, o->model_dir, &e->cfg, e->ops, e->be, parts, o->adapter_dir);
    if (s == LZ_OK)
        s = lz_state_create(&e->state, &e->model, o->n_slots, o->max_context);
    if (s == LZ_OK) {
        int step_tokens = o->prefill_chunk > o->n_slots ? o->prefill_chunk : o->n_slots;
        s = lz_workspace_create(&e->ws, &e->model, step_tokens, step_tokens);
    }
    return s == LZ_OK ? e->ops->sync(e->be) : s; // uploads finished: the load time is real
}

static void free_stage(lz_engine *e) {
    if (!e->model.ops)
        return;
    lz_workspace_free(&e->ws, &e->model);
    lz_state_free(&e->state, &e->model);
    lz_model_free(&e->model);
}

/* Every rank: agree on a plan (rank 0 makes it from placement / plan_file
 * and every rank's free bytes; the others receive it), then load this
 * rank's part. The device communicator, once made, is kept. */
static lz_status plan_and_load(lz_engine *e, const char *placement, const char *plan_file) {
    lz_stage_parts parts;
    const bool had_p2p = e->pipe.device_p2p;
    lz_pipeline_free(&e->pipe); // a previous plan's buffers (lz_pipeline_plan starts from nothing)
    lz_status s = lz_pipeline_plan(&e->pipe, &e->cfg, placement, plan_file, (uint64_t)e->opt.max_context,
                                   e->opt.n_slots, free_bytes(e), &parts);
    if (s == LZ_OK && !had_p2p)
        s = lz_pipeline_connect(&e->pipe, e->ops, e->be);
    e->pipe.device_p2p |= had_p2p;
    return s == LZ_OK ? load_stage(e, &parts) : s;
}

/* Other ranks: serve rank 0's steps, planning again whenever it asks. */
static lz_status serve(lz_engine *e) {
    for (;;) {
        LZ_TRY(lz_pipeline_serve(&e->pipe, &e->model, &e->state, &e->ws));
        if (!e->pipe.replan)
            return LZ_OK;
        free_stage(e);
        LZ_TRY(plan_and_load(e, NULL, NULL));
    }
}

lz_status lz_engine_open(lz_engine *e, const lz_engine_options *opt) {
    memset(e, 0, sizeof *e);
    const double t0 = lz_now_seconds();
    e->opt = *opt;
    if (e->opt.n_slots <= 0)
        e->opt.n_slots = 1;
    if (e->opt.prefill_chunk <= 0)
        e->opt.prefill_chunk = 512;
    if (!opt->model_dir == !opt->shape)
        return lz_fail(LZ_ERR_INPUT, "give exactly one of --model DIR or --shape PRESET");
    LZ_TRY(opt->shape ? lz_preset_config(opt->shape, "--shape", &e->cfg) : lz_config_load(opt->model_dir, &e->cfg));
    if (opt->softmax_layers)
        LZ_TRY(lz_config_set_softmax_layers(&e->cfg, opt->softmax_layers));
    if (e->opt.max_context <= 0)
        e->opt.max_context = e->cfg.max_position_embeddings;
    LZ_TRY(lz_open_inference_backend(e->opt.device, e->opt.dtype, &e->be, &e->ops, &e->cfg.fp8_weights));
    lz_status s = plan_and_load(e, opt->placement, opt->plan_file); // one process: a plan of one rank
    e->load_seconds = e->pipe.stats.load_seconds = lz_now_seconds() - t0;
    if (s == LZ_OK && e->pipe.rank != 0) {
        s = serve(e);
        e->worker = true;
    }
    if (s != LZ_OK)
        lz_engine_close(e);
    return s;
}

lz_status lz_engine_replan(lz_engine *e, const char *placement, const char *plan_file) {
    if (e->pipe.n_ranks < 2)
        return lz_fail(LZ_ERR_INPUT, "moving sequences to another placement needs a pipeline (mpirun -np N, N > 1)");
    const int n = e->state.n_slots;
    Lizard__SequenceState *saved = calloc((size_t)n, sizeof *saved);
    if (!saved)
        return lz_fail(LZ_ERR_NOMEM, "replan: out of memory");
    lz_status s = LZ_OK;
    for (int slot = 0; s == LZ_OK && slot < n; slot++) { // every live sequence, gathered from the stages
        lizard__sequence_state__init(&saved[slot]);
        saved[slot].position = (uint64_t)e->state.slot_pos[slot];
        if (saved[slot].position > 0)
            s = lz_engine_save_stages(e, slot, &saved[slot]);
    }
    if (s == LZ_OK)
        s = lz_pipeline_request_replan(&e->pipe);
    if (s == LZ_OK) {
        free_stage(e);
        s = plan_and_load(e, placement, plan_file);
    }
    for (int slot = 0; s == LZ_OK && slot < n; slot++) // scattered to their new stages
        if (saved[slot].position > 0)
            s = lz_engine_restore_stages(e, slot, &saved[slot]);
    for (int slot = 0; slot < n; slot++)
        lz_engine_free_stages(&saved[slot]);
    free(saved);
    return s;
}

void lz_engine_close(lz_engine *e) {
    if (!e->worker && e->pipe.rank == 0 && e->model.ops)
        lz_pipeline_close(&e->pipe); // the other ranks leave their serve loop
    lz_pipeline_free(&e->pipe);
    free_stage(e);
    if (e->be)
        e->ops->destroy(e->be);
    memset(e, 0, sizeof *e);
}

/* A prompt through a pipeline that can overlap steps: up to one chunk per
 * stage in flight (chunk k + 1 enters the first stage while chunk k is in
 * the second: each stage still sees the sequence's chunks in order). */
static lz_status prefill_overlapped(lz_engine *e, int slot, const int32_t *ids, int n, lz_step_out last,
                                    int overlap) {
    const int chunk = e->opt.prefill_chunk;
    int32_t *tpos = malloc(sizeof(int32_t) * (size_t)chunk);
    lz_status s = tpos ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "prefill: out of memory");
    int in_flight = 0;
    for (int c0 = 0; s == LZ_OK && c0 < n; c0 += chunk) {
        if (in_flight == overlap) {
            s = lz_pipeline_step_finish(&e->pipe, &e->model, NULL, NULL); // a chunk without logits rows
            in_flight--;
        }
        const int len = n - c0 < chunk ? n - c0 : chunk, pos = e->state.slot_pos[slot], start = 0, last_row = len - 1;
        for (int i = 0; i < len; i++)
            tpos[i] = pos + i;
        lz_batch b = {1, len, &slot, &start, &len, &pos, tpos};
        if (s == LZ_OK)
            s = lz_pipeline_step_start(&e->pipe, &e->model, &e->state, &e->ws, ids + c0, &b, &last_row,
                                       c0 + len == n ? 1 : 0, last.ids != NULL, last.ids ? last.draws : NULL);
        in_flight += s == LZ_OK;
    }
    for (; s == LZ_OK && in_flight > 0; in_flight--) // the last one started is the prompt's end: its row
        s = lz_pipeline_step_finish(&e->pipe, &e->model, in_flight == 1 && !last.ids ? last.logits : NULL,
                                    in_flight == 1 ? last.ids : NULL);
    free(tpos);
    return s;
}

lz_status lz_engine_prefill(lz_engine *e, int slot, const int32_t *ids, int n, float *logits_all, lz_step_out last) {
    if (n < 1)
        return lz_fail(LZ_ERR_INPUT, "prompt is empty");
    if (slot < 0 || slot >= e->state.n_slots)
        return lz_fail(LZ_ERR_INPUT, "sequence slot %d out of range (%d slots)", slot, e->state.n_slots);
    const int overlap = lz_engine_overlap(e);
    const bool last_id = last.ids != NULL; // the last row's id, chosen where its logits are
    if (!logits_all && (last.logits || last_id) && overlap >= 2 && n > e->opt.prefill_chunk)
        return prefill_overlapped(e, slot, ids, n, last, overlap < LZ_MAX_INFLIGHT ? overlap : LZ_MAX_INFLIGHT);
    if (logits_all && last_id)
        return lz_fail(LZ_ERR_INTERNAL, "prefill: every position's logits and the last id at once");
    float *logits_last = last_id ? NULL : last.logits;
    const int V = e->model.cfg.vocab_size, chunk = e->opt.prefill_chunk;
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)chunk), *tpos = malloc(sizeof(int32_t) * (size_t)chunk);
    float *tail = logits_all || last_id ? NULL : malloc(sizeof(float) * (size_t)V);
    lz_status s = rows && tpos && (logits_all || last_id || tail) ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "prefill: out of memory");
    for (int c0 = 0; s == LZ_OK && c0 < n; c0 += chunk) {
        const int len = n - c0 < chunk ? n - c0 : chunk, pos = e->state.slot_pos[slot], start = 0;
        for (int i = 0; i < len; i++) {
            rows[i] = i;
            tpos[i] = pos + i;
        }
        lz_batch b = {1, len, &slot, &start, &len, &pos, tpos};
        // logits of every row when asked for all, else only of the prompt's last row
        const bool last_chunk = c0 + len == n;
        if (logits_all)
            s = engine_step(e, ids + c0, &b, rows, len, logits_all + (size_t)c0 * V, NULL, NULL);
        else if (last_id)
            s = engine_step(e, ids + c0, &b, rows + len - 1, last_chunk ? 1 : 0, NULL, last.ids, last.draws);
        else
            s = engine_step(e, ids + c0, &b, rows + len - 1, last_chunk ? 1 : 0, tail, NULL, NULL);
    }
    if (s == LZ_OK && logits_last)
        memcpy(logits_last, logits_all ? logits_all + (size_t)(n - 1) * V : tail, sizeof(float) * (size_t)V);
    free(rows);
    free(tpos);
    free(tail);
    return s;
}

lz_status lz_engine_prefill_many(lz_engine *e, int n, const int32_t *slots, const int32_t *const *ids,
                                 const int *lens, lz_step_out last) {
    const int V = e->model.cfg.vocab_size, chunk = e->opt.prefill_chunk, cap = e->ws.max_tokens;
    const bool last_id = last.ids != NULL;
    int *done = calloc((size_t)n, sizeof(int));
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(7 * n + 2 * cap)), *tok = NULL;
    float *rows_out = last_id ? NULL : malloc(sizeof(float) * (size_t)n * V);
    lz_sample_draw *draws = last_id && last.draws ? malloc(sizeof(lz_sample_draw) * (size_t)n) : NULL;
    lz_status s = done && buf && (last_id || rows_out) && (!last_id || !last.draws || draws)
                      ? LZ_OK
                      : lz_fail(LZ_ERR_NOMEM, "prefill: out of memory");
    for (int i = 0; s == LZ_OK && i < n; i++)
        if (lens[i] < 1)
            s = lz_fail(LZ_ERR_INPUT, "prompt %d is empty", i);
    int32_t *slot = buf, *start = buf + n, *len = buf + 2 * n, *pos = buf + 3 * n, *rows = buf + 4 * n,
            *owner = buf + 5 * n, *chosen = buf + 6 * n, *tpos = buf + 7 * n;
    tok = tpos + cap;
    for (int first = 0; s == LZ_OK && first < n;) {
        // whole per-sequence chunks (the boundaries lz_engine_prefill uses), as many as fit in a step
        int S = 0, T = 0, R = 0;
        for (int i = first; i < n && S < cap; i++) {
            if (done[i] == lens[i])
                continue;
            const int take = lens[i] - done[i] < chunk ? lens[i] - done[i] : chunk;
            if (T + take > cap)
                break;
            slot[S] = slots[i], start[S] = T, len[S] = take, pos[S] = e->state.slot_pos[slots[i]];
            for (int k = 0; k < take; k++) {
                tok[T + k] = ids[i][done[i] + k];
                tpos[T + k] = pos[S] + k;
            }
            if (done[i] + take == lens[i]) { // the prompt's last row: its logits or id are wanted
                rows[R] = T + take - 1;
                if (draws)
                    draws[R] = last.draws[i];
                owner[R++] = i;
            }
            done[i] += take;
            T += take;
            S++;
        }
        lz_batch b = {S, T, slot, start, len, pos, tpos};
        s = engine_step(e, tok, &b, rows, R, rows_out, last_id ? chosen : NULL, draws);
        for (int r = 0; s == LZ_OK && r < R; r++) {
            if (last_id)
                last.ids[owner[r]] = chosen[r];
            else
                memcpy(last.logits + (size_t)owner[r] * V, rows_out + (size_t)r * V, sizeof(float) * (size_t)V);
        }
        while (first < n && done[first] == lens[first])
            first++;
    }
    free(done), free(buf), free(rows_out), free(draws);
    return s;
}

/* A decode batch: sequence i is row i, one token each, at its slot's position. */
static lz_status decode_batch(lz_engine *e, int n, const int32_t *slots, int32_t **buf, lz_batch *b) {
    if (n < 1 || n > e->ws.max_tokens)
        return lz_fail(LZ_ERR_INPUT, "decode step of %d sequences (at most %d)", n, e->ws.max_tokens);
    *buf = malloc(sizeof(int32_t) * 4 * (size_t)n);
    if (!*buf)
        return lz_fail(LZ_ERR_NOMEM, "decode: out of memory");
    int32_t *start = *buf, *len = *buf + n, *pos = *buf + 2 * n, *tpos = *buf + 3 * n;
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= e->state.n_slots)
            return lz_fail(LZ_ERR_INPUT, "sequence slot %d out of range (%d slots)", slots[i], e->state.n_slots);
        start[i] = i;
        len[i] = 1;
        pos[i] = tpos[i] = e->state.slot_pos[slots[i]];
    }
    *b = (lz_batch){n, n, slots, start, len, pos, tpos};
    return LZ_OK;
}

/* One decode step: logits, or (out_ids) the device's greedy or sampled ids. */
static lz_status decode_step(lz_engine *e, int n, const int32_t *slots, const int32_t *ids, float *logits,
                             int32_t *out_ids, const lz_sample_draw *draws) {
    int32_t *buf = NULL;
    lz_batch b;
    lz_status s = decode_batch(e, n, slots, &buf, &b);
    if (s == LZ_OK)
        s = engine_step(e, ids, &b, b.start, n, logits, out_ids, draws);
    free(buf);
    return s;
}

int lz_engine_overlap(const lz_engine *e) {
    return e->pipe.overlap_ok ? e->pipe.n_ranks : 1;
}

int lz_engine_groups(const lz_engine *e, int n) {
    const int groups = lz_engine_overlap(e) < n ? lz_engine_overlap(e) : n;
    return groups < LZ_MAX_INFLIGHT ? groups : LZ_MAX_INFLIGHT;
}

lz_status lz_engine_decode_start(lz_engine *e, int n, const int32_t *slots, const int32_t *ids, bool ids_back,
                                 const lz_sample_draw *draws) {
    if (lz_engine_overlap(e) < 2)
        return lz_fail(LZ_ERR_INTERNAL, "decode_start: no pipeline to overlap steps in");
    int32_t *buf = NULL;
    lz_batch b;
    lz_status s = decode_batch(e, n, slots, &buf, &b);
    if (s == LZ_OK)
        s = lz_pipeline_step_start(&e->pipe, &e->model, &e->state, &e->ws, ids, &b, b.start, n, ids_back, draws);
    free(buf);
    return s;
}

lz_status lz_engine_decode_finish(lz_engine *e, float *logits, int32_t *out_ids) {
    return lz_pipeline_step_finish(&e->pipe, &e->model, logits, out_ids);
}

lz_status lz_engine_decode(lz_engine *e, int n, const int32_t *slots, const int32_t *ids, lz_step_out out) {
    float *logits = out.ids ? NULL : out.logits;
    int32_t *out_ids = out.ids;
    const lz_sample_draw *draws = out.ids ? out.draws : NULL;
    if (!out_ids && !logits)
        return lz_fail(LZ_ERR_INTERNAL, "decode: neither logits nor ids asked for");
    const int groups = out.overlap ? lz_engine_groups(e, n) : 1;
    if (groups < 2)
        return decode_step(e, n, slots, ids, logits, out_ids, draws);
    const size_t V = (size_t)e->model.cfg.vocab_size;
    for (int g = 0; g < groups; g++) {
        const int r0 = lz_engine_group_first(n, groups, g), r1 = lz_engine_group_first(n, groups, g + 1);
        LZ_TRY(lz_engine_decode_start(e, r1 - r0, slots + r0, ids + r0, out_ids != NULL, draws ? draws + r0 : NULL));
    }
    for (int g = 0; g < groups; g++) {
        const int r0 = lz_engine_group_first(n, groups, g);
        LZ_TRY(lz_engine_decode_finish(e, out_ids ? NULL : logits + (size_t)r0 * V, out_ids ? out_ids + r0 : NULL));
    }
    return LZ_OK;
}

lz_status lz_engine_seek(lz_engine *e, int n, const int32_t *slots, const int32_t *positions) {
    for (int i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= e->state.n_slots || positions[i] < 0)
            return lz_fail(LZ_ERR_INPUT, "seek: slot %d to position %d (%d slots)", slots[i], positions[i],
                           e->state.n_slots);
    return lz_pipeline_seek(&e->pipe, &e->state, n, slots, positions);
}

int lz_engine_ranks(const lz_engine *e) { return e->pipe.n_ranks; }

lz_status lz_engine_stats(lz_engine *e, lz_rank_stats *all) { return lz_pipeline_stats(&e->pipe, &e->model, all); }

lz_status lz_engine_reset_slot(lz_engine *e, int slot) {
    return lz_pipeline_reset(&e->pipe, &e->model, &e->state, slot);
}
