/* decoder_layer.c - one decoder layer on a step:
 *   x += o_proj(attention(input_layernorm(x)))       attention = softmax | Lizard
 *   x += down(silu(gate(n)) * up(n)),  n = post_attention_layernorm(x)
 * Inference runs it with the backend's fused ops where it has them; training
 * (train_layer.h) runs the same ops unfused, adds LoRA after the projections
 * that have it and keeps what the backward reads. */
#include "decoder_layer.h"
#include "train_layer.h" // lz_layer_train, lz_layer_tape

/* roped: the projections applied RoPE already (linear_many_rope) */
static lz_status softmax_attention(lz_model *m, lz_layer_state *ls, lz_workspace *ws, const lz_batch *b,
                                   const lz_attn_dims *dims, bool roped) {
    if (!roped)
        LZ_TRY(m->ops->rope(m->be, ws->q, ws->k, m->inv_freq, b, dims));
    return m->ops->softmax_attention(m->be, ws->att, ws->q, ws->k, ws->v, ls, b, dims);
}

/* GLA_i + alpha * WIN_i (docs/model-format.md, "The function"); the gate's logit
 * was computed with q, k and v. */
static lz_status lizard_attention(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws, const lz_batch *b,
                                  const lz_attn_dims *dims) {
    const lz_ops *ops = m->ops;
    const int T = b->n_tokens, f = dims->feature_dim, d = dims->head_dim;
    const bool exp_map = m->cfg.lizard.feature_map == LZ_FMAP_EXP;
    bool one_token_each = true;
    for (int s = 0; s < b->n_seqs; s++)
        one_token_each &= b->len[s] == 1;
    if (one_token_each && ops->gla_decode) { /* gates, feature maps and the recurrent update in one op */
        LZ_TRY(ops->gla_decode(m->be, ws->att, ws->q, ws->k, ws->v, ws->gate_logit, &ly->fmap_q, &ly->fmap_k, exp_map,
                               ls, b, dims));
        return ops->window_attention(m->be, ws->att, ws->q, ws->k, ws->v, &ly->meta, ly->alpha, ls, b, dims);
    }
    LZ_TRY(ops->log_sigmoid(m->be, ws->log_gamma, ws->gate_logit, T));
    LZ_TRY(ops->feature_map(m->be, ws->phi_q, ws->q, &ly->fmap_q, T, dims->n_heads, dims->n_heads, d, f, exp_map));
    LZ_TRY(ops->feature_map(m->be, ws->phi_k, ws->k, &ly->fmap_k, T, dims->n_kv_heads, dims->n_state_heads, d, f,
                            exp_map));
    if (one_token_each)
        LZ_TRY(ops->gla_recurrent(m->be, ws->att, ws->phi_q, ws->phi_k, ws->v, ws->log_gamma, ls, b, dims));
    else
        LZ_TRY(ops->gla_chunked(m->be, ws->att, ws->phi_q, ws->phi_k, ws->v, ws->log_gamma, ls, b, dims));
    return ops->window_attention(m->be, ws->att, ws->q, ws->k, ws->v, &ly->meta, ly->alpha, ls, b, dims);
}

/* y += LoRA of projection j on x, when the layer trains one there. */
static lz_status lora_add(lz_model *m, const lz_layer_train *tr, lz_layer_tape *tape, int j, void *y, const void *x,
                          const lz_batch *b) {
    if (!tape || !tr->lora[j])
        return LZ_OK;
    return m->ops->backward->lora_forward(m->be, y, tape->lora_u[j], x, tr->lora[j], &tr->drop[j], b);
}

/* ws->x += x . W^T (+ bias), projection j (o or down): in one op where the backend fuses it, else
 * (and when training) the product, its LoRA, the add. */
static lz_status residual(lz_model *m, const lz_layer_train *tr, lz_layer_tape *tape, lz_workspace *ws, int j,
                          const void *x, const lz_weight *w, const lz_weight *bias, const lz_batch *b) {
    const lz_ops *ops = m->ops;
    const int T = b->n_tokens;
    if (!tape && ops->linear_residual)
        return ops->linear_residual(m->be, ws->x, ws->proj, x, w, bias, T);
    LZ_TRY(ops->linear(m->be, ws->proj, x, w, bias, T));
    LZ_TRY(lora_add(m, tr, tape, j, ws->proj, x, b));
    return ops->add(m->be, ws->x, ws->proj, (size_t)T * (size_t)w->rows);
}

/* The layer on ws->x. Without a tape (inference) the backend's fused ops run where it has them; with a
 * tape (training) the same ops run unfused, LoRA (tr) is added after the projections that have it and
 * the tape keeps what the backward reads (train_layer.h). */
