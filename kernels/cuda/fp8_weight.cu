// fp8_weight.cu - FP8 E4M3 weights on the device: codes [rows, cols] and one fp32 scale a row
// (kernels/fp8_rule.h), uploaded from the host or made from a weight already on the device (random
// weights of a benchmark's shape: the rule on the GPU, in seconds, bit for bit as the host's).
#include "fp8_linear.cuh"
#include "fp8_rule.h" // lz_fp8_row_scale, lz_fp8_encode

// Both kernels' shapes need whole 16-byte vectors a row (fp8_gemv.cu's loads, cuBLASLt's leading
// dimension of an FP8 matrix).
static lz_status fp8_shape_ok(const char *name, int64_t rows, int64_t cols) {
    if (cols % 16 != 0 || rows < 1 || rows > INT_MAX || cols > INT_MAX)
        return lz_fail(LZ_ERR_INPUT, "tensor '%s' [%lld, %lld]: FP8 weights on CUDA need in_features a multiple "
                       "of 16", name, (long long)rows, (long long)cols);
    return LZ_OK;
}

lz_status lz_fp8_upload(lz_cuda_ctx *c, const lz_host_tensor *src, int64_t rows, int64_t cols, lz_weight *out) {
    *out = (lz_weight){NULL, LZ_DTYPE_F8_E4M3, rows, cols, true, 0, NULL};
    if (rows * cols != src->numel || !src->row_scale)
        return lz_fail(LZ_ERR_INTERNAL, "tensor '%s': %lld FP8 codes viewed as [%lld, %lld]%s", src->name,
                       (long long)src->numel, (long long)rows, (long long)cols, src->row_scale ? "" : " without scales");
    LZ_TRY(fp8_shape_ok(src->name, rows, cols));
    LZ_TRY(lz_fp8_gemm_init(c)); // before any step is recorded
    LZ_CUDA_TRY(cudaMalloc(&out->data, (size_t)(rows * cols)));
    LZ_CUDA_TRY(cudaMalloc((void **)&out->scale, sizeof(float) * (size_t)rows));
    // (synchronous copies: the host buffers may be freed when this returns)
    LZ_CUDA_TRY(cudaMemcpy(out->data, src->data, (size_t)(rows * cols), cudaMemcpyHostToDevice));
    LZ_CUDA_TRY(cudaMemcpy(out->scale, src->row_scale, sizeof(float) * (size_t)rows, cudaMemcpyHostToDevice));
    return LZ_OK;
}

// One block a row: its largest magnitude, its scale, its codes (the exact quotient's, in double).
template <typename T> __global__ void quantize_weight_kernel(const T *w, int64_t cols, uint8_t *codes, float *scales) {
    __shared__ float red[32];
    const T *wr = w + (size_t)blockIdx.x * cols;
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        amax = fmaxf(amax, fabsf(lz_to_float(wr[i])));
    amax = lz_block_max(amax, red);
    const float s = lz_fp8_row_scale(amax);
    if (threadIdx.x == 0)
        scales[blockIdx.x] = s;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        codes[(size_t)blockIdx.x * cols + i] = lz_fp8_encode(lz_to_float(wr[i]), s);
}

lz_status lz_fp8_quantize_weight(lz_cuda_ctx *c, lz_weight *w) {
    if (w->dtype != LZ_DTYPE_BF16 && w->dtype != LZ_DTYPE_F32)
        return lz_fail(LZ_ERR_INTERNAL, "fp8: cannot quantize a weight of type %s", lz_dtype_name(w->dtype));
    LZ_TRY(fp8_shape_ok("random", w->rows, w->cols));
    LZ_TRY(lz_fp8_gemm_init(c));
    lz_weight q = {NULL, LZ_DTYPE_F8_E4M3, w->rows, w->cols, true, 0, NULL};
    LZ_CUDA_TRY(cudaMalloc(&q.data, (size_t)(w->rows * w->cols)));
    const cudaError_t e = cudaMalloc((void **)&q.scale, sizeof(float) * (size_t)w->rows);
    if (e != cudaSuccess)
        cudaFree(q.data);
    LZ_CUDA_TRY(e);
    if (w->dtype == LZ_DTYPE_BF16)
        quantize_weight_kernel<lz_bf16><<<(unsigned)w->rows, 256, 0, c->stream>>>((const lz_bf16 *)w->data, w->cols,
                                                                                  (uint8_t *)q.data, q.scale);
    else
        quantize_weight_kernel<float><<<(unsigned)w->rows, 256, 0, c->stream>>>((const float *)w->data, w->cols,
                                                                                (uint8_t *)q.data, q.scale);
    LZ_LAUNCH_CHECK("fp8 quantize_weight");
    LZ_CUDA_TRY(cudaStreamSynchronize(c->stream)); // the float weight is freed next
    if (w->owned)
        cudaFree(w->data);
    *w = q;
    return LZ_OK;
}

void lz_fp8_free_weight(lz_weight *w) {
    if (w->owned && w->data)
        cudaFree(w->data);
    if (w->scale)
        cudaFree(w->scale);
    *w = (lz_weight){};
}
