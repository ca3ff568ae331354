/* finetune_setup.c - `lizard finetune`'s flags checked, the model, its LoRA,
 * the data, --resume and the log (finetune_run.h). Every check of the input
 * runs before any folder is made. Under mpirun every rank loads the whole
 * model and runs its range of layers (finetune_pipeline.c). */
#include <stdio.h>    // snprintf
#include <stdlib.h>   // calloc, free
#include <string.h>   // strcmp, strchr, memset

#include "distill_output.h" // lz_check_out_folder
#include "finetune_run.h"
#include "mpi_world.h" // lz_world_get

/* --lora-targets: "q,k,v,o,gate,up,down" (or PEFT's names, q_proj ...) */
static lz_status parse_targets(const char *spec, bool *target) {
    static const char *const short_names[LZ_LIN_COUNT] = {"q", "k", "v", "o", "gate", "up", "down"};
    memset(target, 0, sizeof(bool) * LZ_LIN_COUNT);
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", spec) >= (int)sizeof buf || !buf[0])
        return lz_fail(LZ_ERR_INPUT, "--lora-targets: '%s' is not a list of modules", spec);
    for (char *tok = buf, *next; tok; tok = next) {
        if ((next = strchr(tok, ',')))
            *next++ = '\0';
        int found = -1;
        for (int j = 0; j < LZ_LIN_COUNT; j++)
            if (strcmp(tok, short_names[j]) == 0 || strcmp(tok, lz_lin_module[j]) == 0)
                found = j;
        if (found < 0)
            return lz_fail(LZ_ERR_INPUT, "--lora-targets: unknown module '%s' (q, k, v, o, gate, up, down)", tok);
        target[found] = true;
    }
    return LZ_OK;
}

static lz_status check_args(lz_finetune_run *r, const lz_config *cfg, lz_lora_config *lora) {
    const lz_finetune_args *a = &r->a;
    if (!cfg->has_lizard)
        return lz_fail(LZ_ERR_INPUT, "--model %s: config.json has no lizard block (run lizard distill first)",
                       a->model);
    if ((cfg->sliding_window > 0 && a->seq_len > cfg->sliding_window) || cfg->attention_bias || cfg->mlp_bias)
        return lz_fail(LZ_ERR_INPUT, "--model %s: biases, or a sliding window shorter than --seq-len, are not "
                       "supported by finetune", a->model);
    LZ_TRY(parse_targets(a->targets, lora->target));
    int smallest = LZ_TRAIN_MAX_RANK;
    for (int j = 0; j < LZ_LIN_COUNT; j++)
        if (lora->target[j]) {
            int out, in;
            lz_lin_shape(cfg, j, &out, &in);
            smallest = in < smallest ? in : smallest;
            smallest = out < smallest ? out : smallest;
        }
    if (a->lora_rank < 1 || a->lora_rank > smallest)
        return lz_fail(LZ_ERR_INPUT, "--lora-rank %ld: must be 1 .. %d (the smallest dimension of a targeted "
                       "module, at most %d)", a->lora_rank, smallest, LZ_TRAIN_MAX_RANK);
    if (cfg->lizard.feature_dim > LZ_TRAIN_MAX_F || cfg->head_dim > LZ_TRAIN_MAX_D ||
        cfg->lizard.window_size > LZ_TRAIN_MAX_W)
        return lz_fail(LZ_ERR_INPUT, "--model %s: feature_dim, head_dim or window_size above what training supports "
                       "(%d, %d, %d)", a->model, LZ_TRAIN_MAX_F, LZ_TRAIN_MAX_D, LZ_TRAIN_MAX_W);
    if (a->lora_dropout < 0 || a->lora_dropout >= 1)
        return lz_fail(LZ_ERR_INPUT, "--lora-dropout %g: must be in [0, 1)", a->lora_dropout);
    if (a->seq_len < 2 || a->seq_len > cfg->max_position_embeddings)
        return lz_fail(LZ_ERR_INPUT, "--seq-len %ld: must be 2 .. %d (max_position_embeddings)", a->seq_len,
                       cfg->max_position_embeddings);
    if (a->clip < 0)
        return lz_fail(LZ_ERR_INPUT, "--clip %g: must be >= 0 (0: off)", a->clip);
    LZ_TRY(lz_check_out_folder(a->out, "finetune_state.json", a->resume));
    if (a->adapter_out && strcmp(a->adapter_out, a->out) == 0)
        return lz_fail(LZ_ERR_INPUT, "--adapter-out must differ from --out");
    lora->rank = (int)a->lora_rank, lora->alpha = a->lora_alpha, lora->dropout = a->lora_dropout;
    lora->freeze_lizard = a->freeze_lizard, lora->seed = (uint64_t)a->seed;
    return LZ_OK;
}

