/* distill_checkpoint.c - saving and restoring a distillation run. */
#include "distill_checkpoint.h"

#include <stdio.h>  // snprintf
#include <stdlib.h> // calloc, free
#include <string.h> // strcmp, memcpy, strchr

#include <jansson.h> // json_pack
#include "json_read.h" // lz_json_load_file

#include "safetensors.h"        // lz_st_open, lz_st_find
#include "safetensors_writer.h" // lz_stw_create, lz_write_file_atomic

enum { NAME_LEN = 96, PARTS = 3 }; /* a tensor, its first and second moments */

static const char *const part_suffix[PARTS] = {"", ".adam_m", ".adam_v"};

static float *part_of(const lz_distill_layer *l, int tensor, int part) {
    return part == 0 ? l->param[tensor] : part == 1 ? l->m1[tensor] : l->m2[tensor];
}

static void tensor_name(char *name, int layer, int tensor, int part) {
    snprintf(name, NAME_LEN, "layers.%d.%s%s", layer, lz_distill_tensor_names[tensor], part_suffix[part]);
}

lz_status lz_distill_checkpoint_save(const char *dir, const char *signature, const lz_distill_progress *p,
                                     const lz_distill_layer *layers, const bool *trained, int n_layers) {
    size_t n = 0;
    for (int i = 0; i < n_layers; i++)
        n += trained[i] ? LZ_DT_COUNT * PARTS : 0;
    lz_stw_tensor *tensors = calloc(n ? n : 1, sizeof *tensors);
    char *names = calloc(n ? n : 1, NAME_LEN);
    const float **data = calloc(n ? n : 1, sizeof *data);
    if (!tensors || !names || !data) {
        free(tensors), free(names), free(data);
        return lz_fail(LZ_ERR_NOMEM, "distill_state: out of memory");
    }
    size_t k = 0;
    for (int i = 0; i < n_layers; i++)
        for (int j = 0; trained[i] && j < LZ_DT_COUNT; j++)
            for (int part = 0; part < PARTS; part++, k++) {
                tensor_name(names + k * NAME_LEN, i, j, part);
                tensors[k] = (lz_stw_tensor){names + k * NAME_LEN, LZ_DTYPE_F32, 1, {(int64_t)layers[i].numel[j]}};
                data[k] = part_of(&layers[i], j, part);
            }
    char path[4096];
    snprintf(path, sizeof path, "%s/distill_state.safetensors", dir);
    lz_st_writer *w = NULL;
    lz_status s = lz_stw_create(path, tensors, n, &w);
    for (size_t i = 0; s == LZ_OK && i < n; i++)
        s = lz_stw_write(w, data[i], sizeof(float) * (size_t)tensors[i].shape[0]);
    if (s == LZ_OK)
        s = lz_stw_finish(w);
    if (s == LZ_OK)
        s = lz_stw_commit(w); // frees w
    else
        lz_stw_abort(w);
    free(tensors), free(names), free(data);
    if (s != LZ_OK)
        return s;
    json_t *softmax = json_null();
    if (p->chosen) {
        softmax = json_array();
        for (int i = 0; i < n_layers; i++)
            if (p->softmax[i])
                json_array_append_new(softmax, json_integer(i));
    }
    json_t *root = json_pack("{s:I, s:s, s:o}", "step", (json_int_t)p->step, "signature", signature,
                             "softmax_layers", softmax);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return lz_fail(LZ_ERR_NOMEM, "distill_state.json: out of memory");
    snprintf(path, sizeof path, "%s/distill_state.json", dir);
    s = lz_write_file_atomic(path, text, strlen(text));
    free(text);
    return s;
}

void lz_signature_first_difference(const char *saved, const char *now, char *out, size_t cap) {
    snprintf(out, cap, "settings");
    for (const char *p = saved; *p;) {
        const char *end = strchr(p, ';');
        const size_t len = end ? (size_t)(end - p) + 1 : strlen(p);
        char item[512];
        snprintf(item, sizeof item, "%.*s", (int)len, p);
        if (!strstr(now, item)) {
            const char *eq = strchr(item, '=');
            snprintf(out, cap, "%.*s", (int)(eq ? (size_t)(eq - item) : strlen(item)), item);
            return;
        }
        p += len;
    }
}

static lz_status load_json(const char *dir, const char *signature, lz_distill_progress *p, int n_layers) {
    char path[4096];
    snprintf(path, sizeof path, "%s/distill_state.json", dir);
    json_error_t err;
    json_t *root = lz_json_load_file(path, 0, &err);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "--resume: %s: %s", path, err.text);
    json_t *step = json_object_get(root, "step"), *sig = json_object_get(root, "signature");
    json_t *softmax = json_object_get(root, "softmax_layers");
    lz_status s = LZ_OK;
    if (!json_is_integer(step) || json_integer_value(step) < 0 || !json_is_string(sig))
        s = lz_fail(LZ_ERR_INPUT, "--resume: %s: needs an integer \"step\" and a string \"signature\"", path);
    else if (strcmp(json_string_value(sig), signature) != 0) {
        char what[256];
        lz_signature_first_difference(json_string_value(sig), signature, what, sizeof what);
        s = lz_fail(LZ_ERR_INPUT, "--resume: %s was made with different %s", path, what);
    }
    memset(p, 0, sizeof *p);
    if (s == LZ_OK) {
        p->step = (long)json_integer_value(step);
        p->chosen = json_is_array(softmax);
    }
    for (size_t i = 0; s == LZ_OK && p->chosen && i < json_array_size(softmax); i++) {
        json_t *v = json_array_get(softmax, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_layers)
            s = lz_fail(LZ_ERR_INPUT, "--resume: %s: softmax_layers[%zu] is not a layer", path, i);
        else
            p->softmax[json_integer_value(v)] = true;
    }
    json_decref(root);
    return s;
}

lz_status lz_distill_checkpoint_load(const char *dir, const char *signature, lz_distill_progress *p,
                                     lz_distill_layer *layers, const bool *trained, int n_layers) {
    LZ_TRY(load_json(dir, signature, p, n_layers));
    char path[4096], name[NAME_LEN];
    snprintf(path, sizeof path, "%s/distill_state.safetensors", dir);
    lz_st_file f;
    LZ_TRY(lz_st_open(path, &f));
    lz_status s = LZ_OK;
    for (int i = 0; i < n_layers; i++)
        for (int j = 0; trained[i] && j < LZ_DT_COUNT; j++)
            for (int part = 0; s == LZ_OK && part < PARTS; part++) {
                tensor_name(name, i, j, part);
                const lz_st_tensor *t = lz_st_find(&f, name);
                if (!t || t->dtype != LZ_DTYPE_F32 || (size_t)t->numel != layers[i].numel[j])
                    s = lz_fail(LZ_ERR_INPUT, "--resume: %s: tensor %s missing or not F32 [%zu]", path, name,
                                layers[i].numel[j]);
                else
                    memcpy(part_of(&layers[i], j, part), t->data, t->nbytes);
            }
    lz_st_close(&f);
    return s;
}
