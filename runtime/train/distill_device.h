/* distill_device.h - a distillation layer step through the training op table
 * (kernels/train_ops.h), on the CPU or the GPU. The teacher runs on its own
 * backend; on a device whose memory is not the host's, the batch's
 * activations go up (unless the teacher already left them there), the
 * layer's tensors go up and its gradients come back, so that the AdamW
 * update, checkpoints and MPI placement are the same for every device. */
#ifndef LZ_DISTILL_DEVICE_H
#define LZ_DISTILL_DEVICE_H

#include <stdbool.h> // bool

#include "distill_params.h"  // lz_distill_layer
#include "distill_teacher.h" // lz_teacher_acts
#include "error.h"           // lz_status
#include "train_ops.h"       // lz_train_ops

typedef struct lz_distill_device lz_distill_device;

/* On `device` ("cpu" or "cuda"), for batches of `batch` sequences of
 * `seq_len` tokens, hidden size `hidden`; gla_bf16: the GLA's in-chunk
 * products in bf16 (the GPU only). */
lz_status lz_distill_device_open(lz_distill_device **out, const char *device, const lz_lizard_geom *g, int batch,
                                 int seq_len, int hidden, bool gla_bf16);
void lz_distill_device_close(lz_distill_device *dev);

/* The batch's SSE of layer l into *sse and its sum of target^2 into *energy;
 * with `learn`, l->grad is overwritten with grad_scale * d(SSE)/d(param).
 * Activations on the device (acts->on_device: a teacher on the GPU) are read
 * where they are. */
lz_status lz_distill_device_layer(lz_distill_device *dev, lz_distill_layer *l, const lz_teacher_acts *acts,
                                  bool learn, float grad_scale, double *sse, double *energy);

#endif
