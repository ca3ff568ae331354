/* distill_params.h - the trainable tensors of one Lizard layer during
 * distillation, their gradients and AdamW moments, and the learning-rate
 * schedule (linear warmup, then cosine decay to min_lr). */
#ifndef LZ_DISTILL_PARAMS_H
#define LZ_DISTILL_PARAMS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint64_t

#include "train_types.h" // lz_lizard_geom, lz_lizard_params_f32

/* The five tensors in docs/model-format.md's order. */
enum { LZ_DT_WQ, LZ_DT_WK, LZ_DT_GATE, LZ_DT_META, LZ_DT_ALPHA, LZ_DT_COUNT };

/* Their names under model.layers.N.self_attn. */
extern const char *const lz_distill_tensor_names[LZ_DT_COUNT];

typedef struct {
    int layer;
    lz_lizard_geom geom;
    int hidden;
    size_t numel[LZ_DT_COUNT];
    float *param[LZ_DT_COUNT], *grad[LZ_DT_COUNT], *m1[LZ_DT_COUNT], *m2[LZ_DT_COUNT];
} lz_distill_layer;

typedef struct {
    double lr, min_lr, weight_decay, beta1, beta2, eps;
    long warmup, total_steps;
} lz_adamw_config;

/* Allocates and initialises layer `layer`'s tensors from (seed, layer):
 * feature maps and gate uniform with std 1/sqrt(fan-in), meta logits 0,
 * alpha 1; gradients and moments zero. */
int lz_distill_layer_init(lz_distill_layer *l, int layer, const lz_lizard_geom *g, int hidden, uint64_t seed);
void lz_distill_layer_free(lz_distill_layer *l);
lz_lizard_params_f32 lz_distill_layer_params(const lz_distill_layer *l);
lz_lizard_params_f32 lz_distill_layer_grads(const lz_distill_layer *l);

/* Learning rate of step `step` (0-based). */
double lz_distill_lr(const lz_adamw_config *c, long step);
/* One AdamW update at step `step` (0-based; bias correction uses step + 1).
 * Weight decay (decoupled) applies to the feature maps and the gate only. */
void lz_distill_layer_adamw(lz_distill_layer *l, const lz_adamw_config *c, long step);
/* The same update of one tensor p [n] with gradient g and moments m, v; decay_on: weight decay applies. */
void lz_adamw_tensor(float *p, const float *g, float *m, float *v, size_t n, const lz_adamw_config *c, long step,
                     bool decay_on);
/* splitmix64's finaliser; element i of a stream as a uniform double in [0, 1) */
uint64_t lz_mix64(uint64_t z);
double lz_stream_uniform(uint64_t stream, size_t i);
/* w [n] uniform with mean 0 and std `std`, element i of the stream (seed, layer, tensor). */
void lz_fill_uniform(float *w, size_t n, double std, uint64_t seed, int layer, int tensor);

#endif
