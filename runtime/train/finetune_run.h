/* finetune_run.h - one `lizard finetune` run (stage 2): its settings, its
 * state and its phases (cmd_finetune.c parses the flags):
 *   setup     (finetune_setup.c): flags checked, the backend, this rank's part of the model,
 *             the trained tensors, data, --resume, the log;
 *   train     (finetune_train.c): the steps (micro-batches through finetune_pipeline.c),
 *             held-out loss, checkpoints, the output folders (finetune_output.c);
 *   teardown  frees everything setup made (also after a failed setup).
 * The model runs on the inference backend (CPU reference or CUDA) through the
 * training step of stages/train_step.h: the forward is the inference ops'. */
#ifndef LZ_FINETUNE_RUN_H
#define LZ_FINETUNE_RUN_H

#include <stdbool.h> // bool
#include <stdio.h>   // FILE

#include "distill_data.h"    // lz_distill_data
#include "distill_params.h"  // lz_adamw_config
#include "finetune_params.h" // lz_ft_params, lz_lora_config
#include "state.h"           // lz_state
#include "train_step.h"      // lz_train_work

typedef struct {
    const char *model, *data, *out, *adapter_out, *log_path, *device, *dtype, *targets, *valid, *softmax_layers;
    const char *gla_precision;
    long tokens, seq_len, batch, micro_batch, warmup, lora_rank, seed, log_every, checkpoint_every, stop_at,
        eval_batches;
    double lr, min_lr, weight_decay, clip, lora_alpha, lora_dropout;
    bool freeze_lizard, resume;
} lz_finetune_args;

/* The model this rank trains and what its steps run in. */
typedef struct {
    lz_config cfg;
    const lz_ops *ops;
    lz_backend *be;
    lz_model model;       /* this rank's layers (and the embedding on the first rank, the head on the last) */
    bool model_loaded;
    lz_state state;       /* micro slots of seq_len positions */
    lz_workspace ws;
    lz_train_work work;
    lz_ft_params params;
    int first, last;      /* this rank's layers */
    int T, micro;         /* tokens per sequence, sequences per micro-batch */
    int in_flight;        /* micro-batches whose layer inputs are kept at once (the pipeline's depth) */
    void **saves;         /* [in_flight][n_layers]: each layer's input of a micro-batch in flight */
    int32_t *slot, *start, *len, *pos, *token_pos; /* the micro-batch's lz_batch arrays */
    int32_t *targets;     /* [micro * T] */
    double flops_per_token; /* of a training step, for the share of the GEMM bound (0: unknown) */
    double gemm_rate;       /* the device's measured GEMM rate, FLOP/s (0: not measured) */
} lz_ft_model;

typedef struct {
    lz_finetune_args a;
    lz_ft_model m;
    lz_distill_data data, valid;
    bool has_valid;
    lz_adamw_config opt;
    long step; /* steps done */
    int rank, size;
    int32_t *ids;
    char signature[1024];
    FILE *log;
} lz_finetune_run;

lz_status lz_finetune_setup(lz_finetune_run *r);
lz_status lz_finetune_train(lz_finetune_run *r);
/* The same run on a model of `cfg` made at random on the backend (no files, no data, no output):
 * for benchmarks of the training step. */
lz_status lz_finetune_setup_random(lz_finetune_run *r, const lz_config *cfg);
/* One training step on ids [batch, T]: loss and gradient (*loss: the mean cross-entropy; *norm: the
 * gradient's global norm before clipping), a non-finite one refused naming the step, AdamW; step + 1. */
lz_status lz_finetune_step(lz_finetune_run *r, const int32_t *ids, double *loss, double *norm);
void lz_finetune_teardown(lz_finetune_run *r);

/* The checkpoint beside the output, one unit (checkpoint_unit.h) called LZ_FINETUNE_STATE: every
 * trained tensor and its AdamW moments, the step and the run's signature, from and into the host
 * copies; a unit that does not match the run (settings, tensors, step, checksum, non-finite values)
 * is refused in one line. */
#define LZ_FINETUNE_STATE "finetune_state"
lz_status lz_finetune_checkpoint_save(const lz_finetune_run *r);
lz_status lz_finetune_checkpoint_load(lz_finetune_run *r);

/* The pipeline (finetune_pipeline.c): the layers [first, last) of `rank` among `size`; one batch
 * ids [batch, T] as micro-batches through the 1F1B schedule (*loss_sum on every rank; with learn,
 * the owned tensors' gradients += grad_scale * d(sum)); the gradients' global norm (and the first
 * layer whose gradient is not finite, or -1); every tensor's values and moments from its owner to
 * every rank's host copies (before writing). */
void lz_ft_stage_range(int n_layers, int size, int rank, int *first, int *last);
lz_status lz_ft_pipeline_batch(lz_finetune_run *r, const int32_t *ids, bool learn, long step, float grad_scale,
                               double *loss_sum);
lz_status lz_ft_grad_norm(lz_finetune_run *r, double *norm, int *bad_layer);
lz_status lz_ft_share_params(lz_finetune_run *r);

/* The merged model folder (--out) and, with --adapter-out, the PEFT folder (host copies, rank 0). */
lz_status lz_finetune_write_model(const lz_finetune_run *r);
lz_status lz_finetune_write_adapter(const lz_finetune_run *r);

/* The training step's FLOP per token for a model (4 x the weights it multiplies by, for the
 * forward and the backward to the inputs, plus attention's products), as the share of the GEMM
 * bound is reported; sequences of T tokens. */
double lz_finetune_flops_per_token(const lz_model *m, int T);

#endif
