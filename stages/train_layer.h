/* train_layer.h - a decoder layer trained (stage 2): the inference layer's
 * forward (decoder_layer.c, the same ops in the same order) with LoRA added to
 * the projections that have it and what the backward reads kept in a tape;
 * and the layer's backward over the backend's backward op table
 * (kernels/backward_ops.h). Activations are the backend's; gradients fp32. */
#ifndef LZ_TRAIN_LAYER_H
#define LZ_TRAIN_LAYER_H

#include "backward_ops.h" // lz_lora, lz_dropout, lz_backward_ops
#include "projections.h"  // LZ_LIN_*
#include "step.h"         // lz_model, lz_layer, lz_workspace, lz_batch

/* What a layer trains besides its frozen weights. */
typedef struct {
    lz_lora *lora[LZ_LIN_COUNT];       /* NULL: no LoRA on that projection */
    lz_dropout drop[LZ_LIN_COUNT];     /* p = 0: none (set per micro-batch: the streams are its sequences') */
    lz_lizard_params_f32 lizard;       /* a Lizard layer's fp32 tensors (backend memory) */
    lz_lizard_params_f32 *lizard_grad; /* their gradients, or NULL: frozen */
    lz_lizard_geom geom;               /* a Lizard layer's shape */
} lz_layer_train;

/* The activations of one layer's forward that its backward reads (the backend's type), for up to
 * max_tokens rows; one tape serves every layer in turn (each is recomputed just before its backward). */
typedef struct {
    int max_tokens;
    void *xn1;            /* input_layernorm's output [N, C] */
    void *q, *k, *v;      /* projections [N, Hq|Hkv, d] (softmax layers: q and k after RoPE) */
    void *gate_logit;     /* a Lizard layer's gate logit [N] */
    void *att;            /* attention output [N, Hq, d] */
    void *xmid;           /* the residual stream after attention [N, C] */
    void *xn2;            /* post_attention_layernorm's output [N, C] */
    void *g, *u, *h;      /* MLP gate, up, silu(g) * u [N, I] */
    float *lora_u[LZ_LIN_COUNT]; /* [N, r] x A^T of each LoRA projection */
    int lora_rank;
    void *q_raw, *k_raw;  /* the caller's, or NULL: a softmax layer's q and k before RoPE (distillation's inputs) */
} lz_layer_tape;

/* The fp32 gradients a layer's backward works in (max_tokens rows). */
typedef struct {
    float *dxn, *dq, *dk, *dv, *datt, *dh, *dg, *du;
    void *lizard_scratch; /* backward_ops.lizard_scratch_create, when the model has Lizard layers */
} lz_layer_grads;

lz_status lz_layer_tape_create(lz_layer_tape *t, const lz_model *m, int max_tokens, int lora_rank);
void lz_layer_tape_free(lz_layer_tape *t, const lz_model *m);
lz_status lz_layer_grads_create(lz_layer_grads *g, const lz_model *m, int max_tokens);
void lz_layer_grads_free(lz_layer_grads *g, const lz_model *m);

/* The layer's forward for training: ws->x [N, C] in, the layer's output in ws->x on return, as
 * lz_decoder_layer_forward computes it, plus LoRA (tr) on the projections that have it; the tape
 * keeps the activations listed above. The Lizard tensors the forward reads are the model's own
 * weights (kept equal to tr->lizard by the trainer). */
lz_status lz_decoder_layer_train_forward(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws,
                                         const lz_batch *b, int kv_capacity, const lz_layer_train *tr,
                                         lz_layer_tape *tape);

/* After lz_decoder_layer_train_forward of the same layer and batch from input x [N, C]: dx [N, C]
 * holds dL/d(layer output) on entry and dL/d(layer input) on return; the gradients of tr's tensors
 * (LoRA dA, dB; the Lizard tensors unless frozen) are added to. */
lz_status lz_decoder_layer_backward(lz_model *m, lz_layer *ly, const lz_layer_train *tr, const lz_layer_tape *tape,
                                    lz_layer_grads *gr, const void *x, float *dx, const lz_batch *b);

/* Projection j's weight of a layer (wq, wk, wv, wo, w_gate, w_up, w_down). */
lz_weight *lz_layer_projection(lz_layer *ly, int j);

/* The shape of a loaded Lizard layer's attention, as the backward op reads it. */
lz_lizard_geom lz_layer_lizard_geom(const lz_model *m, const lz_layer *ly);

#endif
