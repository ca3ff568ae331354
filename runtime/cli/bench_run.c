/* bench_run.c - `lizard bench`, in one process or under mpirun -np N with
 * the same code (one process is a pipeline plan of one rank): each
 * configuration opens an engine (random weights made by each rank for its
 * own stage, or a model folder), rank 0 drives it while the other ranks
 * serve its steps, and rank 0 reports it beside one device's bound
 * (bench_report.c).
 *
 * Decode: B sequences seeked to `context` (their state is random, the cost
 * of a step is that of a real one), greedy ids chosen on the last stage, run
 * by the generation loop (through a pipeline its groups circulate so that
 * every stage works at once). Prompt: one sequence fed in chunks, up to N
 * chunks in flight. */
#include <stdint.h> // UINT64_MAX
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // malloc, calloc, free

#include "bench_linear.h"    // lz_bench_linear_shapes
#include "bench_report.h"    // lz_bench_report, lz_bench_print_header, lz_bench_print_result
#include "bench_run.h"
#include "bench_state.h"     // lz_bench_state
#include "clock.h"           // lz_now_seconds
#include "engine.h"          // lz_engine
#include "generation_loop.h" // lz_gen_loop
#include "model_presets.h"   // lz_preset_config
#include "mpi_world.h"       // lz_world_get, lz_world_gather_u64
#include "plan.h"            // lz_plan_choose

/* Decides, identically on every rank, whether a configuration fits: the
 * planner over every rank's free bytes (90% of them: scratch is not in the plan). */
static lz_status config_fits(const lz_bench_args *a, const lz_config *cfg, lz_backend *probe,
                             const lz_ops *ops, uint64_t context, int batch, bool *fits, char *why, size_t why_len) {
    const lz_world *w = lz_world_get();
    size_t free_b = 0, total = 0;
    if (ops->memory_info)
        LZ_TRY(ops->memory_info(probe, &free_b, &total));
    uint64_t mine = ops->memory_info ? (uint64_t)(free_b * 0.9) : UINT64_MAX / 4, *all = malloc(sizeof(uint64_t) * (size_t)w->size);
    if (!all)
        return lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
    lz_plan_costs costs;
    lz_plan plan;
    lz_status s = lz_world_gather_u64(&mine, 1, all);
    if (s == LZ_OK)
        s = lz_plan_costs_from_config(cfg, context, batch, &costs);
    if (s == LZ_OK) // the pipeline's own choice, with the same inputs
        s = lz_plan_choose(&costs, a->placement, a->plan_file, w->size, all, &plan);
    free(all);
    *fits = s == LZ_OK;
    if (s == LZ_ERR_INPUT) { // does not fit (or a bad plan file: then every configuration says so)
        snprintf(why, why_len, "%s", lz_error_message());
        lz_error_clear();
        return LZ_OK;
    }
    return s;
}

static lz_status open_engine(lz_engine *e, const lz_bench_args *a, int slots, int context, int chunk) {
    lz_engine_options o = {0};
    o.model_dir = a->model;
    o.shape = a->shape;
    o.seed = (uint64_t)a->seed;
    o.device = a->device;
    o.dtype = a->dtype;
    o.n_slots = slots;
    o.max_context = context;
    o.prefill_chunk = chunk;
    o.placement = a->placement;
    o.plan_file = a->plan_file;
    return lz_engine_open(e, &o);
}

