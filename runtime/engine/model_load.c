/* model_load.c - checks every tensor a stage needs against the config (name,
 * float dtype, exact shape) and uploads it to the backend. */
#include <math.h>   // isfinite
#include <stdio.h>  // snprintf
#include <stdlib.h> // calloc, free
#include <string.h> // memset, strstr, strlen

#include "fp8_weights.h" // lz_fp8_read_scales, lz_fp8_quantize
#include "hash.h"        // lz_fnv1a
#include "lora_adapter.h" // lz_lora_adapter
#include "model_load.h"
#include "safetensors.h" // lz_weights

/* Limits of the reference kernels' stack buffers. */
enum { LZ_MAX_HEAD_DIM = 1024, LZ_MAX_FEATURE_DIM = 512, LZ_MAX_WINDOW = 4096 };

/* Fills the local buffer `name` with "<prefix p>.<suffix>". */
#define LZ_NAME(suffix) (snprintf(name, sizeof name, "%s.%s", p, suffix), name)

typedef struct {
    lz_model *m;
    size_t *param_count; /* which counter the next tensors add to */
    bool random;         /* no checkpoint: make every tensor at random on the backend */
    bool describe;       /* check and count the checkpoint's tensors, upload nothing */
    uint64_t seed;
    const lz_lora_adapter *adapter; /* merged into the weights it covers as they load, or NULL */
} loader;

/* Random weights that keep activations finite through a deep model: norms 1,
 * everything else small. The seed mixes in the tensor's name. */
static lz_status random_tensor(loader *L, const char *name, int64_t rows, int64_t cols, lz_weight *out) {
    const uint64_t h = lz_fnv1a(L->seed ^ LZ_FNV1A_INIT, name, strlen(name));
    const bool norm = strstr(name, "norm") != NULL;
    return L->m->ops->random_weight(L->m->be, rows, cols, norm ? 1.0f : 0.0f, norm ? 0.0f : 0.02f, h, out);
}

static lz_status load_tensor(loader *L, const char *name, int ndim, const int64_t *shape, int64_t rows, int64_t cols,
                             lz_weight *out) {
    *L->param_count += (size_t)(rows * cols);
    if (L->random && L->describe) { // a shape's geometry: no tensor to check, nothing made
        *out = (lz_weight){NULL, LZ_DTYPE_F32, rows, cols, false, 0, NULL};
        return LZ_OK;
    }
    if (L->random)
        return random_tensor(L, name, rows, cols, out);
    const lz_st_tensor *t;
    LZ_TRY(lz_weights_expect(L->m->ckpt, name, ndim, shape, &t));
    if (L->describe) {
        *out = (lz_weight){NULL, t->dtype, rows, cols, false, 0, NULL};
        return LZ_OK;
    }
    if (!lz_lora_adapter_covers(L->adapter, name)) {
        const lz_host_tensor host = {t->name, t->dtype, t->numel, t->data, true, NULL};
        const lz_status s = L->m->ops->upload_weight(L->m->be, &host, rows, cols, out);
        if (s == LZ_ERR_INPUT) // a weight the backend refused (not finite): which folder it is in
            lz_error_prefix("%s: ", L->m->ckpt->dir);
        return s;
    }
    float *w = malloc(sizeof(float) * (size_t)t->numel); // W + (alpha / r) B A, uploaded from a copy
    if (!w)
        return lz_fail(LZ_ERR_NOMEM, "--adapter: out of memory for '%s'", name);
    lz_convert_to_f32(w, t->data, t->dtype, (size_t)t->numel);
    lz_status s = lz_lora_adapter_apply(L->adapter, name, w, rows, cols);
    const lz_host_tensor host = {t->name, LZ_DTYPE_F32, t->numel, w, false, NULL};
    if (s == LZ_OK && (s = L->m->ops->upload_weight(L->m->be, &host, rows, cols, out)) == LZ_ERR_INPUT)
        lz_error_prefix("%s with --adapter: ", L->m->ckpt->dir);
    free(w);
    return s;
}

