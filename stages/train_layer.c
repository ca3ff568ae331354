/* train_layer.c - a decoder layer's tape and gradient buffers, and its
 * backward (train_layer.h); the forward is decoder_layer.c's. */
#include "train_layer.h"

#include <string.h> // memset

lz_weight *lz_layer_projection(lz_layer *ly, int j) {
    lz_weight *const w[LZ_LIN_COUNT] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
    return w[j];
}

/* A list of buffers made and freed together: elems[i] elements of elem_size bytes into *bufs[i]. */
static lz_status alloc_all(const lz_model *m, void **const *bufs, const size_t *elems, const size_t *elem_size,
                           size_t n) {
    for (size_t i = 0; i < n; i++) {
        const size_t bytes = elems[i] * elem_size[i];
        LZ_TRY(m->ops->alloc(m->be, bytes ? bytes : 1, bufs[i]));
    }
    return LZ_OK;
}

static void free_all(const lz_model *m, void **const *bufs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (*bufs[i]) {
            m->ops->free(m->be, *bufs[i]);
            *bufs[i] = NULL;
        }
}

#define TAPE_BUFS(t)                                                                                               \
    {(void **)&(t)->xn1, (void **)&(t)->q, (void **)&(t)->k, (void **)&(t)->v, (void **)&(t)->gate_logit,          \
     (void **)&(t)->att, (void **)&(t)->xmid, (void **)&(t)->xn2, (void **)&(t)->g, (void **)&(t)->u,              \
     (void **)&(t)->h, (void **)&(t)->lora_u[0], (void **)&(t)->lora_u[1], (void **)&(t)->lora_u[2],              \
     (void **)&(t)->lora_u[3], (void **)&(t)->lora_u[4], (void **)&(t)->lora_u[5], (void **)&(t)->lora_u[6]}

lz_status lz_layer_tape_create(lz_layer_tape *t, const lz_model *m, int max_tokens, int lora_rank) {
    const lz_config *c = &m->cfg;
    const size_t N = (size_t)max_tokens, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t qd = N * c->num_attention_heads * c->head_dim, kd = N * c->num_key_value_heads * c->head_dim;
    const size_t a = m->ops->act_size, f = sizeof(float), r = (size_t)(lora_rank > 0 ? lora_rank : 1);
    memset(t, 0, sizeof *t);
    t->max_tokens = max_tokens;
    t->lora_rank = lora_rank;
    void **const bufs[] = TAPE_BUFS(t);
    const size_t elems[] = {N * C, qd, kd, kd, N, qd, N * C, N * C, N * I, N * I, N * I,
                            N * r, N * r, N * r, N * r, N * r, N * r, N * r};
    const size_t size[] = {a, a, a, a, a, a, a, a, a, a, a, f, f, f, f, f, f, f};
    const lz_status s = alloc_all(m, bufs, elems, size, sizeof elems / sizeof elems[0]);
    if (s != LZ_OK) {
        lz_layer_tape_free(t, m);
        lz_error_prefix("training activations for %d rows: ", max_tokens);
    }
    return s;
}

void lz_layer_tape_free(lz_layer_tape *t, const lz_model *m) {
    void **const bufs[] = TAPE_BUFS(t);
    free_all(m, bufs, sizeof bufs / sizeof bufs[0]);
}

#define GRAD_BUFS(g)                                                                                               \
    {(void **)&(g)->dxn, (void **)&(g)->dq, (void **)&(g)->dk, (void **)&(g)->dv, (void **)&(g)->datt,            \
     (void **)&(g)->dh, (void **)&(g)->dg, (void **)&(g)->du}

/* The geometry of a Lizard layer's attention, as the backward op reads it (maps' heads 0 when its weights
 * are not loaded here). */
static lz_lizard_geom lizard_geom(const lz_model *m, const lz_layer *ly) {
    const lz_attn_dims *d = &ly->dims;
    const lz_lizard_config *lc = &m->cfg.lizard;
    const int64_t df = (int64_t)d->head_dim * lc->feature_dim;
    const int n_wq = df ? (int)(ly->fmap_q.rows * ly->fmap_q.cols / df) : 0;
    const int n_wk = df ? (int)(ly->fmap_k.rows * ly->fmap_k.cols / df) : 0;
    return (lz_lizard_geom){.Hq = d->n_heads, .Hkv = d->n_kv_heads, .Hs = d->n_state_heads, .n_wq = n_wq,
                            .n_wk = n_wk, .d = d->head_dim, .f = lc->feature_dim, .w = lc->window_size,
                            .m = lc->num_meta_tokens, .normalize = lc->gla_normalize,
                            .exp_map = lc->feature_map == LZ_FMAP_EXP};
}

lz_lizard_geom lz_layer_lizard_geom(const lz_model *m, const lz_layer *ly) { return lizard_geom(m, ly); }

