/* distill_run.h - one `lizard distill` run: its settings, its state, and
 * the three phases the command calls (cmd_distill.c parses the flags):
 *   setup     (distill_setup.c): flags checked, placement plan under mpirun,
 *             teacher, data, the layers' tensors, --resume, the log;
 *   train     (distill_train.c): the steps, held-out evaluations, the choice
 *             of softmax layers, checkpoints, the final folder;
 *   teardown  frees everything setup made (also after a failed setup). */
#ifndef LZ_DISTILL_RUN_H
#define LZ_DISTILL_RUN_H

#include <stdbool.h> // bool
#include <stdio.h>   // FILE

#include "config.h"             // lz_lizard_config, LZ_MAX_LAYERS
#include "distill_checkpoint.h" // lz_distill_progress
#include "distill_data.h"       // lz_distill_data
#include "distill_device.h"     // lz_distill_device
#include "distill_params.h"     // lz_distill_layer, lz_adamw_config
#include "distill_teacher.h"    // lz_teacher
#include "plan.h"               // lz_plan

/* The flags' values (cmd_distill.c's option table). */
typedef struct {
    const char *teacher, *data, *out, *feature_map, *map_heads, *softmax_layers, *retain_by, *log_path, *plan_file,
        *device, *gla_precision, *teacher_device, *teacher_dtype;
    long feature_dim, window, meta, tokens, seq_len, batch, warmup, seed, log_every, checkpoint_every,
        stop_at, calibration_steps, eval_batches;
    double lr, min_lr, weight_decay, retain_fraction;
    bool resume, no_normalize;
} lz_distill_args;

/* A run's state; every rank holds one under mpirun. */
typedef struct {
    lz_distill_args a;
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
    long saved_step;             /* of the last checkpoint written or resumed from (0: none) */
    lz_distill_device *dev;      /* where the layer steps run (--device) */
    int32_t *ids;                /* [batch, seq_len] */
    double mse[LZ_MAX_LAYERS], rel[LZ_MAX_LAYERS]; /* of the last pass */
    char signature[1024];
    FILE *log;
} lz_distill_run;

lz_status lz_distill_setup(lz_distill_run *r);
lz_status lz_distill_train(lz_distill_run *r);
void lz_distill_teardown(lz_distill_run *r);

#endif