static lz_status load_matrix(loader *L, const char *name, int64_t rows, int64_t cols, lz_weight *out) {
    int64_t shape[2] = {rows, cols};
    return load_tensor(L, name, 2, shape, rows, cols, out);
}

/* Uploads an fp32 host copy of a linear layer's weight: as FP8 codes and row scales (fp8_rule.h) when the
 * run holds FP8, else as it is. */
static lz_status upload_linear_f32(loader *L, const char *name, float *w, int64_t rows, int64_t cols,
                                   lz_weight *out) {
    const size_t n = (size_t)(rows * cols), bad = lz_first_nonfinite(w, LZ_DTYPE_F32, n);
    if (bad < n) // (checked before quantizing: the rule saturates an infinity)
        return lz_fail(LZ_ERR_INPUT, "tensor '%s': element %zu is a NaN or an infinity", name, bad);
    if (!L->m->cfg.fp8_weights) {
        const lz_host_tensor host = {name, LZ_DTYPE_F32, (int64_t)n, w, false, NULL};
        return L->m->ops->upload_weight(L->m->be, &host, rows, cols, out);
    }
    uint8_t *codes;
    float *scales;
    LZ_TRY(lz_fp8_quantize(name, w, rows, cols, &codes, &scales));
    const lz_host_tensor host = {name, LZ_DTYPE_F8_E4M3, (int64_t)n, codes, false, scales};
    const lz_status s = L->m->ops->upload_weight(L->m->be, &host, rows, cols, out);
    free(codes);
    free(scales);
    return s;
}

/* An F8_E4M3 checkpoint tensor [rows, cols] and the scales beside it: kept as FP8 when the run holds FP8 (in
 * place from the mapping where the backend can), else dequantized (s * q in fp32). */
static lz_status load_fp8_tensor(loader *L, const lz_st_tensor *t, int64_t rows, int64_t cols, lz_weight *out) {
    lz_model *m = L->m;
    *L->param_count += (size_t)(rows * cols);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is not of shape [%lld, %lld]", t->file, t->name,
                       (long long)rows, (long long)cols);
    float *scales, *w = NULL;
    LZ_TRY(lz_fp8_read_scales(m->ckpt, t, rows, &scales));
    lz_status s = LZ_OK;
    if (L->describe) {
        *out = (lz_weight){NULL, t->dtype, rows, cols, false, 0, NULL};
    } else if (m->cfg.fp8_weights && !lz_lora_adapter_covers(L->adapter, t->name)) {
        const lz_host_tensor host = {t->name, t->dtype, t->numel, t->data, true, scales};
        s = m->ops->upload_weight(m->be, &host, rows, cols, out);
    } else if (!(w = malloc(sizeof(float) * (size_t)t->numel))) {
        s = lz_fail(LZ_ERR_NOMEM, "out of memory dequantizing '%s'", t->name);
    } else {
        lz_fp8_dequantize(t->data, scales, rows, cols, w);
        s = lz_lora_adapter_apply(L->adapter, t->name, w, rows, cols); // (nothing when it does not cover it)
        if (s == LZ_OK)
            s = upload_linear_f32(L, t->name, w, rows, cols, out);
    }
    if (s == LZ_ERR_INPUT)
        lz_error_prefix("%s: ", m->ckpt->dir);
    free(w);
    free(scales);
    return s;
}

/* A linear layer's weight [rows, cols]: an FP8 checkpoint tensor with its scales, or a float one,
 * quantized at load when the run holds FP8 (cfg.fp8_weights) and `quantize` says so (q, k, v, o, gate,
 * up, down: yes; the LM head: no, it keeps the checkpoint's form, as the hub's FP8 checkpoints keep it). */
