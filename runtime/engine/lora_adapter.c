/* lora_adapter.c - see lora_adapter.h. */
#include <math.h>   // sqrt, isfinite
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, free
#include <string.h> // strcmp, strlen, strdup

#include "hash.h"      // lz_fnv1a
#include "json_read.h" // lz_json_loadb
#include "lora_adapter.h"
#include "peft_targets.h" // lz_peft_targets
#include "projections.h"  // lz_lin_module, lz_lin_parent, lz_lin_shape
#include "text_file.h"    // lz_read_text_file

/* ---- adapter_config.json ---------------------------------------------------------------------- */

/* Fields PEFT writes that do not change the merged weights. */
static const char *const read_past[] = {
    "task_type", "base_model_name_or_path", "revision", "inference_mode", "init_lora_weights", "lora_dropout",
    "megatron_config", "megatron_core", "loftq_config", "eva_config", "corda_config", "runtime_config",
    "auto_mapping", "peft_version", "qalora_group_size", "ensure_weight_tying"};

/* Fields read here or by peft_targets.c. */
static const char *const interpreted[] = {"peft_type", "r", "lora_alpha", "use_rslora", "target_modules",
                                          "exclude_modules", "layers_to_transform", "layers_pattern", "bias"};

/* Fields that change the model in ways this merge does not implement: refused unless off. */
static const struct {
    const char *field, *why;
} unsupported[] = {
    {"use_dora", "DoRA's magnitude vectors are not merged"},
    {"fan_in_fan_out", "transposed (Conv1D) weights are not merged"},
    {"modules_to_save", "whole modules trained and saved beside the factors are not merged"},
    {"rank_pattern", "one rank for every module is merged"},
    {"alpha_pattern", "one alpha for every module is merged"},
    {"target_parameters", "LoRA on parameters (not modules) is not merged"},
    {"layer_replication", "replicated layers are not built"},
    {"trainable_token_indices", "trained token embeddings are not merged"},
    {"lora_bias", "a bias on lora_B is not merged"},
    {"use_qalora", "QALoRA's pooled inputs are not merged"},
    {"alora_invocation_tokens", "activated LoRA (from an invocation token on) is not merged"},
    {"arrow_config", "Arrow routing between adapters is not merged"},
};

static bool listed(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, list[i]) == 0)
            return true;
    return false;
}

/* null, false, 0, "", [] or {}: a field that asks for nothing. */
static bool is_off(const json_t *v) {
    return json_is_null(v) || json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0) ||
           (json_is_string(v) && json_string_length(v) == 0) || (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

static lz_status check_fields(const json_t *root, const char *path) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        if (listed(key, read_past, sizeof read_past / sizeof read_past[0]) ||
            listed(key, interpreted, sizeof interpreted / sizeof interpreted[0]))
            continue;
        bool known = false;
        for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0] && !known; i++)
            if (strcmp(key, unsupported[i].field) == 0) {
                known = true;
                if (!is_off(v))
                    return lz_fail(LZ_ERR_INPUT, "%s: \"%s\" is set: not supported (%s)", path, key,
                                   unsupported[i].why);
            }
        if (!known && !is_off(v))
            return lz_fail(LZ_ERR_INPUT, "%s: \"%.64s\" is set: a field this version does not know, which may change "
                           "the model", path, key);
    }
    const json_t *bias = json_object_get(root, "bias");
    if (bias && !json_is_null(bias) && !(json_is_string(bias) && strcmp(json_string_value(bias), "none") == 0))
        return lz_fail(LZ_ERR_INPUT, "%s: \"bias\": only \"none\" is supported (the adapter's biases are not merged)",
                       path);
    return LZ_OK;
}

static lz_status read_config(const json_t *root, const char *path, lz_lora_adapter *ad) {
    if (!json_is_object(root))
        return lz_fail(LZ_ERR_INPUT, "%s: not a JSON object", path);
    const char *type = json_string_value(json_object_get(root, "peft_type"));
    const json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    const json_t *rs = json_object_get(root, "use_rslora");
    if (!type || strcmp(type, "LORA") != 0)
        return lz_fail(LZ_ERR_INPUT, "%s: peft_type '%.32s'; only LORA adapters merge", path, type ? type : "(none)");
    if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 1 << 16)
        return lz_fail(LZ_ERR_INPUT, "%s: \"r\" must be a positive integer", path);
    if (!json_is_number(alpha) || !isfinite(json_number_value(alpha)))
        return lz_fail(LZ_ERR_INPUT, "%s: \"lora_alpha\" must be a number", path);
    if (rs && !json_is_boolean(rs) && !json_is_null(rs))
        return lz_fail(LZ_ERR_INPUT, "%s: \"use_rslora\" must be true or false", path);
    LZ_TRY(check_fields(root, path));
    ad->rank = (int)json_integer_value(r);
    ad->scale = json_number_value(alpha) / (json_is_true(rs) ? sqrt((double)ad->rank) : (double)ad->rank);
    char *text = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
    if (!text)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    ad->hash = lz_fnv1a(ad->hash, text, strlen(text));
    free(text);
    return LZ_OK;
}

