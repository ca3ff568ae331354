/* finetune_model.h - the whole model for stage-2 fine-tuning (docs/distillation.md,
 * "Stage 2"): every weight as host fp32, the trainable tensors (LoRA A and B of
 * the targeted linear layers, the Lizard layers' tensors unless frozen), and one
 * sequence's loss and gradient through the training op table.
 *
 * Memory: the input of every layer is kept; each layer's forward runs again
 * just before its backward (activation recomputation per layer), and the LM
 * head's cross-entropy works through the vocabulary in chunks. */
#ifndef LZ_FINETUNE_MODEL_H
#define LZ_FINETUNE_MODEL_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t, uint64_t

#include "config.h"      // lz_config
#include "projections.h" // LZ_LIN_*: the linear layers LoRA can target
#include "safetensors.h" // lz_weights
#include "train_ops.h"   // lz_train_ops, lz_lizard_geom


/* A trainable tensor: its checkpoint name, values, gradient and AdamW moments. */
typedef struct {
    char name[128];
    float *w, *g, *m1, *m2;
    size_t n;
    int layer;  /* of the model */
    bool decay; /* weight decay applies */
} lz_ft_param;

typedef struct {
    bool softmax;
    float *in_norm, *post_norm, *W[LZ_LIN_COUNT]; /* W [out, in] */
    int in[LZ_LIN_COUNT], out[LZ_LIN_COUNT];
    lz_ft_param *A[LZ_LIN_COUNT], *B[LZ_LIN_COUNT]; /* NULL where not targeted */
    lz_lizard_geom geom;                            /* Lizard layers */
    lz_ft_param *lz[5];                             /* wq, wk, gate, meta, alpha (distill_params.h's order) */
    float *lz_frozen[5];                            /* the same, frozen (--freeze-lizard) */
} lz_ft_layer;

typedef struct {
    int rank;            /* r */
    double alpha;        /* scale = alpha / r */
    double dropout;      /* p */
    bool target[LZ_LIN_COUNT];
    bool freeze_lizard;
    uint64_t seed;
} lz_lora_config;

typedef struct {
    lz_config cfg;
    lz_lora_config lora;
    const lz_train_ops *ops;
    const lz_finetune_ops *ft;
    lz_weights ckpt;
    float *embed, *final_norm, *lm_head; /* lm_head == embed when tied */
    float *inv_freq;
    lz_ft_layer *layers;
    lz_ft_param *params; /* every trainable tensor */
    int n_params;
    int T;           /* sequence length the buffers hold */
    int slots;       /* sequences in flight at once (pipeline micro-batches) */
    int first, last; /* the layers this process runs: [first, last) (all in one process) */
    void *work; /* buffers of one sequence (finetune_model.c) */
} lz_ft_model;

/* Loads DIR (a model with a lizard block; cfg already parsed with overrides)
 * for sequences of T tokens; LoRA A from the seed (uniform, PEFT's bound
 * 1/sqrt(in)), B zero, so the model starts as the base. Errors name the fault. */
lz_status lz_ft_model_load(lz_ft_model *m, const char *dir, const lz_config *cfg, const lz_lora_config *lora, int T,
                           int slots, const lz_train_ops *ops);
void lz_ft_model_free(lz_ft_model *m);

/* One sequence ids [T]: the sum of next-token cross-entropies (T - 1 of
 * them). With `learn`, adds grad_scale * d(sum)/d(param) to every gradient;
 * dropout (if any) draws its mask from (seed, step, seq). */
lz_status lz_ft_sequence(lz_ft_model *m, const int32_t *ids, bool learn, float grad_scale, uint64_t step, int seq,
                         double *loss);

/* The pieces of lz_ft_sequence, for a pipeline stage that runs layers [first, last) of sequences
 * in flight in `slot`s (finetune_pipeline.c):
 *   lz_ft_hidden   the input of `layer` (layer = n_layers: the last layer's output) in a slot;
 *   lz_ft_embed    ids [T] -> the input of layer 0;
 *   lz_ft_forward  layers [first, last), keeping each one's input;
 *   lz_ft_head     the final norm and the LM head's cross-entropy from the last layer's output
 *                  (the sum over the T - 1 predictions); with `learn`, lz_ft_grad = its gradient;
 *   lz_ft_backward from lz_ft_grad = d/d(output of layer last - 1) to d/d(input of layer first),
 *                  recomputing each layer's forward first; adds to the parameters' gradients. */
float *lz_ft_hidden(lz_ft_model *m, int slot, int layer);
float *lz_ft_grad(lz_ft_model *m);
void lz_ft_embed(lz_ft_model *m, const int32_t *ids, int slot);
void lz_ft_forward(lz_ft_model *m, bool learn, uint64_t step, int seq, int slot);
double lz_ft_head(lz_ft_model *m, const int32_t *ids, bool learn, float grad_scale, int slot);
void lz_ft_backward(lz_ft_model *m, uint64_t step, int seq, int slot);

/* W + scale B A for every targeted linear layer of layer l, module j, into out [out, in]. */
void lz_ft_merged_weight(const lz_ft_model *m, int l, int j, float *out);

#endif