static lz_status load_linear(loader *L, const char *name, int64_t rows, int64_t cols, bool quantize,
                             lz_weight *out) {
    lz_model *m = L->m;
    const lz_st_tensor *t = L->random ? NULL : lz_weights_find(m->ckpt, name);
    if (t && t->dtype == LZ_DTYPE_F8_E4M3)
        return load_fp8_tensor(L, t, rows, cols, out);
    if (t && t->dtype == LZ_DTYPE_F8_E5M2)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is FP8 E5M2: lizard reads FP8 weights in E4M3 only", t->file,
                       name);
    if (!m->cfg.fp8_weights || !quantize || L->describe)
        return load_matrix(L, name, rows, cols, out);
    if (L->random && m->ops->quantize_fp8) { // made and quantized where it lives
        *L->param_count += (size_t)(rows * cols);
        LZ_TRY(random_tensor(L, name, rows, cols, out));
        const lz_status s = m->ops->quantize_fp8(m->be, out);
        if (s != LZ_OK)
            m->ops->free_weight(m->be, out);
        return s;
    }
    float *w = malloc(sizeof(float) * (size_t)(rows * cols));
    if (!w)
        return lz_fail(LZ_ERR_NOMEM, "out of memory quantizing '%s' to FP8", name);
    lz_status s = LZ_OK;
    if (L->random) { // made on the backend as every random weight is, then read back
        *L->param_count += (size_t)(rows * cols);
        lz_weight tmp;
        s = random_tensor(L, name, rows, cols, &tmp);
        if (s == LZ_OK) {
            const size_t bytes = (size_t)(rows * cols) * lz_dtype_size(tmp.dtype);
            void *raw = tmp.dtype == LZ_DTYPE_F32 ? (void *)w : malloc(bytes);
            s = raw ? m->ops->copy_to_host(m->be, raw, tmp.data, bytes)
                    : lz_fail(LZ_ERR_NOMEM, "out of memory quantizing '%s' to FP8", name);
            if (s == LZ_OK && raw != w)
                lz_convert_to_f32(w, raw, tmp.dtype, (size_t)(rows * cols));
            if (raw != w)
                free(raw);
            m->ops->free_weight(m->be, &tmp);
        }
    } else {
        int64_t shape[2] = {rows, cols};
        s = lz_weights_expect(m->ckpt, name, 2, shape, &t);
        if (s == LZ_OK) {
            *L->param_count += (size_t)(rows * cols);
            lz_convert_to_f32(w, t->data, t->dtype, (size_t)t->numel);
            s = lz_lora_adapter_apply(L->adapter, name, w, rows, cols);
        }
    }
    if (s == LZ_OK && (s = upload_linear_f32(L, name, w, rows, cols, out)) == LZ_ERR_INPUT && !L->random)
        lz_error_prefix("%s: ", m->ckpt->dir);
    free(w);
    return s;
}

static lz_status load_vector(loader *L, const char *name, int64_t n, lz_weight *out) {
    int64_t shape[1] = {n};
    return load_tensor(L, name, 1, shape, 1, n, out);
}

static lz_status load_attention(loader *L, lz_layer *ly, const char *p) {
    const lz_config *c = &L->m->cfg;
    const int64_t H = c->hidden_size, q_out = (int64_t)c->num_attention_heads * c->head_dim;
    const int64_t kv_out = (int64_t)c->num_key_value_heads * c->head_dim;
    char name[256];
    LZ_TRY(load_linear(L, LZ_NAME("self_attn.q_proj.weight"), q_out, H, true, &ly->wq));
    LZ_TRY(load_linear(L, LZ_NAME("self_attn.k_proj.weight"), kv_out, H, true, &ly->wk));
    LZ_TRY(load_linear(L, LZ_NAME("self_attn.v_proj.weight"), kv_out, H, true, &ly->wv));
    LZ_TRY(load_linear(L, LZ_NAME("self_attn.o_proj.weight"), H, q_out, true, &ly->wo));
    if (c->attention_bias) {
        LZ_TRY(load_vector(L, LZ_NAME("self_attn.q_proj.bias"), q_out, &ly->bq));
        LZ_TRY(load_vector(L, LZ_NAME("self_attn.k_proj.bias"), kv_out, &ly->bk));
        LZ_TRY(load_vector(L, LZ_NAME("self_attn.v_proj.bias"), kv_out, &ly->bv));
        LZ_TRY(load_vector(L, LZ_NAME("self_attn.o_proj.bias"), H, &ly->bo));
    }
    return LZ_OK;
}

