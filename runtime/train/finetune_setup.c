/* finetune_setup.c - `lizard finetune`'s flags checked, the backend, this
 * rank's part of the model and what it trains, the data, --resume and the log
 * (finetune_run.h). Every check of the input runs before any folder is made.
 * Under mpirun each rank loads only its layers (lz_model_load_stage). */
#include <stdio.h>    // snprintf
#include <stdlib.h>   // calloc, free
#include <string.h>   // strcmp, strchr, memset, strncmp
#include <sys/stat.h> // stat

#include "checkpoint_unit.h" // lz_ckpt_exists
#include "distill_output.h"  // lz_check_out_folder
#include "engine.h"         // lz_open_backend
#include "finetune_run.h"
#include "model_load.h"     // lz_model_load_stage
#include "mpi_world.h"      // lz_world_get
#include "train_ops.h"      // lz_train_ops_get: the Lizard kernels' GLA precision

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

/* An output folder flag: absent, or a folder; never a file, never a model folder's place (adapter). */
static lz_status check_folder_flag(const char *flag, const char *path, bool refuse_model) {
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return LZ_OK;
    if (!S_ISDIR(sb.st_mode))
        return lz_fail(LZ_ERR_INPUT, "%s %s: exists and is not a folder", flag, path);
    char file[4096];
    snprintf(file, sizeof file, "%s/config.json", path);
    if (refuse_model && stat(file, &sb) == 0)
        return lz_fail(LZ_ERR_INPUT, "%s %s: holds a model (config.json); an adapter goes in a folder of its own", flag,
                       path);
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
    if (a->micro_batch < 0 || (a->micro_batch > 0 && a->batch % a->micro_batch != 0))
        return lz_fail(LZ_ERR_INPUT, "--micro-batch %ld: must divide --batch %ld", a->micro_batch, a->batch);
    if (a->gla_precision && strcmp(a->gla_precision, "fp32") != 0 && strcmp(a->gla_precision, "bf16") != 0)
        return lz_fail(LZ_ERR_INPUT, "--gla-precision %s: expected fp32 or bf16", a->gla_precision);
    LZ_TRY(check_folder_flag("--out", a->out, false));
    LZ_TRY(check_folder_flag("--adapter-out", a->adapter_out, true));
    if (!a->resume)
        LZ_TRY(lz_check_out_folder(a->out, LZ_FINETUNE_STATE, false));
    else if (!lz_ckpt_exists(a->out, LZ_FINETUNE_STATE))
        return lz_fail(LZ_ERR_INPUT, "--resume: %s has no %s to continue from", a->out, LZ_FINETUNE_STATE);
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
             a->model, a->data, a->tokens, a->seq_len, a->batch, a->lr, r->opt.warmup, r->opt.min_lr,
             a->weight_decay, a->clip, a->lora_rank, a->lora_alpha, a->lora_dropout, a->targets, a->freeze_lizard,
             a->seed, a->softmax_layers ? a->softmax_layers : "");
}

/* The held-out text: its load errors name --valid, not --data. */
static lz_status load_valid(lz_finetune_run *r, const lz_config *cfg) {
    const lz_finetune_args *a = &r->a;
    struct stat sb;
    if (stat(a->valid, &sb) != 0)
        return lz_fail(LZ_ERR_INPUT, "--valid %s: no such file or folder", a->valid);
    lz_status s = lz_distill_data_load(&r->valid, a->valid, a->model, cfg->vocab_size, (int)a->seq_len,
                                       (uint64_t)a->seed);
    if (s != LZ_OK && strncmp(lz_error_message(), "--data ", 7) == 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", lz_error_message() + 7);
        lz_error_clear();
        return lz_fail(s, "--valid %s", msg);
    }
    r->has_valid = s == LZ_OK;
    return s;
}

/* The micro-batch's lz_batch arrays: sequence s in slot s, rows s*T .., positions from 0. */
static lz_status alloc_batch(lz_ft_model *m) {
    const size_t n = (size_t)m->micro, N = n * (size_t)m->T;
    m->slot = calloc(n, sizeof(int32_t)), m->start = calloc(n, sizeof(int32_t));
    m->len = calloc(n, sizeof(int32_t)), m->pos = calloc(n, sizeof(int32_t));
    m->token_pos = calloc(N, sizeof(int32_t)), m->targets = calloc(N, sizeof(int32_t));
    if (!m->slot || !m->start || !m->len || !m->pos || !m->token_pos || !m->targets)
        return lz_fail(LZ_ERR_NOMEM, "micro-batch arrays: out of memory");
    for (int s = 0; s < m->micro; s++) {
        m->slot[s] = s, m->start[s] = s * m->T, m->len[s] = m->T;
        for (int t = 0; t < m->T; t++)
            m->token_pos[(size_t)s * m->T + t] = t;
    }
    return LZ_OK;
}

