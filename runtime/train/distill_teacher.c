/* distill_teacher.c - the teacher run layer by layer, its activations handed
 * to the distillation before each layer moves on. */
#include "distill_teacher.h"

#include <stdlib.h> // calloc, free
#include <string.h> // memset

#include "engine.h"        // lz_open_backend
#include "handoff.h"       // lz_handoff_walk

lz_status lz_teacher_open(lz_teacher *t, const char *dir, int batch, int seq_len, const lz_plan *plan, int rank) {
    return lz_teacher_open_on(t, dir, batch, seq_len, plan, rank, "cpu", "fp32");
}

/* n activations where the backend computes them, in its activation type */
static void *act_alloc(lz_teacher *t, size_t n) {
    void *p = NULL;
    return t->ops->alloc(t->be, n * t->ops->act_size, &p) == LZ_OK ? p : NULL;
}

lz_status lz_teacher_open_on(lz_teacher *t, const char *dir, int batch, int seq_len, const lz_plan *plan, int rank,
                             const char *device, const char *dtype) {
    memset(t, 0, sizeof *t);
    t->batch = batch;
    t->seq_len = seq_len;
    t->plan = plan;
    t->rank = rank;
    lz_config cfg;
    LZ_TRY(lz_config_load(dir, &cfg));
    if (cfg.has_lizard)
        return lz_fail(LZ_ERR_INPUT, "--teacher %s: config.json has a \"lizard\" block; distill from a teacher", dir);
    if (seq_len > cfg.max_position_embeddings)
        return lz_fail(LZ_ERR_INPUT, "--seq-len %d exceeds the teacher's max_position_embeddings %d", seq_len,
                       cfg.max_position_embeddings);
    t->on_device = strcmp(device, "cuda") == 0;
    t->bf16 = t->on_device && strcmp(dtype, "bf16") == 0;
    LZ_TRY(lz_open_backend(device, dtype, &t->be, &t->ops));
    lz_stage_parts parts;
    lz_stage_parts_all(&parts, cfg.num_hidden_layers);
    parts.head = false; // distillation needs no logits
    for (int i = 0; plan && i < cfg.num_hidden_layers; i++)
        parts.layer[i] = plan->layer_rank[i] == rank;
    parts.embed = !plan || plan->embed_rank == rank;
    lz_status s = lz_model_load_stage(&t->model, dir, &cfg, t->ops, t->be, &parts, NULL);
    if (s != LZ_OK) {
        t->ops->destroy(t->be);
        t->be = NULL;
        return s;
    }
    const size_t T = (size_t)batch * seq_len, H = (size_t)cfg.hidden_size, d = (size_t)cfg.head_dim;
    s = lz_state_create(&t->state, &t->model, batch, seq_len);
    if (s == LZ_OK)
        s = lz_workspace_create(&t->ws, &t->model, (int)T, 0);
    t->layers = calloc((size_t)cfg.num_hidden_layers, sizeof *t->layers);
    if (s == LZ_OK && t->layers)
        s = lz_train_work_create_forward(&t->work, &t->model, (int)T, t->layers);
    t->q_raw = t->work.tape.q_raw = act_alloc(t, T * cfg.num_attention_heads * d);
    t->k_raw = t->work.tape.k_raw = act_alloc(t, T * cfg.num_key_value_heads * d);
    t->slot = calloc((size_t)batch, sizeof(int32_t));
    t->start = calloc((size_t)batch, sizeof(int32_t));
    t->len = calloc((size_t)batch, sizeof(int32_t));
    t->pos = calloc((size_t)batch, sizeof(int32_t));
    t->token_pos = calloc(T, sizeof(int32_t));
    if (t->on_device && plan) // a GPU teacher's hidden states cross ranks through host memory
        t->hidden_host = calloc(T * H, sizeof(float));
    if (s == LZ_OK && !(t->layers && t->q_raw && t->k_raw && t->slot && t->start && t->len && t->pos && t->token_pos &&
                        (t->hidden_host || !(t->on_device && plan))))
        s = lz_fail(LZ_ERR_NOMEM, "teacher activations for %d x %d tokens: out of memory", batch, seq_len);
    if (s != LZ_OK) {
        lz_teacher_close(t);
        return s;
    }
    for (int b = 0; b < batch; b++) {
        t->slot[b] = b;
        t->start[b] = b * seq_len;
        t->len[b] = seq_len;
        for (int i = 0; i < seq_len; i++)
            t->token_pos[(size_t)b * seq_len + i] = i;
    }
    return LZ_OK;
}