/* Rank 0: one prompt of P tokens, chunks overlapping in the pipeline. */
static lz_status drive_prompt(lz_engine *e, int P, double *tok_s) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
    float *logits = malloc(sizeof(float) * (size_t)lz_engine_config(e)->vocab_size);
    lz_status s = ids && logits ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
    for (int i = 0; s == LZ_OK && i < P; i++)
        ids[i] = (int32_t)((i * 7919) % lz_engine_config(e)->vocab_size);
    const int32_t slot = 0, zero = 0;
    const int warm = P < e->opt.prefill_chunk ? P : e->opt.prefill_chunk;
    if (s == LZ_OK) // warm-up: kernels load lazily, cuBLAS picks its algorithms
        s = lz_engine_prefill(e, 0, ids, warm, NULL, (lz_step_out){.logits = logits});
    if (s == LZ_OK)
        s = lz_engine_seek(e, 1, &slot, &zero);
    double t0 = lz_now_seconds();
    if (s == LZ_OK)
        s = lz_engine_prefill(e, 0, ids, P, NULL, (lz_step_out){.logits = logits});
    const double dt = lz_now_seconds() - t0;
    *tok_s = P / dt;
    free(ids), free(logits);
    return s;
}

static bool keep_going(void *ctx, int slot, int32_t id, lz_gen_end end) {
    (void)ctx, (void)slot, (void)id, (void)end;
    return true; // the tokens are not the point; max_tokens ends each sequence
}

/* Rank 0: B sequences at `context`, `steps` greedy tokens each timed after 3 untimed ones, through the
 * generation loop, whose decode groups circulate through a pipeline as generate --batch's do. Timed: from
 * the end of round 2 (every group in flight again) to the end of the last, `steps` rounds of every group. */
static lz_status drive_decode(lz_engine *e, int B, int context, int steps, double *tok_s) {
    const int V = lz_engine_config(e)->vocab_size;
    int32_t *buf = malloc(sizeof(int32_t) * 3 * (size_t)B);
    if (!buf)
        return lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
    int32_t *slots = buf, *ids = buf + B, *pos = buf + 2 * B;
    for (int i = 0; i < B; i++) {
        slots[i] = i;
        ids[i] = (int32_t)((i * 31) % V);
        pos[i] = context;
    }
    const lz_generation_config gen = {0}; // greedy; ignore_eos below
    const lz_sampler_params greedy = {0, 0, 1, 0};
    lz_gen_loop g;
    lz_status s = lz_engine_seek(e, B, slots, pos);
    if (s == LZ_OK)
        s = lz_gen_init(&g, e, &gen, &(lz_gen_callbacks){.on_token = keep_going});
    if (s != LZ_OK) {
        free(buf);
        return s;
    }
    g.circulate = true;
    for (int i = 0; s == LZ_OK && i < B; i++) { // one token fed at `context`, then steps + 3 generated
        lz_gen_seq q = {.feed = ids + i, .n_feed = 1, .max_tokens = steps + 3, .ignore_eos = true};
        s = lz_sampler_init(&q.sampler, &greedy, V);
        if (s == LZ_OK)
            s = lz_gen_start(&g, i, q);
    }
    double t0 = 0;
    for (int round = 0; s == LZ_OK && lz_gen_live(&g) > 0; round++) {
        s = lz_gen_round(&g);
        if (round == 2)
            t0 = lz_now_seconds();
    }
    const double dt = lz_now_seconds() - t0;
    *tok_s = (double)B * steps / dt;
    lz_gen_free(&g);
    free(buf);
    return s;
}

/* One configuration on every rank: rank 0 measures and reports, the others serve inside lz_engine_open. */
static lz_status run_config(const lz_bench_args *a, const lz_bench_report *r, const lz_config *cfg, lz_backend *probe,
                            const lz_ops *ops, int prompt, int batch, int context) {
    const int slots = prompt > 0 ? 1 : batch, positions = prompt > 0 ? prompt + 1 : context + (int)a->steps + 8;
    const char *kind = prompt > 0 ? "prompt" : "decode";
    bool fits = false;
    char why[512] = "";
    LZ_TRY(config_fits(a, cfg, probe, ops, (uint64_t)positions, slots, &fits, why, sizeof why));
    if (!fits) {
        if (lz_world_get()->rank == 0)
            printf("%-7s prompt %7d  batch %4d  context %7d  does not fit: %s\n", kind, prompt, batch, context, why);
        return LZ_OK;
    }
    lz_engine e;
    const int chunk = prompt > 0 ? (int)a->chunk : (batch > 16 ? batch : 16);
    LZ_TRY(open_engine(&e, a, slots, positions, chunk));
    lz_status s = LZ_OK;
    if (!e.worker) {
        double tok_s = 0;
        lz_rank_stats *all = calloc((size_t)lz_engine_ranks(&e), sizeof *all);
        s = all ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
        if (s == LZ_OK)
            s = prompt > 0 ? drive_prompt(&e, prompt, &tok_s) : drive_decode(&e, batch, context, (int)a->steps, &tok_s);
        if (s == LZ_OK) // memory in use with the configuration's weights, state and scratch still held
            s = lz_engine_stats(&e, all);
        if (s == LZ_OK)
            lz_bench_print_result(r, kind, prompt, batch, context, tok_s, all);
        free(all);
    }
    lz_engine_close(&e);
    return s;
}