static lz_status load_mlp(loader *L, lz_layer *ly, const char *p) {
    const lz_config *c = &L->m->cfg;
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    char name[256];
    LZ_TRY(load_vector(L, LZ_NAME("input_layernorm.weight"), H, &ly->input_norm));
    LZ_TRY(load_vector(L, LZ_NAME("post_attention_layernorm.weight"), H, &ly->post_norm));
    LZ_TRY(load_linear(L, LZ_NAME("mlp.gate_proj.weight"), I, H, true, &ly->w_gate));
    LZ_TRY(load_linear(L, LZ_NAME("mlp.up_proj.weight"), I, H, true, &ly->w_up));
    LZ_TRY(load_linear(L, LZ_NAME("mlp.down_proj.weight"), H, I, true, &ly->w_down));
    if (c->mlp_bias) {
        LZ_TRY(load_vector(L, LZ_NAME("mlp.gate_proj.bias"), I, &ly->b_gate));
        LZ_TRY(load_vector(L, LZ_NAME("mlp.up_proj.bias"), I, &ly->b_up));
        LZ_TRY(load_vector(L, LZ_NAME("mlp.down_proj.bias"), H, &ly->b_down));
    }
    return LZ_OK;
}

/* A feature map [heads, head_dim, f] whose head count must be one of `allowed`. */
static lz_status load_feature_map(loader *L, const char *name, const int *allowed, int n_allowed, lz_weight *out) {
    const lz_config *c = &L->m->cfg;
    const lz_st_tensor *t = L->random ? NULL : lz_weights_find(L->m->ckpt, name);
    int64_t heads = t && t->ndim == 3 ? t->shape[0] : L->random ? allowed[n_allowed == 2 ? 0 : 1] : -1;
    bool ok = false;
    for (int i = 0; i < n_allowed; i++)
        ok |= heads == allowed[i];
    int64_t shape[3] = {ok ? heads : allowed[0], c->head_dim, c->lizard.feature_dim};
    if (t && !ok)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' has %lld maps; expected 1, %d%s%s", L->m->ckpt->dir, name,
                       (long long)heads, allowed[n_allowed - 1], n_allowed > 2 ? " or " : "",
                       n_allowed > 2 ? "num_key_value_heads" : " (num_attention_heads)");
    return load_tensor(L, name, 3, shape, shape[0], shape[1] * shape[2], out);
}

static lz_status load_lizard(loader *L, lz_layer *ly, const char *p) {
    const lz_config *c = &L->m->cfg;
    char name[256];
    const int q_allowed[2] = {1, c->num_attention_heads};
    const int k_allowed[3] = {1, c->num_key_value_heads, c->num_attention_heads};
    LZ_TRY(load_feature_map(L, LZ_NAME("self_attn.feature_map_q.weight"), q_allowed, 2, &ly->fmap_q));
    LZ_TRY(load_feature_map(L, LZ_NAME("self_attn.feature_map_k.weight"), k_allowed, 3, &ly->fmap_k));
    LZ_TRY(load_matrix(L, LZ_NAME("self_attn.gate.weight"), 1, c->hidden_size, &ly->gate));
    LZ_TRY(load_vector(L, LZ_NAME("self_attn.meta_logits"), c->lizard.num_meta_tokens, &ly->meta));
    const int64_t one[1] = {1};
    const lz_st_tensor *alpha;
    *L->param_count += 1;
    if (L->random) {
        ly->alpha = 1.0f;
    } else {
        LZ_TRY(lz_weights_expect(L->m->ckpt, LZ_NAME("self_attn.window_alpha"), 1, one, &alpha));
        lz_convert_to_f32(&ly->alpha, alpha->data, alpha->dtype, 1); // a host scalar, read from the mapping
        if (!isfinite(ly->alpha))
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is a NaN or an infinity", L->m->ckpt->dir, name);
    }
    // State is per query head only when phi_k is (keys repeated to every query head).
    ly->dims.n_state_heads = ly->fmap_k.rows == c->num_attention_heads && c->num_attention_heads != c->num_key_value_heads
                                 ? c->num_attention_heads
                                 : c->num_key_value_heads;
    return LZ_OK;
}

