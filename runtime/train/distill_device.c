/* distill_device.c - a distillation layer step on the GPU (distill_device.h). */
#include "distill_device.h"

#include <stdlib.h> // calloc, free

#ifdef LIZARD_HAVE_CUDA

#include <cuda_runtime_api.h> // cudaMalloc, cudaMemcpy

#include "cuda/train_cuda.h" // lz_lizard_layer_sse_cuda
#include "mpi_world.h"       // lz_world_get: one GPU per rank of a node

struct lz_distill_gpu {
    lz_lizard_geom geom;
    int batch, seq_len, hidden;
    lz_lizard_cuda_scratch s;
    float *x, *q, *k, *v, *target;                 /* the batch's activations */
    float *param[LZ_DT_COUNT], *grad[LZ_DT_COUNT]; /* one layer's, reused by every layer */
    size_t numel[LZ_DT_COUNT];
};

#define GPU_TRY(call)                                                                                                  \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            return lz_fail(LZ_ERR_INTERNAL, "--device cuda: %s failed: %s", #call, cudaGetErrorString(e_));            \
    } while (0)

static lz_status alloc(float **p, size_t n) {
    GPU_TRY(cudaMalloc((void **)p, sizeof(float) * (n ? n : 1)));
    return LZ_OK;
}

static lz_status open_buffers(lz_distill_gpu *gpu) {
    const lz_lizard_geom *g = &gpu->geom;
    const size_t T = (size_t)gpu->batch * gpu->seq_len, qd = T * g->Hq * g->d, kd = T * g->Hkv * g->d;
    LZ_TRY(lz_lizard_cuda_scratch_create(&gpu->s, g, gpu->batch, gpu->seq_len, gpu->hidden));
    LZ_TRY(alloc(&gpu->x, T * gpu->hidden));
    LZ_TRY(alloc(&gpu->q, qd));
    LZ_TRY(alloc(&gpu->k, kd));
    LZ_TRY(alloc(&gpu->v, kd));
    LZ_TRY(alloc(&gpu->target, qd));
    const size_t numel[LZ_DT_COUNT] = {lz_lizard_wq_numel(g), lz_lizard_wk_numel(g), (size_t)gpu->hidden, (size_t)g->m,
                                       1};
    for (int i = 0; i < LZ_DT_COUNT; i++) {
        gpu->numel[i] = numel[i];
        LZ_TRY(alloc(&gpu->param[i], numel[i]));
        LZ_TRY(alloc(&gpu->grad[i], numel[i]));
    }
    return LZ_OK;
}

lz_status lz_distill_gpu_open(lz_distill_gpu **out, const lz_lizard_geom *g, int batch, int seq_len, int hidden,
                              bool gla_bf16) {
    *out = NULL;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return lz_fail(LZ_ERR_INPUT, "--device cuda: no CUDA device is visible");
    GPU_TRY(cudaSetDevice(lz_world_get()->local_rank % n)); // as the CUDA backend picks it
    lz_distill_gpu *gpu = calloc(1, sizeof *gpu);
    if (!gpu)
        return lz_fail(LZ_ERR_NOMEM, "--device cuda: out of memory");
    gpu->geom = *g, gpu->batch = batch, gpu->seq_len = seq_len, gpu->hidden = hidden;
    lz_cuda_train_set_gla_precision(gla_bf16 ? LZ_GLA_BF16 : LZ_GLA_FP32);
    const lz_status s = open_buffers(gpu);
    if (s != LZ_OK) {
        lz_distill_gpu_close(gpu);
        return s;
    }
    *out = gpu;
    return LZ_OK;
}

void lz_distill_gpu_close(lz_distill_gpu *gpu) {
    if (!gpu)
        return;
    lz_lizard_cuda_scratch_free(&gpu->s);
    float *bufs[] = {gpu->x, gpu->q, gpu->k, gpu->v, gpu->target};
    for (int i = 0; i < 5; i++)
        cudaFree(bufs[i]); // NULL is fine; an error here would be an earlier fault's
    for (int i = 0; i < LZ_DT_COUNT; i++)
        cudaFree(gpu->param[i]), cudaFree(gpu->grad[i]);
    free(gpu);
}

