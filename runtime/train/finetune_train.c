/* finetune_train.c - the steps of a fine-tuning run: a batch's loss and
 * gradient (through the pipeline, finetune_pipeline.c), global-norm clipping,
 * AdamW of the tensors this rank owns, progress and log lines (rank 0),
 * held-out loss, checkpoints and the output folders (rank 0 writes). */
#include <math.h>   // sqrt, exp
#include <stdio.h>  // fprintf

#include "clock.h"          // lz_now_seconds
#include "distill_output.h" // lz_make_dirs
#include "finetune_run.h"

/* The mean next-token cross-entropy of a batch of `data` (step `data_step`);
 * with `learn`, every owned gradient = d(mean)/d(param). */
static lz_status batch_loss(lz_finetune_run *r, lz_distill_data *data, long data_step, bool learn, double *mean) {
    const double n_pred = (double)r->a.batch * (r->a.seq_len - 1);
    lz_distill_data_batch(data, (uint64_t)data_step, (int)r->a.batch, r->ids);
    double sum;
    LZ_TRY(lz_ft_pipeline_batch(r, r->ids, learn, data_step, (float)(1.0 / n_pred), &sum));
    *mean = sum / n_pred;
    return LZ_OK;
}

/* Scales the gradients to global norm `clip` when above it (clip 0: off); *norm = the norm before. */
static lz_status clip_gradients(lz_finetune_run *r, double *norm) {
    lz_ft_model *m = &r->model;
    LZ_TRY(lz_ft_grad_norm(r, norm));
    const double clip = r->a.clip;
    if (clip > 0 && *norm > clip)
        for (int i = 0; i < m->n_params; i++)
            for (size_t e = 0; e < m->params[i].n; e++)
                m->params[i].g[e] = (float)(m->params[i].g[e] * (clip / *norm));
    return LZ_OK;
}

/* The checkpoint (rank 0 writes what every owner sends it). */
static lz_status checkpoint(lz_finetune_run *r) {
    LZ_TRY(lz_ft_share_params(r));
    if (r->rank != 0)
        return LZ_OK;
    LZ_TRY(lz_make_dirs(r->a.out, "--out"));
    return lz_finetune_checkpoint_save(r);
}

/* The held-out loss: --eval-batches batches of --valid (or those after the training batches of --data). */
static lz_status held_out(lz_finetune_run *r, const char *when) {
    if (r->a.eval_batches <= 0)
        return LZ_OK;
    lz_distill_data *data = r->has_valid ? &r->valid : &r->data;
    const long first = r->has_valid ? 0 : r->opt.total_steps;
    double sum = 0;
    for (long i = 0; i < r->a.eval_batches; i++) {
        double loss;
        LZ_TRY(batch_loss(r, data, first + i, false, &loss));
        sum += loss;
    }
    const double mean = sum / (double)r->a.eval_batches;
    if (r->rank == 0)
        fprintf(stderr, "lizard finetune: %s held-out loss %.4f (perplexity %.2f)\n", when, mean, exp(mean));
    if (r->log) {
        fprintf(r->log, "{\"eval\": \"%s\", \"step\": %ld, \"valid_loss\": %.6f, \"valid_ppl\": %.4f}\n", when,
                r->step, mean, exp(mean));
        fflush(r->log);
    }
    return LZ_OK;
}

static void report_step(lz_finetune_run *r, double loss, double grad_norm, double seconds) {
    const long step = r->step, total = r->opt.total_steps, tokens = r->a.batch * r->a.seq_len;
    const double tps = seconds > 0 ? (double)tokens / seconds : 0, lr = lz_distill_lr(&r->opt, step - 1);
    if (r->log) {
        fprintf(r->log,
                "{\"step\": %ld, \"tokens\": %ld, \"lr\": %.6g, \"tok_per_s\": %.1f, \"loss\": %.6f, "
                "\"grad_norm\": %.6g}\n",
                step, step * tokens, lr, tps, loss, grad_norm);
        fflush(r->log);
    }
    if (r->rank == 0 && (step % r->a.log_every == 0 || step == total))
        fprintf(stderr, "lizard finetune: step %ld/%ld  lr %.2e  %.0f tok/s  loss %.4f  grad norm %.3g\n", step, total,
                lr, tps, loss, grad_norm);
}

lz_status lz_finetune_train(lz_finetune_run *r) {
    lz_ft_model *m = &r->model;
    if (r->step == 0)
        LZ_TRY(held_out(r, "start"));
    while (r->step < r->opt.total_steps) {
        if (r->a.stop_at > 0 && r->step >= r->a.stop_at) { // an interrupted run: the checkpoint is all it leaves
            LZ_TRY(checkpoint(r));
            if (r->rank == 0)
                fprintf(stderr, "lizard finetune: stopped after step %ld (--resume continues)\n", r->step);
            return LZ_OK;
        }
        const double t0 = lz_now_seconds();
        double loss, norm;
        LZ_TRY(batch_loss(r, &r->data, r->step, true, &loss));
        LZ_TRY(clip_gradients(r, &norm));
        for (int i = 0; i < m->n_params; i++) {
            lz_ft_param *p = &m->params[i];
            if (lz_ft_owns(m, p))
                lz_adamw_tensor(p->w, p->g, p->m1, p->m2, p->n, &r->opt, r->step, p->decay);
        }
        r->step++;
        report_step(r, loss, norm, lz_now_seconds() - t0);
        if (r->a.checkpoint_every > 0 && r->step % r->a.checkpoint_every == 0 && r->step < r->opt.total_steps)
            LZ_TRY(checkpoint(r));
    }
    LZ_TRY(held_out(r, "end"));
    LZ_TRY(checkpoint(r));
    if (r->rank != 0)
        return LZ_OK;
    if (r->a.adapter_out)
        LZ_TRY(lz_finetune_write_adapter(r));
    LZ_TRY(lz_finetune_write_model(r));
    fprintf(stderr, "lizard finetune: wrote %s%s%s\n", r->a.out, r->a.adapter_out ? " and " : "",
            r->a.adapter_out ? r->a.adapter_out : "");
    return LZ_OK;
}
