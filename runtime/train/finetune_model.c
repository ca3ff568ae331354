/* finetune_model.c - the model's weights, its trainable tensors, and one
 * sequence's loss and gradient (finetune_model.h). */
#include "finetune_model.h"

#include <math.h>   // sqrt
#include <stdio.h>  // snprintf
#include <stdlib.h> // calloc, malloc, free
#include <string.h> // memcpy, memset, strcmp

#include "distill_params.h" // lz_distill_tensor_names, lz_fill_uniform, lz_mix64, LZ_DT_*
#include "dtype.h"          // lz_convert_to_f32
#include "model.h"          // lz_rope_inv_freq

enum { MAX_PARAMS_PER_LAYER = 2 * LZ_LIN_COUNT + 5 };

/* One sequence's activations of the layer being recomputed, and gradients. */
typedef struct {
    float **X; /* [slots][n_layers + 1][T, C]: each layer's input, then the last output, of a sequence in flight */
    float *xn1, *r1, *q, *k, *v, *qr, *kr, *att, *lse, *xmid, *xn2, *r2, *g, *u, *h, *proj, *rf;
    float *lora_u[LZ_LIN_COUNT], *mask[LZ_LIN_COUNT];
    float *dx, *dxn, *dq, *dk, *dv, *dqr, *dkr, *datt, *dh, *dg, *du;
    int32_t *targets;
    void *lizard; /* the op table's Lizard scratch */
} ft_work;

static lz_status load_f32(lz_ft_model *m, const char *name, size_t numel, float **out) {
    const lz_st_tensor *t = lz_weights_find(&m->ckpt, name);
    if (!t)
        return lz_fail(LZ_ERR_INPUT, "%s: the checkpoint has no tensor %s", m->ckpt.dir, name);
    if ((size_t)t->numel != numel)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor %s has %zu elements, expected %zu", m->ckpt.dir, name,
                       (size_t)t->numel, numel);
    if (!(*out = malloc(sizeof(float) * (numel ? numel : 1))))
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", name);
    lz_convert_to_f32(*out, t->data, t->dtype, numel);
    return LZ_OK;
}

static lz_ft_param *new_param(lz_ft_model *m, int layer, const char *name, size_t n, bool decay) {
    lz_ft_param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->layer = layer, p->n = n, p->decay = decay;
    p->w = calloc(n ? n : 1, sizeof(float)), p->g = calloc(n ? n : 1, sizeof(float));
    p->m1 = calloc(n ? n : 1, sizeof(float)), p->m2 = calloc(n ? n : 1, sizeof(float));
    return p->w && p->g && p->m1 && p->m2 ? p : NULL;
}

static lz_status load_lizard(lz_ft_model *m, int l, lz_ft_layer *ly) {
    const lz_config *c = &m->cfg;
    const int Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, d = c->head_dim, f = c->lizard.feature_dim;
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.self_attn.feature_map_q.weight", l);
    const lz_st_tensor *tq = lz_weights_find(&m->ckpt, name);
    snprintf(name, sizeof name, "model.layers.%d.self_attn.feature_map_k.weight", l);
    const lz_st_tensor *tk = lz_weights_find(&m->ckpt, name);
    if (!tq || !tk)
        return lz_fail(LZ_ERR_INPUT, "%s: Lizard layer %d has no feature maps (%s)", m->ckpt.dir, l, name);
    const int n_wq = (int)(tq->numel / ((int64_t)d * f)), n_wk = (int)(tk->numel / ((int64_t)d * f));
    if ((int64_t)n_wq * d * f != tq->numel || (int64_t)n_wk * d * f != tk->numel || (n_wq != 1 && n_wq != Hq) ||
        (n_wk != 1 && n_wk != Hkv && n_wk != Hq))
        return lz_fail(LZ_ERR_INPUT, "%s: layer %d's feature maps are not [1 or Hq, %d, %d] and [1, Hkv or Hq, %d, %d]",
                       m->ckpt.dir, l, d, f, d, f);
    ly->geom = (lz_lizard_geom){.Hq = Hq, .Hkv = Hkv, .Hs = n_wk == Hq ? Hq : Hkv, .n_wq = n_wq, .n_wk = n_wk,
                                .d = d, .f = f, .w = c->lizard.window_size, .m = c->lizard.num_meta_tokens,
                                .normalize = c->lizard.gla_normalize,
                                .exp_map = c->lizard.feature_map == LZ_FMAP_EXP};
    const size_t numel[5] = {lz_lizard_wq_numel(&ly->geom), lz_lizard_wk_numel(&ly->geom),
                             (size_t)c->hidden_size, (size_t)ly->geom.m, 1};
    for (int j = 0; j < 5; j++) {
        snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l, lz_distill_tensor_names[j]);
        float *vals;
        LZ_TRY(load_f32(m, name, numel[j], &vals));
        if (m->lora.freeze_lizard) {
            ly->lz_frozen[j] = vals;
            continue;
        }
        lz_ft_param *p = new_param(m, l, name, numel[j], j <= LZ_DT_GATE);
        if (!p) {
            free(vals);
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", name);
        }
        memcpy(p->w, vals, sizeof(float) * numel[j]);
        free(vals);
        ly->lz[j] = p;
    }
    return LZ_OK;
}

