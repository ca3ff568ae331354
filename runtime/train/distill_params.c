/* distill_params.c - a layer's trainable tensors, AdamW and the schedule. */
#include "distill_params.h"

#include <math.h>   // sqrt, cos, pow, M_PI
#include <stdlib.h> // calloc, free
#include <string.h> // memset

const char *const lz_distill_tensor_names[LZ_DT_COUNT] = {"feature_map_q.weight", "feature_map_k.weight",
                                                          "gate.weight", "meta_logits", "window_alpha"};

uint64_t lz_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double lz_stream_uniform(uint64_t stream, size_t i) {
    return (double)(lz_mix64(stream + (i + 1) * 0x9E3779B97F4A7C15ULL) >> 11) * 0x1.0p-53;
}

// uniform with mean 0 and the given std, element i of stream (seed, layer, tensor)
void lz_fill_uniform(float *w, size_t n, double std, uint64_t seed, int layer, int tensor) {
    const uint64_t which = ((uint64_t)layer << 8) | (uint64_t)tensor;
    const uint64_t stream = lz_mix64(lz_mix64(seed + 0x9E3779B97F4A7C15ULL) ^ lz_mix64(which));
    const double half_width = std * sqrt(3.0);
    for (size_t i = 0; i < n; i++) {
        w[i] = (float)(half_width * (2 * lz_stream_uniform(stream, i) - 1));
    }
}

int lz_distill_layer_init(lz_distill_layer *l, int layer, const lz_lizard_geom *g, int hidden, uint64_t seed) {
    memset(l, 0, sizeof *l);
    l->layer = layer;
    l->geom = *g;
    l->hidden = hidden;
    const size_t numel[LZ_DT_COUNT] = {lz_lizard_wq_numel(g), lz_lizard_wk_numel(g), (size_t)hidden, (size_t)g->m, 1};
    for (int i = 0; i < LZ_DT_COUNT; i++) {
        l->numel[i] = numel[i];
        l->param[i] = calloc(numel[i] ? numel[i] : 1, sizeof(float));
        l->grad[i] = calloc(numel[i] ? numel[i] : 1, sizeof(float));
        l->m1[i] = calloc(numel[i] ? numel[i] : 1, sizeof(float));
        l->m2[i] = calloc(numel[i] ? numel[i] : 1, sizeof(float));
        if (!l->param[i] || !l->grad[i] || !l->m1[i] || !l->m2[i]) {
            lz_distill_layer_free(l);
            return -1;
        }
    }
    // u = q.W over head_dim inputs: std 1/sqrt(d) keeps the softmax maps neither flat nor one-hot
    lz_fill_uniform(l->param[LZ_DT_WQ], numel[LZ_DT_WQ], 1.0 / sqrt((double)g->d), seed, layer, LZ_DT_WQ);
    lz_fill_uniform(l->param[LZ_DT_WK], numel[LZ_DT_WK], 1.0 / sqrt((double)g->d), seed, layer, LZ_DT_WK);
    // W_gamma . x ~ N(0, 1) for unit-RMS x: gates spread over (0, 1)
    lz_fill_uniform(l->param[LZ_DT_GATE], numel[LZ_DT_GATE], 1.0 / sqrt((double)hidden), seed, layer, LZ_DT_GATE);
    l->param[LZ_DT_ALPHA][0] = 1.0f; // meta logits start at 0
    return 0;
}

void lz_distill_layer_free(lz_distill_layer *l) {
    for (int i = 0; i < LZ_DT_COUNT; i++)
        free(l->param[i]), free(l->grad[i]), free(l->m1[i]), free(l->m2[i]);
    memset(l, 0, sizeof *l);
}

lz_lizard_params_f32 lz_distill_layer_params(const lz_distill_layer *l) {
    return (lz_lizard_params_f32){l->param[0], l->param[1], l->param[2], l->param[3], l->param[4]};
}

lz_lizard_params_f32 lz_distill_layer_grads(const lz_distill_layer *l) {
    return (lz_lizard_params_f32){l->grad[0], l->grad[1], l->grad[2], l->grad[3], l->grad[4]};
}

double lz_distill_lr(const lz_adamw_config *c, long step) {
    if (step < c->warmup)
        return c->lr * (double)(step + 1) / (double)c->warmup;
    const long decay_steps = c->total_steps - c->warmup;
    if (decay_steps <= 1)
        return c->lr;
    const double progress = (double)(step - c->warmup) / (double)(decay_steps - 1);
    const double p = progress > 1 ? 1 : progress;
    return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1 + cos(M_PI * p));
}

void lz_adamw_tensor(float *p, const float *g, float *m, float *v, size_t n, const lz_adamw_config *c, long step,
                     bool decay_on) {
    const double lr = lz_distill_lr(c, step), decay = decay_on ? c->weight_decay : 0;
    const double bc1 = 1 - pow(c->beta1, (double)(step + 1)), bc2 = 1 - pow(c->beta2, (double)(step + 1));
    for (size_t e = 0; e < n; e++) {
        m[e] = (float)(c->beta1 * m[e] + (1 - c->beta1) * g[e]);
        v[e] = (float)(c->beta2 * v[e] + (1 - c->beta2) * (double)g[e] * g[e]);
        const double update = (m[e] / bc1) / (sqrt(v[e] / bc2) + c->eps);
        p[e] = (float)(p[e] - lr * (update + decay * p[e]));
    }
}

void lz_distill_layer_adamw(lz_distill_layer *l, const lz_adamw_config *c, long step) {
    for (int i = 0; i < LZ_DT_COUNT; i++)
        lz_adamw_tensor(l->param[i], l->grad[i], l->m1[i], l->m2[i], l->numel[i], c, step, i <= LZ_DT_GATE);
}
