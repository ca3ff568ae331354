/* cmd_distill.c - `lizard distill`: stage-1 attention distillation (issue #8).
 *
 *   lizard distill --teacher DIR --data PATH --out DIR [--tokens N --seq-len L --batch B ...]
 *
 * Every Lizard layer learns its feature maps, gate, meta-memory logits and
 * alpha so that its attention output matches the teacher's softmax attention
 * output (MSE before o_proj), on the teacher's own hidden states: layers
 * train independently, each with its own AdamW. With --retain-fraction the
 * layers hardest to linearise (largest relative error after a calibration
 * phase) stay softmax. The result is a model folder in MODEL_FORMAT.md's
 * format; a run checkpoints beside it and --resume continues it.
 * Under mpirun -np N the teacher is split by a placement plan (plan.h): each
 * rank trains the layers it owns while the activations pass through, and
 * rank 0 gathers the tensors and writes. docs/distillation.md has the
 * equations and what is verified. */
#include <math.h>     // ceil, round
#include <mpi.h>      // MPI_Allreduce, MPI_Send, MPI_Recv
#include <stdint.h>   // UINT64_MAX
#include <stdio.h>    // fprintf, FILE
#include <stdlib.h>   // calloc, free
#include <string.h>   // strcmp, memset
#include <sys/stat.h> // stat

#include "cli_options.h"        // lz_parse_command
#include "clock.h"              // lz_now_seconds
#include "commands.h"           // lz_cmd_distill
#include "distill_checkpoint.h" // lz_distill_checkpoint_save/load
#include "distill_data.h"       // lz_distill_data
#include "distill_output.h"     // lz_distill_write_model
#include "distill_params.h"     // lz_distill_layer, lz_adamw_config
#include "distill_teacher.h"    // lz_teacher
#include "mpi_world.h"          // lz_world_get, LZ_MPI_TRY
#include "plan.h"               // lz_plan_make, lz_plan_load_text

typedef struct {
    const char *teacher, *data, *out, *feature_map, *map_heads, *softmax_layers, *retain_by, *log_path, *plan_file;
    long feature_dim, window, meta, tokens, seq_len, batch, warmup, seed, log_every, checkpoint_every,
        stop_at, calibration_steps, eval_batches;
    double lr, min_lr, weight_decay, retain_fraction;
    bool resume, no_normalize;
} distill_args;

typedef struct {
    distill_args a;
    lz_teacher teacher;
    lz_distill_data data;
    lz_adamw_config opt;
    lz_lizard_config lizard;
    int n_layers;
    lz_distill_layer *layers;    /* [n_layers]; allocated where trained[i], on every rank */
    bool trained[LZ_MAX_LAYERS]; /* has tensors being learned (all candidates until the softmax layers are chosen) */
    bool owned[LZ_MAX_LAYERS];   /* run (and learned) by this rank: all without mpirun */
    lz_plan plan;                /* under mpirun: which rank owns each layer */
    bool planned;
    int rank;
    lz_distill_progress progress;
    lz_lizard_scratch_f32 scratch;
    int32_t *ids;                /* [batch, seq_len] */
    double mse[LZ_MAX_LAYERS], rel[LZ_MAX_LAYERS]; /* of the last pass */
    char signature[1024];
    FILE *log;
} distill_run;

/* ---- one pass of the teacher: train (or only measure) every active layer --------------- */

typedef struct {
    distill_run *r;
    bool learn;
    long step;
} pass_ctx;

static bool is_active(const distill_run *r, int i) {
    return r->trained[i] && !(r->progress.chosen && r->progress.softmax[i]);
}

