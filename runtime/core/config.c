/* config.c - read config.json: HF LLaMA/Mistral keys, both RoPE spellings, the "lizard" block. */
#include "config.h"
#include "json_read.h" // lz_json_loadb: integers of any size
#include "quant_config.h" // lz_quant_config_parse

#include <errno.h>   // errno, ERANGE
#include <jansson.h> // json_t
#include <limits.h>  // INT_MAX, INT_MIN
#include <stdio.h>   // fopen, fread, snprintf
#include <stdlib.h>  // malloc, realloc, free, strtol
#include <string.h>  // memset, memcpy, strcmp, strchr, strlen, strerror

/* config.json files are a few KB; anything this big is not one. */
enum { CONFIG_MAX_BYTES = 16 << 20 };

/* ---- typed getters: `sect` ("" or "rope_scaling." ...) prefixes the key in messages ---- */

static int is_absent(json_t *v) { return v == NULL || json_is_null(v); }

/* An int key; when absent (or null, unless required) *out = def. */
static lz_status get_int(const char *path, json_t *obj, const char *sect, const char *key, bool required,
                         int def, int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || (json_is_null(v) && !required)) {
        if (required)
            return lz_fail(LZ_ERR_INPUT, "%s: missing key '%s%s'", path, sect, key);
        *out = def;
        return LZ_OK;
    }
    if (!json_is_integer(v))
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s%s' must be an integer", path, sect, key);
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s%s' = %lld is out of range", path, sect, key, (long long)x);
    *out = (int)x;
    return LZ_OK;
}

/* A number key (integer or real: 500000 and 500000.0 are both seen). */
static lz_status get_number(const char *path, json_t *obj, const char *sect, const char *key, bool required,
                            double def, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || (json_is_null(v) && !required)) {
        if (required)
            return lz_fail(LZ_ERR_INPUT, "%s: missing key '%s%s'", path, sect, key);
        *out = def;
        return LZ_OK;
    }
    if (!json_is_number(v))
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s%s' must be a number", path, sect, key);
    *out = json_number_value(v);
    return LZ_OK;
}

static lz_status get_bool(const char *path, json_t *obj, const char *sect, const char *key, bool def,
                          bool *out) {
    json_t *v = json_object_get(obj, key);
    if (is_absent(v)) {
        *out = def;
        return LZ_OK;
    }
    if (!json_is_boolean(v))
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s%s' must be true or false", path, sect, key);
    *out = json_is_true(v);
    return LZ_OK;
}

/* A string key; *out = NULL when absent or null. */
static lz_status get_string(const char *path, json_t *obj, const char *sect, const char *key,
                            const char **out) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (is_absent(v))
        return LZ_OK;
    if (!json_is_string(v))
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s%s' must be a string", path, sect, key);
    *out = json_string_value(v);
    return LZ_OK;
}

static lz_status require_min(const char *path, const char *key, long long value, long long min) {
    if (value < min)
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s' = %lld must be %s", path, key, value,
                       min == 1 ? "positive" : min == 0 ? "non-negative" : "larger");
    return LZ_OK;
}

/* ---- sizes -------------------------------------------------------------------------- */

static lz_status parse_sizes(const char *path, json_t *root, lz_config *c) {
    static const char *const required[] = {"vocab_size", "hidden_size", "intermediate_size",
                                           "num_hidden_layers", "num_attention_heads"};
    int *fields[] = {&c->vocab_size, &c->hidden_size, &c->intermediate_size, &c->num_hidden_layers,
                     &c->num_attention_heads};
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        LZ_TRY(get_int(path, root, "", required[i], true, 0, fields[i]));
        LZ_TRY(require_min(path, required[i], *fields[i], 1));
    }
    if (c->num_hidden_layers > LZ_MAX_LAYERS)
        return lz_fail(LZ_ERR_INPUT, "%s: key 'num_hidden_layers' = %d is over the limit of %d", path,
                       c->num_hidden_layers, LZ_MAX_LAYERS);
    LZ_TRY(get_int(path, root, "", "num_key_value_heads", false, c->num_attention_heads,
                   &c->num_key_value_heads));
    LZ_TRY(require_min(path, "num_key_value_heads", c->num_key_value_heads, 1));
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return lz_fail(LZ_ERR_INPUT, "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                       path, c->num_attention_heads, c->num_key_value_heads);
    /* head_dim: null counts as absent (Mistral writes "head_dim": null) */
    LZ_TRY(get_int(path, root, "", "head_dim", false, c->hidden_size / c->num_attention_heads, &c->head_dim));
    LZ_TRY(require_min(path, "head_dim", c->head_dim, 1));
    if (c->head_dim % 2 != 0) /* RoPE rotates pairs */
        return lz_fail(LZ_ERR_INPUT, "%s: head_dim = %d must be even", path, c->head_dim);
    return LZ_OK;
}