lz_status lz_layer_grads_create(lz_layer_grads *g, const lz_model *m, int max_tokens) {
    const lz_config *c = &m->cfg;
    const size_t N = (size_t)max_tokens, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t qd = N * c->num_attention_heads * c->head_dim, kd = N * c->num_key_value_heads * c->head_dim;
    const size_t f = sizeof(float);
    memset(g, 0, sizeof *g);
    void **const bufs[] = GRAD_BUFS(g);
    const size_t elems[] = {N * C, qd, kd, kd, qd, N * I, N * I, N * I};
    const size_t size[] = {f, f, f, f, f, f, f, f};
    lz_status s = alloc_all(m, bufs, elems, size, sizeof elems / sizeof elems[0]);
    for (int l = 0; s == LZ_OK && l < c->num_hidden_layers; l++) {
        const lz_layer *ly = &m->layers[l];
        if (ly->run_softmax || !m->parts.layer[l])
            continue;
        const lz_lizard_geom geom = lizard_geom(m, ly); // every Lizard layer of a model has one shape
        s = m->ops->backward->lizard_scratch_create(m->be, &g->lizard_scratch, &geom, max_tokens, c->hidden_size);
        break;
    }
    if (s != LZ_OK) {
        lz_layer_grads_free(g, m);
        lz_error_prefix("training gradients for %d rows: ", max_tokens);
    }
    return s;
}

void lz_layer_grads_free(lz_layer_grads *g, const lz_model *m) {
    void **const bufs[] = GRAD_BUFS(g);
    free_all(m, bufs, sizeof bufs / sizeof bufs[0]);
    if (g->lizard_scratch)
        m->ops->backward->lizard_scratch_free(m->be, g->lizard_scratch);
    g->lizard_scratch = NULL;
}

/* d/dx of projection j: dx = dy W (or += with accumulate), plus LoRA's, whose dA, dB are added to. */
static lz_status projection_backward(lz_model *m, lz_layer *ly, const lz_layer_train *tr, const lz_layer_tape *tape,
                                     int j, float *dx, const float *dy, const void *x, bool accumulate,
                                     const lz_batch *b) {
    const lz_backward_ops *bw = m->ops->backward;
    LZ_TRY(bw->linear(m->be, dx, dy, lz_layer_projection(ly, j), b->n_tokens, accumulate));
    if (!tr->lora[j])
        return LZ_OK;
    return bw->lora_backward(m->be, tr->lora[j], dx, dy, x, tape->lora_u[j], &tr->drop[j], b);
}

lz_status lz_decoder_layer_backward(lz_model *m, lz_layer *ly, const lz_layer_train *tr, const lz_layer_tape *tape,
                                    lz_layer_grads *gr, const void *x, float *dx, const lz_batch *b) {
    const lz_ops *ops = m->ops;
    const lz_backward_ops *bw = ops->backward;
    const int N = b->n_tokens;
    const float eps = (float)m->cfg.rms_norm_eps;
    const size_t qd = (size_t)N * ly->dims.n_heads * ly->dims.head_dim;
    const size_t kd = (size_t)N * ly->dims.n_kv_heads * ly->dims.head_dim;
    const size_t I = (size_t)m->cfg.intermediate_size;
    // MLP: out = xmid + down(silu(g) * u), g, u = xn2 W^T, xn2 = rmsnorm(xmid); dx holds d out
    LZ_TRY(projection_backward(m, ly, tr, tape, LZ_LIN_DOWN, gr->dh, dx, tape->h, false, b));
    LZ_TRY(bw->swiglu(m->be, gr->dg, gr->du, gr->dh, tape->g, tape->u, (size_t)N * I));
    LZ_TRY(projection_backward(m, ly, tr, tape, LZ_LIN_GATE, gr->dxn, gr->dg, tape->xn2, false, b));
    LZ_TRY(projection_backward(m, ly, tr, tape, LZ_LIN_UP, gr->dxn, gr->du, tape->xn2, true, b));
    LZ_TRY(bw->rmsnorm(m->be, dx, gr->dxn, tape->xmid, &ly->post_norm, N, eps)); // dx = d xmid
    // attention: xmid = x + o(att), att from q, k, v = xn1 W^T, xn1 = rmsnorm(x)
    LZ_TRY(projection_backward(m, ly, tr, tape, LZ_LIN_O, gr->datt, dx, tape->att, false, b));
    bool dxn_written = false;
    if (ly->run_softmax) {
        LZ_TRY(bw->attention(m->be, gr->dq, gr->dk, gr->dv, gr->datt, tape->q, tape->k, tape->v, b, &ly->dims));
        LZ_TRY(bw->rope(m->be, gr->dq, gr->dk, m->inv_freq, b, &ly->dims));
    } else {
        LZ_TRY(ops->zero(m->be, gr->dq, sizeof(float) * qd));
        LZ_TRY(ops->zero(m->be, gr->dk, sizeof(float) * kd));
        LZ_TRY(ops->zero(m->be, gr->dv, sizeof(float) * kd));
        LZ_TRY(ops->zero(m->be, gr->dxn, sizeof(float) * (size_t)N * m->cfg.hidden_size));
        LZ_TRY(bw->lizard(m->be, gr->lizard_scratch, tr->lizard_grad, gr->dxn, gr->dq, gr->dk, gr->dv, gr->datt,
                          &tr->lizard, tape->xn1, tape->q, tape->k, tape->v, b, &tr->geom, m->cfg.hidden_size));
        dxn_written = true; // the gate's gradient for its input
    }
    LZ_TRY(projection_backward(m, ly, tr, tape, LZ_LIN_Q, gr->dxn, gr->dq, tape->xn1, dxn_written, b));
    LZ_TRY(projection_backward(m, ly, tr, tape, LZ_LIN_K, gr->dxn, gr->dk, tape->xn1, true, b));
    LZ_TRY(projection_backward(m, ly, tr, tape, LZ_LIN_V, gr->dxn, gr->dv, tape->xn1, true, b));
    return bw->rmsnorm(m->be, dx, gr->dxn, x, &ly->input_norm, N, eps); // dx = d x
}