static lz_status up(float *dst, const float *src, size_t n) {
    GPU_TRY(cudaMemcpy(dst, src, sizeof(float) * n, cudaMemcpyHostToDevice));
    return LZ_OK;
}

lz_status lz_distill_gpu_layer(lz_distill_gpu *gpu, lz_distill_layer *l, const lz_teacher_acts *acts, bool learn,
                               float grad_scale, double *sse, double *energy) {
    const lz_lizard_geom *g = &gpu->geom;
    const size_t T = (size_t)gpu->batch * gpu->seq_len, qd = T * g->Hq * g->d, kd = T * g->Hkv * g->d;
    const float *x = acts->x, *q = acts->q, *k = acts->k, *v = acts->v, *target = acts->target;
    if (acts->on_device && acts->bf16) { // a bf16 teacher: the trainer reads fp32
        LZ_TRY(lz_cuda_bf16_to_f32(gpu->x, acts->x, T * gpu->hidden));
        LZ_TRY(lz_cuda_bf16_to_f32(gpu->q, acts->q, qd));
        LZ_TRY(lz_cuda_bf16_to_f32(gpu->k, acts->k, kd));
        LZ_TRY(lz_cuda_bf16_to_f32(gpu->v, acts->v, kd));
        LZ_TRY(lz_cuda_bf16_to_f32(gpu->target, acts->target, qd));
        x = gpu->x, q = gpu->q, k = gpu->k, v = gpu->v, target = gpu->target;
    } else if (!acts->on_device) { // a teacher on the CPU: the batch goes up first
        LZ_TRY(up(gpu->x, acts->x, T * gpu->hidden));
        LZ_TRY(up(gpu->q, acts->q, qd));
        LZ_TRY(up(gpu->k, acts->k, kd));
        LZ_TRY(up(gpu->v, acts->v, kd));
        LZ_TRY(up(gpu->target, acts->target, qd));
        x = gpu->x, q = gpu->q, k = gpu->k, v = gpu->v, target = gpu->target;
    }
    for (int i = 0; i < LZ_DT_COUNT; i++) {
        LZ_TRY(up(gpu->param[i], l->param[i], gpu->numel[i]));
        if (learn)
            GPU_TRY(cudaMemset(gpu->grad[i], 0, sizeof(float) * gpu->numel[i]));
    }
    const lz_lizard_params_f32 p = {gpu->param[0], gpu->param[1], gpu->param[2], gpu->param[3], gpu->param[4]};
    lz_lizard_params_f32 gr = {gpu->grad[0], gpu->grad[1], gpu->grad[2], gpu->grad[3], gpu->grad[4]};
    LZ_TRY(lz_lizard_layer_sse_cuda(sse, energy, &p, learn ? &gr : NULL, grad_scale, x, q, k, v, target, gpu->batch,
                                    gpu->seq_len, g, &gpu->s));
    for (int i = 0; learn && i < LZ_DT_COUNT; i++)
        GPU_TRY(cudaMemcpy(l->grad[i], gpu->grad[i], sizeof(float) * gpu->numel[i], cudaMemcpyDeviceToHost));
    return LZ_OK;
}

#else // a CPU-only build

struct lz_distill_gpu {
    int unused;
};

lz_status lz_distill_gpu_open(lz_distill_gpu **out, const lz_lizard_geom *g, int batch, int seq_len, int hidden,
                              bool gla_bf16) {
    *out = NULL;
    return lz_fail(LZ_ERR_INPUT, "--device cuda: this build has no CUDA backend (built with LIZARD_CUDA=OFF)");
}

void lz_distill_gpu_close(lz_distill_gpu *gpu) { free(gpu); }

lz_status lz_distill_gpu_layer(lz_distill_gpu *gpu, lz_distill_layer *l, const lz_teacher_acts *acts, bool learn,
                               float grad_scale, double *sse, double *energy) {
    return lz_fail(LZ_ERR_INTERNAL, "--device cuda: this build has no CUDA backend");
}

#endif
