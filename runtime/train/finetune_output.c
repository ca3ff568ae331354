/* finetune_output.c - what a fine-tuning run writes: its checkpoint, the
 * merged model folder and the PEFT adapter folder (finetune_run.h). */
#include <jansson.h> // json_*
#include <stdio.h>   // snprintf
#include <stdlib.h>  // calloc, malloc, free
#include <string.h>  // memcpy, strcmp, strlen

#include "checkpoint_unit.h"   // lz_ckpt_write, lz_ckpt_read
#include "distill_output.h"     // lz_make_dirs, lz_copy_optional
#include "dtype.h"              // lz_f32_to_bf16, lz_f32_to_f16, lz_dtype_size
#include "finetune_run.h"
#include "safetensors_writer.h" // lz_stw_*

enum { PARTS = 3 };
static const char *const part_suffix[PARTS] = {"", ".adam_m", ".adam_v"};


static lz_status write_json(const char *dir, const char *file, json_t *root) {
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", file);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    const lz_status s = lz_write_file_atomic(path, text, strlen(text));
    free(text);
    return s;
}

/* A list of F32 tensors to write as one safetensors file. */
typedef struct {
    size_t n, cap;
    char (*names)[224];
    const float **data;
    lz_stw_tensor *tensors;
} f32_list;

static lz_status list_open(f32_list *l, size_t cap) {
    memset(l, 0, sizeof *l);
    l->cap = cap ? cap : 1;
    l->names = calloc(l->cap, sizeof *l->names);
    l->data = calloc(l->cap, sizeof *l->data);
    l->tensors = calloc(l->cap, sizeof *l->tensors);
    if (l->names && l->data && l->tensors)
        return LZ_OK;
    free(l->names), free(l->data), free(l->tensors);
    return lz_fail(LZ_ERR_NOMEM, "tensor list: out of memory");
}

// rows 0: a 1-D tensor of cols elements
static void list_add(f32_list *l, const char *name, const float *data, int64_t rows, int64_t cols) {
    snprintf(l->names[l->n], sizeof l->names[l->n], "%s", name);
    l->data[l->n] = data;
    l->tensors[l->n] = (lz_stw_tensor){l->names[l->n], LZ_DTYPE_F32, rows ? 2 : 1, {rows ? rows : cols, cols}};
    l->n++;
}

// writes the list to path and frees it
static lz_status list_write(f32_list *l, const char *path) {
    lz_st_writer *w = NULL;
    lz_status s = lz_stw_create(path, l->tensors, l->n, &w);
    for (size_t i = 0; s == LZ_OK && i < l->n; i++) {
        const lz_stw_tensor *t = &l->tensors[i];
        const size_t numel = (size_t)(t->ndim == 2 ? t->shape[0] * t->shape[1] : t->shape[0]);
        s = lz_stw_write(w, l->data[i], sizeof(float) * numel);
    }
    if (s == LZ_OK)
        s = lz_stw_finish(w);
    if (s == LZ_OK)
        s = lz_stw_commit(w);
    else
        lz_stw_abort(w);
    free(l->names), free(l->data), free(l->tensors);
    return s;
}

/* The unit's tensors: each trained tensor's values and moments, in the params' order (F32, 1-D). */
static lz_status unit_tensors(const lz_finetune_run *r, lz_ckpt_tensor **out, char (**names)[224], size_t *n) {
    const lz_ft_params *m = &r->m.params;
    *n = 0;
    *out = calloc((size_t)m->n_params * PARTS + 1, sizeof **out);
    *names = calloc((size_t)m->n_params * PARTS + 1, sizeof **names);
    if (!*out || !*names)
        return lz_fail(LZ_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < m->n_params; i++)
        for (int part = 0; part < PARTS && !m->params[i].frozen; part++) {
            const lz_ft_param *p = &m->params[i];
            snprintf((*names)[*n], sizeof **names, "%s%s", p->name, part_suffix[part]);
            (*out)[*n] = (lz_ckpt_tensor){{(*names)[*n], LZ_DTYPE_F32, 1, {(int64_t)p->n}}, p->host[part]};
            (*n)++;
        }
    return LZ_OK;
}

