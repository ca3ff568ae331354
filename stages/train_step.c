/* train_step.c - a training step's pieces (train_step.h). */
#include "train_step.h"

#include <string.h> // memset


lz_status lz_train_work_create(lz_train_work *w, const lz_model *m, int max_tokens, int lora_rank,
                               lz_layer_train *layers) {
    memset(w, 0, sizeof *w);
    if (!m->ops->backward)
        return lz_fail(LZ_ERR_INPUT, "the %s backend has no backward ops: it cannot train", m->ops->name);
    w->max_tokens = max_tokens;
    w->layers = layers;
    const size_t NC = (size_t)max_tokens * m->cfg.hidden_size;
    lz_status s = lz_layer_tape_create(&w->tape, m, max_tokens, lora_rank);
    if (s == LZ_OK)
        s = lz_layer_grads_create(&w->grads, m, max_tokens);
    if (s == LZ_OK)
        s = m->ops->alloc(m->be, NC * sizeof(float), (void **)&w->dx);
    if (s == LZ_OK)
        s = m->ops->alloc(m->be, NC * m->ops->act_size, &w->h);
    if (s == LZ_OK)
        s = m->ops->alloc(m->be, NC * sizeof(float), (void **)&w->dh);
    if (s != LZ_OK)
        lz_train_work_free(w, m);
    return s;
}

lz_status lz_train_work_create_forward(lz_train_work *w, const lz_model *m, int max_tokens, lz_layer_train *layers) {
    memset(w, 0, sizeof *w);
    if (!m->ops->backward)
        return lz_fail(LZ_ERR_INPUT, "the %s backend has no backward ops: it cannot keep a layer's activations",
                       m->ops->name);
    w->max_tokens = max_tokens;
    w->layers = layers;
    return lz_layer_tape_create(&w->tape, m, max_tokens, 0);
}

void lz_train_work_free(lz_train_work *w, const lz_model *m) {
    if (w->tape.max_tokens)
        lz_layer_tape_free(&w->tape, m);
    if (m->ops->backward)
        lz_layer_grads_free(&w->grads, m);
    void *bufs[] = {w->dx, w->h, w->dh};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            m->ops->free(m->be, bufs[i]);
    memset(w, 0, sizeof *w);
}

lz_status lz_train_begin(lz_model *m, const lz_state *st, const lz_workspace *ws, const lz_train_work *w,
                         const int32_t *ids, const lz_batch *b) {
    if (b->n_tokens < 1 || b->n_tokens > w->max_tokens || b->n_tokens > ws->max_tokens)
        return lz_fail(LZ_ERR_INTERNAL, "a training micro-batch of %d rows (buffers hold %d)", b->n_tokens,
                       w->max_tokens);
    int row = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->slot[s] != s || s >= st->n_slots || b->start[s] != row || b->len[s] < 1 || b->pos[s] != 0 ||
            b->len[s] > st->kv_capacity)
            return lz_fail(LZ_ERR_INTERNAL, "training sequence %d: slot %d, rows %d + %d, position %d", s, b->slot[s],
                           b->start[s], b->len[s], b->pos[s]);
        row += b->len[s];
    }
    if (row != b->n_tokens)
        return lz_fail(LZ_ERR_INTERNAL, "training sequences cover %d rows of %d", row, b->n_tokens);
    for (int t = 0; ids && t < b->n_tokens; t++)
        if (ids[t] < 0 || ids[t] >= m->cfg.vocab_size)
            return lz_fail(LZ_ERR_INPUT, "token id %d out of range (vocab_size %d)", ids[t], m->cfg.vocab_size);
    return m->ops->begin_step(m->be, ids, b, NULL, 0);
}

/* A Lizard layer's recurrent state of the micro-batch's slots, emptied: every pass over a layer starts
 * its sequences from position 0 (a softmax layer's cache is written before it is read). */
static lz_status clear_layer_state(lz_model *m, lz_state *st, int l, int n_seqs) {
    const lz_layer *ly = &m->layers[l];
    if (ly->run_softmax)
        return LZ_OK;
    LZ_TRY(m->ops->zero(m->be, st->layers[l].S, sizeof(float) * lz_layer_s_elems(ly) * (size_t)n_seqs));
    return m->ops->zero(m->be, st->layers[l].z, sizeof(float) * lz_layer_z_elems(ly) * (size_t)n_seqs);
}

/* Layer l on ws->x, with the tape filled for its backward. */
static lz_status layer_run(lz_model *m, lz_state *st, lz_workspace *ws, lz_train_work *w, const lz_batch *b, int l) {
    LZ_TRY(clear_layer_state(m, st, l, b->n_seqs));
    lz_status s = lz_decoder_layer_train_forward(m, &m->layers[l], &st->layers[l], ws, b, st->kv_capacity,
                                                 &w->layers[l], &w->tape);
    if (s != LZ_OK)
        lz_error_prefix("layer %d: ", l);
    return s;
}

lz_status lz_train_forward(lz_model *m, lz_state *st, lz_workspace *ws, lz_train_work *w, const int32_t *ids,
                           const lz_batch *b, const lz_step_part *part, void *const *saves, lz_layer_hook hook,
                           void *hook_ctx) {
    const size_t bytes = (size_t)b->n_tokens * m->cfg.hidden_size * m->ops->act_size;
    if (part->embed)
        LZ_TRY(lz_step_embed(m, ws, ids, b));
    for (int l = part->first; l < part->last; l++) {
        if (!m->parts.layer[l])
            continue;
        if (saves)
            LZ_TRY(m->ops->backward->copy(m->be, saves[l], ws->x, bytes));
        LZ_TRY(layer_run(m, st, ws, w, b, l));
        if (hook)
            LZ_TRY(hook(hook_ctx, l, &w->tape));
    }
    return LZ_OK;
}

lz_status lz_train_head(lz_model *m, lz_workspace *ws, lz_train_work *w, const lz_batch *b, const int32_t *targets,
                        float grad_scale, bool learn, double *loss) {
    const lz_ops *ops = m->ops;
    const int N = b->n_tokens;
    const float eps = (float)m->cfg.rms_norm_eps;
    LZ_TRY(ops->rmsnorm(m->be, w->h, ws->x, &m->final_norm, N, eps));
    LZ_TRY(ops->backward->cross_entropy(m->be, loss, learn ? w->dh : NULL, w->h, &m->lm_head, targets, N,
                                        grad_scale));
    if (!learn)
        return LZ_OK;
    LZ_TRY(ops->zero(m->be, w->dx, sizeof(float) * (size_t)N * m->cfg.hidden_size));
    return ops->backward->rmsnorm(m->be, w->dx, w->dh, ws->x, &m->final_norm, N, eps);
}

lz_status lz_train_backward(lz_model *m, lz_state *st, lz_workspace *ws, lz_train_work *w, const lz_batch *b,
                            const lz_step_part *part, void *const *saves) {
    const size_t bytes = (size_t)b->n_tokens * m->cfg.hidden_size * m->ops->act_size;
    for (int l = part->last - 1; l >= part->first; l--) {
        if (!m->parts.layer[l])
            continue;
        LZ_TRY(m->ops->backward->copy(m->be, ws->x, saves[l], bytes));
        LZ_TRY(layer_run(m, st, ws, w, b, l)); // recomputed: only the layer's input was kept
        lz_status s = lz_decoder_layer_backward(m, &m->layers[l], &w->layers[l], &w->tape, &w->grads, saves[l], w->dx,
                                                b);
        if (s != LZ_OK) {
            lz_error_prefix("layer %d backward: ", l);
            return s;
        }
    }
    return LZ_OK;
}
