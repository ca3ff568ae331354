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

/* outs[i] = rmsnorm(x) . w[i]^T, through ws->xn. */
static lz_status norm_linear_many(lz_model *m, lz_workspace *ws, int count, void *const *outs, const lz_weight *norm,
                                  const lz_weight *const *w, const lz_weight *const *bias, int T) {
    const lz_ops *ops = m->ops;
    LZ_TRY(ops->rmsnorm(m->be, ws->xn, ws->x, norm, T, (float)m->cfg.rms_norm_eps));
    return ops->linear_many(m->be, count, outs, ws->xn, w, bias, T);
}

/* ws->x += x . W^T (+ bias) */
static lz_status linear_residual(lz_model *m, lz_workspace *ws, const void *x, const lz_weight *w,
                                 const lz_weight *bias, int T) {
    const lz_ops *ops = m->ops;
    if (ops->linear_residual)
        return ops->linear_residual(m->be, ws->x, ws->proj, x, w, bias, T);
    LZ_TRY(ops->linear(m->be, ws->proj, x, w, bias, T));
    return ops->add(m->be, ws->x, ws->proj, (size_t)T * (size_t)w->rows);
}

lz_status lz_decoder_layer_forward(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws,
                                   const lz_batch *b, int kv_capacity) {
    const lz_ops *ops = m->ops;
    const int T = b->n_tokens;
    const size_t I = (size_t)m->cfg.intermediate_size;
    const float eps = (float)m->cfg.rms_norm_eps;
    lz_attn_dims dims = ly->dims;
    dims.kv_capacity = kv_capacity;

    /* q, k, v (and a Lizard layer's gate) read the same input: one launch where the backend can; a
     * softmax layer's RoPE folded into it where the backend can */
    const bool roped = ly->run_softmax && ops->linear_many_rope;
    {
        void *outs[4] = {ws->q, ws->k, ws->v, ws->gate_logit};
        const lz_weight *w[4] = {&ly->wq, &ly->wk, &ly->wv, &ly->gate};
        const lz_weight *bias[4] = {&ly->bq, &ly->bk, &ly->bv, NULL};
        if (roped) {
            LZ_TRY(ops->rmsnorm(m->be, ws->xn, ws->x, &ly->input_norm, T, eps));
            LZ_TRY(ops->linear_many_rope(m->be, 3, outs, ws->xn, w, bias, T, m->inv_freq, b, &dims));
        } else {
            LZ_TRY(norm_linear_many(m, ws, ly->run_softmax ? 3 : 4, outs, &ly->input_norm, w, bias, T));
        }
    }
    if (ly->run_softmax)
        LZ_TRY(softmax_attention(m, ls, ws, b, &dims, roped));
    else
        LZ_TRY(lizard_attention(m, ly, ls, ws, b, &dims));
    LZ_TRY(linear_residual(m, ws, ws->att, &ly->wo, &ly->bo, T));

    if (ops->norm_swiglu) {
        LZ_TRY(ops->norm_swiglu(m->be, ws->mlp_gate, ws->xn, ws->mlp_up, ws->x, &ly->post_norm, eps, &ly->w_gate,
                                &ly->b_gate, &ly->w_up, &ly->b_up, T));
    } else {
        void *outs[2] = {ws->mlp_gate, ws->mlp_up};
        const lz_weight *w[2] = {&ly->w_gate, &ly->w_up}, *bias[2] = {&ly->b_gate, &ly->b_up};
        LZ_TRY(norm_linear_many(m, ws, 2, outs, &ly->post_norm, w, bias, T));
        LZ_TRY(ops->swiglu(m->be, ws->mlp_gate, ws->mlp_gate, ws->mlp_up, (size_t)T * I));
    }
    return linear_residual(m, ws, ws->mlp_gate, &ly->w_down, &ly->b_down, T);
}

/* y += LoRA of projection j on x, when the layer trains one there. */
static lz_status lora_add(lz_model *m, const lz_layer_train *tr, lz_layer_tape *tape, int j, void *y, const void *x,
                          const lz_batch *b) {
    if (!tr->lora[j])
        return LZ_OK;
    return m->ops->backward->lora_forward(m->be, y, tape->lora_u[j], x, tr->lora[j], &tr->drop[j], b);
}