// lz_teacher_layer_fn
static lz_status layer_pass(void *ctx, const lz_teacher_acts *acts) {
    pass_ctx *c = ctx;
    distill_run *r = c->r;
    const int i = acts->layer;
    if (!is_active(r, i) || !r->owned[i])
        return LZ_OK;
    lz_distill_layer *l = &r->layers[i];
    const lz_lizard_geom *g = &l->geom;
    const int L = r->teacher.seq_len, H = l->hidden;
    const size_t qrow = (size_t)L * g->Hq * g->d, krow = (size_t)L * g->Hkv * g->d;
    const double n_out = (double)r->teacher.batch * qrow;
    const lz_lizard_params_f32 p = lz_distill_layer_params(l);
    lz_lizard_params_f32 grad = lz_distill_layer_grads(l);
    if (c->learn)
        lz_distill_layer_zero_grad(l);
    double sse = 0, energy = 0;
    for (int b = 0; b < r->teacher.batch; b++) {
        const float *target = acts->target + b * qrow;
        sse += lz_lizard_layer_sse_f32(&p, c->learn ? &grad : NULL, (float)(1.0 / n_out), acts->x + (size_t)b * L * H,
                                       acts->q + b * qrow, acts->k + b * krow, acts->v + b * krow, target, L, g,
                                       &r->scratch);
        for (size_t e = 0; e < qrow; e++)
            energy += (double)target[e] * target[e];
    }
    r->mse[i] = sse / n_out;
    r->rel[i] = energy > 0 ? sse / energy : 0;
    if (c->learn)
        lz_distill_layer_adamw(l, &r->opt, c->step);
    return LZ_OK;
}

static int layers_to_run(const distill_run *r) {
    int last = -1;
    for (int i = 0; i < r->n_layers; i++)
        if (is_active(r, i))
            last = i;
    return last + 1;
}

/* One batch through the teacher; every rank ends with every layer's losses. */
static lz_status run_pass(distill_run *r, long data_step, bool learn, long step) {
    lz_distill_data_batch(&r->data, (uint64_t)data_step, (int)r->a.batch, r->ids);
    memset(r->mse, 0, sizeof r->mse);
    memset(r->rel, 0, sizeof r->rel);
    pass_ctx c = {r, learn, step};
    LZ_TRY(lz_teacher_run(&r->teacher, r->ids, layers_to_run(r), layer_pass, &c));
    if (r->planned) { // each layer's losses come from its owner alone; the others add zeros
        LZ_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, r->mse, r->n_layers, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        LZ_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, r->rel, r->n_layers, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    }
    return LZ_OK;
}

/* ---- reporting ----------------------------------------------------------------------------- */

/* " 0:1.2e-03 ..." or "\"0\": 0.0012, ..." of the active layers: the MSE,
 * or the relative error (SSE / sum of target^2) when `relative`. */
static void log_losses(distill_run *r, FILE *fp, bool json, bool relative) {
    bool first = true;
    for (int i = 0; i < r->n_layers; i++) {
        if (!is_active(r, i))
            continue;
        const double v = relative ? r->rel[i] : r->mse[i];
        if (json)
            fprintf(fp, "%s\"%d\": %.6g", first ? "" : ", ", i, v);
        else
            fprintf(fp, " %d:%.3e", i, v);
        first = false;
    }
}

static void report_step(distill_run *r, long step, double seconds) {
    const long total = r->opt.total_steps, tokens = r->a.batch * r->a.seq_len;
    const double tps = seconds > 0 ? (double)tokens / seconds : 0, lr = lz_distill_lr(&r->opt, step);
    if (r->log) {
        fprintf(r->log, "{\"step\": %ld, \"tokens\": %ld, \"lr\": %.6g, \"tok_per_s\": %.1f, \"mse\": {", step + 1,
                (step + 1) * tokens, lr, tps);
        log_losses(r, r->log, true, false);
        fprintf(r->log, "}}\n");
        fflush(r->log);
    }
    if (r->rank != 0 || ((step + 1) % r->a.log_every != 0 && step + 1 != total))
        return;
    fprintf(stderr, "lizard distill: step %ld/%ld  lr %.2e  %.0f tok/s  mse", step + 1, total, lr, tps);
    log_losses(r, stderr, false, false);
    fprintf(stderr, "\n");
}

