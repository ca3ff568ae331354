/* train_ops.h - the training op table of stage 1: the math of `lizard distill`,
 * once per backend, so that runtime/train never calls a backend (CUDA runtime,
 * kernels) itself. Stage 2 trains through the inference backend and its
 * backward op table (backward_ops.h).
 *
 * Tensors are fp32 in the backend's memory (host on "cpu", device on
 * "cuda"); alloc/upload/download move them. Every op returns LZ_OK or a
 * status with the error set. */
#ifndef LZ_TRAIN_OPS_H
#define LZ_TRAIN_OPS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t

#include "error.h"       // lz_status
#include "train_types.h" // lz_lizard_geom, lz_lizard_params_f32

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

} lz_train_ops;

/* The table of `device` ("cpu" or "cuda"); "cuda" in a build without it
 * fails naming LIZARD_CUDA. */
lz_status lz_train_ops_get(const char *device, const lz_train_ops **out);

/* The backends' tables (kernels/cpu/train_ops_cpu.c, kernels/cuda/train_ops_cuda.cu). */
const lz_train_ops *lz_train_ops_cpu(void);
const lz_train_ops *lz_train_ops_cuda(void);

#endif
