/* model.h - a model's weights on a backend, layer by layer, and the step that
 * runs a batch of tokens through them.
 *
 * A stage is the set of layers a process owns; with one process it owns all
 * of them (the pipeline issue splits them). A layer runs as softmax attention
 * (the teacher's, with RoPE and a KV cache) or as Lizard attention (gated
 * linear attention + window branch), decided by cfg.softmax_layer[]. */
#ifndef LZ_MODEL_H
#define LZ_MODEL_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint64_t

#include "config.h" // lz_config
#include "ops.h"    // lz_ops, lz_weight, lz_attn_dims

struct lz_weights; /* a mapped checkpoint (runtime/core/safetensors.h) */

typedef struct {
    int index;
    bool run_softmax; /* runs as the teacher's softmax attention */
    bool has_lizard;  /* the checkpoint has this layer's Lizard tensors */
    lz_attn_dims dims;
    lz_weight input_norm, post_norm;
    lz_weight wq, wk, wv, wo, bq, bk, bv, bo;        /* b*: empty unless attention_bias */
    lz_weight w_gate, w_up, w_down, b_gate, b_up, b_down; /* b*: empty unless mlp_bias */
    /* Lizard (loaded only when the layer runs as Lizard) */
    lz_weight fmap_q;  /* [Hq_map, head_dim * f], Hq_map = 1 or Hq */
    lz_weight fmap_k;  /* [Hk_map, head_dim * f], Hk_map = 1, Hkv or Hq */
    lz_weight gate;    /* [1, hidden] */
    lz_weight meta;    /* [1, m] */
    float alpha;
} lz_layer;

/* Which parts of the model a process holds (a pipeline stage); all by default. */
typedef struct {
    bool layer[LZ_MAX_LAYERS];
    bool embed; /* the embedding (first stage) */
    bool head;  /* final norm + LM head (last stage) */
} lz_stage_parts;

typedef struct {
    lz_config cfg;
    lz_stage_parts parts;
    const lz_ops *ops;
    lz_backend *be;
    struct lz_weights *ckpt; /* the mapped checkpoint (CPU weights may point into it); owned */
    lz_weight embed, final_norm, lm_head;
    lz_layer *layers;
    float *inv_freq; /* [head_dim / 2] RoPE frequencies, backend memory */
    size_t n_params_teacher, n_params_lizard; /* of the tensors loaded */
    uint64_t adapter_hash; /* of a LoRA adapter merged at load (0: none): part of the session fingerprint */
} lz_model;

/* RoPE inverse frequencies [head_dim / 2] for the config (default or llama3),
 * computed as HF transformers does. */
void lz_rope_inv_freq(const lz_config *cfg, float *out);

#endif