/* The held-out batches (the eval_batches after the last training batch)
 * measured with the current tensors: "start" and "end" in the log, and the
 * calibration. MSE and relative error are averaged over the batches. */
static lz_status evaluate(distill_run *r, const char *label) {
    double mse[LZ_MAX_LAYERS] = {0}, rel[LZ_MAX_LAYERS] = {0};
    for (long b = 0; b < r->a.eval_batches; b++) {
        LZ_TRY(run_pass(r, r->opt.total_steps + b, false, 0));
        for (int i = 0; i < r->n_layers; i++)
            mse[i] += r->mse[i] / (double)r->a.eval_batches, rel[i] += r->rel[i] / (double)r->a.eval_batches;
    }
    memcpy(r->mse, mse, sizeof mse);
    memcpy(r->rel, rel, sizeof rel);
    if (r->rank != 0)
        return LZ_OK;
    fprintf(stderr, "lizard distill: %s held-out mse", label);
    log_losses(r, stderr, false, false);
    fprintf(stderr, "  relative");
    log_losses(r, stderr, false, true);
    fprintf(stderr, "\n");
    if (r->log) {
        fprintf(r->log, "{\"eval\": \"%s\", \"mse\": {", label);
        log_losses(r, r->log, true, false);
        fprintf(r->log, "}, \"relative\": {");
        log_losses(r, r->log, true, true);
        fprintf(r->log, "}}\n");
        fflush(r->log);
    }
    return LZ_OK;
}

/* ---- retaining softmax layers by error -------------------------------------------------------- */

static lz_status choose_softmax_layers(distill_run *r) {
    LZ_TRY(evaluate(r, "calibration"));
    const int keep = (int)round(r->a.retain_fraction * r->n_layers);
    memset(r->progress.softmax, 0, sizeof r->progress.softmax);
    for (int k = 0; k < keep; k++) { // the largest relative error not yet chosen
        int worst = -1;
        for (int i = 0; i < r->n_layers; i++)
            if (!r->progress.softmax[i] && (worst < 0 || r->rel[i] > r->rel[worst]))
                worst = i;
        r->progress.softmax[worst] = true;
    }
    r->progress.chosen = true;
    if (r->rank != 0)
        return LZ_OK;
    fprintf(stderr, "lizard distill: kept as softmax (largest relative error):");
    for (int i = 0; i < r->n_layers; i++)
        if (r->progress.softmax[i])
            fprintf(stderr, " %d (%.3f)", i, r->rel[i]);
    fprintf(stderr, "\n");
    return LZ_OK;
}

/* ---- checkpoints -------------------------------------------------------------------------------- */

/* Under mpirun: every layer's tensors and moments from its owner to rank 0. */
static lz_status gather_layers(distill_run *r) {
    enum { TAG = 7302 };
    for (int i = 0; i < r->n_layers; i++) {
        const int owner = r->plan.layer_rank[i];
        if (!r->trained[i] || owner == 0 || (r->rank != owner && r->rank != 0))
            continue;
        lz_distill_layer *l = &r->layers[i];
        for (int j = 0; j < LZ_DT_COUNT; j++) {
            float *parts[3] = {l->param[j], l->m1[j], l->m2[j]};
            for (int k = 0; k < 3; k++) {
                if (r->rank == owner)
                    LZ_MPI_TRY(MPI_Send(parts[k], (int)l->numel[j], MPI_FLOAT, 0, TAG, MPI_COMM_WORLD));
                else
                    LZ_MPI_TRY(MPI_Recv(parts[k], (int)l->numel[j], MPI_FLOAT, owner, TAG, MPI_COMM_WORLD,
                                        MPI_STATUS_IGNORE));
            }
        }
    }
    return LZ_OK;
}

