/* bench_train.h - `lizard bench --train`: the stage-2 training step (LoRA on q, k, v, o, the Lizard
 * tensors trainable) of a model shape made at random on the device, in tokens/s beside its bound
 *   GEMM rate / (4 x the weights' products per token + attention's forward and backward FLOPs)
 * (frozen weights need no weight gradient; lz_finetune_flops_per_token). */
#ifndef LZ_BENCH_TRAIN_H
#define LZ_BENCH_TRAIN_H

#include <stdio.h> // FILE

#include "config.h" // lz_config
#include "error.h"  // lz_status

typedef struct {
    const char *shape, *device, *dtype;
    int seq_len, batch, steps;
    long seed;
    FILE *json; /* or NULL: one JSON object for the result */
} lz_bench_train_args;

lz_status lz_bench_train(const lz_bench_train_args *a, const lz_config *cfg);

#endif
