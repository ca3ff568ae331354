/* train_ops.h - the training op table: the math of `lizard distill` and
 * `lizard finetune`, once per backend, so that runtime/train never calls a
 * backend (CUDA runtime, kernels) itself.
 *
 * Tensors are fp32 in the backend's memory (host on "cpu", device on
 * "cuda"); alloc/upload/download move them. Every op returns LZ_OK or a
 * status with the error set. An op a backend does not have yet is NULL:
 * callers check with lz_train_need(). */
#ifndef LZ_TRAIN_OPS_H
#define LZ_TRAIN_OPS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t

#include "error.h"       // lz_status
#include "train_types.h" // lz_lizard_geom, lz_lizard_params_f32

/* Stage 2 (fine-tuning): one sequence of T tokens from position 0 per call,
 * fp32 in the backend's memory; the equations and what each overwrites or
 * adds to are in kernels/cpu/train_kernels.h and kernels/cpu/backward/. */
typedef struct {
    void (*rmsnorm_forward)(float *y, float *rinv, const float *x, const float *w, int T, int C, float eps);
    void (*rmsnorm_backward)(float *dx, const float *dy, const float *x, const float *w, const float *rinv, int T,
                             int C);
    void (*swiglu_forward)(float *h, const float *g, const float *u, size_t n);
    void (*swiglu_backward)(float *dg, float *du, const float *dh, const float *g, const float *u, size_t n);
    void (*embedding_forward)(float *x, const float *E, const int32_t *ids, int T, int C);
    void (*rope)(float *x, int T, int H, int d, const float *inv_freq, float sign);
    void (*attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v, int T, int Hq,
                              int Hkv, int d);
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v, int T, int Hq,
                               int Hkv, int d);
    void (*linear_forward)(float *y, const float *x, const float *W, int T, int in, int out);
    void (*linear_backward_input)(float *dx, const float *dy, const float *W, int T, int in, int out);
    void (*lora_forward)(float *y, float *u, const float *x, const float *A, const float *B, const float *mask,
                         float scale, int T, int in, int out, int r);
    void (*lora_backward)(float *dA, float *dB, float *dx, const float *dy, const float *x, const float *u,
                          const float *A, const float *B, const float *mask, float scale, int T, int in, int out,
                          int r);
    double (*lm_head_cross_entropy)(float *dh, const float *h, const float *W, const int32_t *targets, int T, int C,
                                    int V, float grad_scale);
    /* The Lizard layer: scratch for T tokens and hidden size C; the forward keeps in it what the backward reads. */
    void *(*lizard_scratch_create)(const lz_lizard_geom *g, int T, int C); /* NULL: out of memory */
    void (*lizard_scratch_free)(void *scratch);
    void (*lizard_forward)(void *scratch, float *y, const lz_lizard_params_f32 *p, const float *x, const float *q,
                           const float *k, const float *v, int T, const lz_lizard_geom *g);
    void (*lizard_backward)(void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq, float *dk, float *dv,
                            const float *dy, const lz_lizard_params_f32 *p, const float *x, const float *q,
                            const float *k, const float *v, int T, const lz_lizard_geom *g);
} lz_finetune_ops;

typedef struct lz_train_ops {
    const char *name;
    bool host_memory; /* the backend's memory is the host's: host pointers may be passed as they are */

    /* Picks the device of the process with this local rank (one per rank of a node). */
    lz_status (*open)(int local_rank);
    lz_status (*alloc)(size_t bytes, void **out);
    void (*free)(void *p); /* NULL is fine */
    lz_status (*upload)(void *dst, const void *src, size_t bytes);   /* host -> backend */
    lz_status (*download)(void *dst, const void *src, size_t bytes); /* backend -> host */
    lz_status (*zero)(void *p, size_t bytes);
    /* dst [n] = src [n] (bf16 bits in backend memory) as fp32 */
    lz_status (*bf16_to_f32)(float *dst, const void *src, size_t n);
    /* The GLA's in-chunk products in bf16 (with fp32 accumulation) or fp32. */
    lz_status (*set_gla_bf16)(bool on);

    /* Stage 1: one Lizard layer against its teacher's attention output, for
     * n_seq sequences of T tokens packed one after the other (sequence b in
     * rows b*T .. b*T+T-1) and hidden size C. *sse = sum of (y - target)^2,
     * *energy (if not NULL) = sum of target^2; if grad is not NULL, adds
     * grad_scale * d(sse)/d(param) to it. x [n_seq*T, C], q, target
     * [.., Hq, d], k, v [.., Hkv, d]. */
    lz_status (*lizard_scratch_create)(void **out, const lz_lizard_geom *g, int n_seq, int T, int C);
    void (*lizard_scratch_free)(void *scratch);
    lz_status (*lizard_layer_sse)(double *sse, double *energy, const lz_lizard_params_f32 *p,
                                  lz_lizard_params_f32 *grad, float grad_scale, const float *x, const float *q,
                                  const float *k, const float *v, const float *target, int n_seq, int T,
                                  const lz_lizard_geom *g, void *scratch);

    /* Stage 2; NULL: not built for this backend yet. */
    const lz_finetune_ops *finetune;
} lz_train_ops;

/* The table of `device` ("cpu" or "cuda"); "cuda" in a build without it
 * fails naming LIZARD_CUDA. */
lz_status lz_train_ops_get(const char *device, const lz_train_ops **out);

/* LZ_OK if `op` is built for this backend, else an error naming it and the backend. */
lz_status lz_train_need(const lz_train_ops *ops, const void *op, const char *what);

/* The backends' tables (kernels/cpu/train_ops_cpu.c, kernels/cuda/train_ops_cuda.cu). */
const lz_train_ops *lz_train_ops_cpu(void);
const lz_train_ops *lz_train_ops_cuda(void);

#endif