static lz_status save(distill_run *r) {
    if (r->planned)
        LZ_TRY(gather_layers(r));
    if (r->rank != 0)
        return LZ_OK; // rank 0 writes
    LZ_TRY(lz_make_dirs(r->a.out, "--out"));
    if (r->progress.chosen)
        LZ_TRY(lz_distill_write_model(r->a.out, r->a.teacher, &r->teacher.model.ckpt, r->layers,
                                      r->progress.softmax, r->n_layers, &r->lizard));
    return lz_distill_checkpoint_save(r->a.out, r->signature, &r->progress, r->layers, r->trained, r->n_layers);
}

/* ---- setup ---------------------------------------------------------------------------------------- */

static lz_status check_args(const distill_args *a) {
    if (a->softmax_layers && a->retain_fraction >= 0)
        return lz_fail(LZ_ERR_INPUT, "--softmax-layers and --retain-fraction: give one of them");
    if (a->retain_by && strcmp(a->retain_by, "error") != 0)
        return lz_fail(LZ_ERR_INPUT, "--retain-by: '%s' is not supported (only 'error')", a->retain_by);
    if (a->retain_by && a->retain_fraction < 0)
        return lz_fail(LZ_ERR_INPUT, "--retain-by needs --retain-fraction");
    if (strcmp(a->feature_map, "softmax") != 0 && strcmp(a->feature_map, "exp") != 0)
        return lz_fail(LZ_ERR_INPUT, "--feature-map: '%s' is not softmax or exp", a->feature_map);
    if (strcmp(a->map_heads, "per-head") != 0 && strcmp(a->map_heads, "shared") != 0)
        return lz_fail(LZ_ERR_INPUT, "--map-heads: '%s' is not per-head or shared", a->map_heads);
    struct stat sb;
    char path[4096];
    snprintf(path, sizeof path, "%s/distill_state.json", a->out);
    if (a->resume && stat(path, &sb) != 0)
        return lz_fail(LZ_ERR_INPUT, "--resume: %s has no distill_state.json to continue from", a->out);
    snprintf(path, sizeof path, "%s/config.json", a->out);
    if (!a->resume && stat(path, &sb) == 0)
        return lz_fail(LZ_ERR_INPUT, "--out %s already holds a model (--resume continues its run)", a->out);
    return LZ_OK;
}

static void make_signature(distill_run *r) {
    const distill_args *a = &r->a;
    snprintf(r->signature, sizeof r->signature,
             "teacher=%s;data=%s;feature_dim=%d;feature_map=%s;map_heads=%s;window=%ld;meta_tokens=%ld;"
             "normalize=%d;softmax_layers=%s;retain_fraction=%g;calibration_steps=%ld;tokens=%ld;seq_len=%ld;"
             "batch=%ld;lr=%g;min_lr=%g;warmup=%ld;weight_decay=%g;seed=%ld;",
             a->teacher, a->data, r->lizard.feature_dim, a->feature_map, a->map_heads, a->window, a->meta,
             !a->no_normalize, a->softmax_layers ? a->softmax_layers : "-", a->retain_fraction, a->calibration_steps,
             a->tokens, a->seq_len, a->batch, r->opt.lr, r->opt.min_lr, r->opt.warmup, r->opt.weight_decay, a->seed);
}

/* Under mpirun: the balanced plan of the teacher's layers over the ranks
 * (every rank computes the same one), or --plan FILE. */
static lz_status make_plan(distill_run *r) {
    const lz_world *w = lz_world_get();
    r->rank = w->rank;
    if (w->size <= 1 && !r->a.plan_file)
        return LZ_OK;
    lz_config cfg;
    LZ_TRY(lz_config_load(r->a.teacher, &cfg));
    lz_plan_costs costs;
    LZ_TRY(lz_plan_costs_from_config(&cfg, (uint64_t)r->a.seq_len, (int)r->a.batch, &costs));
    uint64_t free_bytes[LZ_MAX_RANKS];
    for (int i = 0; i < LZ_MAX_RANKS; i++)
        free_bytes[i] = UINT64_MAX / 4; // host memory: the plan places by compute, not by fit
    if (r->a.plan_file) {
        LZ_TRY(lz_plan_load_text(r->a.plan_file, cfg.num_hidden_layers, &r->plan));
        lz_plan_account(&r->plan, &costs, free_bytes);
        LZ_TRY(lz_plan_validate(&r->plan));
        if (r->plan.n_ranks != w->size)
            return lz_fail(LZ_ERR_INPUT, "--plan %s: %d ranks, but mpirun started %d", r->a.plan_file,
                           r->plan.n_ranks, w->size);
    } else {
        LZ_TRY(lz_plan_make("balanced", &costs, w->size, free_bytes, &r->plan));
    }
    r->planned = true;
    return LZ_OK;
}