static lz_status layer_forward(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws, const lz_batch *b,
                               int kv_capacity, const lz_layer_train *tr, lz_layer_tape *tape) {
    const lz_ops *ops = m->ops;
    const int T = b->n_tokens;
    const size_t I = (size_t)m->cfg.intermediate_size, C = (size_t)m->cfg.hidden_size;
    const float eps = (float)m->cfg.rms_norm_eps;
    lz_attn_dims dims = ly->dims;
    dims.kv_capacity = kv_capacity;
    lz_workspace w = *ws; // training: the tape's buffers in place of the workspace's, so that they outlive the layer
    if (tape)
        w.xn = tape->xn1, w.q = tape->q, w.k = tape->k, w.v = tape->v, w.gate_logit = tape->gate_logit,
        w.att = tape->att;

    /* q, k, v (and a Lizard layer's gate) read the same input: one launch where the backend can; a
     * softmax layer's RoPE folded into it where the backend can (not when LoRA adds to q and k first) */
    const bool roped = !tape && ly->run_softmax && ops->linear_many_rope;
    {
        void *outs[4] = {w.q, w.k, w.v, w.gate_logit};
        const lz_weight *wt[4] = {&ly->wq, &ly->wk, &ly->wv, &ly->gate};
        const lz_weight *bias[4] = {&ly->bq, &ly->bk, &ly->bv, NULL};
        LZ_TRY(ops->rmsnorm(m->be, w.xn, ws->x, &ly->input_norm, T, eps));
        if (roped)
            LZ_TRY(ops->linear_many_rope(m->be, 3, outs, w.xn, wt, bias, T, m->inv_freq, b, &dims));
        else
            LZ_TRY(ops->linear_many(m->be, ly->run_softmax ? 3 : 4, outs, w.xn, wt, bias, T));
        for (int j = LZ_LIN_Q; j <= LZ_LIN_V; j++)
            LZ_TRY(lora_add(m, tr, tape, j, outs[j], w.xn, b));
    }
    if (tape && ly->run_softmax && tape->q_raw) { // kept before RoPE rotates them in place
        const size_t q_bytes = (size_t)T * dims.n_heads * dims.head_dim * ops->act_size;
        LZ_TRY(ops->backward->copy(m->be, tape->q_raw, tape->q, q_bytes));
        LZ_TRY(ops->backward->copy(m->be, tape->k_raw, tape->k, q_bytes / dims.n_heads * dims.n_kv_heads));
    }
    if (ly->run_softmax)
        LZ_TRY(softmax_attention(m, ls, &w, b, &dims, roped));
    else
        LZ_TRY(lizard_attention(m, ly, ls, &w, b, &dims));
    LZ_TRY(residual(m, tr, tape, ws, LZ_LIN_O, w.att, &ly->wo, &ly->bo, b));
    if (tape)
        LZ_TRY(ops->backward->copy(m->be, tape->xmid, ws->x, (size_t)T * C * ops->act_size));

    if (!tape && ops->norm_swiglu) {
        LZ_TRY(ops->norm_swiglu(m->be, ws->mlp_gate, ws->xn, ws->mlp_up, ws->x, &ly->post_norm, eps, &ly->w_gate,
                                &ly->b_gate, &ly->w_up, &ly->b_up, T));
        return residual(m, tr, tape, ws, LZ_LIN_DOWN, ws->mlp_gate, &ly->w_down, &ly->b_down, b);
    }
    void *xn = tape ? tape->xn2 : ws->xn, *g = tape ? tape->g : ws->mlp_gate, *u = tape ? tape->u : ws->mlp_up;
    void *h = tape ? tape->h : ws->mlp_gate; // inference: silu(g) * u in place of g
    void *outs[2] = {g, u};
    const lz_weight *wt[2] = {&ly->w_gate, &ly->w_up}, *bias[2] = {&ly->b_gate, &ly->b_up};
    LZ_TRY(ops->rmsnorm(m->be, xn, ws->x, &ly->post_norm, T, eps));
    LZ_TRY(ops->linear_many(m->be, 2, outs, xn, wt, bias, T));
    LZ_TRY(lora_add(m, tr, tape, LZ_LIN_GATE, g, xn, b));
    LZ_TRY(lora_add(m, tr, tape, LZ_LIN_UP, u, xn, b));
    LZ_TRY(ops->swiglu(m->be, h, g, u, (size_t)T * I));
    return residual(m, tr, tape, ws, LZ_LIN_DOWN, h, &ly->w_down, &ly->b_down, b);
}

lz_status lz_decoder_layer_forward(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws,
                                   const lz_batch *b, int kv_capacity) {
    return layer_forward(m, ly, ls, ws, b, kv_capacity, NULL, NULL);
}

lz_status lz_decoder_layer_train_forward(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws,
                                         const lz_batch *b, int kv_capacity, const lz_layer_train *tr,
                                         lz_layer_tape *tape) {
    if (!m->ops->backward)
        return lz_fail(LZ_ERR_INPUT, "the %s backend has no backward ops: it cannot train", m->ops->name);
    if (b->n_tokens > tape->max_tokens)
        return lz_fail(LZ_ERR_INTERNAL, "a training step of %d rows past its tape's %d", b->n_tokens,
                       tape->max_tokens);
    return layer_forward(m, ly, ls, ws, b, kv_capacity, tr, tape);
}