static lz_status load_layer(lz_ft_model *m, int l) {
    const lz_config *c = &m->cfg;
    lz_ft_layer *ly = &m->layers[l];
    const int C = c->hidden_size;
    char name[160];
    ly->softmax = c->softmax_layer[l];
    snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
    LZ_TRY(load_f32(m, name, (size_t)C, &ly->in_norm));
    snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
    LZ_TRY(load_f32(m, name, (size_t)C, &ly->post_norm));
    for (int j = 0; j < LZ_LIN_COUNT; j++) {
        lz_lin_shape(c, j, &ly->out[j], &ly->in[j]);
        snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, lz_lin_parent[j], lz_lin_module[j]);
        LZ_TRY(load_f32(m, name, (size_t)ly->in[j] * ly->out[j], &ly->W[j]));
        if (!m->lora.target[j])
            continue;
        const int r = m->lora.rank;
        snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_A.weight", l, lz_lin_parent[j], lz_lin_module[j]);
        ly->A[j] = new_param(m, l, name, (size_t)r * ly->in[j], true);
        snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_B.weight", l, lz_lin_parent[j], lz_lin_module[j]);
        ly->B[j] = new_param(m, l, name, (size_t)ly->out[j] * r, true);
        if (!ly->A[j] || !ly->B[j])
            return lz_fail(LZ_ERR_NOMEM, "LoRA of layer %d: out of memory", l);
        // PEFT's init: A kaiming-uniform (bound 1/sqrt(in), std = bound/sqrt(3)), B zero
        lz_fill_uniform(ly->A[j]->w, ly->A[j]->n, 1.0 / sqrt(3.0 * ly->in[j]), m->lora.seed, l, 16 + j);
    }
    return ly->softmax ? LZ_OK : load_lizard(m, l, ly);
}

static lz_status alloc_work(lz_ft_model *m) {
    const lz_config *c = &m->cfg;
    ft_work *w = calloc(1, sizeof *w);
    if (!(m->work = w))
        return lz_fail(LZ_ERR_NOMEM, "fine-tuning buffers: out of memory");
    const size_t T = (size_t)m->T, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t qd = T * c->num_attention_heads * c->head_dim, kd = T * c->num_key_value_heads * c->head_dim;
    const size_t wide = I > C ? I : C, widest = wide > qd / T ? wide : qd / T;
    const size_t n_x = (size_t)m->slots * (c->num_hidden_layers + 1);
    w->X = calloc(n_x, sizeof(float *));
    bool ok = w->X && (w->targets = malloc(sizeof(int32_t) * T));
    for (size_t i = 0; ok && i < n_x; i++) // only the layers of this stage are ever used
        ok = (w->X[i] = malloc(sizeof(float) * T * C));
    float **bufs[] = {&w->xn1, &w->r1, &w->q, &w->k, &w->v, &w->qr, &w->kr, &w->att, &w->lse, &w->xmid,
                      &w->xn2, &w->r2, &w->g, &w->u, &w->h, &w->proj, &w->rf, &w->dx, &w->dxn, &w->dq,
                      &w->dk, &w->dv, &w->dqr, &w->dkr, &w->datt, &w->dh, &w->dg, &w->du};
    const size_t sizes[] = {T * C, T, qd, kd, kd, qd, kd, qd, T * c->num_attention_heads, T * C,
                            T * C, T, T * I, T * I, T * I, T * C, T, T * C, T * C, qd,
                            kd, kd, qd, kd, qd, T * I, T * I, T * I};
    for (size_t i = 0; ok && i < sizeof sizes / sizeof sizes[0]; i++)
        ok = (*bufs[i] = malloc(sizeof(float) * sizes[i]));
    for (int j = 0; ok && j < LZ_LIN_COUNT; j++)
        ok = (w->lora_u[j] = malloc(sizeof(float) * T * (m->lora.rank ? m->lora.rank : 1))) &&
             (w->mask[j] = malloc(sizeof(float) * T * widest));
    if (ok && lz_config_count_softmax(c) < c->num_hidden_layers) {
        for (int l = 0; l < c->num_hidden_layers; l++)
            if (!m->layers[l].softmax) {
                ok = (w->lizard = m->ft->lizard_scratch_create(&m->layers[l].geom, m->T, c->hidden_size));
                break;
            }
    }
    return ok ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "fine-tuning buffers for %d tokens: out of memory", m->T);
}