static lz_status setup(distill_run *r) {
    distill_args *a = &r->a;
    LZ_TRY(check_args(a));
    LZ_TRY(make_plan(r));
    LZ_TRY(lz_teacher_open(&r->teacher, a->teacher, (int)a->batch, (int)a->seq_len, r->planned ? &r->plan : NULL,
                           r->rank));
    lz_config cfg = r->teacher.model.cfg;
    r->n_layers = cfg.num_hidden_layers;
    const int d = cfg.head_dim, Hq = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads;
    const bool per_head = strcmp(a->map_heads, "per-head") == 0;
    r->lizard = (lz_lizard_config){.feature_dim = a->feature_dim > 0 ? (int)a->feature_dim : d,
                                   .feature_map = strcmp(a->feature_map, "exp") == 0 ? LZ_FMAP_EXP : LZ_FMAP_SOFTMAX,
                                   .window_size = (int)a->window, .num_meta_tokens = (int)a->meta,
                                   .gla_normalize = !a->no_normalize};
    const lz_lizard_geom g = {.Hq = Hq, .Hkv = Hkv, .Hs = Hkv, .n_wq = per_head ? Hq : 1,
                              .n_wk = per_head ? Hkv : 1, .d = d, .f = r->lizard.feature_dim, .w = (int)a->window,
                              .m = (int)a->meta, .normalize = !a->no_normalize,
                              .exp_map = r->lizard.feature_map == LZ_FMAP_EXP};
    // schedule
    const long per_step = a->batch * a->seq_len;
    r->opt = (lz_adamw_config){.lr = a->lr, .min_lr = a->min_lr >= 0 ? a->min_lr : a->lr / 10,
                               .weight_decay = a->weight_decay, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                               .total_steps = (a->tokens + per_step - 1) / per_step};
    r->opt.warmup = a->warmup >= 0 ? a->warmup : r->opt.total_steps / 20;
    if (a->calibration_steps < 0)
        a->calibration_steps = r->opt.total_steps / 10;
    // which layers learn
    if (a->retain_fraction < 0) {
        LZ_TRY(lz_config_set_softmax_layers(&cfg, a->softmax_layers ? a->softmax_layers : "none"));
        memcpy(r->progress.softmax, cfg.softmax_layer, sizeof r->progress.softmax);
        r->progress.chosen = true;
    }
    LZ_TRY(lz_distill_data_load(&r->data, a->data, a->teacher, cfg.vocab_size, (int)a->seq_len, (uint64_t)a->seed));
    r->layers = calloc((size_t)r->n_layers, sizeof *r->layers);
    r->ids = calloc((size_t)(a->batch * a->seq_len), sizeof(int32_t));
    if (!r->layers || !r->ids || lz_lizard_scratch_create_f32(&r->scratch, &g, (int)a->seq_len, cfg.hidden_size))
        return lz_fail(LZ_ERR_NOMEM, "distillation buffers: out of memory");
    for (int i = 0; i < r->n_layers; i++) {
        r->trained[i] = !r->progress.softmax[i];
        r->owned[i] = !r->planned || r->plan.layer_rank[i] == r->rank;
        if (r->trained[i] && lz_distill_layer_init(&r->layers[i], i, &g, cfg.hidden_size, (uint64_t)a->seed))
            return lz_fail(LZ_ERR_NOMEM, "layer %d tensors: out of memory", i);
    }
    make_signature(r);
    if (a->resume)
        LZ_TRY(lz_distill_checkpoint_load(a->out, r->signature, &r->progress, r->layers, r->trained, r->n_layers));
    if (a->log_path && r->rank == 0 && !(r->log = fopen(a->log_path, a->resume ? "a" : "w")))
        return lz_fail(LZ_ERR_IO, "--log %s: cannot open for writing", a->log_path);
    return LZ_OK;
}

