// train_ops_cuda.cu - the training op table on the GPU (train_ops.h): device
// memory and copies on the training stream (train_cuda.h: the legacy default
// stream unless a caller set another), the fp32 training kernels of train_cuda.h.
#include <cuda_runtime_api.h>
#include <stdlib.h> // calloc, free

#include "train_common.cuh" // LZ_CUDA_TRY, lz_train_stream, train_cuda.h

extern "C" {
#include "train_ops.h"
}

static lz_status cuda_open(int local_rank) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return lz_fail(LZ_ERR_INPUT, "--device cuda: no CUDA device is visible (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    LZ_CUDA_TRY(cudaSetDevice(local_rank % n)); // as the CUDA backend picks it
    return LZ_OK;
}

static lz_status cuda_alloc(size_t bytes, void **out) {
    *out = NULL;
    LZ_CUDA_TRY(cudaMalloc(out, bytes ? bytes : 1));
    return LZ_OK;
}

static void cuda_free(void *p) { cudaFree(p); } // NULL is fine; an error here would be an earlier fault's

static lz_status cuda_upload(void *dst, const void *src, size_t bytes) {
    LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, lz_train_stream()));
    LZ_CUDA_TRY(cudaStreamSynchronize(lz_train_stream())); // the caller may reuse src at once
    return LZ_OK;
}

static lz_status cuda_download(void *dst, const void *src, size_t bytes) {
    LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, lz_train_stream()));
    LZ_CUDA_TRY(cudaStreamSynchronize(lz_train_stream()));
    return LZ_OK;
}

static lz_status cuda_zero(void *p, size_t bytes) {
    LZ_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, lz_train_stream()));
    return LZ_OK;
}

static lz_status cuda_set_gla_bf16(bool on) {
    lz_cuda_train_set_gla_precision(on ? LZ_GLA_BF16 : LZ_GLA_FP32);
    return LZ_OK;
}

static lz_status cuda_lizard_scratch_create(void **out, const lz_lizard_geom *g, int n_seq, int T, int C) {
    lz_lizard_cuda_scratch *s = (lz_lizard_cuda_scratch *)calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return lz_fail(LZ_ERR_NOMEM, "Lizard layer scratch: out of memory");
    const lz_status st = lz_lizard_cuda_scratch_create(s, g, n_seq, T, C);
    if (st != LZ_OK) { // (the scratch freed what it had)
        free(s);
        return st;
    }
    *out = s;
    return LZ_OK;
}

static void cuda_lizard_scratch_free(void *scratch) {
    if (!scratch)
        return;
    lz_lizard_cuda_scratch_free((lz_lizard_cuda_scratch *)scratch);
    free(scratch);
}

static lz_status cuda_lizard_layer_sse(double *sse, double *energy, const lz_lizard_params_f32 *p,
                                       lz_lizard_params_f32 *grad, float grad_scale, const float *x, const float *q,
                                       const float *k, const float *v, const float *target, int n_seq, int T,
                                       const lz_lizard_geom *g, void *scratch) {
    return lz_lizard_layer_sse_cuda(sse, energy, p, grad, grad_scale, x, q, k, v, target, n_seq, T, g,
                                    (lz_lizard_cuda_scratch *)scratch);
}

static lz_train_ops make_table(void) {
    lz_train_ops t = {};
    t.name = "cuda";
    t.host_memory = false;
    t.open = cuda_open;
    t.alloc = cuda_alloc;
    t.free = cuda_free;
    t.upload = cuda_upload;
    t.download = cuda_download;
    t.zero = cuda_zero;
    t.bf16_to_f32 = lz_cuda_bf16_to_f32;
    t.set_gla_bf16 = cuda_set_gla_bf16;
    t.lizard_scratch_create = cuda_lizard_scratch_create;
    t.lizard_scratch_free = cuda_lizard_scratch_free;
    t.lizard_layer_sse = cuda_lizard_layer_sse;
    return t;
}

static const lz_train_ops cuda_train_ops = make_table();

extern "C" const lz_train_ops *lz_train_ops_cuda(void) { return &cuda_train_ops; }