/* Each layer's input of every micro-batch in flight (this rank's layers). */
static lz_status alloc_saves(lz_ft_model *m) {
    const int L = m->cfg.num_hidden_layers;
    m->saves = calloc((size_t)m->in_flight * L, sizeof(void *));
    if (!m->saves)
        return lz_fail(LZ_ERR_NOMEM, "layer inputs: out of memory");
    const size_t bytes = (size_t)m->micro * m->T * m->cfg.hidden_size * m->ops->act_size;
    for (int i = 0; i < m->in_flight; i++)
        for (int l = m->first; l < m->last; l++)
            LZ_TRY(m->ops->alloc(m->be, bytes, &m->saves[(size_t)i * L + l]));
    return LZ_OK;
}

/* The model of this rank on the backend, and what its steps run in. */
static lz_status open_model(lz_finetune_run *r, const lz_lora_config *lora) {
    const lz_finetune_args *a = &r->a;
    lz_ft_model *m = &r->m;
    LZ_TRY(lz_open_backend(a->device, a->dtype, &m->be, &m->ops));
    if (!m->ops->backward)
        return lz_fail(LZ_ERR_INPUT, "--device %s: this backend has no training ops", a->device);
    if (strcmp(a->device, "cuda") == 0) { // the Lizard layers' GLA products: bf16 with bf16 weights unless told
        const lz_train_ops *tops;
        LZ_TRY(lz_train_ops_get("cuda", &tops));
        const char *gla = a->gla_precision ? a->gla_precision : strcmp(a->dtype, "fp32") == 0 ? "fp32" : "bf16";
        LZ_TRY(tops->set_gla_bf16(strcmp(gla, "bf16") == 0));
    } else if (a->gla_precision && strcmp(a->gla_precision, "bf16") == 0) {
        return lz_fail(LZ_ERR_INPUT, "--gla-precision bf16: the CPU backend computes the GLA in fp32 only");
    }
    lz_stage_parts parts;
    lz_stage_parts_all(&parts, m->cfg.num_hidden_layers);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        parts.layer[l] = l >= m->first && l < m->last;
    parts.embed = r->rank == 0;
    parts.head = r->rank == r->size - 1;
    if (a->model)
        LZ_TRY(lz_model_load_stage(&m->model, a->model, &m->cfg, m->ops, m->be, &parts, NULL));
    else
        LZ_TRY(lz_model_init_random_stage(&m->model, &m->cfg, m->ops, m->be, &parts, (uint64_t)a->seed));
    m->model_loaded = true;
    LZ_TRY(lz_state_create(&m->state, &m->model, m->micro, m->T));
    LZ_TRY(lz_workspace_create(&m->ws, &m->model, m->micro * m->T, 1));
    LZ_TRY(lz_ft_params_create(&m->params, &m->model, lora, m->first, m->last, m->micro));
    LZ_TRY(lz_train_work_create(&m->work, &m->model, m->micro * m->T, lora->rank, m->params.layers));
    LZ_TRY(alloc_batch(m));
    LZ_TRY(alloc_saves(m));
    m->flops_per_token = lz_finetune_flops_per_token(&m->model, m->T);
    double copy_bps = 0;
    if (m->ops->measure_ceilings && m->ops->measure_ceilings(m->be, &copy_bps, &m->gemm_rate) != LZ_OK)
        m->gemm_rate = 0; // the share of the bound is then not reported
    lz_error_clear();
    return LZ_OK;
}