/* ---- token ids and flags ------------------------------------------------------------- */

static lz_status parse_token_id(const char *path, const char *key, json_t *v, int *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX)
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s' must be a non-negative integer, a list of them, or null",
                       path, key);
    *out = (int)json_integer_value(v);
    return LZ_OK;
}

static lz_status parse_bos_eos(const char *path, json_t *root, lz_config *c) {
    json_t *bos = json_object_get(root, "bos_token_id");
    c->bos_token_id = -1;
    if (!is_absent(bos))
        LZ_TRY(parse_token_id(path, "bos_token_id", bos, &c->bos_token_id));
    json_t *eos = json_object_get(root, "eos_token_id");
    c->n_eos = 0;
    if (is_absent(eos))
        return LZ_OK;
    if (!json_is_array(eos)) {
        c->n_eos = 1;
        return parse_token_id(path, "eos_token_id", eos, &c->eos_token_ids[0]);
    }
    if (json_array_size(eos) > LZ_MAX_EOS)
        return lz_fail(LZ_ERR_INPUT, "%s: key 'eos_token_id' lists %zu ids (at most %d)", path,
                       json_array_size(eos), LZ_MAX_EOS);
    for (size_t i = 0; i < json_array_size(eos); i++)
        LZ_TRY(parse_token_id(path, "eos_token_id", json_array_get(eos, i), &c->eos_token_ids[c->n_eos++]));
    return LZ_OK;
}

static lz_status parse_misc(const char *path, json_t *root, lz_config *c) {
    const char *s;
    LZ_TRY(get_string(path, root, "", "model_type", &s));
    snprintf(c->model_type, sizeof c->model_type, "%s", s ? s : "");
    LZ_TRY(get_string(path, root, "", "hidden_act", &s));
    if (s && strcmp(s, "silu") != 0)
        return lz_fail(LZ_ERR_INPUT, "%s: key 'hidden_act' is '%s', only 'silu' is supported", path, s);
    LZ_TRY(get_number(path, root, "", "rms_norm_eps", false, 1e-6, &c->rms_norm_eps));
    if (!(c->rms_norm_eps > 0))
        return lz_fail(LZ_ERR_INPUT, "%s: key 'rms_norm_eps' must be positive", path);
    LZ_TRY(get_int(path, root, "", "max_position_embeddings", false, 2048, &c->max_position_embeddings));
    LZ_TRY(require_min(path, "max_position_embeddings", c->max_position_embeddings, 1));
    LZ_TRY(get_int(path, root, "", "sliding_window", false, 0, &c->sliding_window));
    LZ_TRY(require_min(path, "sliding_window", c->sliding_window, 0));
    LZ_TRY(get_bool(path, root, "", "tie_word_embeddings", false, &c->tie_word_embeddings));
    LZ_TRY(get_bool(path, root, "", "attention_bias", false, &c->attention_bias));
    LZ_TRY(get_bool(path, root, "", "mlp_bias", false, &c->mlp_bias));
    return parse_bos_eos(path, root, c);
}

/* ---- RoPE ------------------------------------------------------------------------------ */

/* "rope_type" (or the older "type") of a rope_scaling / rope_parameters object. */
static lz_status parse_rope_type(const char *path, json_t *obj, const char *name, lz_rope_type *out) {
    json_t *v = json_object_get(obj, "rope_type");
    if (is_absent(v))
        v = json_object_get(obj, "type");
    if (is_absent(v))
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s' has no 'rope_type' (or 'type')", path, name);
    if (!json_is_string(v))
        return lz_fail(LZ_ERR_INPUT, "%s: key '%s.rope_type' must be a string", path, name);
    const char *t = json_string_value(v);
    if (strcmp(t, "default") == 0)
        *out = LZ_ROPE_DEFAULT;
    else if (strcmp(t, "llama3") == 0)
        *out = LZ_ROPE_LLAMA3;
    else
        return lz_fail(LZ_ERR_INPUT, "%s: unsupported RoPE type '%s' (supported: default, llama3)", path, t);
    return LZ_OK;
}

static lz_status parse_llama3(const char *path, json_t *obj, const char *sect, lz_rope_config *r) {
    LZ_TRY(get_number(path, obj, sect, "factor", true, 0, &r->factor));
    LZ_TRY(get_number(path, obj, sect, "low_freq_factor", true, 0, &r->low_freq_factor));
    LZ_TRY(get_number(path, obj, sect, "high_freq_factor", true, 0, &r->high_freq_factor));
    LZ_TRY(get_int(path, obj, sect, "original_max_position_embeddings", true, 0,
                   &r->original_max_position_embeddings));
    if (!(r->factor > 0) || !(r->low_freq_factor > 0) || r->original_max_position_embeddings <= 0)
        return lz_fail(LZ_ERR_INPUT, "%s: %sfactor, low_freq_factor and original_max_position_embeddings "
                       "must be positive", path, sect);
    if (!(r->high_freq_factor > r->low_freq_factor)) /* the smoothing divides by their difference */
        return lz_fail(LZ_ERR_INPUT, "%s: %shigh_freq_factor (%g) must be greater than low_freq_factor (%g)",
                       path, sect, r->high_freq_factor, r->low_freq_factor);
    return LZ_OK;
}