/* ---- the tensors ------------------------------------------------------------------------------ */

/* "base_model.model.model.layers.L.PARENT.MODULE.lora_X.weight" -> layer, module, X; false if not of that form. */
static bool parse_name(const char *name, int n_layers, int *layer, int *module, char *ab) {
    char parent[16], mod[16], again[200];
    if (sscanf(name, "base_model.model.model.layers.%d.%15[a-z_].%15[a-z_].lora_%c.weight", layer, parent, mod,
               ab) != 4 ||
        *layer < 0 || *layer >= n_layers || (*ab != 'A' && *ab != 'B'))
        return false;
    for (int j = 0; j < LZ_LIN_COUNT; j++) {
        snprintf(again, sizeof again, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", *layer,
                 lz_lin_parent[j], lz_lin_module[j], *ab);
        if (strcmp(again, name) == 0) {
            *module = j;
            return true;
        }
    }
    return false;
}

/* F32, F16, BF16, or F64 whose every element is an F32 value; finite. */
static lz_status check_values(const lz_st_tensor *t, const char *path) {
    const size_t n = (size_t)t->numel;
    if (!lz_dtype_is_float_weight(t->dtype) && t->dtype != LZ_DTYPE_F64)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is %s: a LoRA factor must be F32, F16, BF16 (or F64 of F32 "
                       "values)", path, t->name, lz_dtype_name(t->dtype));
    const size_t bad = lz_first_nonfinite(t->data, t->dtype, n);
    if (bad < n)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' holds a NaN or infinity (element %zu)", path, t->name, bad);
    for (size_t i = 0; t->dtype == LZ_DTYPE_F64 && i < n; i++) {
        double v;
        memcpy(&v, (const char *)t->data + 8 * i, sizeof v);
        if ((double)(float)v != v)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is F64 and its element %zu (%.17g) has no exact F32 value "
                           "(the merge is in F32): save the adapter in float32", path, t->name, i, v);
    }
    return LZ_OK;
}

/* Every tensor a LoRA factor of a targeted projection the model has, of that projection's shape, A and B
 * paired, of a dtype that converts exactly, finite. */
static lz_status check_tensors(const lz_lora_adapter *ad, const lz_config *c, const lz_peft_targets *targets,
                               const char *path, const char *config_path) {
    if (ad->file.n_tensors == 0)
        return lz_fail(LZ_ERR_INPUT, "%s: no tensors", path);
    for (size_t i = 0; i < ad->file.n_tensors; i++) {
        const lz_st_tensor *t = &ad->file.tensors[i];
        int layer, j;
        char ab;
        if (!parse_name(t->name, c->num_hidden_layers, &layer, &j, &ab))
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%.160s' is no LoRA factor of a projection this model has "
                           "(%d layers)", path, t->name, c->num_hidden_layers);
        char key[128];
        snprintf(key, sizeof key, "model.layers.%d.%s.%s", layer, lz_lin_parent[j], lz_lin_module[j]);
        bool targeted;
        const char *why;
        LZ_TRY(lz_peft_targets_match(targets, key, &targeted, &why));
        if (!targeted)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is outside the adapter's targets: for %s, %s (%s)", path,
                           t->name, key, why, config_path);
        int out, in;
        lz_lin_shape(c, j, &out, &in);
        const int64_t want0 = ab == 'A' ? ad->rank : out, want1 = ab == 'A' ? in : ad->rank;
        if (t->ndim != 2 || t->shape[0] != want0 || t->shape[1] != want1)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' has shape [%lld%s%lld]; this model needs [%lld, %lld] "
                           "(r = %d)", path, t->name, (long long)(t->ndim ? t->shape[0] : 0), t->ndim == 2 ? ", " : "...",
                           (long long)(t->ndim == 2 ? t->shape[1] : 0), (long long)want0, (long long)want1,
                           ad->rank);
        char other[200];
        snprintf(other, sizeof other, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer,
                 lz_lin_parent[j], lz_lin_module[j], ab == 'A' ? 'B' : 'A');
        if (!lz_st_find(&ad->file, other))
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' has no '%s'", path, t->name, other);
        LZ_TRY(check_values(t, path));
    }
    return LZ_OK;
}

/* ---- opening ---------------------------------------------------------------------------------- */

