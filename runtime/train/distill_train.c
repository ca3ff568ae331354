/* distill_train.c - the steps of a distillation run: a batch through the
 * teacher with every active layer trained as it passes, progress and log
 * lines, held-out evaluations, the choice of softmax layers by error,
 * checkpoints (gathered on rank 0 under mpirun) and the final folder. */
#include <math.h>   // round, isfinite
#include <stdio.h>  // fprintf
#include <string.h> // memset, memcpy

#include "clock.h"          // lz_now_seconds
#include "distill_output.h" // lz_distill_write_model, lz_make_dirs
#include "distill_run.h"
#include "handoff.h"        // lz_handoff_send, lz_handoff_recv
#include "mpi_world.h"      // lz_world_sum, LZ_TAG_TENSORS

/* ---- one pass of the teacher: train (or only measure) every active layer --------------- */

typedef struct {
    lz_distill_run *r;
    bool learn;
    long step;
} pass_ctx;

/* Training stops at the first NaN or infinity in a layer's loss or gradient, before the
 * update that would spread it: the tensors and the last checkpoint stay as they were. */
static lz_status check_finite(const lz_distill_run *r, const lz_distill_layer *l, const pass_ctx *c, double sse) {
    const char *what = NULL;
    char where[160];
    if (!isfinite(sse))
        what = "loss";
    for (int j = 0; !what && c->learn && j < LZ_DT_COUNT; j++)
        if (lz_first_nonfinite(l->grad[j], LZ_DTYPE_F32, l->numel[j]) < l->numel[j]) {
            snprintf(where, sizeof where, "gradient of %s", lz_distill_tensor_names[j]);
            what = where;
        }
    if (!what)
        return LZ_OK;
    char kept[4200];
    if (r->saved_step > 0)
        snprintf(kept, sizeof kept, "the checkpoint of step %ld in %s is kept", r->saved_step, r->a.out);
    else
        snprintf(kept, sizeof kept, "no checkpoint was written");
    if (c->learn)
        return lz_fail(LZ_ERR_INPUT, "step %ld: layer %d: the %s is not finite%s; training stopped before the "
                       "update (a smaller --lr may help); %s", c->step + 1, l->layer, what,
                       isfinite(sse) ? "" : isnan(sse) ? " (nan)" : " (inf)", kept);
    return lz_fail(LZ_ERR_INPUT, "a held-out batch after step %ld: layer %d: the loss is not finite; %s",
                   r->progress.step, l->layer, kept);
}

static bool is_active(const lz_distill_run *r, int i) {
    return r->trained[i] && !(r->progress.chosen && r->progress.softmax[i]);
}

// lz_teacher_layer_fn
static lz_status layer_pass(void *ctx, const lz_teacher_acts *acts) {
    pass_ctx *c = ctx;
    lz_distill_run *r = c->r;
    const int i = acts->layer;
    if (!is_active(r, i) || !r->owned[i])
        return LZ_OK;
    lz_distill_layer *l = &r->layers[i];
    const lz_lizard_geom *g = &l->geom;
    const double n_out = (double)r->teacher.batch * r->teacher.seq_len * g->Hq * g->d;
    double sse = 0, energy = 0;
    LZ_TRY(lz_distill_device_layer(r->dev, l, acts, c->learn, (float)(1.0 / n_out), &sse, &energy));
    LZ_TRY(check_finite(r, l, c, sse));
    r->mse[i] = sse / n_out;
    r->rel[i] = energy > 0 ? sse / energy : 0;
    if (c->learn)
        lz_distill_layer_adamw(l, &r->opt, c->step);
    return LZ_OK;
}

static int layers_to_run(const lz_distill_run *r) {
    int last = -1;
    for (int i = 0; i < r->n_layers; i++)
        if (is_active(r, i))
            last = i;
    return last + 1;
}

/* One batch through the teacher; every rank ends with every layer's losses. */
static lz_status run_pass(lz_distill_run *r, long data_step, bool learn, long step) {
    lz_distill_data_batch(&r->data, (uint64_t)data_step, (int)r->a.batch, r->ids);
    memset(r->mse, 0, sizeof r->mse);
    memset(r->rel, 0, sizeof r->rel);
    pass_ctx c = {r, learn, step};
    LZ_TRY(lz_teacher_run(&r->teacher, r->ids, layers_to_run(r), (uint64_t)data_step + 1, layer_pass, &c));
    if (!r->planned)
        return LZ_OK;
    // each layer's losses come from its owner alone; the others add zeros
    LZ_TRY(lz_world_sum(r->mse, r->n_layers));
    return lz_world_sum(r->rel, r->n_layers);
}

/* ---- reporting ----------------------------------------------------------------------------- */

/* " 0:1.2e-03 ..." or "\"0\": 0.0012, ..." of the active layers: the MSE,
 * or the relative error (SSE / sum of target^2) when `relative`. */
static void log_losses(lz_distill_run *r, FILE *fp, bool json, bool relative) {
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

static void report_step(lz_distill_run *r, long step, double seconds) {
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
static lz_status evaluate(lz_distill_run *r, const char *label) {
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

static lz_status choose_softmax_layers(lz_distill_run *r) {
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
static lz_status gather_layers(lz_distill_run *r) {
    const uint64_t step = (uint64_t)r->progress.step;
    for (int i = 0; i < r->n_layers; i++) {
        const int owner = r->plan.layer_rank[i];
        if (!r->trained[i] || owner == 0 || (r->rank != owner && r->rank != 0))
            continue;
        lz_distill_layer *l = &r->layers[i];
        for (int j = 0; j < LZ_DT_COUNT; j++) {
            float *parts[3] = {l->param[j], l->m1[j], l->m2[j]};
            for (int k = 0; k < 3; k++) {
                if (r->rank == owner)
                    LZ_TRY(lz_handoff_send(NULL, parts[k], l->numel[j], 0, LZ_TAG_TENSORS, step));
                else
                    LZ_TRY(lz_handoff_recv(NULL, parts[k], l->numel[j], owner, LZ_TAG_TENSORS, step));
            }
        }
    }
    return LZ_OK;
}

static lz_status save(lz_distill_run *r) {
    if (r->planned)
        LZ_TRY(gather_layers(r));
    if (r->rank != 0) {
        r->saved_step = r->progress.step; // rank 0 writes
        return LZ_OK;
    }
    LZ_TRY(lz_make_dirs(r->a.out, "--out"));
    if (r->progress.chosen)
        LZ_TRY(lz_distill_write_model(r->a.out, r->a.teacher, r->teacher.model.ckpt, r->layers,
                                      r->progress.softmax, r->n_layers, &r->lizard));
    LZ_TRY(lz_distill_checkpoint_save(r->a.out, r->signature, &r->progress, r->layers, r->trained, r->n_layers));
    r->saved_step = r->progress.step;
    return LZ_OK;
}

lz_status lz_distill_train(lz_distill_run *r) {
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
        if (r->a.checkpoint_every > 0 && (step + 1) % r->a.checkpoint_every == 0 && step + 1 < total) {
            LZ_TRY(save(r));
            if (r->rank == 0)
                fprintf(stderr, "lizard distill: checkpoint after step %ld in %s\n", step + 1, r->a.out);
        }
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
