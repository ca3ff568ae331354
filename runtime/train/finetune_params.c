/* finetune_params.c - the trained tensors of stage 2 (finetune_params.h). */
#include "finetune_params.h"

#include <math.h>   // sqrt
#include <stdio.h>  // snprintf
#include <stdlib.h> // calloc, malloc, free
#include <string.h> // memcpy, memset

#include "distill_params.h" // lz_distill_tensor_names, lz_fill_uniform, lz_mix64, LZ_DT_*
#include "dtype.h"          // lz_convert_to_f32, lz_dtype_size
#include "safetensors.h"    // lz_weights_find

static lz_ft_param *add_param(lz_ft_params *p, int layer, int proj, const char *name, int64_t rows, int64_t cols,
                              bool decay) {
    lz_ft_param *q = &p->params[p->n_params++];
    snprintf(q->name, sizeof q->name, "%s", name);
    q->rows = rows, q->cols = cols, q->layer = layer, q->proj = proj, q->decay = decay;
    q->n = (size_t)(rows ? rows : 1) * (size_t)cols;
    for (int k = 0; k < LZ_FT_PARTS; k++)
        if (!(q->host[k] = calloc(q->n ? q->n : 1, sizeof(float))))
            return NULL;
    return q;
}

/* The values of a model tensor as fp32 on the host: from the checkpoint it was loaded from, or
 * (a model made at random, no files) from its weight on the backend. */
static lz_status read_tensor(lz_model *m, const char *name, const lz_weight *w, float *out, size_t n) {
    const lz_st_tensor *t = m->ckpt ? lz_weights_find(m->ckpt, name) : NULL;
    if (t) {
        if ((size_t)t->numel != n)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor %s has %lld elements, expected %zu", m->ckpt->dir, name,
                           (long long)t->numel, n);
        lz_convert_to_f32(out, t->data, t->dtype, n);
        return LZ_OK;
    }
    if (!w || !w->data || (size_t)(w->rows * w->cols) != n)
        return lz_fail(LZ_ERR_INPUT, "the model has no tensor %s of %zu elements", name, n);
    const size_t bytes = n * lz_dtype_size(w->dtype);
    void *raw = malloc(bytes ? bytes : 1);
    if (!raw)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", name);
    lz_status s = m->ops->copy_to_host(m->be, raw, w->data, bytes);
    if (s == LZ_OK)
        lz_convert_to_f32(out, raw, w->dtype, n);
    free(raw);
    return s;
}

/* A Lizard layer's shape: from its loaded weights, else (a layer another rank runs) from the
 * checkpoint's feature maps, else (a model made at random) the random models' maps. */
static lz_lizard_geom layer_geom(const lz_model *m, int l) {
    const lz_layer *ly = &m->layers[l];
    lz_lizard_geom g = lz_layer_lizard_geom(m, ly);
    if (ly->fmap_q.rows * ly->fmap_q.cols > 0)
        return g;
    const int64_t df = (int64_t)g.d * g.f;
    char name[192];
    snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l, lz_distill_tensor_names[LZ_DT_WQ]);
    const lz_st_tensor *tq = m->ckpt ? lz_weights_find(m->ckpt, name) : NULL;
    snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l, lz_distill_tensor_names[LZ_DT_WK]);
    const lz_st_tensor *tk = m->ckpt ? lz_weights_find(m->ckpt, name) : NULL;
    g.n_wq = tq && df ? (int)(tq->numel / df) : 1;
    g.n_wk = tk && df ? (int)(tk->numel / df) : g.Hkv;
    g.Hs = g.n_wk == g.Hq && g.Hq != g.Hkv ? g.Hq : g.Hkv; // phi_k per query head: a state per query head
    return g;
}