static lz_status check_limits(const lz_config *c) {
    if (c->head_dim > LZ_MAX_HEAD_DIM)
        return lz_fail(LZ_ERR_INPUT, "config.json: head_dim %d exceeds the supported %d", c->head_dim, LZ_MAX_HEAD_DIM);
    if (c->has_lizard && c->lizard.feature_dim > LZ_MAX_FEATURE_DIM)
        return lz_fail(LZ_ERR_INPUT, "config.json: lizard.feature_dim %d exceeds the supported %d",
                       c->lizard.feature_dim, LZ_MAX_FEATURE_DIM);
    if (c->has_lizard && c->lizard.window_size > LZ_MAX_WINDOW)
        return lz_fail(LZ_ERR_INPUT, "config.json: lizard.window_size %d exceeds the supported %d",
                       c->lizard.window_size, LZ_MAX_WINDOW);
    return LZ_OK;
}

/* A layer that runs as Lizard: its dimensions and weights (name: its first Lizard tensor's). */
static lz_status load_lizard_layer(loader *L, lz_layer *ly, const char *p, const char *name) {
    lz_model *m = L->m;
    const lz_config *c = &m->cfg;
    const int i = ly->index;
    if (!c->has_lizard)
        return lz_fail(LZ_ERR_INPUT, "%s: layer %d would run as Lizard but config.json has no \"lizard\" block",
                       m->ckpt->dir, i);
    if (!ly->has_lizard)
        return lz_fail(LZ_ERR_INPUT, "%s: layer %d runs as Lizard but tensor '%s' is missing", m->ckpt->dir, i, name);
    ly->dims.feature_dim = c->lizard.feature_dim;
    ly->dims.window = c->lizard.window_size;
    ly->dims.n_meta = c->lizard.num_meta_tokens;
    ly->dims.gla_normalize = c->lizard.gla_normalize;
    L->param_count = &m->n_params_lizard;
    return load_lizard(L, ly, p);
}

static lz_status load_layer(loader *L, int i) {
    lz_model *m = L->m;
    const lz_config *c = &m->cfg;
    lz_layer *ly = &m->layers[i];
    char p[64], name[256];
    snprintf(p, sizeof p, "model.layers.%d", i);
    snprintf(name, sizeof name, "%s.self_attn.feature_map_q.weight", p);
    ly->index = i;
    ly->run_softmax = c->softmax_layer[i];
    ly->has_lizard = L->random ? c->has_lizard : lz_weights_find(m->ckpt, name) != NULL;
    ly->dims = (lz_attn_dims){.n_heads = c->num_attention_heads, .n_kv_heads = c->num_key_value_heads,
                              .head_dim = c->head_dim, .sliding_window = c->sliding_window};
    if (!m->parts.layer[i])
        return LZ_OK; // another stage's layer: its kind is known, its weights are not needed here
    L->param_count = &m->n_params_teacher;
    LZ_TRY(load_attention(L, ly, p));
    LZ_TRY(load_mlp(L, ly, p));
    if (!ly->run_softmax)
        LZ_TRY(load_lizard_layer(L, ly, p, name));
    if (!L->describe && m->ops->join_weights) { /* q, k, v (and a Lizard gate) and gate, up each read one input */
        lz_weight *qkv[4] = {&ly->wq, &ly->wk, &ly->wv, &ly->gate}, *mlp[2] = {&ly->w_gate, &ly->w_up};
        LZ_TRY(m->ops->join_weights(m->be, ly->run_softmax ? 3 : 4, qkv));
        LZ_TRY(m->ops->join_weights(m->be, 2, mlp));
    }
    return LZ_OK;
}