void lz_teacher_close(lz_teacher *t) {
    if (t->be) {
        if (t->q_raw)
            t->ops->free(t->be, t->q_raw);
        if (t->k_raw)
            t->ops->free(t->be, t->k_raw);
        lz_train_work_free(&t->work, &t->model);
        if (t->ws.x)
            lz_workspace_free(&t->ws, &t->model);
        if (t->state.layers)
            lz_state_free(&t->state, &t->model);
        lz_model_free(&t->model);
        t->ops->destroy(t->be);
    }
    free(t->layers);
    free(t->slot), free(t->start), free(t->len), free(t->pos);
    free(t->token_pos);
    free(t->hidden_host);
    memset(t, 0, sizeof *t);
}

typedef struct {
    lz_teacher *t;
    lz_teacher_layer_fn fn;
    void *ctx;
} hook_ctx;

/* After each layer: what its forward kept, handed to the distillation (the layer's input after
 * input_layernorm, q and k before RoPE, v, the attention output). */
static lz_status hand_over(void *ctx, int layer, const lz_layer_tape *tape) {
    const hook_ctx *h = ctx;
    lz_teacher *t = h->t;
    if (t->on_device)
        LZ_TRY(t->ops->sync(t->be)); // the training kernels run on their own stream
    const lz_teacher_acts acts = {layer, tape->xn1, tape->q_raw, tape->k_raw, tape->v, tape->att, t->on_device,
                                  t->bf16};
    return h->fn(h->ctx, &acts);
}

/* Layers [first, last) of this process, each handed to fn after it ran: the training forward of the
 * layers (train_step.h), so the teacher runs the layers exactly as every other command does. */
static lz_status run_layers(lz_teacher *t, const lz_batch *b, int first, int last, lz_teacher_layer_fn fn,
                            void *ctx) {
    const lz_step_part part = {.embed = false, .first = first, .last = last, .head = false};
    hook_ctx h = {t, fn, ctx};
    return lz_train_forward(&t->model, &t->state, &t->ws, &t->work, NULL, b, &part, NULL, hand_over, &h);
}

typedef struct {
    lz_teacher *t;
    const lz_batch *b;
    lz_teacher_layer_fn fn;
    void *ctx;
} walk_ctx;

static lz_status visit_layers(void *ctx, const lz_plan_visit *v) {
    walk_ctx *w = ctx;
    return run_layers(w->t, w->b, v->first, v->first + v->count, w->fn, w->ctx);
}

/* The plan's visits up to layer n_layers, the hidden states [T, hidden]
 * handed on whenever the next visit belongs to another rank. */
static lz_status run_planned(lz_teacher *t, const lz_batch *b, int n_layers, uint64_t step, lz_teacher_layer_fn fn,
                             void *ctx) {
    lz_plan_visit visits[LZ_MAX_LAYERS + 2];
    int n = 0;
    lz_plan_visit_order(t->plan, visits, LZ_MAX_LAYERS + 2, &n);
    while (n > 1 && visits[n - 1].first >= n_layers) // layers past the last one wanted, the head
        n--;
    if (visits[n - 1].first + visits[n - 1].count > n_layers)
        visits[n - 1].count = n_layers - visits[n - 1].first;
    walk_ctx w = {t, b, fn, ctx};
    const lz_handoff staged = {.ops = t->ops, .be = t->be, .staging = t->hidden_host};
    return lz_handoff_walk(visits, n, t->rank, t->on_device ? &staged : NULL, t->ws.x,
                           (size_t)b->n_tokens * t->model.cfg.hidden_size, step, visit_layers, &w);
}

lz_status lz_teacher_run(lz_teacher *t, const int32_t *ids, int n_layers, uint64_t step, lz_teacher_layer_fn fn,
                         void *ctx) {
    lz_model *m = &t->model;
    const int T = t->batch * t->seq_len;
    const lz_batch b = {t->batch, T, t->slot, t->start, t->len, t->pos, t->token_pos};
    for (int s = 0; s < t->batch; s++)
        LZ_TRY(lz_state_reset_slot(&t->state, m, s));
    LZ_TRY(lz_step_begin(m, &t->state, &t->ws, ids, &b, NULL, 0));
    if (m->parts.embed)
        LZ_TRY(lz_step_embed(m, &t->ws, ids, &b));
    if (t->plan)
        return run_planned(t, &b, n_layers, step, fn, ctx);
    return run_layers(t, &b, 0, n_layers < m->cfg.num_hidden_layers ? n_layers : m->cfg.num_hidden_layers, fn, ctx);
}