static lz_status describe_layer(lz_ft_params *p, lz_model *m, int l) {
    const lz_config *c = &m->cfg;
    lz_layer *ly = &m->layers[l];
    const lz_lora_config *lc = &p->lora;
    char name[192];
    for (int j = 0; j < LZ_LIN_COUNT; j++) {
        if (!lc->target[j])
            continue;
        int out, in;
        lz_lin_shape(c, j, &out, &in);
        lz_lora *lo = &p->loras[(size_t)l * LZ_LIN_COUNT + j];
        *lo = (lz_lora){.r = lc->rank, .in = in, .out = out, .scale = (float)(lc->alpha / lc->rank)};
        snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_A.weight", l, lz_lin_parent[j], lz_lin_module[j]);
        lz_ft_param *A = add_param(p, l, j, name, lc->rank, in, true);
        snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_B.weight", l, lz_lin_parent[j], lz_lin_module[j]);
        lz_ft_param *B = add_param(p, l, j, name, out, lc->rank, true);
        if (!A || !B)
            return lz_fail(LZ_ERR_NOMEM, "LoRA of layer %d: out of memory", l);
        // PEFT's init: A kaiming-uniform (bound 1/sqrt(in), std = bound/sqrt(3)), B zero
        lz_fill_uniform(A->host[LZ_FT_VALUES], A->n, 1.0 / sqrt(3.0 * in), lc->seed, l, 16 + j);
    }
    if (ly->run_softmax)
        return LZ_OK;
    if (!ly->has_lizard)
        return lz_fail(LZ_ERR_INPUT, "layer %d runs as Lizard but the model has no Lizard tensors for it", l);
    const lz_lizard_geom g = layer_geom(m, l);
    p->layers[l].geom = g;
    const lz_weight *model_w[LZ_DT_COUNT] = {&ly->fmap_q, &ly->fmap_k, &ly->gate, &ly->meta, NULL};
    const int64_t rows[LZ_DT_COUNT] = {g.n_wq, g.n_wk, 1, 0, 0};
    const int64_t cols[LZ_DT_COUNT] = {(int64_t)g.d * g.f, (int64_t)g.d * g.f, c->hidden_size, g.m, 1};
    for (int k = 0; k < LZ_DT_COUNT; k++) {
        snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l, lz_distill_tensor_names[k]);
        lz_ft_param *q = add_param(p, l, -1, name, rows[k], cols[k], k <= LZ_DT_GATE);
        if (!q)
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", name);
        q->frozen = lc->freeze_lizard;
        if (!m->parts.layer[l])
            continue; // another rank's: its values arrive when the ranks share them
        if (k == LZ_DT_ALPHA) // a scalar the loader keeps on the host
            q->host[LZ_FT_VALUES][0] = ly->alpha;
        else
            LZ_TRY(read_tensor(m, name, model_w[k], q->host[LZ_FT_VALUES], q->n));
    }
    return LZ_OK;
}

static lz_status alloc_owned(lz_ft_params *p, lz_model *m) {
    for (int i = 0; i < p->n_params; i++) {
        lz_ft_param *q = &p->params[i];
        q->owned = q->layer >= p->first && q->layer < p->last;
        if (!q->owned)
            continue;
        const size_t bytes = sizeof(float) * q->n;
        float **bufs[4] = {&q->w, &q->g, &q->m1, &q->m2};
        for (int k = 0; k < (q->frozen ? 1 : 4); k++) {
            LZ_TRY(m->ops->alloc(m->be, bytes, (void **)bufs[k]));
            LZ_TRY(m->ops->zero(m->be, *bufs[k], bytes));
        }
    }
    return LZ_OK;
}

/* The training step's view of each owned layer: LoRA factors and the Lizard tensors. */
static void bind_layers(lz_ft_params *p) {
    for (int i = 0; i < p->n_params; i++) {
        lz_ft_param *q = &p->params[i];
        lz_layer_train *tr = &p->layers[q->layer];
        if (q->proj >= 0) { // A, then B
            lz_lora *lo = &p->loras[(size_t)q->layer * LZ_LIN_COUNT + q->proj];
            lo->A = q[0].w, lo->dA = q[0].g, lo->B = q[1].w, lo->dB = q[1].g;
            tr->lora[q->proj] = q->owned ? lo : NULL;
            i++;
            continue;
        }
        // the five Lizard tensors, in distill_params.h's order
        tr->lizard = (lz_lizard_params_f32){q[0].w, q[1].w, q[2].w, q[3].w, q[4].w};
        p->grads[q->layer] = (lz_lizard_params_f32){q[0].g, q[1].g, q[2].g, q[3].g, q[4].g};
        tr->lizard_grad = q->frozen || !q->owned ? NULL : &p->grads[q->layer];
        i += LZ_DT_COUNT - 1;
    }
}

