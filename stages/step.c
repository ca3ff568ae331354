/* step.c - scratch buffers and the forward step of a stage. */
#include <stdint.h> // uintptr_t
#include <string.h> // memset

#include "decoder_layer.h"
#include "hash.h" // lz_fnv1a

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

lz_status lz_workspace_create(lz_workspace *ws, const lz_model *m, int max_tokens, int max_logit_rows) {
    const lz_config *c = &m->cfg;
    const size_t T = (size_t)max_tokens, a = m->ops->act_size, hd = (size_t)c->head_dim;
    const size_t Hq = (size_t)c->num_attention_heads, Hkv = (size_t)c->num_key_value_heads;
    const size_t F = c->has_lizard ? 2 * (size_t)c->lizard.feature_dim : 1;
    memset(ws, 0, sizeof *ws);
    ws->max_tokens = max_tokens;
    ws->max_logit_rows = max_logit_rows;
    struct {
        void **buf;
        size_t elems;
    } plan[] = {
        {&ws->x, T * c->hidden_size},
        {&ws->xn, T * c->hidden_size},
        {&ws->q, T * Hq * hd},
        {&ws->k, T * Hkv * hd},
        {&ws->v, T * Hkv * hd},
        {&ws->att, T * Hq * hd},
        {&ws->proj, T * c->hidden_size},
        {&ws->mlp_gate, T * c->intermediate_size},
        {&ws->mlp_up, T * c->intermediate_size},
        {&ws->phi_q, T * Hq * F},
        {&ws->phi_k, T * max_size(Hq, Hkv) * F},
        {&ws->gate_logit, T},
        {&ws->log_gamma, T},
        {&ws->head_in, (size_t)max_logit_rows * c->hidden_size},
        {&ws->logits, (size_t)max_logit_rows * c->vocab_size},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        lz_status s = m->ops->alloc(m->be, plan[i].elems * a, plan[i].buf);
        if (s != LZ_OK) {
            lz_workspace_free(ws, m);
            lz_error_prefix("workspace for %d tokens per step: ", max_tokens);
            return s;
        }
    }
    return LZ_OK;
}

void lz_workspace_free(lz_workspace *ws, const lz_model *m) {
    if (m->ops->graph_reset)
        m->ops->graph_reset(m->be); // recordings may name these buffers
    void *all[] = {ws->x, ws->xn, ws->q, ws->k, ws->v, ws->att, ws->proj, ws->mlp_gate, ws->mlp_up, ws->phi_q,
                   ws->phi_k, ws->gate_logit, ws->log_gamma, ws->head_in, ws->logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            m->ops->free(m->be, all[i]);
    memset(ws, 0, sizeof *ws);
}

/* Everything a step reads from its caller is checked here, before any state changes. */
static lz_status validate_step(const lz_model *m, const lz_state *st, const lz_workspace *ws, const int32_t *ids,
                               const lz_batch *b, const int32_t *logit_rows, int n_logit_rows) {
    if (b->n_tokens < 1 || b->n_tokens > ws->max_tokens)
        return lz_fail(LZ_ERR_INPUT, "step of %d tokens (workspace holds %d)", b->n_tokens, ws->max_tokens);
    if (n_logit_rows < 0 || n_logit_rows > ws->max_logit_rows)
        return lz_fail(LZ_ERR_INPUT, "step asks for %d logit rows (workspace holds %d)", n_logit_rows,
                       ws->max_logit_rows);
    for (int t = 0; ids && t < b->n_tokens; t++) // no ids: a pipeline stage that does not embed
        if (ids[t] < 0 || ids[t] >= m->cfg.vocab_size)
            return lz_fail(LZ_ERR_INPUT, "token id %d out of range (vocab_size %d)", ids[t], m->cfg.vocab_size);
    for (int r = 0; r < n_logit_rows; r++)
        if (logit_rows[r] < 0 || logit_rows[r] >= b->n_tokens)
            return lz_fail(LZ_ERR_INPUT, "logit row %d out of range (%d tokens)", logit_rows[r], b->n_tokens);
    bool has_kv_cache = false; // only softmax layers bound the context
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        has_kv_cache |= m->layers[i].run_softmax;
    int expect_start = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const int slot = b->slot[s];
        if (slot < 0 || slot >= st->n_slots)
            return lz_fail(LZ_ERR_INPUT, "sequence slot %d out of range (%d slots)", slot, st->n_slots);
        if (b->start[s] != expect_start || b->len[s] < 1)
            return lz_fail(LZ_ERR_INTERNAL, "batch rows of sequence %d are not contiguous", s);
        expect_start += b->len[s];
        if (b->pos[s] != st->slot_pos[slot])
            return lz_fail(LZ_ERR_INTERNAL, "slot %d holds %d tokens, step starts at %d", slot, st->slot_pos[slot],
                           b->pos[s]);
        if (has_kv_cache && b->pos[s] + b->len[s] > st->kv_capacity)
            return lz_fail(LZ_ERR_INPUT, "sequence in slot %d would reach %d tokens; the context holds %d", slot,
                           b->pos[s] + b->len[s], st->kv_capacity);
    }
    if (expect_start != b->n_tokens)
        return lz_fail(LZ_ERR_INTERNAL, "batch sequences cover %d rows of %d", expect_start, b->n_tokens);
    return LZ_OK;
}

/* Everything the launches of a decode step depend on besides the data the
 * backend copies in begin_step: buffers, shapes, capacities. */