/* transformers 5 "rope_parameters" wins over transformers 4 "rope_theta" + "rope_scaling". */
static lz_status parse_rope(const char *path, json_t *root, lz_rope_config *r) {
    memset(r, 0, sizeof *r);
    r->type = LZ_ROPE_DEFAULT;
    LZ_TRY(get_number(path, root, "", "rope_theta", false, 10000.0, &r->theta));
    const char *name = "rope_parameters", *sect = "rope_parameters.";
    json_t *obj = json_object_get(root, name);
    if (is_absent(obj)) {
        name = "rope_scaling";
        sect = "rope_scaling.";
        obj = json_object_get(root, name);
    }
    if (!is_absent(obj)) {
        if (!json_is_object(obj))
            return lz_fail(LZ_ERR_INPUT, "%s: key '%s' must be an object or null", path, name);
        LZ_TRY(parse_rope_type(path, obj, name, &r->type));
        if (strcmp(name, "rope_parameters") == 0)
            LZ_TRY(get_number(path, obj, sect, "rope_theta", false, r->theta, &r->theta));
        if (r->type == LZ_ROPE_LLAMA3)
            LZ_TRY(parse_llama3(path, obj, sect, r));
    }
    if (!(r->theta > 0))
        return lz_fail(LZ_ERR_INPUT, "%s: rope_theta (%g) must be positive", path, r->theta);
    return LZ_OK;
}

/* ---- lizard block ------------------------------------------------------------------------ */

static lz_status parse_softmax_list(const char *path, json_t *lz, lz_config *c) {
    json_t *list = json_object_get(lz, "softmax_layers");
    if (!list)
        return lz_fail(LZ_ERR_INPUT, "%s: missing key 'lizard.softmax_layers'", path);
    if (!json_is_array(list))
        return lz_fail(LZ_ERR_INPUT, "%s: key 'lizard.softmax_layers' must be a list of layer indices", path);
    memset(c->softmax_layer, 0, sizeof c->softmax_layer);
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *v = json_array_get(list, i);
        if (!json_is_integer(v))
            return lz_fail(LZ_ERR_INPUT, "%s: lizard.softmax_layers[%zu] is not an integer", path, i);
        json_int_t layer = json_integer_value(v);
        if (layer < 0 || layer >= c->num_hidden_layers)
            return lz_fail(LZ_ERR_INPUT, "%s: lizard.softmax_layers: layer %lld out of range (model has %d layers)",
                           path, (long long)layer, c->num_hidden_layers);
        if (c->softmax_layer[layer])
            return lz_fail(LZ_ERR_INPUT, "%s: lizard.softmax_layers: layer %lld listed twice", path,
                           (long long)layer);
        c->softmax_layer[layer] = true;
    }
    return LZ_OK;
}

static lz_status parse_lizard(const char *path, json_t *root, lz_config *c) {
    for (int i = 0; i < c->num_hidden_layers; i++) /* a teacher: every layer softmax */
        c->softmax_layer[i] = true;
    json_t *lz = json_object_get(root, "lizard");
    if (is_absent(lz))
        return LZ_OK;
    if (!json_is_object(lz))
        return lz_fail(LZ_ERR_INPUT, "%s: key 'lizard' must be an object", path);
    c->has_lizard = true;
    lz_lizard_config *l = &c->lizard;
    LZ_TRY(parse_softmax_list(path, lz, c));
    LZ_TRY(get_int(path, lz, "lizard.", "feature_dim", true, 0, &l->feature_dim));
    LZ_TRY(require_min(path, "lizard.feature_dim", l->feature_dim, 1));
    LZ_TRY(get_int(path, lz, "lizard.", "window_size", true, 0, &l->window_size));
    LZ_TRY(require_min(path, "lizard.window_size", l->window_size, 1));
    LZ_TRY(get_int(path, lz, "lizard.", "num_meta_tokens", true, 0, &l->num_meta_tokens));
    LZ_TRY(require_min(path, "lizard.num_meta_tokens", l->num_meta_tokens, 0));
    LZ_TRY(get_bool(path, lz, "lizard.", "gla_normalize", true, &l->gla_normalize));
    const char *fmap;
    LZ_TRY(get_string(path, lz, "lizard.", "feature_map", &fmap));
    if (!fmap || strcmp(fmap, "softmax") == 0)
        l->feature_map = LZ_FMAP_SOFTMAX;
    else if (strcmp(fmap, "exp") == 0)
        l->feature_map = LZ_FMAP_EXP;
    else
        return lz_fail(LZ_ERR_INPUT, "%s: key 'lizard.feature_map' is '%s' (supported: softmax, exp)", path,
                       fmap);
    return LZ_OK;
}

