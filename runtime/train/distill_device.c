/* distill_device.c - a distillation layer step through the training op table (distill_device.h). */
#include "distill_device.h"

#include <stdlib.h> // calloc, free

#include "mpi_world.h" // lz_world_get: one device per rank of a node

enum { ACT_X, ACT_Q, ACT_K, ACT_V, ACT_TARGET, ACT_COUNT };

struct lz_distill_device {
    const lz_train_ops *ops;
    lz_lizard_geom geom;
    int batch, seq_len, hidden;
    void *scratch;
    float *act[ACT_COUNT];                         /* the batch's activations in device memory (not host_memory) */
    float *param[LZ_DT_COUNT], *grad[LZ_DT_COUNT]; /* one layer's, reused by every layer (not host_memory) */
    size_t act_numel[ACT_COUNT], numel[LZ_DT_COUNT];
};

static lz_status alloc_floats(const lz_train_ops *ops, float **p, size_t n) {
    return ops->alloc(sizeof(float) * n, (void **)p);
}

static lz_status open_buffers(lz_distill_device *dev) {
    const lz_train_ops *ops = dev->ops;
    const lz_lizard_geom *g = &dev->geom;
    const size_t T = (size_t)dev->batch * dev->seq_len, qd = T * g->Hq * g->d, kd = T * g->Hkv * g->d;
    LZ_TRY(ops->lizard_scratch_create(&dev->scratch, g, dev->batch, dev->seq_len, dev->hidden));
    const size_t act_numel[ACT_COUNT] = {T * dev->hidden, qd, kd, kd, qd};
    const size_t numel[LZ_DT_COUNT] = {lz_lizard_wq_numel(g), lz_lizard_wk_numel(g), (size_t)dev->hidden,
                                       (size_t)g->m, 1};
    for (int i = 0; i < ACT_COUNT; i++)
        dev->act_numel[i] = act_numel[i];
    for (int i = 0; i < LZ_DT_COUNT; i++)
        dev->numel[i] = numel[i];
    if (ops->host_memory)
        return LZ_OK; // the host's arrays are read and written in place
    for (int i = 0; i < ACT_COUNT; i++)
        LZ_TRY(alloc_floats(ops, &dev->act[i], act_numel[i]));
    for (int i = 0; i < LZ_DT_COUNT; i++) {
        LZ_TRY(alloc_floats(ops, &dev->param[i], numel[i]));
        LZ_TRY(alloc_floats(ops, &dev->grad[i], numel[i]));
    }
    return LZ_OK;
}

lz_status lz_distill_device_open(lz_distill_device **out, const char *device, const lz_lizard_geom *g, int batch,
                                 int seq_len, int hidden, bool gla_bf16) {
    *out = NULL;
    const lz_train_ops *ops;
    LZ_TRY(lz_train_ops_get(device, &ops));
    LZ_TRY(ops->open(lz_world_get()->local_rank));
    LZ_TRY(ops->set_gla_bf16(gla_bf16));
    lz_distill_device *dev = calloc(1, sizeof *dev);
    if (!dev)
        return lz_fail(LZ_ERR_NOMEM, "--device %s: out of memory", device);
    dev->ops = ops, dev->geom = *g, dev->batch = batch, dev->seq_len = seq_len, dev->hidden = hidden;
    const lz_status s = open_buffers(dev);
    if (s != LZ_OK) {
        lz_distill_device_close(dev);
        return s;
    }
    *out = dev;
    return LZ_OK;
}

void lz_distill_device_close(lz_distill_device *dev) {
    if (!dev)
        return;
    const lz_train_ops *ops = dev->ops;
    ops->lizard_scratch_free(dev->scratch);
    for (int i = 0; i < ACT_COUNT; i++)
        ops->free(dev->act[i]);
    for (int i = 0; i < LZ_DT_COUNT; i++)
        ops->free(dev->param[i]), ops->free(dev->grad[i]);
    free(dev);
}

lz_status lz_distill_device_layer(lz_distill_device *dev, lz_distill_layer *l, const lz_teacher_acts *acts,
                                  bool learn, float grad_scale, double *sse, double *energy) {
    const lz_train_ops *ops = dev->ops;
    const float *src[ACT_COUNT] = {acts->x, acts->q, acts->k, acts->v, acts->target};
    const float *act[ACT_COUNT];
    for (int i = 0; i < ACT_COUNT; i++) {
        act[i] = src[i];
        if (acts->on_device && acts->bf16) // a bf16 teacher: the trainer reads fp32
            LZ_TRY(ops->bf16_to_f32(dev->act[i], src[i], dev->act_numel[i]));
        else if (!acts->on_device && !ops->host_memory) // a teacher on the CPU: the batch goes up first
            LZ_TRY(ops->upload(dev->act[i], src[i], sizeof(float) * dev->act_numel[i]));
        else
            continue;
        act[i] = dev->act[i];
    }
    float *const *param = ops->host_memory ? l->param : dev->param, *const *grad = ops->host_memory ? l->grad : dev->grad;
    for (int i = 0; i < LZ_DT_COUNT; i++) {
        if (!ops->host_memory)
            LZ_TRY(ops->upload(param[i], l->param[i], sizeof(float) * dev->numel[i]));
        if (learn)
            LZ_TRY(ops->zero(grad[i], sizeof(float) * dev->numel[i]));
    }
    const lz_lizard_params_f32 p = {param[0], param[1], param[2], param[3], param[4]};
    lz_lizard_params_f32 gr = {grad[0], grad[1], grad[2], grad[3], grad[4]};
    LZ_TRY(ops->lizard_layer_sse(sse, energy, &p, learn ? &gr : NULL, grad_scale, act[ACT_X], act[ACT_Q], act[ACT_K],
                                 act[ACT_V], act[ACT_TARGET], dev->batch, dev->seq_len, &dev->geom, dev->scratch));
    for (int i = 0; learn && !ops->host_memory && i < LZ_DT_COUNT; i++)
        LZ_TRY(ops->download(l->grad[i], grad[i], sizeof(float) * dev->numel[i]));
    return LZ_OK;
}