static void teardown(distill_run *r) {
    for (int i = 0; r->layers && i < r->n_layers; i++)
        lz_distill_layer_free(&r->layers[i]);
    free(r->layers);
    free(r->ids);
    lz_lizard_scratch_free_f32(&r->scratch);
    lz_distill_data_free(&r->data);
    lz_teacher_close(&r->teacher);
    if (r->log)
        fclose(r->log);
}

/* ---- the run --------------------------------------------------------------------------------------- */

static lz_status train(distill_run *r) {
    const long total = r->opt.total_steps;
    const bool retain = r->a.retain_fraction >= 0;
    if (r->progress.step == 0)
        LZ_TRY(evaluate(r, "start"));
    if (r->rank == 0)
        fprintf(stderr, "lizard distill: %ld steps of %ld x %ld tokens from step %ld\n", total, r->a.batch,
                r->a.seq_len, r->progress.step);
    for (long step = r->progress.step; step < total; step++) {
        if (retain && !r->progress.chosen && step == r->a.calibration_steps)
            LZ_TRY(choose_softmax_layers(r));
        const double t0 = lz_now_seconds();
        LZ_TRY(run_pass(r, step, true, step));
        r->progress.step = step + 1;
        report_step(r, step, lz_now_seconds() - t0);
        if (r->a.checkpoint_every > 0 && (step + 1) % r->a.checkpoint_every == 0 && step + 1 < total)
            LZ_TRY(save(r));
        if (r->a.stop_at > 0 && step + 1 == r->a.stop_at && step + 1 < total) {
            LZ_TRY(save(r));
            if (r->rank == 0)
                fprintf(stderr, "lizard distill: stopped after step %ld of %ld; --resume continues\n", step + 1,
                        total);
            return LZ_OK;
        }
    }
    if (retain && !r->progress.chosen)
        LZ_TRY(choose_softmax_layers(r));
    LZ_TRY(evaluate(r, "end"));
    LZ_TRY(save(r));
    if (r->rank != 0)
        return LZ_OK;
    fprintf(stderr, "lizard distill: wrote %s (layers ", r->a.out);
    for (int i = 0; i < r->n_layers; i++)
        fputc(r->progress.softmax[i] ? 'S' : 'L', stderr);
    fprintf(stderr, ")\n");
    return LZ_OK;
}

