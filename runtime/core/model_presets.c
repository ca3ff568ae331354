/* model_presets.c - the preset table, the tensor list of a preset (names and
 * shapes as in docs/model-format.md) and its config.json. */
#include "model_presets.h"

#include <stdio.h>  // snprintf
#include <stdlib.h> // calloc, free
#include <string.h> // strcmp, strdup, strlen
#include <unistd.h> // unlink, rmdir

#include <jansson.h> // json_t, json_pack, json_dumps

/* ---- the table ------------------------------------------------------------ */

/* Tiny: small enough for unit tests and demos on a laptop. */
#define TINY_SHAPE                                                                                               \
    .vocab_size = 512, .hidden_size = 128, .intermediate_size = 344, .num_hidden_layers = 4,                    \
    .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 32, .rms_norm_eps = 1e-5,                    \
    .max_position_embeddings = 4096, .tie_word_embeddings = false, .bos_token_id = 510, .n_eos = 1,             \
    .eos_token_ids = {511}, .rope = {.type = LZ_ROPE_DEFAULT, .theta = 10000.0}, .dtype = LZ_DTYPE_F32,          \
    .max_shard_bytes = 0, .builtin_tokenizer = true, .linear_std = 0.0, .embed_std = 1.0

#define TINY_LIZARD                                                                                              \
    .has_lizard = true,                                                                                          \
    .lizard = {.feature_dim = 16, .feature_map = LZ_FMAP_SOFTMAX, .window_size = 16, .num_meta_tokens = 4,       \
               .gla_normalize = true},                                                                           \
    .feature_map_q_heads = 1, .feature_map_k_heads = 2

/* LLaMA-3 family: vocab, RoPE (llama3 scaling), special ids; bf16, 5 GB shards. */
#define LLAMA3_COMMON                                                                                            \
    .vocab_size = 128256, .num_key_value_heads = 8, .head_dim = 128, .rms_norm_eps = 1e-5,                      \
    .max_position_embeddings = 131072, .tie_word_embeddings = false, .bos_token_id = 128000, .n_eos = 2,        \
    .eos_token_ids = {128001, 128009},                                                                           \
    .rope = {.type = LZ_ROPE_LLAMA3, .theta = 500000.0, .factor = 8.0, .low_freq_factor = 1.0,                   \
             .high_freq_factor = 4.0, .original_max_position_embeddings = 8192},                                 \
    .dtype = LZ_DTYPE_BF16, .max_shard_bytes = 5000000000ULL, .builtin_tokenizer = false, .linear_std = 0.02,   \
    .embed_std = 0.02

#define LLAMA3_8B                                                                                                \
    LLAMA3_COMMON, .hidden_size = 4096, .intermediate_size = 14336, .num_hidden_layers = 32,                    \
    .num_attention_heads = 32
#define LLAMA3_70B                                                                                               \
    LLAMA3_COMMON, .hidden_size = 8192, .intermediate_size = 28672, .num_hidden_layers = 80,                    \
    .num_attention_heads = 64

#define LLAMA3_LIZARD                                                                                            \
    .has_lizard = true,                                                                                          \
    .lizard = {.feature_dim = 128, .feature_map = LZ_FMAP_SOFTMAX, .window_size = 128, .num_meta_tokens = 4,     \
               .gla_normalize = true},                                                                           \
    .feature_map_q_heads = 1, .feature_map_k_heads = 8

/* Tiny-hybrid also carries Lizard tensors in its softmax layers, so one small
 * checkpoint exercises every --softmax-layers choice (all, none, a subset).
 * The big hybrids do not: that would cost memory for nothing in practice. */
static const lz_model_preset presets[] = {
    {.name = "tiny-hybrid", .summary = "4 layers, hidden 128, softmax layers 0 and 2 (demo default), f32",
     TINY_SHAPE, TINY_LIZARD, .softmax_stride = 2, .lizard_tensors_in_softmax = true},
    {.name = "tiny-teacher", .summary = "tiny-hybrid's shape, all softmax attention, no lizard block", TINY_SHAPE},
    {.name = "tiny-lizard", .summary = "tiny-hybrid's shape, every layer Lizard", TINY_SHAPE, TINY_LIZARD},
    {.name = "llama3-8b-teacher", .summary = "LLaMA-3-8B shape, softmax attention, bf16 (~16 GB)", LLAMA3_8B},
    {.name = "llama3-8b-hybrid", .summary = "LLaMA-3-8B shape, softmax layers 0,2,4,...", LLAMA3_8B,
     LLAMA3_LIZARD, .softmax_stride = 2},
    {.name = "llama3-8b-lizard", .summary = "LLaMA-3-8B shape, every layer Lizard", LLAMA3_8B, LLAMA3_LIZARD},
    {.name = "llama3-70b-teacher", .summary = "LLaMA-3-70B shape, softmax attention, bf16 (~141 GB)", LLAMA3_70B},
    {.name = "llama3-70b-hybrid", .summary = "LLaMA-3-70B shape, softmax layers 0,2,4,...", LLAMA3_70B,
     LLAMA3_LIZARD, .softmax_stride = 2},
    {.name = "llama3-70b-lizard", .summary = "LLaMA-3-70B shape, every layer Lizard", LLAMA3_70B, LLAMA3_LIZARD},
};