/* ---- entry points ------------------------------------------------------------------------ */

static lz_status parse_root(const char *path, json_t *root, lz_config *out) {
    LZ_TRY(parse_sizes(path, root, out));
    LZ_TRY(parse_misc(path, root, out));
    LZ_TRY(parse_rope(path, root, &out->rope));
    LZ_TRY(lz_quant_config_parse(path, root, out));
    return parse_lizard(path, root, out);
}

lz_status lz_config_parse(const char *text, size_t len, const char *path, lz_config *out) {
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t *root = lz_json_loadb(text, len, 0, &err);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: invalid JSON: %s (line %d, column %d)", path, err.text, err.line,
                       err.column);
    lz_status st = json_is_object(root) ? parse_root(path, root, out)
                                        : lz_fail(LZ_ERR_INPUT, "%s: top level is not a JSON object", path);
    json_decref(root);
    return st;
}

/* Whole file into a malloc'd buffer. */
static lz_status read_file(const char *path, char **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return lz_fail(LZ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    lz_status st = b ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    while (st == LZ_OK) {
        n += fread(b + n, 1, cap - n, f);
        if (ferror(f))
            st = lz_fail(LZ_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        else if (n < cap)
            break; /* end of file */
        else if (cap >= CONFIG_MAX_BYTES)
            st = lz_fail(LZ_ERR_INPUT, "%s: over %d bytes, not a config file", path, CONFIG_MAX_BYTES);
        else {
            char *nb = realloc(b, cap * 2);
            st = nb ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
            b = nb ? nb : b;
            cap *= 2;
        }
    }
    fclose(f);
    if (st != LZ_OK) {
        free(b);
        return st;
    }
    *buf = b;
    *len = n;
    return LZ_OK;
}

lz_status lz_config_load(const char *dir, lz_config *out) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return lz_fail(LZ_ERR_INPUT, "%s: path too long", dir);
    char *text = NULL;
    size_t len = 0;
    LZ_TRY(read_file(path, &text, &len));
    lz_status st = lz_config_parse(text, len, path, out);
    free(text);
    return st;
}

/* ---- --softmax-layers ---------------------------------------------------------------------- */

/* One comma-separated token (surrounding spaces allowed) -> a layer index in range. */
static lz_status parse_layer_token(const char *tok, size_t len, int n_layers, bool *layers) {
    while (len > 0 && *tok == ' ')
        tok++, len--;
    while (len > 0 && tok[len - 1] == ' ')
        len--;
    char buf[32];
    char *end = NULL;
    long v = 0;
    if (len > 0 && len < sizeof buf) {
        memcpy(buf, tok, len);
        buf[len] = '\0';
        errno = 0;
        v = strtol(buf, &end, 10);
    }
    if (!end || *end != '\0' || !(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        return lz_fail(LZ_ERR_INPUT, "--softmax-layers: '%.*s' is not a layer index", (int)len, tok);
    if (errno == ERANGE || v < 0 || v >= n_layers)
        return lz_fail(LZ_ERR_INPUT, "--softmax-layers: layer %s out of range (model has %d layers)", buf,
                       n_layers);
    layers[v] = true;
    return LZ_OK;
}

lz_status lz_config_set_softmax_layers(lz_config *cfg, const char *spec) {
    bool layers[LZ_MAX_LAYERS] = {false};
    int n = cfg->num_hidden_layers < LZ_MAX_LAYERS ? cfg->num_hidden_layers : LZ_MAX_LAYERS;
    if (strcmp(spec, "all") == 0) {
        for (int i = 0; i < n; i++)
            layers[i] = true;
    } else if (strcmp(spec, "none") != 0) {
        const char *p = spec;
        for (;;) { /* cfg is changed only once the whole list is valid */
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            LZ_TRY(parse_layer_token(p, len, n, layers));
            if (!comma)
                break;
            p = comma + 1;
        }
    }
    memcpy(cfg->softmax_layer, layers, sizeof layers);
    return LZ_OK;
}

int lz_config_count_softmax(const lz_config *cfg) {
    int count = 0;
    for (int i = 0; i < cfg->num_hidden_layers && i < LZ_MAX_LAYERS; i++)
        count += cfg->softmax_layer[i];
    return count;
}