/* ws->x += o_proj or down_proj of x (+ bias), with its LoRA. */
static lz_status residual_train(lz_model *m, const lz_layer_train *tr, lz_layer_tape *tape, lz_workspace *ws, int j,
                                const void *x, const lz_weight *w, const lz_weight *bias, const lz_batch *b) {
    const lz_ops *ops = m->ops;
    const int T = b->n_tokens;
    LZ_TRY(ops->linear(m->be, ws->proj, x, w, bias, T));
    LZ_TRY(lora_add(m, tr, tape, j, ws->proj, x, b));
    return ops->add(m->be, ws->x, ws->proj, (size_t)T * (size_t)w->rows);
}

lz_status lz_decoder_layer_train_forward(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws,
                                         const lz_batch *b, int kv_capacity, const lz_layer_train *tr,
                                         lz_layer_tape *tape) {
    const lz_ops *ops = m->ops;
    const int T = b->n_tokens;
    const size_t I = (size_t)m->cfg.intermediate_size, C = (size_t)m->cfg.hidden_size;
    const float eps = (float)m->cfg.rms_norm_eps;
    if (!ops->backward)
        return lz_fail(LZ_ERR_INPUT, "the %s backend has no backward ops: it cannot train", ops->name);
    if (T > tape->max_tokens)
        return lz_fail(LZ_ERR_INTERNAL, "a training step of %d rows past its tape's %d", T, tape->max_tokens);
    lz_attn_dims dims = ly->dims;
    dims.kv_capacity = kv_capacity;
    lz_workspace w = *ws; // the tape's buffers in place of the workspace's, so that they outlive the layer
    w.xn = tape->xn1, w.q = tape->q, w.k = tape->k, w.v = tape->v, w.gate_logit = tape->gate_logit, w.att = tape->att;
    {
        void *outs[4] = {tape->q, tape->k, tape->v, tape->gate_logit};
        const lz_weight *wt[4] = {&ly->wq, &ly->wk, &ly->wv, &ly->gate}, *bias[4] = {&ly->bq, &ly->bk, &ly->bv, NULL};
        LZ_TRY(ops->rmsnorm(m->be, tape->xn1, ws->x, &ly->input_norm, T, eps));
        LZ_TRY(ops->linear_many(m->be, ly->run_softmax ? 3 : 4, outs, tape->xn1, wt, bias, T));
        for (int j = LZ_LIN_Q; j <= LZ_LIN_V; j++)
            LZ_TRY(lora_add(m, tr, tape, j, outs[j], tape->xn1, b));
    }
    if (ly->run_softmax && tape->q_raw) { // kept before RoPE rotates them in place
        const size_t q_bytes = (size_t)T * dims.n_heads * dims.head_dim * ops->act_size;
        LZ_TRY(ops->backward->copy(m->be, tape->q_raw, tape->q, q_bytes));
        LZ_TRY(ops->backward->copy(m->be, tape->k_raw, tape->k, q_bytes / dims.n_heads * dims.n_kv_heads));
    }
    if (ly->run_softmax)
        LZ_TRY(softmax_attention(m, ls, &w, b, &dims, false)); // q and k rotated in place
    else
        LZ_TRY(lizard_attention(m, ly, ls, &w, b, &dims));
    LZ_TRY(residual_train(m, tr, tape, ws, LZ_LIN_O, tape->att, &ly->wo, &ly->bo, b));
    LZ_TRY(ops->backward->copy(m->be, tape->xmid, ws->x, (size_t)T * C * ops->act_size));
    {
        void *outs[2] = {tape->g, tape->u};
        const lz_weight *wt[2] = {&ly->w_gate, &ly->w_up}, *bias[2] = {&ly->b_gate, &ly->b_up};
        LZ_TRY(ops->rmsnorm(m->be, tape->xn2, ws->x, &ly->post_norm, T, eps));
        LZ_TRY(ops->linear_many(m->be, 2, outs, tape->xn2, wt, bias, T));
        LZ_TRY(lora_add(m, tr, tape, LZ_LIN_GATE, tape->g, tape->xn2, b));
        LZ_TRY(lora_add(m, tr, tape, LZ_LIN_UP, tape->u, tape->xn2, b));
    }
    LZ_TRY(ops->swiglu(m->be, tape->h, tape->g, tape->u, (size_t)T * I));
    return residual_train(m, tr, tape, ws, LZ_LIN_DOWN, tape->h, &ly->w_down, &ly->b_down, b);
}
