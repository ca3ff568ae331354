// weight_check.cu - see weight_check.cuh.
#include "weight_check.cuh"

template <typename T> __global__ void first_nonfinite_kernel(const T *w, size_t n, unsigned long long *first) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (!isfinite(lz_to_float(w[i])))
            atomicMin(first, (unsigned long long)i);
}

lz_status lz_first_nonfinite_device(lz_cuda_ctx *c, const void *w, size_t n, lz_dtype dtype, size_t *first) {
    *first = n;
    if (n == 0)
        return LZ_OK;
    unsigned long long *d_first = NULL, h_first = ~0ull;
    LZ_CUDA_TRY(cudaMalloc(&d_first, sizeof *d_first));
    lz_status s = LZ_OK;
    const cudaError_t set = cudaMemcpyAsync(d_first, &h_first, sizeof h_first, cudaMemcpyHostToDevice, c->stream);
    const size_t blocks_needed = (n + 255) / 256, most = (size_t)8 * c->n_sms;
    const unsigned blocks = (unsigned)(blocks_needed < most ? blocks_needed : most);
    if (set != cudaSuccess) {
        s = lz_gpu_fail(false, "cudaMemcpyAsync(first)", cudaGetErrorString(set), __FILE__, __LINE__);
    } else {
        if (dtype == LZ_DTYPE_BF16)
            first_nonfinite_kernel<<<blocks, 256, 0, c->stream>>>((const __nv_bfloat16 *)w, n, d_first);
        else
            first_nonfinite_kernel<<<blocks, 256, 0, c->stream>>>((const float *)w, n, d_first);
        const cudaError_t launched = cudaGetLastError();
        if (launched != cudaSuccess)
            s = lz_gpu_fail(true, "first_nonfinite_kernel", cudaGetErrorString(launched), __FILE__, __LINE__);
    }
    cudaError_t e = cudaSuccess;
    if (s == LZ_OK && (e = cudaMemcpyAsync(&h_first, d_first, sizeof h_first, cudaMemcpyDeviceToHost, c->stream)) ==
                          cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (s == LZ_OK && e != cudaSuccess)
        s = lz_gpu_fail(false, "cudaMemcpyAsync(first) / cudaStreamSynchronize", cudaGetErrorString(e), __FILE__, __LINE__);
    const cudaError_t freed = cudaFree(d_first);
    if (s == LZ_OK && freed != cudaSuccess)
        s = lz_gpu_fail(false, "cudaFree(first)", cudaGetErrorString(freed), __FILE__, __LINE__);
    if (s == LZ_OK)
        *first = h_first < n ? (size_t)h_first : n;
    return s;
}