static void make_signature(lz_finetune_run *r) {
    const lz_finetune_args *a = &r->a;
    snprintf(r->signature, sizeof r->signature,
             "model=%s;data=%s;tokens=%ld;seq_len=%ld;batch=%ld;lr=%g;warmup=%ld;min_lr=%g;weight_decay=%g;clip=%g;"
             "lora_rank=%ld;lora_alpha=%g;lora_dropout=%g;lora_targets=%s;freeze_lizard=%d;seed=%ld;"
             "softmax_layers=%s;",
             a->model, a->data, a->tokens, a->seq_len, a->batch, a->lr, a->warmup, r->opt.min_lr, a->weight_decay,
             a->clip, a->lora_rank, a->lora_alpha, a->lora_dropout, a->targets, a->freeze_lizard, a->seed,
             a->softmax_layers ? a->softmax_layers : "");
}

lz_status lz_finetune_setup(lz_finetune_run *r) {
    lz_finetune_args *a = &r->a;
    const lz_world *world = lz_world_get();
    r->rank = world->rank;
    const lz_train_ops *ops;
    LZ_TRY(lz_train_ops_get(a->device, &ops));
    LZ_TRY(lz_train_need(ops, ops->finetune, "lizard finetune"));
    lz_config cfg;
    LZ_TRY(lz_config_load(a->model, &cfg));
    if (a->softmax_layers)
        LZ_TRY(lz_config_set_softmax_layers(&cfg, a->softmax_layers));
    lz_lora_config lora = {0};
    LZ_TRY(check_args(r, &cfg, &lora));
    if (world->size > cfg.num_hidden_layers)
        return lz_fail(LZ_ERR_INPUT, "mpirun -np %d: more ranks than the model's %d layers", world->size,
                       cfg.num_hidden_layers);
    LZ_TRY(lz_distill_data_load(&r->data, a->data, a->model, cfg.vocab_size, (int)a->seq_len, (uint64_t)a->seed));
    if (a->valid) {
        LZ_TRY(lz_distill_data_load(&r->valid, a->valid, a->model, cfg.vocab_size, (int)a->seq_len, (uint64_t)a->seed));
        r->has_valid = true;
    }
    LZ_TRY(lz_ft_model_load(&r->model, a->model, &cfg, &lora, (int)a->seq_len, world->size, ops));
    lz_ft_stage_range(cfg.num_hidden_layers, world->size, world->rank, &r->model.first, &r->model.last);
    const long per_step = a->batch * a->seq_len;
    r->opt = (lz_adamw_config){.lr = a->lr, .min_lr = a->min_lr >= 0 ? a->min_lr : a->lr / 10,
                               .weight_decay = a->weight_decay, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                               .total_steps = (a->tokens + per_step - 1) / per_step};
    r->opt.warmup = a->warmup >= 0 ? a->warmup : r->opt.total_steps / 20;
    if (!(r->ids = calloc((size_t)per_step, sizeof(int32_t))))
        return lz_fail(LZ_ERR_NOMEM, "fine-tuning batch: out of memory");
    make_signature(r);
    if (a->resume)
        LZ_TRY(lz_finetune_checkpoint_load(r));
    if (a->log_path && r->rank == 0 && !(r->log = fopen(a->log_path, a->resume ? "a" : "w")))
        return lz_fail(LZ_ERR_IO, "--log %s: cannot open for writing", a->log_path);
    return LZ_OK;
}

void lz_finetune_teardown(lz_finetune_run *r) {
    lz_ft_model_free(&r->model);
    lz_distill_data_free(&r->data);
    if (r->has_valid)
        lz_distill_data_free(&r->valid);
    free(r->ids);
    if (r->log)
        fclose(r->log);
}
