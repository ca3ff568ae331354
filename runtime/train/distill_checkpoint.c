/* distill_checkpoint.c - saving and restoring a distillation run through a checkpoint unit. */
#include "distill_checkpoint.h"

#include <stdio.h>  // snprintf
#include <stdlib.h> // calloc, free
#include <string.h> // strcmp, memcpy

#include <jansson.h> // json_array, json_object

enum { NAME_LEN = 96, PARTS = 3 }; /* a tensor, its first and second moments */

static const char *const part_suffix[PARTS] = {"", ".adam_m", ".adam_v"};

static float *part_of(const lz_distill_layer *l, int tensor, int part) {
    return part == 0 ? l->param[tensor] : part == 1 ? l->m1[tensor] : l->m2[tensor];
}

/* The unit's tensors: every trained layer's five tensors and their moments, F32 [numel]. */
typedef struct {
    lz_ckpt_tensor *t;
    char *names;
    size_t n;
} tensor_list;

static lz_status list_tensors(const lz_distill_layer *layers, const bool *trained, int n_layers, tensor_list *out) {
    size_t n = 0;
    for (int i = 0; i < n_layers; i++)
        n += trained[i] ? LZ_DT_COUNT * PARTS : 0;
    *out = (tensor_list){calloc(n ? n : 1, sizeof *out->t), calloc(n ? n : 1, NAME_LEN), n};
    if (!out->t || !out->names) {
        free(out->t), free(out->names);
        return lz_fail(LZ_ERR_NOMEM, "distill_state: out of memory");
    }
    size_t k = 0;
    for (int i = 0; i < n_layers; i++)
        for (int j = 0; trained[i] && j < LZ_DT_COUNT; j++)
            for (int part = 0; part < PARTS; part++, k++) {
                char *name = out->names + k * NAME_LEN;
                snprintf(name, NAME_LEN, "layers.%d.%s%s", i, lz_distill_tensor_names[j], part_suffix[part]);
                out->t[k] = (lz_ckpt_tensor){{name, LZ_DTYPE_F32, 1, {(int64_t)layers[i].numel[j]}},
                                             part_of(&layers[i], j, part)};
            }
    return LZ_OK;
}

static void list_free(tensor_list *l) { free(l->t), free(l->names); }

lz_status lz_distill_checkpoint_save(const char *dir, const char *signature, const lz_distill_progress *p,
                                     const lz_distill_layer *layers, const bool *trained, int n_layers) {
    json_t *softmax = json_null();
    if (p->chosen) {
        softmax = json_array();
        for (int i = 0; softmax && i < n_layers; i++)
            if (p->softmax[i])
                json_array_append_new(softmax, json_integer(i));
    }
    json_t *fields = softmax ? json_pack("{s:o}", "softmax_layers", softmax) : NULL;
    tensor_list list = {0};
    lz_status s = fields ? list_tensors(layers, trained, n_layers, &list)
                         : lz_fail(LZ_ERR_NOMEM, "distill_state: out of memory");
    if (s == LZ_OK) {
        const lz_ckpt_state state = {p->step, signature, fields};
        s = lz_ckpt_write(dir, LZ_DISTILL_STATE, &state, list.t, list.n);
        list_free(&list);
    }
    json_decref(fields);
    return s;
}

/* ---- the field "softmax_layers" ------------------------------------------------------------- */

typedef struct {
    const lz_distill_resume_rules *rules;
    lz_distill_progress read; /* what the state says, taken only when the whole unit passed */
} fields_ctx;

/* "0,2" of a layer set, or "none". */
static const char *set_text(const bool *set, int n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k < cap; i++)
        if (set[i])
            k += (size_t)snprintf(buf + k, cap - k, "%s%d", k ? "," : "", i);
    return k ? buf : "none";
}

