/* bench_pipeline.c - `mpirun -np N lizard bench`: the same measurements as
 * one process, through the pipeline: each configuration opens an engine
 * (random weights made by each rank for its own stage, or a model folder),
 * rank 0 drives it while the other ranks serve its steps, and every rank
 * reports its memory, load time and the bytes it sent.
 *
 * Decode: B sequences seeked to `context` (their state is random, the cost
 * of a step is that of a real one), greedy ids chosen on the last stage, run
 * by the generation loop (its groups circulate so that every stage works at
 * once). Prompt: one sequence fed in chunks, up to N chunks in flight. */
#include <stdint.h> // UINT64_MAX
#include <stdio.h>  // printf, fprintf
#include <stdlib.h> // malloc, free

#include "bench_pipeline.h"
#include "clock.h"         // lz_now_seconds
#include "engine.h"        // lz_engine
#include "generation_loop.h" // lz_gen_loop
#include "model_presets.h" // lz_preset_config
#include "mpi_world.h"     // lz_world_get, lz_world_gather_u64
#include "plan.h"          // lz_plan_choose

/* Decides, identically on every rank, whether a configuration fits: the
 * planner over every rank's free bytes (90% of them: scratch is not in the plan). */
static lz_status config_fits(const lz_bench_pipeline_args *a, const lz_config *cfg, lz_backend *probe,
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

static lz_status open_engine(lz_engine *e, const lz_bench_pipeline_args *a, int slots, int context, int chunk) {
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

/* Rank 0: every rank's counters, printed as one line per rank. */
static lz_status print_ranks(lz_engine *e, FILE *json, const char *what) {
    const int n = lz_engine_ranks(e);
    lz_rank_stats *all = calloc((size_t)n, sizeof *all);
    if (!all)
        return lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
    lz_status s = lz_engine_stats(e, all);
    for (int r = 0; s == LZ_OK && r < n; r++) {
        const double per_token = all[r].tokens ? (double)all[r].bytes_activations / (double)all[r].tokens : 0;
        char mem[48] = "-"; // (a backend that cannot say: the CPU)
        if (all[r].mem_total > 0)
            snprintf(mem, sizeof mem, "%.2f / %.2f GB", all[r].mem_used / 1e9, all[r].mem_total / 1e9);
        printf("  rank %d: load %.2f s, memory %s, sent %.0f activation bytes per token%s\n", r, all[r].load_seconds,
               mem, per_token, all[r].bytes_results ? " (+ the last stage's ids or logits)" : "");
        if (json)
            fprintf(json,
                    "{\"kind\": \"rank\", \"of\": \"%s\", \"rank\": %d, \"load_s\": %.3f, \"mem_bytes\": %llu, "
                    "\"activation_bytes_per_token\": %.1f, \"result_bytes\": %llu, \"tokens\": %llu}\n",
                    what, r, all[r].load_seconds, (unsigned long long)all[r].mem_used, per_token,
                    (unsigned long long)all[r].bytes_results, (unsigned long long)all[r].tokens);
    }
    free(all);
    return s;
}

static void report(const lz_bench_pipeline_args *a, const char *kind, int prompt, int batch, int context,
                   double tok_s, double load_s) {
    const int n = lz_world_get()->size;
    printf("%-7s prompt %7d  batch %4d  context %7d  %10.1f tok/s  (%.2f ms per token of a sequence)  %d ranks %s, "
           "load %.1f s\n",
           kind, prompt, batch, context, tok_s, tok_s > 0 ? 1e3 * (batch > 0 ? batch : 1) / tok_s : 0.0, n,
           a->plan_file ? "plan file" : a->placement ? a->placement : "balanced", load_s);
    if (a->json)
        fprintf(a->json,
                "{\"kind\": \"%s\", \"prompt\": %d, \"batch\": %d, \"context\": %d, \"tok_s\": %.2f, \"ranks\": %d, "
                "\"placement\": \"%s\", \"load_s\": %.3f}\n",
                kind, prompt, batch, context, tok_s, n, a->plan_file ? "file" : a->placement ? a->placement : "balanced",
                load_s);
}

/* Rank 0: one prompt of P tokens, chunks overlapping in the pipeline. */
static lz_status drive_prompt(lz_engine *e, const lz_bench_pipeline_args *a, int P) {
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
    if (s == LZ_OK)
        report(a, "prompt", P, 1, P, P / dt, e->load_seconds);
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
static lz_status drive_decode(lz_engine *e, const lz_bench_pipeline_args *a, int B, int context, int steps) {
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
    if (s == LZ_OK)
        report(a, "decode", 0, B, context, (double)B * steps / dt, e->load_seconds);
    lz_gen_free(&g);
    free(buf);
    return s;
}

/* One configuration on every rank: rank 0 measures, the others serve inside
 * lz_engine_open. */
static lz_status run_config(const lz_bench_pipeline_args *a, const lz_config *cfg, lz_backend *probe,
                            const lz_ops *ops, int prompt, int batch, int context) {
    const int slots = prompt > 0 ? 1 : batch, positions = prompt > 0 ? prompt + 1 : context + (int)a->steps + 8;
    bool fits = false;
    char why[512] = "";
    LZ_TRY(config_fits(a, cfg, probe, ops, (uint64_t)positions, slots, &fits, why, sizeof why));
    if (!fits) {
        if (lz_world_get()->rank == 0)
            printf("%-7s prompt %7d  batch %4d  context %7d  does not fit: %s\n", prompt > 0 ? "prompt" : "decode",
                   prompt, batch, context, why);
        return LZ_OK;
    }
    lz_engine e;
    const int chunk = prompt > 0 ? (int)a->chunk : (batch > 16 ? batch : 16);
    LZ_TRY(open_engine(&e, a, slots, positions, chunk));
    lz_status s = LZ_OK;
    if (!e.worker) {
        s = prompt > 0 ? drive_prompt(&e, a, prompt) : drive_decode(&e, a, batch, context, (int)a->steps);
        if (s == LZ_OK)
            s = print_ranks(&e, a->json, prompt > 0 ? "prompt" : "decode");
    }
    lz_engine_close(&e);
    return s;
}

lz_status lz_bench_pipeline(const lz_bench_pipeline_args *a, const int32_t *prompts, int np, const int32_t *batches,
                            int nb, const int32_t *contexts, int nc) {
    lz_config cfg;
    LZ_TRY(a->shape ? lz_preset_config(a->shape, "lizard bench: --shape", &cfg) : lz_config_load(a->model, &cfg));
    lz_backend *probe = NULL; // this rank's device: free memory and (rank 0) the ceilings
    const lz_ops *ops = NULL;
    bool fp8;
    LZ_TRY(lz_open_inference_backend(a->device, a->dtype, &probe, &ops, &fp8));
    lz_status s = LZ_OK;
    const lz_world *w = lz_world_get();
    if (w->rank == 0) {
        printf("lizard bench: %s on %d ranks (%s), %s\n", a->shape ? a->shape : a->model, w->size, ops->name,
               a->plan_file ? a->plan_file : a->placement ? a->placement : "balanced placement");
        double copy = 0, gemm = 0;
        if (!a->no_ceilings && ops->measure_ceilings && (s = ops->measure_ceilings(probe, &copy, &gemm)) == LZ_OK)
            printf("ceilings of rank 0's device: copy %.2f TB/s (read + write), GEMM %.1f TFLOP/s\n", copy / 1e12,
                   gemm / 1e12);
    }
    for (int i = 0; s == LZ_OK && i < np; i++)
        if (prompts[i] > 0)
            s = run_config(a, &cfg, probe, ops, prompts[i], 1, prompts[i]);
    for (int j = 0; s == LZ_OK && j < nc; j++)
        for (int i = 0; s == LZ_OK && i < nb; i++)
            if (batches[i] > 0)
                s = run_config(a, &cfg, probe, ops, 0, batches[i], contexts[j]);
    ops->destroy(probe);
    return s;
}