lz_status lz_finetune_checkpoint_save(const lz_finetune_run *r) {
    lz_ckpt_tensor *tensors = NULL;
    char(*names)[224] = NULL;
    size_t n;
    lz_status s = unit_tensors(r, &tensors, &names, &n);
    const lz_ckpt_state state = {.step = r->step, .signature = r->signature, .fields = NULL};
    if (s == LZ_OK)
        s = lz_ckpt_write(r->a.out, LZ_FINETUNE_STATE, &state, tensors, n);
    free(tensors), free(names);
    return s;
}

lz_status lz_finetune_checkpoint_load(lz_finetune_run *r) {
    lz_ckpt_tensor *tensors = NULL;
    char(*names)[224] = NULL;
    size_t n;
    lz_status s = unit_tensors(r, &tensors, &names, &n);
    const lz_ckpt_expect expect = {.signature = r->signature, .max_step = r->opt.total_steps, .tensors = tensors,
                                   .n_tensors = n};
    if (s == LZ_OK)
        s = lz_ckpt_read(r->a.out, LZ_FINETUNE_STATE, &expect, &r->step);
    free(tensors), free(names);
    if (s != LZ_OK)
        lz_error_prefix("--resume: ");
    return s;
}

/* ---- the merged model ---------------------------------------------------------------------- */

typedef struct {
    const lz_weights *src;
    const lz_stw_tensor *tensors;
    void *const *replaced; /* [n]: the new bytes in the tensor's dtype, or NULL: the source's */
} fill_ctx;

static lz_status fill(void *ctx, const lz_stw_tensor *t, uint64_t offset, void *buf, size_t nbytes) {
    const fill_ctx *c = ctx;
    const size_t i = (size_t)(t - c->tensors);
    const void *from = c->replaced[i] ? c->replaced[i] : c->src->index[i]->data;
    memcpy(buf, (const char *)from + offset, nbytes);
    return LZ_OK;
}

/* vals [n] fp32 as `dtype` bytes (malloc'd) */
static void *as_dtype(const float *vals, size_t n, lz_dtype dtype) {
    void *out = malloc(n * lz_dtype_size(dtype) + 1);
    for (size_t e = 0; out && e < n; e++) {
        if (dtype == LZ_DTYPE_F32)
            ((float *)out)[e] = vals[e];
        else if (dtype == LZ_DTYPE_BF16)
            ((uint16_t *)out)[e] = lz_f32_to_bf16(vals[e]);
        else
            ((uint16_t *)out)[e] = lz_f32_to_f16(vals[e]);
    }
    return out;
}

/* The new values of source tensor `name` (malloc'd fp32 [n]), or NULL when it is unchanged. */
static float *new_values(const lz_finetune_run *r, const char *name, size_t n) {
    const lz_ft_params *p = &r->m.params;
    for (int i = 0; i < p->n_params; i++) // a trained Lizard tensor: same name
        if (p->params[i].proj < 0 && !p->params[i].frozen && strcmp(p->params[i].name, name) == 0 &&
            p->params[i].n == n) {
            float *v = malloc(sizeof(float) * (n ? n : 1));
            if (v)
                memcpy(v, p->params[i].host[LZ_FT_VALUES], sizeof(float) * n);
            return v;
        }
    int l, used = 0;
    char parent[16], module[16];
    if (sscanf(name, "model.layers.%d.%15[^.].%15[^.].weight%n", &l, parent, module, &used) != 3 ||
        used != (int)strlen(name) || l < 0 || l >= r->m.cfg.num_hidden_layers)
        return NULL;
    for (int j = 0; j < LZ_LIN_COUNT; j++)
        if (strcmp(module, lz_lin_module[j]) == 0 && strcmp(parent, lz_lin_parent[j]) == 0 &&
            lz_ft_params_lora(p, l, j)) {
            float *v = malloc(sizeof(float) * n);
            if (v && !lz_ft_params_merged(p, &r->m.model, l, j, v)) {
                free(v);
                return NULL;
            }
            return v;
        }
    return NULL;
}