lz_status lz_ft_model_load(lz_ft_model *m, const char *dir, const lz_config *cfg, const lz_lora_config *lora, int T,
                           int slots, const lz_train_ops *ops) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg, m->lora = *lora, m->ops = ops, m->T = T, m->slots = slots;
    m->first = 0, m->last = cfg->num_hidden_layers;
    LZ_TRY(lz_train_need(ops, ops->finetune, "lizard finetune"));
    m->ft = ops->finetune;
    const lz_config *c = &m->cfg;
    LZ_TRY(lz_weights_open(dir, &m->ckpt));
    const size_t V = (size_t)c->vocab_size, C = (size_t)c->hidden_size;
    LZ_TRY(load_f32(m, "model.embed_tokens.weight", V * C, &m->embed));
    LZ_TRY(load_f32(m, "model.norm.weight", C, &m->final_norm));
    if (c->tie_word_embeddings)
        m->lm_head = m->embed;
    else
        LZ_TRY(load_f32(m, "lm_head.weight", V * C, &m->lm_head));
    m->inv_freq = malloc(sizeof(float) * (size_t)(c->head_dim / 2 + 1));
    m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    m->params = calloc((size_t)c->num_hidden_layers * MAX_PARAMS_PER_LAYER, sizeof *m->params);
    if (!m->inv_freq || !m->layers || !m->params)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", dir);
    lz_rope_inv_freq(c, m->inv_freq);
    for (int l = 0; l < c->num_hidden_layers; l++)
        LZ_TRY(load_layer(m, l));
    return alloc_work(m);
}

void lz_ft_model_free(lz_ft_model *m) {
    ft_work *w = m->work;
    if (w) {
        for (size_t i = 0; w->X && i < (size_t)m->slots * (m->cfg.num_hidden_layers + 1); i++)
            free(w->X[i]);
        free(w->X), free(w->targets);
        float *bufs[] = {w->xn1, w->r1, w->q, w->k, w->v, w->qr, w->kr, w->att, w->lse, w->xmid,
                         w->xn2, w->r2, w->g, w->u, w->h, w->proj, w->rf, w->dx, w->dxn, w->dq,
                         w->dk, w->dv, w->dqr, w->dkr, w->datt, w->dh, w->dg, w->du};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            free(bufs[i]);
        for (int j = 0; j < LZ_LIN_COUNT; j++)
            free(w->lora_u[j]), free(w->mask[j]);
        if (w->lizard)
            m->ft->lizard_scratch_free(w->lizard);
        free(w);
    }
    for (int l = 0; m->layers && l < m->cfg.num_hidden_layers; l++) {
        lz_ft_layer *ly = &m->layers[l];
        free(ly->in_norm), free(ly->post_norm);
        for (int j = 0; j < LZ_LIN_COUNT; j++)
            free(ly->W[j]);
        for (int j = 0; j < 5; j++)
            free(ly->lz_frozen[j]);
    }
    for (int i = 0; i < m->n_params; i++)
        free(m->params[i].w), free(m->params[i].g), free(m->params[i].m1), free(m->params[i].m2);
    if (m->lm_head != m->embed)
        free(m->lm_head);
    free(m->embed), free(m->final_norm), free(m->inv_freq), free(m->layers), free(m->params);
    lz_weights_close(&m->ckpt);
    memset(m, 0, sizeof *m);
}

