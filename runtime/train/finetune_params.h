/* finetune_params.h - what stage 2 trains (docs/distillation.md, "Stage 2"):
 * LoRA factors on the targeted projections of every layer and, unless
 * frozen, each Lizard layer's five tensors. Each tensor has its values,
 * gradient and AdamW moments in fp32 in the backend's memory (on the rank
 * whose layers hold it) and a host copy of values and moments that
 * checkpoints and the output folders write and read. After every update the
 * model's own weights follow: the backend's LoRA copies and the Lizard
 * weights that the inference ops read. */
#ifndef LZ_FINETUNE_PARAMS_H
#define LZ_FINETUNE_PARAMS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint64_t

#include "model.h"       // lz_model
#include "projections.h" // LZ_LIN_*
#include "train_step.h"  // lz_layer_train, lz_lora

typedef struct {
    int rank;            /* r */
    double alpha;        /* scale = alpha / r */
    double dropout;      /* p on the LoRA path's input */
    bool target[LZ_LIN_COUNT];
    bool freeze_lizard;
    uint64_t seed;
} lz_lora_config;

enum { LZ_FT_VALUES, LZ_FT_MOMENT1, LZ_FT_MOMENT2, LZ_FT_PARTS };

/* One tensor: a LoRA factor (PEFT's name) or a Lizard tensor (the model's name). */
typedef struct {
    char name[192];
    size_t n;
    int64_t rows, cols; /* as written: [rows, cols], rows 0 for a 1-D tensor */
    int layer;
    int proj;           /* a LoRA factor's projection (LZ_LIN_*); -1: a Lizard tensor */
    bool decay;         /* weight decay applies (LoRA factors, feature maps, gate) */
    bool frozen;        /* a Lizard tensor under --freeze-lizard: read, never trained or saved */
    bool owned;         /* its layer runs on this rank: it has backend memory here */
    float *w, *g, *m1, *m2;       /* backend memory (owned; frozen: w only) */
    float *host[LZ_FT_PARTS];     /* values, moments on the host (every rank, for checkpoints) */
} lz_ft_param;

typedef struct {
    lz_lora_config lora;
    int n_layers, first, last;        /* this rank trains layers [first, last) */
    lz_ft_param *params;              /* every layer's, in layer order */
    int n_params;
    lz_lora *loras;                   /* [n_layers * LZ_LIN_COUNT] (r = 0: none there) */
    lz_layer_train *layers;           /* [n_layers]: handed to the training step */
    lz_lizard_params_f32 *grads;      /* [n_layers]: the Lizard tensors' gradients */
    uint64_t *streams;                /* [n_layers][LZ_LIN_COUNT][max_seqs]: dropout streams of a micro-batch */
    int max_seqs;
} lz_ft_params;

/* Every tensor of the model's layers described; those of [first, last) made in the backend's memory
 * for micro-batches of up to max_seqs sequences: LoRA A uniform with PEFT's bound 1/sqrt(in) from
 * (seed, layer, module), B zero (so training starts from the model itself); the Lizard tensors read
 * in fp32 from the checkpoint the model was loaded from. Errors name the tensor. */
lz_status lz_ft_params_create(lz_ft_params *p, lz_model *m, const lz_lora_config *lora, int first, int last,
                              int max_seqs);
void lz_ft_params_free(lz_ft_params *p, lz_model *m);

/* Host copies -> backend (owned tensors; values and moments), then the model follows. */
lz_status lz_ft_params_upload(lz_ft_params *p, lz_model *m);
/* Backend -> host copies (owned tensors). */
lz_status lz_ft_params_download(lz_ft_params *p, lz_model *m);
/* After the values changed on the backend: LoRA's backend copies, the model's Lizard weights. */
lz_status lz_ft_params_sync_model(lz_ft_params *p, lz_model *m);
lz_status lz_ft_params_zero_grads(lz_ft_params *p, lz_model *m);

/* The dropout streams of a micro-batch: sequences first_seq .. first_seq + n_seqs - 1 of step's batch. */
void lz_ft_params_set_dropout(lz_ft_params *p, uint64_t step, int first_seq, int n_seqs);

/* W + (alpha / r) B A of layer l's projection j, from the host copies, into out [out, in] (W: the
 * checkpoint's tensor, converted to fp32). NULL-safe: false when that projection has no LoRA. */
bool lz_ft_params_merged(const lz_ft_params *p, const lz_model *m, int l, int j, float *out);
const lz_lora *lz_ft_params_lora(const lz_ft_params *p, int l, int j);

#endif
