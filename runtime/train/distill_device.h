/* distill_device.h - `lizard distill --device cuda`: a layer's training step
 * on the GPU (kernels/cuda/train_cuda.h). The teacher still runs on the CPU
 * backend; its activations of the batch go up, the layer's tensors go up,
 * forward and backward run on the GPU, and the gradients come back, so the
 * AdamW update, checkpoints and MPI placement are the CPU path's, unchanged.
 * Without a CUDA build, opening fails with a message naming the flag. */
#ifndef LZ_DISTILL_DEVICE_H
#define LZ_DISTILL_DEVICE_H

#include <stdbool.h> // bool

#include "distill_params.h"  // lz_distill_layer
#include "distill_teacher.h" // lz_teacher_acts
#include "error.h"           // lz_status

typedef struct lz_distill_gpu lz_distill_gpu;

/* For batches of `batch` sequences of `seq_len` tokens, hidden size `hidden`;
 * gla_bf16: the GLA's in-chunk products in bf16 (train_cuda.h's bf16 path). */
lz_status lz_distill_gpu_open(lz_distill_gpu **out, const lz_lizard_geom *g, int batch, int seq_len, int hidden,
                              bool gla_bf16);
void lz_distill_gpu_close(lz_distill_gpu *gpu);

/* The batch's SSE of layer l into *sse and its sum of target^2 into *energy;
 * with `learn`, l->grad is overwritten with grad_scale * d(SSE)/d(param) (what
 * the CPU path accumulates from zero). Activations on the device
 * (acts->on_device: a teacher on the GPU) are read where they are. */
lz_status lz_distill_gpu_layer(lz_distill_gpu *gpu, lz_distill_layer *l, const lz_teacher_acts *acts, bool learn,
                               float grad_scale, double *sse, double *energy);

#endif