lz_status lz_ft_params_create(lz_ft_params *p, lz_model *m, const lz_lora_config *lora, int first, int last,
                              int max_seqs) {
    memset(p, 0, sizeof *p);
    const int L = m->cfg.num_hidden_layers;
    p->lora = *lora, p->n_layers = L, p->first = first, p->last = last, p->max_seqs = max_seqs;
    p->params = calloc((size_t)L * (2 * LZ_LIN_COUNT + LZ_DT_COUNT), sizeof *p->params);
    p->loras = calloc((size_t)L * LZ_LIN_COUNT, sizeof *p->loras);
    p->layers = calloc((size_t)L, sizeof *p->layers);
    p->grads = calloc((size_t)L, sizeof *p->grads);
    p->streams = calloc((size_t)L * LZ_LIN_COUNT * (size_t)max_seqs, sizeof *p->streams);
    if (!p->params || !p->loras || !p->layers || !p->grads || !p->streams)
        return lz_fail(LZ_ERR_NOMEM, "trained tensors: out of memory");
    for (int l = 0; l < L; l++)
        LZ_TRY(describe_layer(p, m, l));
    LZ_TRY(alloc_owned(p, m));
    bind_layers(p);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < LZ_LIN_COUNT; j++)
            p->layers[l].drop[j] = (lz_dropout){lora->dropout, p->streams + ((size_t)l * LZ_LIN_COUNT + j) * max_seqs};
    return lz_ft_params_upload(p, m);
}

void lz_ft_params_free(lz_ft_params *p, lz_model *m) {
    for (int i = 0; p->params && i < p->n_params; i++) {
        lz_ft_param *q = &p->params[i];
        float *bufs[4] = {q->w, q->g, q->m1, q->m2};
        for (int k = 0; k < 4; k++)
            if (bufs[k])
                m->ops->free(m->be, bufs[k]);
        for (int k = 0; k < LZ_FT_PARTS; k++)
            free(q->host[k]);
    }
    for (size_t i = 0; p->loras && i < (size_t)p->n_layers * LZ_LIN_COUNT; i++)
        if (p->loras[i].shadow && m->ops->backward)
            m->ops->backward->lora_release(m->be, &p->loras[i]);
    free(p->params), free(p->loras), free(p->layers), free(p->grads), free(p->streams);
    memset(p, 0, sizeof *p);
}

lz_status lz_ft_params_upload(lz_ft_params *p, lz_model *m) {
    for (int i = 0; i < p->n_params; i++) {
        const lz_ft_param *q = &p->params[i];
        if (!q->owned)
            continue;
        float *dst[LZ_FT_PARTS] = {q->w, q->m1, q->m2};
        for (int k = 0; k < (q->frozen ? 1 : LZ_FT_PARTS); k++)
            LZ_TRY(m->ops->copy_from_host(m->be, dst[k], q->host[k], sizeof(float) * q->n));
    }
    return lz_ft_params_sync_model(p, m);
}

lz_status lz_ft_params_download(lz_ft_params *p, lz_model *m) {
    for (int i = 0; i < p->n_params; i++) {
        const lz_ft_param *q = &p->params[i];
        if (!q->owned || q->frozen)
            continue;
        const float *src[LZ_FT_PARTS] = {q->w, q->m1, q->m2};
        for (int k = 0; k < LZ_FT_PARTS; k++)
            LZ_TRY(m->ops->copy_to_host(m->be, q->host[k], src[k], sizeof(float) * q->n));
    }
    return LZ_OK;
}