/* The config (parsed) and the tensors (already in out->file) checked against the model. */
static lz_status check_adapter(const char *dir, const char *config_text, size_t config_len, const lz_config *cfg,
                               lz_lora_adapter *out) {
    char config_path[4096], tensors_path[4096];
    snprintf(config_path, sizeof config_path, "%s/adapter_config.json", dir);
    snprintf(tensors_path, sizeof tensors_path, "%s/adapter_model.safetensors", dir);
    json_error_t jerr;
    json_t *root = lz_json_loadb(config_text, config_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: %s (line %d)", config_path, jerr.text, jerr.line);
    lz_peft_targets *targets = NULL;
    lz_status s = read_config(root, config_path, out);
    if (s == LZ_OK)
        s = lz_peft_targets_read(root, config_path, &targets);
    json_decref(root);
    if (s == LZ_OK)
        s = check_tensors(out, cfg, targets, tensors_path, config_path);
    lz_peft_targets_free(targets);
    for (size_t i = 0; s == LZ_OK && i < out->file.n_tensors; i++) { // names, shapes and a taste of each
        const lz_st_tensor *t = &out->file.tensors[i];
        out->hash = lz_fnv1a(out->hash, t->name, strlen(t->name));
        out->hash = lz_fnv1a(out->hash, t->data, t->nbytes < 256 ? t->nbytes : 256);
    }
    return s;
}

static lz_status begin(const char *dir, lz_lora_adapter *out) {
    memset(out, 0, sizeof *out);
    out->hash = LZ_FNV1A_INIT;
    out->dir = strdup(dir);
    return out->dir ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "--adapter: out of memory");
}

lz_status lz_lora_adapter_open(const char *dir, const lz_config *cfg, lz_lora_adapter *out) {
    LZ_TRY(begin(dir, out));
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text = NULL;
    size_t len = 0;
    lz_status s = lz_read_text_file("--adapter", path, &text, &len);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (s == LZ_OK)
        s = lz_st_open(path, &out->file);
    if (s == LZ_OK)
        s = check_adapter(dir, text, len, cfg, out);
    free(text);
    if (s != LZ_OK)
        lz_lora_adapter_close(out);
    return s;
}

lz_status lz_lora_adapter_parse(const char *dir, const char *config_text, size_t config_len,
                                const uint8_t *tensors_file, size_t tensors_len, const lz_config *cfg,
                                lz_lora_adapter *out) {
    LZ_TRY(begin(dir, out));
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    lz_status s = lz_st_parse(tensors_file, tensors_len, path, &out->file);
    if (s == LZ_OK)
        s = check_adapter(dir, config_text, config_len, cfg, out);
    if (s != LZ_OK)
        lz_lora_adapter_close(out);
    return s;
}

void lz_lora_adapter_close(lz_lora_adapter *ad) {
    if (ad->file.map || ad->file.tensors)
        lz_st_close(&ad->file);
    free(ad->dir);
    memset(ad, 0, sizeof *ad);
}

/* ---- merging ---------------------------------------------------------------------------------- */

/* The A and B of weight `name` ("model.layers.L.PARENT.MODULE.weight"), or false. */
static bool factors(const lz_lora_adapter *ad, const char *name, const lz_st_tensor **A, const lz_st_tensor **B) {
    const size_t n = strlen(name), tail = strlen(".weight");
    if (n <= tail || strcmp(name + n - tail, ".weight") != 0)
        return false;
    char a[256], b[256];
    snprintf(a, sizeof a, "base_model.model.%.*s.lora_A.weight", (int)(n - tail), name);
    snprintf(b, sizeof b, "base_model.model.%.*s.lora_B.weight", (int)(n - tail), name);
    *A = lz_st_find(&ad->file, a);
    *B = lz_st_find(&ad->file, b);
    return *A && *B;
}

bool lz_lora_adapter_covers(const lz_lora_adapter *ad, const char *name) {
    const lz_st_tensor *A, *B;
    return ad && factors(ad, name, &A, &B);
}

/* n elements of t from element `first` as F32 (exact: checked when opened). */
static void to_f32(float *dst, const lz_st_tensor *t, size_t first, size_t n) {
    const char *src = (const char *)t->data + first * lz_dtype_size(t->dtype);
    if (t->dtype != LZ_DTYPE_F64) {
        lz_convert_to_f32(dst, src, t->dtype, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, src + 8 * i, sizeof v);
        dst[i] = (float)v;
    }
}

lz_status lz_lora_adapter_apply(const lz_lora_adapter *ad, const char *name, float *w, int64_t rows, int64_t cols) {
    const lz_st_tensor *At, *Bt;
    if (!ad || !factors(ad, name, &At, &Bt))
        return LZ_OK;
    const int r = ad->rank;
    float *A = malloc(sizeof(float) * (size_t)(r * cols)), *Brow = malloc(sizeof(float) * (size_t)r);
    if (A && Brow) {
        to_f32(A, At, 0, (size_t)(r * cols));
        for (int64_t o = 0; o < rows; o++) { // row o: w[o, :] += scale * sum_k B[o, k] A[k, :]
            to_f32(Brow, Bt, (size_t)(o * r), (size_t)r);
            float *wo = w + o * cols;
            for (int k = 0; k < r; k++) {
                const float bk = (float)(ad->scale * Brow[k]);
                const float *Ak = A + (int64_t)k * cols;
                for (int64_t c = 0; c < cols; c++)
                    wo[c] += bk * Ak[c];
            }
        }
    }
    const bool ok = A && Brow;
    free(A), free(Brow);
    return ok ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "--adapter: out of memory merging '%s'", name);
}