size_t lz_preset_count(void) { return sizeof presets / sizeof presets[0]; }

const lz_model_preset *lz_preset_at(size_t i) { return i < lz_preset_count() ? &presets[i] : NULL; }

const lz_model_preset *lz_preset_find(const char *name) {
    for (size_t i = 0; name && i < lz_preset_count(); i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

void lz_preset_names(char *buf, size_t cap) {
    size_t used = 0;
    if (cap == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < lz_preset_count() && used < cap; i++) {
        int k = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", presets[i].name);
        if (k < 0)
            break;
        used += (size_t)k;
    }
}

bool lz_preset_is_softmax_layer(const lz_model_preset *p, int layer) {
    if (!p->has_lizard)
        return true;
    return p->softmax_stride > 0 && layer % p->softmax_stride == 0;
}

bool lz_preset_has_lizard_tensors(const lz_model_preset *p, int layer) {
    if (!p->has_lizard)
        return false;
    return !lz_preset_is_softmax_layer(p, layer) || p->lizard_tensors_in_softmax;
}

/* ---- the tensor list ------------------------------------------------------ */

/* A list being filled; `cap` is known in advance from the preset. */
typedef struct {
    lz_tensor_list *list;
    size_t cap;
    lz_dtype dtype;
} list_builder;

/* Appends one tensor of shape [d0, d1, d2] cut to `ndim` dims. */
static lz_status add(list_builder *b, lz_tensor_role role, const char *name, int ndim, int64_t d0, int64_t d1,
                     int64_t d2) {
    if (b->list->n >= b->cap)
        return lz_fail(LZ_ERR_INTERNAL, "tensor list of %zu entries overflowed at %s", b->cap, name);
    char *copy = strdup(name);
    if (!copy)
        return lz_fail(LZ_ERR_NOMEM, "out of memory listing tensors");
    const bool fp8 = b->dtype == LZ_DTYPE_F8_E4M3;
    const bool fp8_linear = fp8 && role == LZ_ROLE_LINEAR && strcmp(name, "lm_head.weight") != 0;
    lz_stw_tensor *t = &b->list->tensors[b->list->n];
    *t = (lz_stw_tensor){.name = copy,
                         .dtype = fp8_linear ? LZ_DTYPE_F8_E4M3 : fp8 ? LZ_DTYPE_BF16 : b->dtype,
                         .ndim = ndim,
                         .shape = {d0, d1, d2}};
    b->list->roles[b->list->n++] = role;
    if (!fp8_linear)
        return LZ_OK;
    char scale[200];
    snprintf(scale, sizeof scale, "%s_scale", name);
    list_builder plain = {b->list, b->cap, LZ_DTYPE_F32};
    return add(&plain, LZ_ROLE_FP8_SCALE, scale, 2, d0, 1, 0);
}

/* "model.layers.N.<suffix>" */
static lz_status add_layer(list_builder *b, int layer, const char *suffix, lz_tensor_role role, int ndim, int64_t d0,
                           int64_t d1, int64_t d2) {
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.%s", layer, suffix);
    return add(b, role, name, ndim, d0, d1, d2);
}

static lz_status add_lizard_tensors(list_builder *b, const lz_model_preset *p, int layer) {
    int f = p->lizard.feature_dim;
    LZ_TRY(add_layer(b, layer, "self_attn.feature_map_q.weight", LZ_ROLE_FMAP, 3, p->feature_map_q_heads,
                     p->head_dim, f));
    LZ_TRY(add_layer(b, layer, "self_attn.feature_map_k.weight", LZ_ROLE_FMAP, 3, p->feature_map_k_heads,
                     p->head_dim, f));
    LZ_TRY(add_layer(b, layer, "self_attn.gate.weight", LZ_ROLE_GATE, 2, 1, p->hidden_size, 0));
    LZ_TRY(add_layer(b, layer, "self_attn.meta_logits", LZ_ROLE_META, 1, p->lizard.num_meta_tokens, 0, 0));
    return add_layer(b, layer, "self_attn.window_alpha", LZ_ROLE_ALPHA, 1, 1, 0, 0);
}

/* One decoder layer: norms, attention projections (+ Lizard), SwiGLU MLP. */
static lz_status add_decoder_layer(list_builder *b, const lz_model_preset *p, int layer) {
    int64_t h = p->hidden_size, q = (int64_t)p->num_attention_heads * p->head_dim;
    int64_t kv = (int64_t)p->num_key_value_heads * p->head_dim, inter = p->intermediate_size;
    LZ_TRY(add_layer(b, layer, "input_layernorm.weight", LZ_ROLE_NORM, 1, h, 0, 0));
    LZ_TRY(add_layer(b, layer, "self_attn.q_proj.weight", LZ_ROLE_LINEAR, 2, q, h, 0));
    LZ_TRY(add_layer(b, layer, "self_attn.k_proj.weight", LZ_ROLE_LINEAR, 2, kv, h, 0));
    LZ_TRY(add_layer(b, layer, "self_attn.v_proj.weight", LZ_ROLE_LINEAR, 2, kv, h, 0));
    LZ_TRY(add_layer(b, layer, "self_attn.o_proj.weight", LZ_ROLE_LINEAR, 2, h, q, 0));
    if (lz_preset_has_lizard_tensors(p, layer))
        LZ_TRY(add_lizard_tensors(b, p, layer));
    LZ_TRY(add_layer(b, layer, "post_attention_layernorm.weight", LZ_ROLE_NORM, 1, h, 0, 0));
    LZ_TRY(add_layer(b, layer, "mlp.gate_proj.weight", LZ_ROLE_LINEAR, 2, inter, h, 0));
    LZ_TRY(add_layer(b, layer, "mlp.up_proj.weight", LZ_ROLE_LINEAR, 2, inter, h, 0));
    return add_layer(b, layer, "mlp.down_proj.weight", LZ_ROLE_LINEAR, 2, h, inter, 0);
}

static lz_status fill_list(list_builder *b, const lz_model_preset *p) {
    LZ_TRY(add(b, LZ_ROLE_EMBED, "model.embed_tokens.weight", 2, p->vocab_size, p->hidden_size, 0));
    for (int layer = 0; layer < p->num_hidden_layers; layer++)
        LZ_TRY(add_decoder_layer(b, p, layer));
    LZ_TRY(add(b, LZ_ROLE_NORM, "model.norm.weight", 1, p->hidden_size, 0, 0));
    if (!p->tie_word_embeddings)
        LZ_TRY(add(b, LZ_ROLE_LINEAR, "lm_head.weight", 2, p->vocab_size, p->hidden_size, 0));
    return LZ_OK;
}

lz_status lz_preset_tensors(const lz_model_preset *p, lz_dtype dtype, lz_tensor_list *out) {
    *out = (lz_tensor_list){0};
    /* 9 teacher tensors, 7 FP8 scales and up to 5 Lizard tensors per layer, 3 outside. */
    size_t cap = (size_t)p->num_hidden_layers * 21 + 3;
    out->tensors = calloc(cap, sizeof *out->tensors);
    out->roles = calloc(cap, sizeof *out->roles);
    if (!out->tensors || !out->roles) {
        lz_tensor_list_free(out);
        return lz_fail(LZ_ERR_NOMEM, "out of memory listing tensors of %s", p->name);
    }
    list_builder b = {.list = out, .cap = cap, .dtype = dtype};
    lz_status st = fill_list(&b, p);
    if (st != LZ_OK)
        lz_tensor_list_free(out);
    return st;
}

void lz_tensor_list_free(lz_tensor_list *list) {
    for (size_t i = 0; list->tensors && i < list->n; i++)
        free((char *)list->tensors[i].name);
    free(list->tensors);
    free(list->roles);
    *list = (lz_tensor_list){0};
}

uint64_t lz_tensor_list_params(const lz_tensor_list *list) {
    uint64_t total = 0;
    for (size_t i = 0; i < list->n; i++)
        if (list->roles[i] != LZ_ROLE_FP8_SCALE) // (a weight's scales are not parameters of the model)
            total += lz_stw_tensor_numel(&list->tensors[i]);
    return total;
}

uint64_t lz_tensor_list_bytes(const lz_tensor_list *list) {
    uint64_t total = 0;
    for (size_t i = 0; i < list->n; i++)
        total += lz_stw_tensor_bytes(&list->tensors[i]);
    return total;
}

/* ---- config.json, generation_config.json ----------------------------------------- */

static lz_status write_json(const char *dir, const char *name, json_t *root) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* 12 significant digits: 1e-05 and 500000.0 as people write them. */
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12)) : NULL;
    json_decref(root);
    if (!text)
        return lz_fail(LZ_ERR_NOMEM, "out of memory building %s", path);
    size_t len = strlen(text);
    lz_status st = lz_write_file_atomic(path, text, len);
    free(text);
    return st;
}

