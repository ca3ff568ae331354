/* train_types.h - the types every training backend shares (kernels/train_ops.h,
 * kernels/cpu/train_kernels.h, kernels/cuda/train_cuda.h): the shape of one
 * Lizard layer's attention and its trainable tensors. */
#ifndef LZ_TRAIN_TYPES_H
#define LZ_TRAIN_TYPES_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

/* Shape of one Lizard layer's attention. */
typedef struct {
    int Hq, Hkv;  /* query heads, key/value heads */
    int Hs;       /* state heads = heads of phi_k: Hkv, or Hq when phi_k is per query head */
    int n_wq;     /* heads of W in phi_q: 1 or Hq */
    int n_wk;     /* heads of W in phi_k: 1, Hkv or Hq (Hq: keys repeated to every query head first) */
    int d;        /* head_dim */
    int f;        /* phi has 2f features */
    int w;        /* window */
    int m;        /* meta-memory logits */
    bool normalize; /* GLA divided by its normaliser */
    bool exp_map;   /* "exp" feature map instead of "softmax" */
} lz_lizard_geom;

/* Tokens per chunk of the chunked GLA (the same as the inference kernel's),
 * and the limits the model loader and finetune enforce (stack buffers are sized by them). */
enum {
    LZ_TRAIN_CHUNK = 64,
    LZ_TRAIN_MAX_F = 512,
    LZ_TRAIN_MAX_D = 1024,
    LZ_TRAIN_MAX_W = 4096,
    LZ_TRAIN_MAX_RANK = 256, /* LoRA rank */
};

/* Number of chunks of T tokens. */
static inline int lz_train_chunks(int T) { return (T + LZ_TRAIN_CHUNK - 1) / LZ_TRAIN_CHUNK; }

/* A layer's trainable tensors (or their gradients): [n_wq, d, f], [n_wk, d, f], [C], [m], [1]. */
#define LZ_LIZARD_PARAMS_DECLARE(real, sfx)                                                                        \
    typedef struct {                                                                                               \
        real *wq, *wk, *wg, *meta, *alpha;                                                                         \
    } lz_lizard_params_##sfx;
LZ_LIZARD_PARAMS_DECLARE(float, f32)
LZ_LIZARD_PARAMS_DECLARE(double, f64)

/* Elements of each trainable tensor of a layer. */
static inline size_t lz_lizard_wq_numel(const lz_lizard_geom *g) { return (size_t)g->n_wq * g->d * g->f; }
static inline size_t lz_lizard_wk_numel(const lz_lizard_geom *g) { return (size_t)g->n_wk * g->d * g->f; }

#endif