/* --linear-shapes (before the runs) and --state (after them) time pieces of one model alone, its linear ops
 * and a sequence's state as a session message: not layer runs through a plan. They need every layer in this
 * process, which an engine of one process holds (cmd_bench.c refuses them under mpirun). */
static lz_status whole_model(const lz_bench_args *a, bool linear, bool state) {
    lz_engine e;
    LZ_TRY(open_engine(&e, a, 1, 2, 16));
    lz_status s = linear ? lz_bench_linear_shapes(&e.model) : LZ_OK;
    for (int j = 0; s == LZ_OK && state && j < a->n_contexts; j++)
        s = lz_bench_state(&e.model, a->contexts[j], a->json);
    lz_engine_close(&e);
    return s;
}

lz_status lz_bench_run(const lz_bench_args *a) {
    const lz_world *w = lz_world_get();
    lz_config cfg;
    LZ_TRY(a->shape ? lz_preset_config(a->shape, "lizard bench: --shape", &cfg) : lz_config_load(a->model, &cfg));
    lz_backend *probe = NULL; // this rank's device: free memory and (rank 0) the ceilings
    const lz_ops *ops = NULL;
    LZ_TRY(lz_open_inference_backend(a->device, a->dtype, &probe, &ops, &cfg.fp8_weights));
    lz_bench_report r = {.ranks = w->size, .json = a->json};
    r.placement = a->plan_file ? "file" : a->placement ? a->placement : "balanced";
    // the whole model's figures from its description (a folder's headers, or the shape), on every rank: a
    // bad folder fails everywhere alike
    lz_status s = lz_model_describe(&r.whole, a->model, &cfg, ops);
    if (s == LZ_OK && w->rank == 0 && !a->no_ceilings && ops->measure_ceilings)
        s = ops->measure_ceilings(probe, &r.copy_bps, &r.gemm_flops);
    if (s == LZ_OK && w->rank == 0) {
        size_t free_b = 0, total = 0;
        if (!ops->memory_info || ops->memory_info(probe, &free_b, &total) != LZ_OK)
            free_b = 0; // (a backend that cannot say: the CPU)
        lz_bench_print_header(&r, a->shape ? a->shape : a->model, ops->name, free_b);
    }
    if (s == LZ_OK && a->linear_shapes)
        s = whole_model(a, true, false);
    for (int i = 0; s == LZ_OK && i < a->n_prompts; i++)
        if (a->prompts[i] > 0)
            s = run_config(a, &r, &cfg, probe, ops, a->prompts[i], 1, a->prompts[i]);
    for (int j = 0; s == LZ_OK && j < a->n_contexts; j++)
        for (int i = 0; s == LZ_OK && i < a->n_batches; i++)
            if (a->batches[i] > 0)
                s = run_config(a, &r, &cfg, probe, ops, 0, a->batches[i], a->contexts[j]);
    if (s == LZ_OK && a->state)
        s = whole_model(a, false, true);
    lz_model_free(&r.whole);
    ops->destroy(probe);
    return s;
}