/* An int for one eos id, a list for several (as HF writes them). */
static json_t *eos_json(const lz_model_preset *p) {
    if (p->n_eos == 1)
        return json_integer(p->eos_token_ids[0]);
    json_t *list = json_array();
    for (int i = 0; list && i < p->n_eos; i++)
        json_array_append_new(list, json_integer(p->eos_token_ids[i]));
    return list;
}

static json_t *rope_scaling_json(const lz_model_preset *p) {
    if (p->rope.type != LZ_ROPE_LLAMA3)
        return json_null();
    return json_pack("{s:f, s:f, s:f, s:i, s:s}", "factor", p->rope.factor, "low_freq_factor",
                     p->rope.low_freq_factor, "high_freq_factor", p->rope.high_freq_factor,
                     "original_max_position_embeddings", p->rope.original_max_position_embeddings, "rope_type",
                     "llama3");
}

static json_t *lizard_json(const lz_model_preset *p) {
    json_t *softmax = json_array();
    for (int l = 0; softmax && l < p->num_hidden_layers; l++)
        if (lz_preset_is_softmax_layer(p, l))
            json_array_append_new(softmax, json_integer(l));
    return json_pack("{s:o, s:i, s:s, s:i, s:i, s:b}", "softmax_layers", softmax, "feature_dim",
                     p->lizard.feature_dim, "feature_map",
                     p->lizard.feature_map == LZ_FMAP_SOFTMAX ? "softmax" : "exp", "window_size",
                     p->lizard.window_size, "num_meta_tokens", p->lizard.num_meta_tokens, "gla_normalize",
                     (int)p->lizard.gla_normalize);
}

