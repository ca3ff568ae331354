/* distill_setup.c - everything a distillation run needs before its first
 * step: checked settings, the placement plan under mpirun, the teacher, the
 * data, every candidate layer's tensors (restored with --resume), the log. */
#include <math.h>     // round
#include <stdint.h>   // UINT64_MAX
#include <stdio.h>    // snprintf, fopen
#include <stdlib.h>   // calloc, free
#include <string.h>   // strcmp, memcpy
#include <unistd.h>   // access

#include "distill_output.h" // lz_check_out_folder
#include "distill_run.h"
#include "mpi_world.h" // lz_world_get

static lz_status check_args(const lz_distill_args *a) {
    if (a->softmax_layers && a->retain_fraction >= 0)
        return lz_fail(LZ_ERR_INPUT, "--softmax-layers and --retain-fraction: give one of them");
    if (a->retain_by && strcmp(a->retain_by, "error") != 0)
        return lz_fail(LZ_ERR_INPUT, "--retain-by: '%s' is not supported (only 'error')", a->retain_by);
    if (a->retain_by && a->retain_fraction < 0)
        return lz_fail(LZ_ERR_INPUT, "--retain-by needs --retain-fraction");
    if (strcmp(a->feature_map, "softmax") != 0 && strcmp(a->feature_map, "exp") != 0)
        return lz_fail(LZ_ERR_INPUT, "--feature-map: '%s' is not softmax or exp", a->feature_map);
    if (strcmp(a->device, "cpu") != 0 && strcmp(a->device, "cuda") != 0)
        return lz_fail(LZ_ERR_INPUT, "--device: '%s' is not cpu or cuda", a->device);
    if (strcmp(a->gla_precision, "fp32") != 0 && strcmp(a->gla_precision, "bf16") != 0)
        return lz_fail(LZ_ERR_INPUT, "--gla-precision: '%s' is not fp32 or bf16", a->gla_precision);
    if (strcmp(a->gla_precision, "bf16") == 0 && strcmp(a->device, "cuda") != 0)
        return lz_fail(LZ_ERR_INPUT, "--gla-precision bf16 needs --device cuda");
    if (a->teacher_device && strcmp(a->teacher_device, "cpu") != 0 && strcmp(a->teacher_device, "cuda") != 0)
        return lz_fail(LZ_ERR_INPUT, "--teacher-device: '%s' is not cpu or cuda", a->teacher_device);
    if (strcmp(a->teacher_dtype, "fp32") != 0 && strcmp(a->teacher_dtype, "bf16") != 0)
        return lz_fail(LZ_ERR_INPUT, "--teacher-dtype: '%s' is not fp32 or bf16", a->teacher_dtype);
    if (a->teacher_device && strcmp(a->teacher_device, "cuda") == 0 && strcmp(a->device, "cuda") != 0)
        return lz_fail(LZ_ERR_INPUT, "--teacher-device cuda needs --device cuda (the CPU trainer reads host memory)");
    if (strcmp(a->map_heads, "per-head") != 0 && strcmp(a->map_heads, "shared") != 0)
        return lz_fail(LZ_ERR_INPUT, "--map-heads: '%s' is not per-head or shared", a->map_heads);
    if (!a->resume)
        return lz_check_out_folder(a->out, LZ_DISTILL_STATE, false);
    if (lz_ckpt_exists(a->out, LZ_DISTILL_STATE))
        return LZ_OK;
    char old[4096];
    snprintf(old, sizeof old, "%s/distill_state.json", a->out);
    return lz_fail(LZ_ERR_INPUT, "--resume: %s has no %s to continue from%s", a->out, LZ_DISTILL_STATE,
                   access(old, F_OK) == 0 ? " (its distill_state.json is an earlier version's, which is not continued)"
                                          : "");
}

static void make_signature(lz_distill_run *r) {
    const lz_distill_args *a = &r->a;
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
static lz_status make_plan(lz_distill_run *r) {
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
    LZ_TRY(lz_plan_choose(&costs, "balanced", r->a.plan_file, w->size, free_bytes, &r->plan));
    r->planned = true;
    return LZ_OK;
}

lz_status lz_distill_setup(lz_distill_run *r) {
    lz_distill_args *a = &r->a;
    LZ_TRY(check_args(a));
    LZ_TRY(make_plan(r));
    // the teacher follows --device (under mpirun each rank's teacher layers on its own GPU)
    const char *teacher_device = a->teacher_device ? a->teacher_device : a->device;
    if (strcmp(a->teacher_dtype, "bf16") == 0 && strcmp(teacher_device, "cuda") != 0)
        return lz_fail(LZ_ERR_INPUT, "--teacher-dtype bf16 needs the teacher on the GPU (--device cuda)");
    LZ_TRY(lz_teacher_open_on(&r->teacher, a->teacher, (int)a->batch, (int)a->seq_len, r->planned ? &r->plan : NULL,
                              r->rank, teacher_device, a->teacher_dtype));
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
    if (!r->layers || !r->ids)
        return lz_fail(LZ_ERR_NOMEM, "distillation buffers: out of memory");
    for (int i = 0; i < r->n_layers; i++) {
        r->trained[i] = !r->progress.softmax[i];
        r->owned[i] = !r->planned || r->plan.layer_rank[i] == r->rank;
        if (r->trained[i] && lz_distill_layer_init(&r->layers[i], i, &g, cfg.hidden_size, (uint64_t)a->seed))
            return lz_fail(LZ_ERR_NOMEM, "layer %d tensors: out of memory", i);
    }
    LZ_TRY(lz_distill_device_open(&r->dev, a->device, &g, (int)a->batch, (int)a->seq_len, cfg.hidden_size,
                                  strcmp(a->gla_precision, "bf16") == 0));
    make_signature(r);
    if (a->resume) {
        const lz_distill_resume_rules rules = {
            .signature = r->signature, .total_steps = r->opt.total_steps, .n_layers = r->n_layers,
            .trained = r->trained, .given_softmax = a->retain_fraction < 0 ? r->progress.softmax : NULL,
            .retain_count = (int)round(a->retain_fraction * r->n_layers), .calibration_steps = a->calibration_steps};
        LZ_TRY(lz_distill_checkpoint_load(a->out, &rules, &r->progress, r->layers));
        r->saved_step = r->progress.step;
    }
    if (a->log_path && r->rank == 0 && !(r->log = fopen(a->log_path, a->resume ? "a" : "w")))
        return lz_fail(LZ_ERR_IO, "--log %s: cannot open for writing", a->log_path);
    return LZ_OK;
}

void lz_distill_teardown(lz_distill_run *r) {
    for (int i = 0; r->layers && i < r->n_layers; i++)
        lz_distill_layer_free(&r->layers[i]);
    free(r->layers);
    free(r->ids);
    lz_distill_device_close(r->dev);
    lz_distill_data_free(&r->data);
    lz_teacher_close(&r->teacher);
    if (r->log)
        fclose(r->log);
}