// lz_ckpt_fields_fn
static lz_status check_fields(void *ctx, const json_t *fields, long step, const char *where) {
    fields_ctx *c = ctx;
    const lz_distill_resume_rules *r = c->rules;
    const json_t *list = json_object_get(fields, "softmax_layers");
    if (!list)
        return lz_fail(LZ_ERR_INPUT, "%s: \"softmax_layers\" is missing", where);
    if (json_object_size(fields) != 1) {
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)fields, key, v)
            if (strcmp(key, "softmax_layers") != 0)
                return lz_fail(LZ_ERR_INPUT, "%s: \"%.64s\" is not a field of a distillation state", where, key);
    }
    if (!json_is_null(list) && !json_is_array(list))
        return lz_fail(LZ_ERR_INPUT, "%s: \"softmax_layers\" must be null or a list of layers", where);
    lz_distill_progress *p = &c->read;
    *p = (lz_distill_progress){.step = step, .chosen = json_is_array(list)};
    int count = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *v = json_array_get(list, i);
        const json_int_t layer = json_is_integer(v) ? json_integer_value(v) : -1;
        if (layer < 0 || layer >= r->n_layers || p->softmax[layer])
            return lz_fail(LZ_ERR_INPUT, "%s: softmax_layers[%zu] is not a layer of the teacher's %d (or repeats one)",
                           where, i, r->n_layers);
        p->softmax[layer] = true;
        count++;
    }
    char a[512], b[512];
    if (r->given_softmax) { // --softmax-layers: the state holds exactly them
        bool same = p->chosen;
        for (int i = 0; same && i < r->n_layers; i++)
            same = p->softmax[i] == r->given_softmax[i];
        if (!same)
            return lz_fail(LZ_ERR_INPUT, "%s: softmax_layers %s is not this run's --softmax-layers %s", where,
                           p->chosen ? set_text(p->softmax, r->n_layers, a, sizeof a) : "null",
                           set_text(r->given_softmax, r->n_layers, b, sizeof b));
        return LZ_OK;
    }
    // --retain-fraction: chosen once the calibration step has run (or at the end of a run shorter than it)
    const bool chosen = step > r->calibration_steps || step == r->total_steps;
    if (chosen != p->chosen)
        return lz_fail(LZ_ERR_INPUT, "%s: softmax_layers is %s at step %ld, but this run chooses them before step %ld",
                       where, p->chosen ? "chosen" : "null", step, r->calibration_steps + 1);
    if (chosen && count != r->retain_count)
        return lz_fail(LZ_ERR_INPUT, "%s: softmax_layers %s keeps %d layers; this run's --retain-fraction keeps %d",
                       where, set_text(p->softmax, r->n_layers, a, sizeof a), count, r->retain_count);
    for (int i = 0; i < r->n_layers; i++)
        if (p->softmax[i] && !r->trained[i])
            return lz_fail(LZ_ERR_INPUT, "%s: softmax layer %d was never a candidate of this run", where, i);
    return LZ_OK;
}

/* ---- loading -------------------------------------------------------------------------------- */

/* The reader's expectations over the run's layers; list freed by the caller. */
static lz_status expect_of(const lz_distill_resume_rules *rules, lz_distill_layer *layers, fields_ctx *c,
                           tensor_list *list, lz_ckpt_expect *e) {
    *c = (fields_ctx){rules, {0}};
    LZ_TRY(list_tensors(layers, rules->trained, rules->n_layers, list));
    *e = (lz_ckpt_expect){rules->signature, rules->total_steps, list->t, list->n, check_fields, c};
    return LZ_OK;
}

lz_status lz_distill_checkpoint_load(const char *dir, const lz_distill_resume_rules *rules, lz_distill_progress *p,
                                     lz_distill_layer *layers) {
    fields_ctx c;
    tensor_list list = {0};
    lz_ckpt_expect e;
    LZ_TRY(expect_of(rules, layers, &c, &list, &e));
    long step = 0;
    lz_status s = lz_ckpt_read(dir, LZ_DISTILL_STATE, &e, &step);
    list_free(&list);
    if (s == LZ_OK)
        *p = c.read;
    return s;
}

lz_status lz_distill_checkpoint_check(const char *where, const char *state_text, size_t state_len,
                                      const uint8_t *tensors_file, size_t tensors_len,
                                      const lz_distill_resume_rules *rules, lz_distill_progress *p,
                                      lz_distill_layer *layers) {
    fields_ctx c;
    tensor_list list = {0};
    lz_ckpt_expect e;
    LZ_TRY(expect_of(rules, layers, &c, &list, &e));
    long step = 0;
    lz_status s = lz_ckpt_check(where, state_text, state_len, tensors_file, tensors_len, &e, &step);
    list_free(&list);
    if (s == LZ_OK)
        *p = c.read;
    return s;
}
