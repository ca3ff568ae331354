/* finetune_run.h - one `lizard finetune` run (stage 2): its settings, its
 * state and its phases (cmd_finetune.c parses the flags):
 *   setup     (finetune_setup.c): flags checked, model, LoRA, data, --resume, the log;
 *   train     (finetune_train.c): the steps, held-out loss, checkpoints, the output folders
 *             (finetune_output.c);
 *   teardown  frees everything setup made (also after a failed setup). */
#ifndef LZ_FINETUNE_RUN_H
#define LZ_FINETUNE_RUN_H

#include <stdbool.h> // bool
#include <stdio.h>   // FILE

#include "distill_data.h"   // lz_distill_data
#include "distill_params.h" // lz_adamw_config
#include "finetune_model.h" // lz_ft_model

typedef struct {
    const char *model, *data, *out, *adapter_out, *log_path, *device, *targets, *valid, *softmax_layers;
    long tokens, seq_len, batch, warmup, lora_rank, seed, log_every, checkpoint_every, stop_at, eval_batches;
    double lr, min_lr, weight_decay, clip, lora_alpha, lora_dropout;
    bool freeze_lizard, resume;
} lz_finetune_args;

typedef struct {
    lz_finetune_args a;
    lz_ft_model model;
    lz_distill_data data, valid;
    bool has_valid;
    lz_adamw_config opt;
    long step; /* steps done */
    int rank;  /* under mpirun: this process's pipeline stage */
    int32_t *ids;
    char signature[1024];
    FILE *log;
} lz_finetune_run;

lz_status lz_finetune_setup(lz_finetune_run *r);
lz_status lz_finetune_train(lz_finetune_run *r);
void lz_finetune_teardown(lz_finetune_run *r);

/* The checkpoint beside the output (finetune_state.safetensors: every trainable
 * tensor and its AdamW moments; finetune_state.json: {"step", "signature"}). */
lz_status lz_finetune_checkpoint_save(const lz_finetune_run *r);
lz_status lz_finetune_checkpoint_load(lz_finetune_run *r);

/* The pipeline (finetune_pipeline.c): the layers [first, last) of `rank` among `size`; whether
 * this process owns tensor p; one batch ids [batch, T] through the 1F1B schedule (*loss_sum on
 * every rank; with learn, the owned tensors' gradients = grad_scale * d(sum)); the gradients'
 * global norm; every tensor and its moments from its owner to all ranks (before writing). */
void lz_ft_stage_range(int n_layers, int size, int rank, int *first, int *last);
bool lz_ft_owns(const lz_ft_model *m, const lz_ft_param *p);
lz_status lz_ft_pipeline_batch(lz_finetune_run *r, const int32_t *ids, bool learn, long step, float grad_scale,
                               double *loss_sum);
lz_status lz_ft_grad_norm(lz_finetune_run *r, double *norm);
lz_status lz_ft_share_params(lz_finetune_run *r);

/* The merged model folder (--out) and, with --adapter-out, the PEFT folder. */
lz_status lz_finetune_write_model(const lz_finetune_run *r);
lz_status lz_finetune_write_adapter(const lz_finetune_run *r);

#endif