static uint64_t step_signature(const lz_model *m, const lz_state *st, const lz_workspace *ws, const lz_batch *b,
                               int n_logit_rows) {
    const uint64_t parts[] = {(uint64_t)(uintptr_t)m, (uint64_t)(uintptr_t)m->layers, (uint64_t)(uintptr_t)st, (uint64_t)(uintptr_t)ws, (uint64_t)(uintptr_t)st->layers,
                              (uint64_t)st->n_slots, (uint64_t)st->kv_capacity, (uint64_t)b->n_tokens,
                              (uint64_t)b->n_seqs, (uint64_t)n_logit_rows};
    return lz_fnv1a(LZ_FNV1A_INIT, parts, sizeof parts);
}

lz_status lz_step_embed(lz_model *m, lz_workspace *ws, const int32_t *ids, const lz_batch *batch) {
    return m->ops->embedding(m->be, ws->x, &m->embed, ids, batch->n_tokens);
}

static lz_status run_layers(lz_model *m, lz_state *st, lz_workspace *ws, const lz_batch *batch, int first, int last) {
    for (int i = first; i < last; i++) {
        if (!m->parts.layer[i])
            continue;
        lz_status s = lz_decoder_layer_forward(m, &m->layers[i], &st->layers[i], ws, batch, st->kv_capacity);
        if (s != LZ_OK) {
            lz_error_prefix("layer %d: ", i);
            return s;
        }
    }
    return LZ_OK;
}

/* Final norm + LM head on the requested rows, left on the device. */
static lz_status head_ops(lz_model *m, lz_workspace *ws, const int32_t *logit_rows, int n_logit_rows) {
    const lz_ops *ops = m->ops;
    const float eps = (float)m->cfg.rms_norm_eps;
    LZ_TRY(ops->gather_rows(m->be, ws->head_in, ws->x, logit_rows, n_logit_rows, m->cfg.hidden_size));
    LZ_TRY(ops->rmsnorm(m->be, ws->head_in, ws->head_in, &m->final_norm, n_logit_rows, eps));
    return ops->linear(m->be, ws->logits, ws->head_in, &m->lm_head, NULL, n_logit_rows);
}

static lz_status part_ops(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                          const lz_step_part *part, const int32_t *logit_rows, int n_logit_rows) {
    if (part->embed)
        LZ_TRY(lz_step_embed(m, ws, ids, batch));
    LZ_TRY(run_layers(m, st, ws, batch, part->first, part->last));
    return part->head && n_logit_rows > 0 ? head_ops(m, ws, logit_rows, n_logit_rows) : LZ_OK;
}

lz_status lz_step_part_run(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                           const lz_step_part *part, const int32_t *logit_rows, int n_logit_rows) {
    const lz_ops *ops = m->ops;
    // Decode steps (one token per sequence) repeat the same launches: a backend may record and replay them.
    // Prompts change shape every step: they run as they are.
    if (batch->n_tokens != batch->n_seqs || !ops->graph_begin)
        return part_ops(m, st, ws, ids, batch, part, logit_rows, n_logit_rows);
    const uint64_t key[] = {step_signature(m, st, ws, batch, n_logit_rows), (uint64_t)part->embed,
                            (uint64_t)part->first, (uint64_t)part->last, (uint64_t)part->head};
    bool run_ops = true;
    LZ_TRY(ops->graph_begin(m->be, lz_fnv1a(LZ_FNV1A_INIT, key, sizeof key), &run_ops));
    lz_status s = run_ops ? part_ops(m, st, ws, ids, batch, part, logit_rows, n_logit_rows) : LZ_OK;
    lz_status g = ops->graph_end(m->be, s == LZ_OK);
    return s == LZ_OK ? g : s;
}

lz_status lz_step_result(lz_model *m, lz_workspace *ws, int n_logit_rows, lz_head_out out) {
    if (n_logit_rows == 0)
        return m->ops->sync(m->be);
    if (out.ids && out.sample)
        return m->ops->sample_rows(m->be, out.ids, ws->logits, n_logit_rows, m->cfg.vocab_size, out.sample);
    if (out.ids)
        return m->ops->argmax_rows(m->be, out.ids, ws->logits, n_logit_rows, m->cfg.vocab_size);
    return m->ops->act_to_host(m->be, out.logits, ws->logits, (size_t)n_logit_rows * m->cfg.vocab_size);
}

void lz_step_end(lz_state *st, const lz_batch *batch) {
    for (int q = 0; q < batch->n_seqs; q++)
        st->slot_pos[batch->slot[q]] += batch->len[q];
}

lz_status lz_step_begin(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                        const int32_t *logit_rows, int n_logit_rows) {
    LZ_TRY(validate_step(m, st, ws, ids, batch, logit_rows, n_logit_rows));
    return m->ops->begin_step(m->be, ids, batch, logit_rows, n_logit_rows);
}

lz_status lz_step(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                  const int32_t *logit_rows, int n_logit_rows, lz_head_out out) {
    const lz_step_part whole = {true, 0, m->cfg.num_hidden_layers, true};
    LZ_TRY(lz_step_begin(m, st, ws, ids, batch, logit_rows, n_logit_rows));
    LZ_TRY(lz_step_part_run(m, st, ws, ids, batch, &whole, logit_rows, n_logit_rows)); // on failure the slots' state
                                                                                        // is undefined: the caller resets them
    lz_step_end(st, batch);
    return lz_step_result(m, ws, n_logit_rows, out);
}