/* ---- one sequence ------------------------------------------------------------------------ */

typedef struct {
    bool dropout;   /* training with p > 0 */
    uint64_t key;   /* (seed, step, seq) */
    float **X;      /* the slot's layer inputs */
} ft_pass;

static ft_pass pass_of(const lz_ft_model *m, bool learn, uint64_t step, int seq, int slot) {
    const ft_work *w = m->work;
    const uint64_t key = lz_mix64(lz_mix64(m->lora.seed) ^ lz_mix64((step << 20) ^ (uint64_t)seq));
    return (ft_pass){learn && m->lora.dropout > 0, key,
                     w->X + (size_t)slot * (m->cfg.num_hidden_layers + 1)};
}

/* mask [T, in] of layer l's module j: 0 with probability p, else 1 / (1 - p); NULL without dropout */
static const float *dropout_mask(lz_ft_model *m, const ft_pass *ps, int l, int j) {
    if (!ps->dropout)
        return NULL;
    ft_work *w = m->work;
    const size_t n = (size_t)m->T * m->layers[l].in[j];
    const uint64_t stream = lz_mix64(ps->key ^ lz_mix64(((uint64_t)l << 8) | (uint64_t)j));
    const float keep = (float)(1 / (1 - m->lora.dropout));
    for (size_t e = 0; e < n; e++) {
        w->mask[j][e] = lz_stream_uniform(stream, e) < m->lora.dropout ? 0.0f : keep;
    }
    return w->mask[j];
}

static float lora_scale(const lz_ft_model *m) { return (float)(m->lora.alpha / m->lora.rank); }

// y = x W^T (+ LoRA)
static void linear(lz_ft_model *m, const ft_pass *ps, int l, int j, float *y, const float *x) {
    lz_ft_layer *ly = &m->layers[l];
    ft_work *w = m->work;
    m->ft->linear_forward(y, x, ly->W[j], m->T, ly->in[j], ly->out[j]);
    if (ly->A[j])
        m->ft->lora_forward(y, w->lora_u[j], x, ly->A[j]->w, ly->B[j]->w, dropout_mask(m, ps, l, j), lora_scale(m),
                            m->T, ly->in[j], ly->out[j], m->lora.rank);
}

// dx += dy W (+ LoRA's), LoRA's gradients added to; the forward's u and mask are still in place
static void linear_backward(lz_ft_model *m, const ft_pass *ps, int l, int j, float *dx, const float *dy,
                            const float *x) {
    lz_ft_layer *ly = &m->layers[l];
    ft_work *w = m->work;
    m->ft->linear_backward_input(dx, dy, ly->W[j], m->T, ly->in[j], ly->out[j]);
    if (ly->A[j])
        m->ft->lora_backward(ly->A[j]->g, ly->B[j]->g, dx, dy, x, w->lora_u[j], ly->A[j]->w, ly->B[j]->w,
                             ps->dropout ? w->mask[j] : NULL, lora_scale(m), m->T, ly->in[j], ly->out[j],
                             m->lora.rank);
}

static lz_lizard_params_f32 lizard_params(const lz_ft_layer *ly) {
    float *v[5];
    for (int j = 0; j < 5; j++)
        v[j] = ly->lz[j] ? ly->lz[j]->w : ly->lz_frozen[j];
    return (lz_lizard_params_f32){v[0], v[1], v[2], v[3], v[4]};
}

/* layer l: X[l] -> X[l + 1], keeping the activations its backward reads. With dropout,
 * the masks of the modules with LoRA are drawn again (the same for the same pass). */
