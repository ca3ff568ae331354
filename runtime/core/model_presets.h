/* model_presets.h - named model shapes for `lizard init`: everything needed to
 * write config.json, the list of tensors in the checkpoint format
 * (docs/model-format.md), and how to initialise them at random.
 *
 * Presets: tiny-{teacher,hybrid,lizard} (demos and tests, f32, with a
 * tokenizer trained at init time), llama3-8b-* and llama3-70b-* (the
 * LLaMA-3 shapes, bf16, sharded at 5 GB, no tokenizer). */
#ifndef LZ_MODEL_PRESETS_H
#define LZ_MODEL_PRESETS_H

#include <stdbool.h>           // bool
#include <stddef.h>            // size_t
#include <stdint.h>            // uint64_t

#include "config.h"            // lz_rope_config, lz_lizard_config
#include "dtype.h"             // lz_dtype
#include "error.h"             // lz_status
#include "safetensors_writer.h" // lz_stw_tensor

typedef struct {
    const char *name;    /* "tiny-hybrid" */
    const char *summary; /* one line for the usage text */

    /* config.json, standard keys */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int head_dim;
    double rms_norm_eps;
    int max_position_embeddings;
    bool tie_word_embeddings;
    int bos_token_id;
    int n_eos;
    int eos_token_ids[2];
    lz_rope_config rope;

    /* the "lizard" block (absent for a teacher) */
    bool has_lizard;
    lz_lizard_config lizard;
    int softmax_stride;            /* 0: no softmax layer; k: layers 0, k, 2k, ... stay softmax */
    bool lizard_tensors_in_softmax; /* also write Lizard tensors in the softmax layers, so that
                                       the same checkpoint runs with --softmax-layers none */
    int feature_map_q_heads;       /* Hq of feature_map_q.weight: 1 = shared by all query heads */
    int feature_map_k_heads;       /* Hk of feature_map_k.weight: here one per key/value head */

    /* files */
    lz_dtype dtype;                /* default; `lizard init --dtype` overrides */
    uint64_t max_shard_bytes;      /* 0: one model.safetensors */
    bool builtin_tokenizer;        /* train and write a byte-level BPE of vocab_size tokens */

    /* random init */
    double linear_std;             /* 0: 1/sqrt(fan_in) (tiny models: varied outputs) */
    double embed_std;
} lz_model_preset;

size_t lz_preset_count(void);
const lz_model_preset *lz_preset_at(size_t i);
/* NULL when there is no such preset. */
const lz_model_preset *lz_preset_find(const char *name);
/* "tiny-hybrid, tiny-teacher, ..." into buf (truncated to cap). */
void lz_preset_names(char *buf, size_t cap);

/* Layer roles under the preset's lizard block. */
bool lz_preset_is_softmax_layer(const lz_model_preset *p, int layer);
bool lz_preset_has_lizard_tensors(const lz_model_preset *p, int layer);

/* What a tensor is, which decides its random init. */
typedef enum {
    LZ_ROLE_EMBED,   /* model.embed_tokens.weight */
    LZ_ROLE_LINEAR,  /* q/k/v/o, gate/up/down projections, lm_head: [out, in] */
    LZ_ROLE_NORM,    /* RMSNorm weights */
    LZ_ROLE_FMAP,    /* feature_map_{q,k}.weight [H, head_dim, f] */
    LZ_ROLE_GATE,    /* gate.weight [1, hidden] */
    LZ_ROLE_META,    /* meta_logits [m] */
    LZ_ROLE_ALPHA,   /* window_alpha [1] */
    LZ_ROLE_FP8_SCALE, /* P.weight_scale [out, 1] F32 of the FP8 weight listed just before it */
} lz_tensor_role;

/* The checkpoint's tensors in the order they are written (HF names). */
typedef struct {
    size_t n;
    lz_stw_tensor *tensors; /* names owned by the list */
    lz_tensor_role *roles;
} lz_tensor_list;

/* dtype F8_E4M3: the layers' linear weights (q, k, v, o, gate, up, down) in FP8, each followed by its
 * row scales (fbgemm_fp8's layout, docs/model-format.md), every other tensor in BF16. */
lz_status lz_preset_tensors(const lz_model_preset *p, lz_dtype dtype, lz_tensor_list *out);
void lz_tensor_list_free(lz_tensor_list *list);

/* Sums over a list: elements and data bytes. */
uint64_t lz_tensor_list_params(const lz_tensor_list *list);
uint64_t lz_tensor_list_bytes(const lz_tensor_list *list);

/* DIR/config.json: HF LlamaConfig keys (transformers 4 RoPE spelling:
 * rope_theta + rope_scaling), torch_dtype from `dtype`, and the "lizard"
 * block for a Lizard preset; F8_E4M3: bfloat16 and a quantization_config of
 * fbgemm_fp8 (the LM head not converted). Written atomically. */
lz_status lz_preset_write_config(const lz_model_preset *p, lz_dtype dtype, const char *dir);
/* The parsed config of preset `name`, exactly as a model folder of that
 * preset would give it (written to a temp folder and read back through
 * lz_config_load). An unknown name is an error listing the presets; `flag`
 * names the option in messages ("--shape"). */
lz_status lz_preset_config(const char *name, const char *flag, lz_config *out);

/* DIR/generation_config.json: {"bos_token_id", "eos_token_id"}. */
lz_status lz_preset_write_generation_config(const lz_model_preset *p, const char *dir);

#endif