/* The run's shape: micro-batches, this rank's layers, the optimizer's schedule, the batch's ids. */
static lz_status plan_run(lz_finetune_run *r) {
    lz_finetune_args *a = &r->a;
    lz_ft_model *m = &r->m;
    if (r->size > m->cfg.num_hidden_layers)
        return lz_fail(LZ_ERR_INPUT, "mpirun -np %d: more ranks than the model's %d layers", r->size,
                       m->cfg.num_hidden_layers);
    m->T = (int)a->seq_len;
    m->micro = (int)(a->micro_batch > 0 ? a->micro_batch : r->size == 1 ? a->batch : 1);
    const int M = (int)(a->batch / m->micro);
    m->in_flight = r->size - r->rank < M ? r->size - r->rank : M; // 1F1B: forwards ahead of the first backward
    lz_ft_stage_range(m->cfg.num_hidden_layers, r->size, r->rank, &m->first, &m->last);
    const long per_step = a->batch * a->seq_len;
    r->opt = (lz_adamw_config){.lr = a->lr, .min_lr = a->min_lr >= 0 ? a->min_lr : a->lr / 10,
                               .weight_decay = a->weight_decay, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                               .total_steps = (a->tokens + per_step - 1) / per_step};
    r->opt.warmup = a->warmup >= 0 ? a->warmup : r->opt.total_steps / 20;
    if (!(r->ids = calloc((size_t)per_step, sizeof(int32_t))))
        return lz_fail(LZ_ERR_NOMEM, "fine-tuning batch: out of memory");
    return LZ_OK;
}

lz_status lz_finetune_setup(lz_finetune_run *r) {
    lz_finetune_args *a = &r->a;
    const lz_world *world = lz_world_get();
    r->rank = world->rank, r->size = world->size;
    lz_ft_model *m = &r->m;
    LZ_TRY(lz_config_load(a->model, &m->cfg));
    if (a->softmax_layers)
        LZ_TRY(lz_config_set_softmax_layers(&m->cfg, a->softmax_layers));
    lz_lora_config lora = {0};
    LZ_TRY(check_args(r, &m->cfg, &lora));
    LZ_TRY(lz_distill_data_load(&r->data, a->data, a->model, m->cfg.vocab_size, (int)a->seq_len, (uint64_t)a->seed));
    if (a->valid)
        LZ_TRY(load_valid(r, &m->cfg));
    LZ_TRY(plan_run(r));
    make_signature(r);
    LZ_TRY(open_model(r, &lora));
    if (a->resume) {
        LZ_TRY(lz_finetune_checkpoint_load(r));
        LZ_TRY(lz_ft_params_upload(&m->params, &m->model));
    }
    if (a->log_path && r->rank == 0 && !(r->log = fopen(a->log_path, a->resume ? "a" : "w")))
        return lz_fail(LZ_ERR_IO, "--log %s: cannot open for writing", a->log_path);
    return LZ_OK;
}

lz_status lz_finetune_setup_random(lz_finetune_run *r, const lz_config *cfg) {
    lz_finetune_args *a = &r->a;
    const lz_world *world = lz_world_get();
    r->rank = world->rank, r->size = world->size;
    lz_ft_model *m = &r->m;
    m->cfg = *cfg;
    if (a->softmax_layers)
        LZ_TRY(lz_config_set_softmax_layers(&m->cfg, a->softmax_layers));
    if (!m->cfg.has_lizard)
        return lz_fail(LZ_ERR_INPUT, "shape %s: no Lizard layers to train", a->model ? a->model : "(random)");
    lz_lora_config lora = {0};
    LZ_TRY(parse_targets(a->targets, lora.target));
    lora.rank = (int)a->lora_rank, lora.alpha = a->lora_alpha, lora.dropout = a->lora_dropout;
    lora.freeze_lizard = a->freeze_lizard, lora.seed = (uint64_t)a->seed;
    a->model = NULL; // made at random
    LZ_TRY(plan_run(r));
    return open_model(r, &lora);
}

void lz_finetune_teardown(lz_finetune_run *r) {
    lz_ft_model *m = &r->m;
    if (m->be) {
        const int L = m->cfg.num_hidden_layers;
        for (size_t i = 0; m->saves && i < (size_t)m->in_flight * L; i++)
            if (m->saves[i])
                m->ops->free(m->be, m->saves[i]);
        lz_train_work_free(&m->work, &m->model);
        lz_ft_params_free(&m->params, &m->model);
        if (m->ws.x)
            lz_workspace_free(&m->ws, &m->model);
        if (m->state.layers)
            lz_state_free(&m->state, &m->model);
        if (m->model_loaded)
            lz_model_free(&m->model);
        m->ops->destroy(m->be);
    }
    free(m->saves), free(m->slot), free(m->start), free(m->len), free(m->pos), free(m->token_pos), free(m->targets);
    lz_distill_data_free(&r->data);
    if (r->has_valid)
        lz_distill_data_free(&r->valid);
    free(r->ids);
    if (r->log)
        fclose(r->log);
    memset(m, 0, sizeof *m);
}
