/* config.h - config.json of a LLaMA/Mistral-family model, plus the "lizard" block.
 *
 * Keys are read as HF transformers reads them (see docs/model-format.md):
 * both RoPE spellings (transformers 4: rope_theta + rope_scaling with "type"
 * or "rope_type"; transformers 5: rope_parameters). */
#ifndef LZ_CONFIG_H
#define LZ_CONFIG_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "error.h"   // lz_status

enum { LZ_MAX_LAYERS = 1024, LZ_MAX_EOS = 16 };

typedef enum { LZ_ROPE_DEFAULT, LZ_ROPE_LLAMA3 } lz_rope_type;
typedef enum { LZ_FMAP_SOFTMAX, LZ_FMAP_EXP } lz_feature_map;

typedef struct {
    lz_rope_type type;
    double theta;
    /* llama3 only */
    double factor, low_freq_factor, high_freq_factor;
    int original_max_position_embeddings;
} lz_rope_config;

typedef struct {
    int feature_dim;            /* f; phi has 2f features */
    lz_feature_map feature_map;
    int window_size;            /* w */
    int num_meta_tokens;        /* m */
    bool gla_normalize;
} lz_lizard_config;

typedef struct {
    char model_type[32];        /* "llama", "mistral", ... ("" if absent) */
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
    bool attention_bias;
    bool mlp_bias;
    int sliding_window;         /* 0: none (Mistral's key; null or absent) */
    int bos_token_id;           /* -1 if absent */
    int n_eos;
    int eos_token_ids[LZ_MAX_EOS];
    lz_rope_config rope;

    bool has_lizard;            /* the "lizard" block is present */
    lz_lizard_config lizard;
    /* Per layer: true = softmax attention (teacher), false = Lizard layer.
     * A teacher (no lizard block) has every layer softmax. */
    bool softmax_layer[LZ_MAX_LAYERS];

    /* quantization_config's quant_method of an FP8 checkpoint that lizard reads ("fbgemm_fp8",
     * "compressed-tensors", "fp8"; "" without one); every other method is refused when parsed. */
    char quant_method[32];
    /* Not from the file: the run holds the linear layers' weights as FP8 E4M3 with one scale per
     * row (--dtype fp8, kernels/fp8_rule.h), quantized at load unless the checkpoint's are FP8. */
    bool fp8_weights;
} lz_config;

/* Parses config.json text; `path` names it in errors. */
lz_status lz_config_parse(const char *text, size_t len, const char *path, lz_config *out);
/* Reads DIR/config.json. */
lz_status lz_config_load(const char *dir, lz_config *out);

/* Applies a --softmax-layers override: "all", "none" or "0,2,5".
 * Layer indices are checked against num_hidden_layers. Whether the chosen
 * Lizard layers have their tensors is checked at load time. */
lz_status lz_config_set_softmax_layers(lz_config *cfg, const char *spec);

/* Number of softmax / Lizard layers. */
int lz_config_count_softmax(const lz_config *cfg);

#endif