static void layer_forward(lz_ft_model *m, const ft_pass *ps, int l) {
    const lz_config *c = &m->cfg;
    const lz_ft_layer *ly = &m->layers[l];
    ft_work *w = m->work;
    const int T = m->T, C = c->hidden_size, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    const int d = c->head_dim, I = c->intermediate_size;
    const float *x = ps->X[l];
    float *y = ps->X[l + 1];
    const size_t qd = (size_t)T * Hq * d, kd = (size_t)T * Hkv * d;
    m->ft->rmsnorm_forward(w->xn1, w->r1, x, ly->in_norm, T, C, (float)c->rms_norm_eps);
    linear(m, ps, l, LZ_LIN_Q, w->q, w->xn1);
    linear(m, ps, l, LZ_LIN_K, w->k, w->xn1);
    linear(m, ps, l, LZ_LIN_V, w->v, w->xn1);
    if (ly->softmax) {
        memcpy(w->qr, w->q, sizeof(float) * qd);
        memcpy(w->kr, w->k, sizeof(float) * kd);
        m->ft->rope(w->qr, T, Hq, d, m->inv_freq, 1);
        m->ft->rope(w->kr, T, Hkv, d, m->inv_freq, 1);
        m->ft->attention_forward(w->att, w->lse, w->qr, w->kr, w->v, T, Hq, Hkv, d);
    } else {
        const lz_lizard_params_f32 p = lizard_params(ly);
        m->ft->lizard_forward(w->lizard, w->att, &p, w->xn1, w->q, w->k, w->v, T, &ly->geom);
    }
    linear(m, ps, l, LZ_LIN_O, w->proj, w->att);
    for (size_t e = 0; e < (size_t)T * C; e++)
        w->xmid[e] = x[e] + w->proj[e];
    m->ft->rmsnorm_forward(w->xn2, w->r2, w->xmid, ly->post_norm, T, C, (float)c->rms_norm_eps);
    linear(m, ps, l, LZ_LIN_GATE, w->g, w->xn2);
    linear(m, ps, l, LZ_LIN_UP, w->u, w->xn2);
    m->ft->swiglu_forward(w->h, w->g, w->u, (size_t)T * I);
    linear(m, ps, l, LZ_LIN_DOWN, w->proj, w->h);
    for (size_t e = 0; e < (size_t)T * C; e++)
        y[e] = w->xmid[e] + w->proj[e];
}

/* After layer_forward(l): w->dx holds dL/dX[l+1] on entry and dL/dX[l] on return. */
static void layer_backward(lz_ft_model *m, const ft_pass *ps, int l) {
    const lz_config *c = &m->cfg;
    lz_ft_layer *ly = &m->layers[l];
    ft_work *w = m->work;
    const int T = m->T, C = c->hidden_size, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    const int d = c->head_dim, I = c->intermediate_size;
    const size_t TC = (size_t)T * C, qd = (size_t)T * Hq * d, kd = (size_t)T * Hkv * d;
    // MLP: dx (= d xmid so far) through down, SwiGLU, gate and up, the post-attention norm
    memset(w->dh, 0, sizeof(float) * T * I);
    linear_backward(m, ps, l, LZ_LIN_DOWN, w->dh, w->dx, w->h);
    m->ft->swiglu_backward(w->dg, w->du, w->dh, w->g, w->u, (size_t)T * I);
    memset(w->dxn, 0, sizeof(float) * TC);
    linear_backward(m, ps, l, LZ_LIN_GATE, w->dxn, w->dg, w->xn2);
    linear_backward(m, ps, l, LZ_LIN_UP, w->dxn, w->du, w->xn2);
    m->ft->rmsnorm_backward(w->dx, w->dxn, w->xmid, ly->post_norm, w->r2, T, C);
    // attention: o_proj, then softmax (RoPE) or Lizard, then q, k, v and the input norm
    memset(w->datt, 0, sizeof(float) * qd);
    linear_backward(m, ps, l, LZ_LIN_O, w->datt, w->dx, w->att);
    memset(w->dxn, 0, sizeof(float) * TC);
    if (ly->softmax) {
        m->ft->attention_backward(w->dq, w->dk, w->dv, w->datt, w->att, w->lse, w->qr, w->kr, w->v, T, Hq, Hkv, d);
        m->ft->rope(w->dq, T, Hq, d, m->inv_freq, -1);
        m->ft->rope(w->dk, T, Hkv, d, m->inv_freq, -1);
    } else {
        memset(w->dq, 0, sizeof(float) * qd);
        memset(w->dk, 0, sizeof(float) * kd);
        memset(w->dv, 0, sizeof(float) * kd);
        const lz_lizard_params_f32 p = lizard_params(ly);
        lz_lizard_params_f32 gr = {0};
        if (ly->lz[0])
            gr = (lz_lizard_params_f32){ly->lz[0]->g, ly->lz[1]->g, ly->lz[2]->g, ly->lz[3]->g, ly->lz[4]->g};
        m->ft->lizard_backward(w->lizard, ly->lz[0] ? &gr : NULL, w->dxn, w->dq, w->dk, w->dv, w->datt, &p, w->xn1,
                               w->q, w->k, w->v, T, &ly->geom);
    }
    linear_backward(m, ps, l, LZ_LIN_Q, w->dxn, w->dq, w->xn1);
    linear_backward(m, ps, l, LZ_LIN_K, w->dxn, w->dk, w->xn1);
    linear_backward(m, ps, l, LZ_LIN_V, w->dxn, w->dv, w->xn1);
    m->ft->rmsnorm_backward(w->dx, w->dxn, ps->X[l], ly->in_norm, w->r1, T, C);
}

