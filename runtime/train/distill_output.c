/* distill_output.c - writing the distilled model folder. */
#include "distill_output.h"

#include <errno.h>    // errno, EEXIST
#include <stdio.h>    // snprintf, FILE
#include <stdlib.h>   // calloc, free
#include <string.h>   // memcpy, strerror
#include <sys/stat.h> // mkdir, stat

#include <jansson.h> // json_object_set_new, json_dumps
#include "json_read.h" // lz_json_load_file: the teacher's config.json as HF wrote it

#include "safetensors_writer.h" // lz_stw_write_model, lz_write_file_atomic

enum { NAME_LEN = 160 };

lz_status lz_make_dirs(const char *path, const char *flag) {
    char buf[4096];
    if (!path[0] || snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return lz_fail(LZ_ERR_INPUT, "%s: bad path '%s'", flag, path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        const char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return lz_fail(LZ_ERR_IO, "%s: mkdir %s: %s", flag, buf, strerror(errno));
        *p = saved;
        if (saved == '\0')
            return LZ_OK;
    }
}

typedef struct {
    const lz_weights *teacher;
    const lz_stw_tensor *tensors;
    const float *const *lizard_data; /* [n tensors]: NULL for the teacher's */
} fill_ctx;

// lz_stw_fill_fn: bytes of the teacher's tensor from its mapping, or of a trained one
static lz_status fill(void *ctx, const lz_stw_tensor *t, uint64_t offset, void *buf, size_t nbytes) {
    const fill_ctx *c = ctx;
    const size_t i = (size_t)(t - c->tensors);
    const void *src = c->lizard_data[i] ? (const void *)c->lizard_data[i] : c->teacher->index[i]->data;
    memcpy(buf, (const char *)src + offset, nbytes);
    return LZ_OK;
}

static void shape_of(lz_stw_tensor *t, const lz_distill_layer *l, int which) {
    const lz_lizard_geom *g = &l->geom;
    t->dtype = LZ_DTYPE_F32;
    switch (which) {
    case LZ_DT_WQ: t->ndim = 3, t->shape[0] = g->n_wq, t->shape[1] = g->d, t->shape[2] = g->f; break;
    case LZ_DT_WK: t->ndim = 3, t->shape[0] = g->n_wk, t->shape[1] = g->d, t->shape[2] = g->f; break;
    case LZ_DT_GATE: t->ndim = 2, t->shape[0] = 1, t->shape[1] = l->hidden; break;
    case LZ_DT_META: t->ndim = 1, t->shape[0] = g->m; break;
    default: t->ndim = 1, t->shape[0] = 1; break;
    }
}

static lz_status write_weights(const char *out_dir, const lz_weights *teacher, const lz_distill_layer *layers,
                               const bool *softmax, int n_layers) {
    size_t n = teacher->n_tensors;
    for (int i = 0; i < n_layers; i++)
        n += softmax[i] ? 0 : LZ_DT_COUNT;
    lz_stw_tensor *tensors = calloc(n, sizeof *tensors);
    const float **data = calloc(n, sizeof *data);
    char *names = calloc(n, NAME_LEN);
    lz_status s = tensors && data && names ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "model folder: out of memory");
    for (size_t i = 0; s == LZ_OK && i < teacher->n_tensors; i++) {
        const lz_st_tensor *src = teacher->index[i];
        tensors[i] = (lz_stw_tensor){.name = src->name, .dtype = src->dtype, .ndim = src->ndim};
        memcpy(tensors[i].shape, src->shape, sizeof(int64_t) * (size_t)src->ndim);
    }
    size_t k = teacher->n_tensors;
    for (int i = 0; s == LZ_OK && i < n_layers; i++)
        for (int j = 0; !softmax[i] && j < LZ_DT_COUNT; j++, k++) {
            char *name = names + k * NAME_LEN;
            snprintf(name, NAME_LEN, "model.layers.%d.self_attn.%s", i, lz_distill_tensor_names[j]);
            tensors[k].name = name;
            shape_of(&tensors[k], &layers[i], j);
            data[k] = layers[i].param[j];
        }
    if (s == LZ_OK) {
        fill_ctx c = {teacher, tensors, data};
        s = lz_stw_write_model(out_dir, tensors, n, 5000000000ULL, fill, &c);
    }
    free(tensors), free(data), free(names);
    return s;
}

static lz_status write_config(const char *out_dir, const char *teacher_dir, const bool *softmax, int n_layers,
                              const lz_lizard_config *lz) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", teacher_dir);
    json_error_t err;
    json_t *root = lz_json_load_file(path, 0, &err);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: %s", path, err.text);
    json_t *list = json_array(), *block = json_object();
    for (int i = 0; i < n_layers; i++)
        if (softmax[i])
            json_array_append_new(list, json_integer(i));
    json_object_set_new(block, "softmax_layers", list);
    json_object_set_new(block, "feature_dim", json_integer(lz->feature_dim));
    json_object_set_new(block, "feature_map", json_string(lz->feature_map == LZ_FMAP_EXP ? "exp" : "softmax"));
    json_object_set_new(block, "window_size", json_integer(lz->window_size));
    json_object_set_new(block, "num_meta_tokens", json_integer(lz->num_meta_tokens));
    json_object_set_new(block, "gla_normalize", json_boolean(lz->gla_normalize));
    json_object_set_new(root, "lizard", block);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return lz_fail(LZ_ERR_NOMEM, "config.json: out of memory");
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    lz_status s = lz_write_file_atomic(path, text, strlen(text));
    free(text);
    return s;
}

lz_status lz_check_out_folder(const char *out, const char *state_file, bool resume) {
    struct stat sb;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, state_file);
    if (resume && stat(path, &sb) != 0)
        return lz_fail(LZ_ERR_INPUT, "--resume: %s has no %s to continue from", out, state_file);
    snprintf(path, sizeof path, "%s/config.json", out);
    if (!resume && stat(path, &sb) == 0)
        return lz_fail(LZ_ERR_INPUT, "--out %s already holds a model (--resume continues its run)", out);
    return LZ_OK;
}

lz_status lz_copy_optional(const char *out_dir, const char *teacher_dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", teacher_dir, name);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return LZ_OK;
    lz_status s = LZ_OK;
    char *buf = NULL;
    long len = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (len < 0 || fseek(fp, 0, SEEK_SET) != 0 || !(buf = malloc((size_t)len + 1)) ||
        fread(buf, 1, (size_t)len, fp) != (size_t)len)
        s = lz_fail(LZ_ERR_IO, "%s: read failed", path);
    fclose(fp);
    if (s == LZ_OK) {
        snprintf(path, sizeof path, "%s/%s", out_dir, name);
        s = lz_write_file_atomic(path, buf, (size_t)len);
    }
    free(buf);
    return s;
}

lz_status lz_distill_write_model(const char *out_dir, const char *teacher_dir, const lz_weights *teacher,
                                 const lz_distill_layer *layers, const bool *softmax, int n_layers,
                                 const lz_lizard_config *lizard) {
    LZ_TRY(lz_make_dirs(out_dir, "--out"));
    static const char *const extras[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++)
        LZ_TRY(lz_copy_optional(out_dir, teacher_dir, extras[i]));
    LZ_TRY(write_weights(out_dir, teacher, layers, softmax, n_layers));
    return write_config(out_dir, teacher_dir, softmax, n_layers, lizard); // last: a folder without it is unfinished
}