static lz_status write_config(const lz_finetune_run *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", r->a.model);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: %s", path, err.text);
    json_t *block = json_object_get(root, "lizard"), *list = json_array();
    for (int i = 0; i < r->m.cfg.num_hidden_layers; i++)
        if (r->m.cfg.softmax_layer[i])
            json_array_append_new(list, json_integer(i));
    json_object_set_new(block, "softmax_layers", list); // as trained (--softmax-layers)
    return write_json(r->a.out, "config.json", root);
}

lz_status lz_finetune_write_model(const lz_finetune_run *r) {
    const lz_weights *src = r->m.model.ckpt;
    LZ_TRY(lz_make_dirs(r->a.out, "--out"));
    const size_t n = src->n_tensors;
    lz_stw_tensor *tensors = calloc(n, sizeof *tensors);
    void **replaced = calloc(n, sizeof *replaced);
    lz_status s = tensors && replaced ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "model folder: out of memory");
    for (size_t i = 0; s == LZ_OK && i < n; i++) {
        const lz_st_tensor *t = src->index[i];
        tensors[i] = (lz_stw_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
        memcpy(tensors[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        float *vals = new_values(r, t->name, (size_t)t->numel);
        if (vals) {
            replaced[i] = as_dtype(vals, (size_t)t->numel, t->dtype);
            free(vals);
            if (!replaced[i])
                s = lz_fail(LZ_ERR_NOMEM, "model folder: out of memory");
        }
    }
    if (s == LZ_OK) {
        fill_ctx c = {src, tensors, replaced};
        s = lz_stw_write_model(r->a.out, tensors, n, 5000000000ULL, fill, &c);
    }
    for (size_t i = 0; replaced && i < n; i++)
        free(replaced[i]);
    free(tensors), free(replaced);
    static const char *const extras[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (size_t i = 0; s == LZ_OK && i < sizeof extras / sizeof extras[0]; i++)
        s = lz_copy_optional(r->a.out, r->a.model, extras[i]);
    return s == LZ_OK ? write_config(r) : s; // config.json last: a folder without it is unfinished
}

/* ---- the PEFT adapter ------------------------------------------------------------------------ */

lz_status lz_finetune_write_adapter(const lz_finetune_run *r) {
    const lz_ft_params *p = &r->m.params;
    LZ_TRY(lz_make_dirs(r->a.adapter_out, "--adapter-out"));
    f32_list list;
    LZ_TRY(list_open(&list, (size_t)p->n_params));
    char name[224], path[4096];
    for (int i = 0; i < p->n_params; i++) {
        const lz_ft_param *q = &p->params[i];
        if (q->proj < 0)
            continue;
        snprintf(name, sizeof name, "base_model.model.%s", q->name); // PEFT's names
        list_add(&list, name, q->host[LZ_FT_VALUES], q->rows, q->cols);
    }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", r->a.adapter_out);
    LZ_TRY(list_write(&list, path));
    json_t *targets = json_array();
    for (int j = 0; j < LZ_LIN_COUNT; j++)
        if (p->lora.target[j])
            json_array_append_new(targets, json_string(lz_lin_module[j]));
    json_t *root = json_pack("{s:s, s:s, s:s, s:n, s:i, s:f, s:f, s:o, s:s, s:b, s:b, s:b, s:b, s:b, s:n, s:n, s:n, "
                             "s:{}, s:{}, s:n}",
                             "peft_type", "LORA", "task_type", "CAUSAL_LM", "base_model_name_or_path", r->a.model,
                             "revision", "r", p->lora.rank, "lora_alpha", p->lora.alpha, "lora_dropout",
                             p->lora.dropout, "target_modules", targets, "bias", "none", "fan_in_fan_out", 0,
                             "inference_mode", 1, "init_lora_weights", 1, "use_rslora", 0, "use_dora", 0,
                             "modules_to_save", "layers_to_transform", "layers_pattern", "rank_pattern",
                             "alpha_pattern", "megatron_config");
    return write_json(r->a.adapter_out, "adapter_config.json", root);
}