float *lz_ft_hidden(lz_ft_model *m, int slot, int layer) {
    ft_work *w = m->work;
    return w->X[(size_t)slot * (m->cfg.num_hidden_layers + 1) + layer];
}

float *lz_ft_grad(lz_ft_model *m) { return ((ft_work *)m->work)->dx; }

void lz_ft_embed(lz_ft_model *m, const int32_t *ids, int slot) {
    m->ft->embedding_forward(lz_ft_hidden(m, slot, 0), m->embed, ids, m->T, m->cfg.hidden_size);
}

void lz_ft_forward(lz_ft_model *m, bool learn, uint64_t step, int seq, int slot) {
    const ft_pass ps = pass_of(m, learn, step, seq, slot);
    for (int l = m->first; l < m->last; l++)
        layer_forward(m, &ps, l);
}

double lz_ft_head(lz_ft_model *m, const int32_t *ids, bool learn, float grad_scale, int slot) {
    const lz_config *c = &m->cfg;
    ft_work *w = m->work;
    const int T = m->T, C = c->hidden_size;
    const float *x = lz_ft_hidden(m, slot, c->num_hidden_layers);
    for (int t = 0; t < T; t++)
        w->targets[t] = t + 1 < T ? ids[t + 1] : -1;
    m->ft->rmsnorm_forward(w->xn1, w->rf, x, m->final_norm, T, C, (float)c->rms_norm_eps);
    const double loss = m->ft->lm_head_cross_entropy(learn ? w->dxn : NULL, w->xn1, m->lm_head, w->targets, T, C,
                                                     c->vocab_size, grad_scale);
    if (learn) {
        memset(w->dx, 0, sizeof(float) * (size_t)T * C);
        m->ft->rmsnorm_backward(w->dx, w->dxn, x, m->final_norm, w->rf, T, C);
    }
    return loss;
}

void lz_ft_backward(lz_ft_model *m, uint64_t step, int seq, int slot) {
    const ft_pass ps = pass_of(m, true, step, seq, slot);
    for (int l = m->last - 1; l >= m->first; l--) {
        layer_forward(m, &ps, l); // recomputed: only each layer's input was kept
        layer_backward(m, &ps, l);
    }
}

lz_status lz_ft_sequence(lz_ft_model *m, const int32_t *ids, bool learn, float grad_scale, uint64_t step, int seq,
                         double *loss) {
    lz_ft_embed(m, ids, 0);
    lz_ft_forward(m, learn, step, seq, 0);
    *loss = lz_ft_head(m, ids, learn, grad_scale, 0);
    if (learn)
        lz_ft_backward(m, step, seq, 0); // the embedding is frozen: its gradient is not needed
    return LZ_OK;
}

void lz_ft_merged_weight(const lz_ft_model *m, int l, int j, float *out) {
    const lz_ft_layer *ly = &m->layers[l];
    const int in = ly->in[j], o = ly->out[j], r = m->lora.rank;
    memcpy(out, ly->W[j], sizeof(float) * (size_t)in * o);
    if (!ly->A[j])
        return;
    const float s = lora_scale(m);
    for (int a = 0; a < o; a++)
        for (int b = 0; b < in; b++) {
            float acc = 0;
            for (int k = 0; k < r; k++)
                acc += ly->B[j]->w[(size_t)a * r + k] * ly->A[j]->w[(size_t)k * in + b];
            out[(size_t)a * in + b] += s * acc;
        }
}
