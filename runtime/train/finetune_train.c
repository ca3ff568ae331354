/* finetune_train.c - the steps of a fine-tuning run: a batch's loss and
 * gradient (through the pipeline, finetune_pipeline.c), global-norm clipping
 * folded into AdamW on the backend for the tensors this rank owns, progress
 * and log lines with tokens/s and the share of the GEMM bound (rank 0),
 * held-out loss, checkpoints and the output folders (rank 0 writes). A
 * non-finite loss or gradient stops the run at that step; the last
 * checkpoint stays as it was. */
#include <math.h>  // sqrt, exp, pow, isfinite
#include <stdio.h> // fprintf

#include "clock.h"          // lz_now_seconds
#include "distill_output.h" // lz_make_dirs
#include "finetune_run.h"

double lz_finetune_flops_per_token(const lz_model *m, int T) {
    const lz_config *c = &m->cfg;
    const double C = c->hidden_size, I = c->intermediate_size, d = c->head_dim;
    const double Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    const double per_layer = C * (Hq * d) * 2 + C * (Hkv * d) * 2 + 3 * C * I; // q, o; k, v; gate, up, down
    double weights = (double)c->vocab_size * C, attention = 0;                 // the LM head
    const double ctx = (T + 1) / 2.0;                                          // a causal row's keys, on average
    for (int l = 0; l < c->num_hidden_layers; l++) {
        weights += per_layer;
        if (c->softmax_layer[l]) {
            attention += 4 * ctx * Hq * d; // Q K^T and P V
        } else {
            const double w = c->lizard.window_size < ctx ? c->lizard.window_size : ctx, F = 2.0 * c->lizard.feature_dim;
            attention += 4 * w * Hq * d;                        // the window branch
            attention += 4 * 32 * Hq * (F + d) + 4 * Hq * F * d; // the GLA: in-chunk products and the state's
        }
    }
    // forward and backward to the inputs: 2 x 2 FLOP per weight; attention's backward is twice its forward
    return 4 * weights + 3 * attention;
}

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

/* One AdamW update of every owned tensor, the gradients scaled by `clip_scale` on the way. */
static lz_status update(lz_finetune_run *r, float clip_scale) {
    lz_ft_model *m = &r->m;
    const lz_adamw_config *c = &r->opt;
    const long t = r->step + 1; // bias correction counts from 1
    lz_adamw_update u = {.lr = lz_distill_lr(c, r->step), .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                         .bias1 = 1 - pow(c->beta1, (double)t), .bias2 = 1 - pow(c->beta2, (double)t),
                         .grad_scale = clip_scale};
    for (int i = 0; i < m->params.n_params; i++) {
        const lz_ft_param *p = &m->params.params[i];
        if (!p->owned || p->frozen)
            continue;
        u.weight_decay = p->decay ? c->weight_decay : 0;
        LZ_TRY(m->ops->backward->adamw(m->be, p->w, p->m1, p->m2, p->g, p->n, &u));
    }
    return lz_ft_params_sync_model(&m->params, &m->model);
}

lz_status lz_finetune_step(lz_finetune_run *r, const int32_t *ids, double *loss, double *norm) {
    const double n_pred = (double)r->a.batch * (r->a.seq_len - 1);
    double sum;
    int bad_layer;
    LZ_TRY(lz_ft_pipeline_batch(r, ids, true, r->step, (float)(1.0 / n_pred), &sum));
    *loss = sum / n_pred;
    LZ_TRY(lz_ft_grad_norm(r, norm, &bad_layer));
    if (!isfinite(*loss) || !isfinite(*norm)) {
        if (bad_layer >= 0)
            return lz_fail(LZ_ERR_INPUT, "step %ld: the gradient is not finite (first in layer %d; loss %g); the last "
                           "checkpoint is kept (a lower --lr?)", r->step + 1, bad_layer, *loss);
        return lz_fail(LZ_ERR_INPUT, "step %ld: the loss is %g; the last checkpoint is kept (a lower --lr?)",
                       r->step + 1, *loss);
    }
    const double clip = r->a.clip;
    LZ_TRY(update(r, clip > 0 && *norm > clip ? (float)(clip / *norm) : 1.0f));
    r->step++;
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
    // the share of the bound: this rank's FLOP rate against its GEMM rate (each rank runs its share of the layers)
    const double bound = r->m.gemm_rate > 0 && r->m.flops_per_token > 0
                             ? r->m.gemm_rate * r->size / r->m.flops_per_token : 0;
    if (r->log) {
        fprintf(r->log,
                "{\"step\": %ld, \"tokens\": %ld, \"lr\": %.6g, \"tok_per_s\": %.1f, \"bound_tok_per_s\": %.1f, "
                "\"loss\": %.6f, \"grad_norm\": %.6g}\n",
                step, step * tokens, lr, tps, bound, loss, grad_norm);
        fflush(r->log);
    }
    if (r->rank != 0 || !(step % r->a.log_every == 0 || step == total))
        return;
    if (bound > 0)
        fprintf(stderr, "lizard finetune: step %ld/%ld  lr %.2e  %.0f tok/s (%.0f%% of the GEMM bound)  loss %.4f  "
                "grad norm %.3g\n", step, total, lr, tps, 100 * tps / bound, loss, grad_norm);
    else
        fprintf(stderr, "lizard finetune: step %ld/%ld  lr %.2e  %.0f tok/s  loss %.4f  grad norm %.3g\n", step, total,
                lr, tps, loss, grad_norm);
}

lz_status lz_finetune_train(lz_finetune_run *r) {
    if (r->step == 0)
        LZ_TRY(held_out(r, "start"));
    double seconds = 0;
    long steps_timed = 0;
    while (r->step < r->opt.total_steps) {
        if (r->a.stop_at > 0 && r->step >= r->a.stop_at) { // an interrupted run: the checkpoint is all it leaves
            LZ_TRY(checkpoint(r));
            if (r->rank == 0)
                fprintf(stderr, "lizard finetune: stopped after step %ld (--resume continues)\n", r->step);
            return LZ_OK;
        }
        const double t0 = lz_now_seconds();
        double loss, norm;
        lz_distill_data_batch(&r->data, (uint64_t)r->step, (int)r->a.batch, r->ids);
        LZ_TRY(lz_finetune_step(r, r->ids, &loss, &norm));
        const double dt = lz_now_seconds() - t0;
        report_step(r, loss, norm, dt);
        if (r->step > 1) { // the first step warms the backend
            seconds += dt;
            steps_timed++;
        }
        if (r->a.checkpoint_every > 0 && r->step % r->a.checkpoint_every == 0 && r->step < r->opt.total_steps)
            LZ_TRY(checkpoint(r));
    }
    if (r->rank == 0 && steps_timed > 0)
        fprintf(stderr, "lizard finetune: %.0f tok/s over %ld steps\n",
                (double)steps_timed * r->a.batch * r->a.seq_len / seconds, steps_timed);
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