static lz_status load_all(lz_model *m, const char *dir, const lz_config *cfg, bool random, bool describe,
                          uint64_t seed, const lz_lora_adapter *adapter);

void lz_stage_parts_all(lz_stage_parts *parts, int n_layers) {
    memset(parts, 0, sizeof *parts);
    for (int i = 0; i < n_layers && i < LZ_MAX_LAYERS; i++)
        parts->layer[i] = true;
    parts->embed = parts->head = true;
}

/* An empty model of `cfg` on a backend, owning `parts`. */
static lz_status begin_model(lz_model *m, const lz_config *cfg, const lz_ops *ops, lz_backend *be,
                             const lz_stage_parts *parts) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->parts = *parts;
    m->ops = ops;
    m->be = be;
    LZ_TRY(check_limits(cfg));
    m->ckpt = calloc(1, sizeof *m->ckpt);
    return m->ckpt ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "model: out of memory");
}

lz_status lz_model_load_stage(lz_model *m, const char *dir, const lz_config *cfg, const lz_ops *ops, lz_backend *be,
                              const lz_stage_parts *parts, const char *adapter_dir) {
    LZ_TRY(begin_model(m, cfg, ops, be, parts));
    LZ_TRY(lz_weights_open(dir, m->ckpt));
    if (!adapter_dir)
        return load_all(m, dir, cfg, false, false, 0, NULL);
    lz_lora_adapter ad;
    LZ_TRY(lz_lora_adapter_open(adapter_dir, cfg, &ad));
    lz_status s = load_all(m, dir, cfg, false, false, 0, &ad);
    if (s == LZ_OK)
        m->adapter_hash = ad.hash;
    lz_lora_adapter_close(&ad);
    return s;
}

lz_status lz_model_load(lz_model *m, const char *dir, const lz_config *cfg, const lz_ops *ops, lz_backend *be) {
    lz_stage_parts all;
    lz_stage_parts_all(&all, cfg->num_hidden_layers);
    return lz_model_load_stage(m, dir, cfg, ops, be, &all, NULL);
}

lz_status lz_model_describe(lz_model *m, const char *dir, const lz_config *cfg, const lz_ops *ops) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    lz_stage_parts_all(&m->parts, cfg->num_hidden_layers);
    m->ops = ops;
    m->ckpt = calloc(1, sizeof *m->ckpt);
    if (!m->ckpt)
        return lz_fail(LZ_ERR_NOMEM, "model: out of memory");
    if (!dir) // a shape: the tensors lz_model_init_random would make
        return load_all(m, "(random weights)", cfg, true, true, 0, NULL);
    LZ_TRY(lz_weights_open(dir, m->ckpt));
    return load_all(m, dir, cfg, false, true, 0, NULL);
}

lz_status lz_model_init_random(lz_model *m, const lz_config *cfg, const lz_ops *ops, lz_backend *be, uint64_t seed) {
    lz_stage_parts all;
    lz_stage_parts_all(&all, cfg->num_hidden_layers);
    return lz_model_init_random_stage(m, cfg, ops, be, &all, seed);
}

