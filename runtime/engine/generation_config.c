/* generation_config.c - reading generation_config.json with jansson. */
#include <jansson.h> // json_t
#include <stdio.h>   // snprintf
#include <unistd.h>  // access

#include "generation_config.h"
#include "json_read.h" // lz_json_load_file: integers of any size

static void add_eos(lz_generation_config *g, long id) {
    for (int i = 0; i < g->n_eos; i++)
        if (g->eos_token_ids[i] == id)
            return;
    if (g->n_eos < LZ_MAX_EOS && id >= 0 && id <= INT32_MAX)
        g->eos_token_ids[g->n_eos++] = (int)id;
}

static lz_status read_eos(lz_generation_config *g, json_t *v, const char *path) {
    if (!v || json_is_null(v))
        return LZ_OK;
    if (json_is_integer(v)) {
        add_eos(g, (long)json_integer_value(v));
        return LZ_OK;
    }
    size_t i;
    json_t *e;
    if (!json_is_array(v))
        return lz_fail(LZ_ERR_INPUT, "%s: eos_token_id must be an integer or a list of integers", path);
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e))
            return lz_fail(LZ_ERR_INPUT, "%s: eos_token_id must be an integer or a list of integers", path);
        add_eos(g, (long)json_integer_value(e));
    }
    return LZ_OK;
}

static lz_status read_sampling(lz_generation_config *g, json_t *root, const char *path) {
    json_t *v = json_object_get(root, "do_sample");
    if (!json_is_true(v))
        return LZ_OK; // HF: greedy unless do_sample
    g->defaults.temperature = 1.0;
    g->defaults.top_k = 50; // HF generate()'s default top_k when sampling
    if ((v = json_object_get(root, "temperature")) && json_is_number(v))
        g->defaults.temperature = json_number_value(v);
    if ((v = json_object_get(root, "top_k")) && json_is_integer(v))
        g->defaults.top_k = (int)json_integer_value(v);
    if ((v = json_object_get(root, "top_p")) && json_is_number(v))
        g->defaults.top_p = json_number_value(v);
    if (g->defaults.temperature < 0 || g->defaults.top_k < 0 || !(g->defaults.top_p > 0 && g->defaults.top_p <= 1))
        return lz_fail(LZ_ERR_INPUT, "%s: sampling defaults out of range", path);
    return LZ_OK;
}

lz_status lz_generation_config_load(const char *dir, const lz_config *cfg, lz_generation_config *out) {
    *out = (lz_generation_config){.defaults = {.temperature = 0, .top_k = 0, .top_p = 1.0, .seed = 0}};
    for (int i = 0; i < cfg->n_eos; i++)
        add_eos(out, cfg->eos_token_ids[i]);
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (access(path, F_OK) != 0)
        return LZ_OK;
    json_error_t err;
    json_t *root = lz_json_load_file(path, 0, &err);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: line %d column %d: %s", path, err.line, err.column, err.text);
    lz_status s = json_is_object(root) ? LZ_OK : lz_fail(LZ_ERR_INPUT, "%s: not a JSON object", path);
    if (s == LZ_OK)
        s = read_eos(out, json_object_get(root, "eos_token_id"), path);
    if (s == LZ_OK)
        s = read_sampling(out, root, path);
    json_decref(root);
    return s;
}

bool lz_generation_config_is_eos(const lz_generation_config *g, int32_t id) {
    for (int i = 0; i < g->n_eos; i++)
        if (g->eos_token_ids[i] == id)
            return true;
    return false;
}
