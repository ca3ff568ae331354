/* lora_adapter.c - see lora_adapter.h. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, free
#include <string.h> // strcmp, strlen, strdup

#include "hash.h"      // lz_fnv1a
#include "json_read.h" // lz_json_load_file
#include "lora_adapter.h"
#include "projections.h" // lz_lin_module, lz_lin_parent, lz_lin_shape


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

static lz_status read_config(const char *dir, lz_lora_adapter *ad) {
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t jerr;
    json_t *root = lz_json_load_file(path, 0, &jerr);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: %s (line %d)", path, jerr.text, jerr.line);
    const char *type = json_string_value(json_object_get(root, "peft_type"));
    json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    lz_status s = LZ_OK;
    if (!type || strcmp(type, "LORA") != 0)
        s = lz_fail(LZ_ERR_INPUT, "%s: peft_type '%s'; only LORA adapters merge", path, type ? type : "(none)");
    else if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 1 << 16)
        s = lz_fail(LZ_ERR_INPUT, "%s: \"r\" must be a positive integer", path);
    else if (!json_is_number(alpha))
        s = lz_fail(LZ_ERR_INPUT, "%s: \"lora_alpha\" must be a number", path);
    static const char *const unsupported[] = {"use_dora", "use_rslora", "fan_in_fan_out"};
    for (size_t i = 0; s == LZ_OK && i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (json_is_true(json_object_get(root, unsupported[i])))
            s = lz_fail(LZ_ERR_INPUT, "%s: \"%s\": true is not supported (plain LoRA only)", path, unsupported[i]);
    if (s == LZ_OK && json_object_get(root, "rank_pattern") && json_object_size(json_object_get(root, "rank_pattern")))
        s = lz_fail(LZ_ERR_INPUT, "%s: \"rank_pattern\" is not supported (one rank for every module)", path);
    if (s == LZ_OK && json_object_get(root, "alpha_pattern") &&
        json_object_size(json_object_get(root, "alpha_pattern")))
        s = lz_fail(LZ_ERR_INPUT, "%s: \"alpha_pattern\" is not supported (one alpha for every module)", path);
    if (s == LZ_OK) {
        ad->rank = (int)json_integer_value(r);
        ad->scale = json_number_value(alpha) / ad->rank;
        char *text = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
        if (text)
            ad->hash = lz_fnv1a(ad->hash, text, strlen(text));
        free(text);
    }
    json_decref(root);
    return s;
}

/* Every tensor a LoRA factor of a projection the model has, of that projection's shape, A and B paired. */
static lz_status check_tensors(const lz_lora_adapter *ad, const lz_config *c, const char *path) {
    if (ad->file.n_tensors == 0)
        return lz_fail(LZ_ERR_INPUT, "%s: no tensors", path);
    for (size_t i = 0; i < ad->file.n_tensors; i++) {
        const lz_st_tensor *t = &ad->file.tensors[i];
        int layer, j;
        char ab;
        if (!parse_name(t->name, c->num_hidden_layers, &layer, &j, &ab))
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is no LoRA factor of a projection this model has "
                           "(%d layers)", path, t->name, c->num_hidden_layers);
        int out, in;
        lz_lin_shape(c, j, &out, &in);
        const int64_t want0 = ab == 'A' ? ad->rank : out, want1 = ab == 'A' ? in : ad->rank;
        if (t->ndim != 2 || t->shape[0] != want0 || t->shape[1] != want1)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' has shape [%lld%s%lld]; this model needs [%lld, %lld] "
                           "(r = %d)", path, t->name, (long long)t->shape[0], t->ndim == 2 ? ", " : "...",
                           (long long)(t->ndim == 2 ? t->shape[1] : 0), (long long)want0, (long long)want1,
                           ad->rank);
        char other[200];
        snprintf(other, sizeof other, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer,
                 lz_lin_parent[j], lz_lin_module[j], ab == 'A' ? 'B' : 'A');
        if (!lz_st_find(&ad->file, other))
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' has no '%s'", path, t->name, other);
    }
    return LZ_OK;
}

lz_status lz_lora_adapter_open(const char *dir, const lz_config *cfg, lz_lora_adapter *out) {
    memset(out, 0, sizeof *out);
    out->hash = LZ_FNV1A_INIT;
    out->dir = strdup(dir);
    if (!out->dir)
        return lz_fail(LZ_ERR_NOMEM, "--adapter: out of memory");
    lz_status s = read_config(dir, out);
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (s == LZ_OK)
        s = lz_st_open(path, &out->file);
    if (s == LZ_OK)
        s = check_tensors(out, cfg, path);
    for (size_t i = 0; s == LZ_OK && i < out->file.n_tensors; i++) { // names, shapes and a taste of each
        const lz_st_tensor *t = &out->file.tensors[i];
        out->hash = lz_fnv1a(out->hash, t->name, strlen(t->name));
        out->hash = lz_fnv1a(out->hash, t->data, t->nbytes < 256 ? t->nbytes : 256);
    }
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

lz_status lz_lora_adapter_apply(const lz_lora_adapter *ad, const char *name, float *w, int64_t rows, int64_t cols) {
    const lz_st_tensor *At, *Bt;
    if (!ad || !factors(ad, name, &At, &Bt))
        return LZ_OK;
    const int r = ad->rank;
    float *A = malloc(sizeof(float) * (size_t)(r * cols)), *Brow = malloc(sizeof(float) * (size_t)r);
    if (A && Brow) {
        lz_convert_to_f32(A, At->data, At->dtype, (size_t)(r * cols));
        const size_t b_es = lz_dtype_size(Bt->dtype);
        for (int64_t o = 0; o < rows; o++) { // row o: w[o, :] += scale * sum_k B[o, k] A[k, :]
            lz_convert_to_f32(Brow, (const char *)Bt->data + (size_t)(o * r) * b_es, Bt->dtype, (size_t)r);
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