lz_status lz_ft_params_sync_model(lz_ft_params *p, lz_model *m) {
    const lz_backward_ops *bw = m->ops->backward;
    for (int l = p->first; l < p->last; l++) {
        lz_layer_train *tr = &p->layers[l];
        for (int j = 0; j < LZ_LIN_COUNT; j++)
            if (tr->lora[j])
                LZ_TRY(bw->lora_sync(m->be, tr->lora[j]));
        lz_layer *ly = &m->layers[l];
        if (ly->run_softmax || !tr->lizard.wq)
            continue;
        LZ_TRY(bw->weight_set(m->be, &ly->fmap_q, tr->lizard.wq));
        LZ_TRY(bw->weight_set(m->be, &ly->fmap_k, tr->lizard.wk));
        LZ_TRY(bw->weight_set(m->be, &ly->gate, tr->lizard.wg));
        if (ly->meta.rows * ly->meta.cols > 0)
            LZ_TRY(bw->weight_set(m->be, &ly->meta, tr->lizard.meta));
        LZ_TRY(m->ops->copy_to_host(m->be, &ly->alpha, tr->lizard.alpha, sizeof(float)));
    }
    return LZ_OK;
}

lz_status lz_ft_params_zero_grads(lz_ft_params *p, lz_model *m) {
    for (int i = 0; i < p->n_params; i++) {
        const lz_ft_param *q = &p->params[i];
        if (q->owned && !q->frozen)
            LZ_TRY(m->ops->zero(m->be, q->g, sizeof(float) * q->n));
    }
    return LZ_OK;
}

void lz_ft_params_set_dropout(lz_ft_params *p, uint64_t step, int first_seq, int n_seqs) {
    if (p->lora.dropout <= 0)
        return;
    for (int s = 0; s < n_seqs && s < p->max_seqs; s++) {
        const uint64_t seq = (uint64_t)(first_seq + s);
        const uint64_t key = lz_mix64(lz_mix64(p->lora.seed) ^ lz_mix64((step << 20) ^ seq));
        for (int l = 0; l < p->n_layers; l++)
            for (int j = 0; j < LZ_LIN_COUNT; j++)
                p->streams[((size_t)l * LZ_LIN_COUNT + j) * p->max_seqs + s] =
                    lz_mix64(key ^ lz_mix64(((uint64_t)l << 8) | (uint64_t)j));
    }
}

const lz_lora *lz_ft_params_lora(const lz_ft_params *p, int l, int j) {
    const lz_lora *lo = &p->loras[(size_t)l * LZ_LIN_COUNT + j];
    return lo->r ? lo : NULL;
}

/* The host values of the tensor called name. */
static const float *host_values(const lz_ft_params *p, const char *name) {
    for (int i = 0; i < p->n_params; i++)
        if (strcmp(p->params[i].name, name) == 0)
            return p->params[i].host[LZ_FT_VALUES];
    return NULL;
}

bool lz_ft_params_merged(const lz_ft_params *p, const lz_model *m, int l, int j, float *out) {
    const lz_lora *lo = lz_ft_params_lora(p, l, j);
    if (!lo)
        return false;
    char name[192];
    snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, lz_lin_parent[j], lz_lin_module[j]);
    const lz_st_tensor *t = m->ckpt ? lz_weights_find(m->ckpt, name) : NULL;
    snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_A.weight", l, lz_lin_parent[j], lz_lin_module[j]);
    const float *A = host_values(p, name);
    snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_B.weight", l, lz_lin_parent[j], lz_lin_module[j]);
    const float *B = host_values(p, name);
    if (!t || !A || !B)
        return false;
    const int in = lo->in, o = lo->out, r = lo->r;
    lz_convert_to_f32(out, t->data, t->dtype, (size_t)in * o);
    for (int a = 0; a < o; a++)
        for (int c = 0; c < in; c++) {
            float acc = 0;
            for (int k = 0; k < r; k++)
                acc += B[(size_t)a * r + k] * A[(size_t)k * in + c];
            out[(size_t)a * in + c] += lo->scale * acc;
        }
    return true;
}