lz_status lz_model_init_random_stage(lz_model *m, const lz_config *cfg, const lz_ops *ops, lz_backend *be,
                                     const lz_stage_parts *parts, uint64_t seed) {
    LZ_TRY(begin_model(m, cfg, ops, be, parts));
    return load_all(m, "(random weights)", cfg, true, false, seed, NULL);
}

static lz_status load_all(lz_model *m, const char *dir, const lz_config *cfg, bool random, bool describe,
                          uint64_t seed, const lz_lora_adapter *adapter) {
    lz_status st = LZ_ERR_NOMEM;
    m->layers = calloc((size_t)cfg->num_hidden_layers, sizeof(lz_layer));
    if (!m->layers)
        goto fail;
    loader L = {m, &m->n_params_teacher, random, describe, seed, adapter};
    const int64_t V = cfg->vocab_size, H = cfg->hidden_size;
    // the embedding: on the first stage, and on the last when the LM head is tied to it
    const bool need_embed = m->parts.embed || (m->parts.head && cfg->tie_word_embeddings);
    if (need_embed && (st = load_matrix(&L, "model.embed_tokens.weight", V, H, &m->embed)) != LZ_OK)
        goto fail;
    for (int i = 0; i < cfg->num_hidden_layers; i++)
        if ((st = load_layer(&L, i)) != LZ_OK)
            goto fail;
    if (m->parts.head) {
        L.param_count = &m->n_params_teacher; // (the last layer's Lizard tensors counted as Lizard)
        if ((st = load_vector(&L, "model.norm.weight", H, &m->final_norm)) != LZ_OK)
            goto fail;
        if (cfg->tie_word_embeddings)
            m->lm_head = (lz_weight){m->embed.data, m->embed.dtype, V, H, false, 0, NULL};
        else if ((st = load_linear(&L, "lm_head.weight", V, H, false, &m->lm_head)) != LZ_OK)
            goto fail;
    }
    if (describe)
        return LZ_OK;
    float freq[LZ_MAX_HEAD_DIM / 2];
    lz_rope_inv_freq(cfg, freq);
    if ((st = m->ops->alloc(m->be, sizeof(float) * (size_t)(cfg->head_dim / 2), (void **)&m->inv_freq)) != LZ_OK)
        goto fail;
    if ((st = m->ops->upload_f32(m->be, m->inv_freq, freq, (size_t)(cfg->head_dim / 2))) != LZ_OK)
        goto fail;
    return LZ_OK;
fail:
    if (st == LZ_ERR_NOMEM && !m->layers)
        lz_fail(LZ_ERR_NOMEM, "%s: out of memory for %d layers", dir, cfg->num_hidden_layers);
    lz_model_free(m);
    return st;
}

static void free_layer(lz_model *m, lz_layer *ly) {
    lz_weight *all[] = {&ly->input_norm, &ly->post_norm, &ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->bq, &ly->bk,
                        &ly->bv, &ly->bo, &ly->w_gate, &ly->w_up, &ly->w_down, &ly->b_gate, &ly->b_up, &ly->b_down,
                        &ly->fmap_q, &ly->fmap_k, &ly->gate, &ly->meta};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        m->ops->free_weight(m->be, all[i]);
}

void lz_model_free(lz_model *m) {
    if (!m->ops)
        return;
    if (m->ops->graph_reset && m->be) // (a described model has no backend: nothing recorded)
        m->ops->graph_reset(m->be);
    if (m->layers)
        for (int i = 0; i < m->cfg.num_hidden_layers; i++)
            free_layer(m, &m->layers[i]);
    free(m->layers);
    m->ops->free_weight(m->be, &m->embed);
    m->ops->free_weight(m->be, &m->final_norm);
    if (!m->cfg.tie_word_embeddings)
        m->ops->free_weight(m->be, &m->lm_head);
    if (m->inv_freq)
        m->ops->free(m->be, m->inv_freq);
    if (m->ckpt)
        lz_weights_close(m->ckpt);
    free(m->ckpt);
    memset(m, 0, sizeof *m);
}