lz_status lz_cmd_distill(int argc, char **argv) {
    distill_run r = {.a = {.feature_map = "softmax", .map_heads = "per-head", .window = 64, .meta = 4,
                           .tokens = 1000000, .seq_len = 512, .batch = 4, .warmup = -1, .log_every = 10,
                           .calibration_steps = -1, .eval_batches = 4, .lr = 1e-3, .min_lr = -1, .weight_decay = 0.01,
                           .retain_fraction = -1}};
    distill_args *a = &r.a;
    const lz_option options[] = {
        {"--teacher", LZ_OPT_STRING, "DIR", "teacher model folder (no lizard block)", &a->teacher, true, 0, 0},
        {"--data", LZ_OPT_STRING, "PATH", "token ids (1-D int32 .npy), a UTF-8 text file or a folder of *.txt",
         &a->data, true, 0, 0},
        {"--out", LZ_OPT_STRING, "DIR", "the distilled model folder (and its checkpoints)", &a->out, true, 0, 0},
        {"--feature-dim", LZ_OPT_INT, "F", "f: phi has 2f features (default head_dim)", &a->feature_dim, false, 1,
         LZ_TRAIN_MAX_F},
        {"--feature-map", LZ_OPT_STRING, "softmax|exp", "Hedgehog activation (default softmax)", &a->feature_map,
         false, 0, 0},
        {"--map-heads", LZ_OPT_STRING, "per-head|shared",
         "phi_q per query head and phi_k per kv head, or one map each (default per-head)", &a->map_heads, false, 0,
         0},
        {"--window", LZ_OPT_INT, "W", "window branch size (default 64)", &a->window, false, 1, LZ_TRAIN_MAX_W},
        {"--meta-tokens", LZ_OPT_INT, "M", "meta-memory logits (default 4)", &a->meta, false, 0, 4096},
        {"--no-gla-normalize", LZ_OPT_FLAG, "", "GLA without its denominator", &a->no_normalize, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|none", "layers kept as softmax attention (default none)",
         &a->softmax_layers, false, 0, 0},
        {"--retain-fraction", LZ_OPT_FLOAT, "X", "instead: keep this fraction of layers as softmax, chosen by error",
         &a->retain_fraction, false, 0, 1},
        {"--retain-by", LZ_OPT_STRING, "error", "how --retain-fraction chooses (largest relative MSE)",
         &a->retain_by, false, 0, 0},
        {"--calibration-steps", LZ_OPT_INT, "N", "steps before the softmax layers are chosen (default 10%)",
         &a->calibration_steps, false, 0, 1e12},
        {"--tokens", LZ_OPT_INT, "N", "training tokens (default 1000000)", &a->tokens, false, 1, 1e15},
        {"--seq-len", LZ_OPT_INT, "L", "tokens per sequence (default 512)", &a->seq_len, false, 1, 1 << 20},
        {"--batch", LZ_OPT_INT, "B", "sequences per step (default 4)", &a->batch, false, 1, 1 << 16},
        {"--lr", LZ_OPT_FLOAT, "X", "peak learning rate (default 1e-3)", &a->lr, false, 0, 10},
        {"--min-lr", LZ_OPT_FLOAT, "X", "end of the cosine decay (default lr / 10)", &a->min_lr, false, 0, 10},
        {"--warmup", LZ_OPT_INT, "N", "linear warmup steps (default 5% of the steps)", &a->warmup, false, 0, 1e12},
        {"--weight-decay", LZ_OPT_FLOAT, "X", "AdamW decoupled weight decay of the maps and gate (default 0.01)",
         &a->weight_decay, false, 0, 10},
        {"--seed", LZ_OPT_INT, "N", "initial tensors and data order (default 0)", &a->seed, false, 0,
         9007199254740991.0},
        {"--eval-batches", LZ_OPT_INT, "N", "held-out batches measured at the start, the end and for the choice "
         "of softmax layers (default 4)", &a->eval_batches, false, 1, 1e6},
        {"--log", LZ_OPT_STRING, "FILE", "JSON lines: one per step and per held-out evaluation", &a->log_path,
         false, 0, 0},
        {"--log-every", LZ_OPT_INT, "N", "progress line every N steps (default 10)", &a->log_every, false, 1, 1e12},
        {"--checkpoint-every", LZ_OPT_INT, "N", "write the folder and the run's state every N steps (default: at "
         "the end)", &a->checkpoint_every, false, 0, 1e12},
        {"--stop-at-step", LZ_OPT_INT, "N", "checkpoint after step N and stop (--resume continues)", &a->stop_at,
         false, 0, 1e12},
        {"--plan", LZ_OPT_STRING, "FILE", "under mpirun: a hand-written placement plan (default balanced)",
         &a->plan_file, false, 0, 0},
        {"--resume", LZ_OPT_FLAG, "", "continue the run checkpointed in --out", &a->resume, false, 0, 0},
    };
    const lz_command_spec spec = {"distill", "stage-1 attention distillation of a teacher into a Lizard model",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    lz_status s = setup(&r);
    if (s == LZ_OK)
        s = train(&r);
    teardown(&r);
    return s;
}