static const char *torch_dtype(lz_dtype dtype) {
    return dtype == LZ_DTYPE_BF16 || dtype == LZ_DTYPE_F8_E4M3 ? "bfloat16"
           : dtype == LZ_DTYPE_F16                            ? "float16"
                                                              : "float32";
}

/* HF LlamaConfig keys (transformers 4 spelling of RoPE) plus the lizard block. */
lz_status lz_preset_write_config(const lz_model_preset *p, lz_dtype dtype, const char *dir) {
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:f, s:f, s:o, s:b, s:f, s:b, s:b, s:i, s:o,"
        " s:f, s:i, s:b, s:s}",
        "architectures", "LlamaForCausalLM", "model_type", "llama", "vocab_size", p->vocab_size, "hidden_size",
        p->hidden_size, "intermediate_size", p->intermediate_size, "num_hidden_layers", p->num_hidden_layers,
        "num_attention_heads", p->num_attention_heads, "num_key_value_heads", p->num_key_value_heads, "head_dim",
        p->head_dim, "hidden_act", "silu", "max_position_embeddings", p->max_position_embeddings, "rms_norm_eps",
        p->rms_norm_eps, "rope_theta", p->rope.theta, "rope_scaling", rope_scaling_json(p), "attention_bias", 0,
        "attention_dropout", 0.0, "mlp_bias", 0, "tie_word_embeddings", (int)p->tie_word_embeddings,
        "bos_token_id", p->bos_token_id, "eos_token_id", eos_json(p), "initializer_range", 0.02, "pretraining_tp",
        1, "use_cache", 1, "torch_dtype", torch_dtype(dtype));
    if (root && p->has_lizard && json_object_set_new(root, "lizard", lizard_json(p)) != 0) {
        json_decref(root);
        root = NULL;
    }
    if (root && dtype == LZ_DTYPE_F8_E4M3 &&
        json_object_set_new(root, "quantization_config",
                            json_pack("{s:s, s:f, s:[s]}", "quant_method", "fbgemm_fp8", "activation_scale_ub", 1200.0,
                                      "modules_to_not_convert", "lm_head")) != 0) {
        json_decref(root);
        root = NULL;
    }
    return write_json(dir, "config.json", root);
}

lz_status lz_preset_write_generation_config(const lz_model_preset *p, const char *dir) {
    return write_json(dir, "generation_config.json",
                      json_pack("{s:i, s:o}", "bos_token_id", p->bos_token_id, "eos_token_id", eos_json(p)));
}

lz_status lz_preset_config(const char *name, const char *flag, lz_config *out) {
    const lz_model_preset *p = lz_preset_find(name);
    if (!p) {
        char names[512];
        lz_preset_names(names, sizeof names);
        return lz_fail(LZ_ERR_INPUT, "%s: unknown shape '%s' (known: %s)", flag, name, names);
    }
    char dir[] = "/tmp/lizard-preset-XXXXXX", path[64];
    if (!mkdtemp(dir))
        return lz_fail(LZ_ERR_IO, "%s: cannot make a temp folder for '%s'", flag, name);
    lz_status s = lz_preset_write_config(p, p->dtype, dir);
    if (s == LZ_OK)
        s = lz_config_load(dir, out);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    return s;
}
