// random_and_ceilings.cu - random weights made on the GPU (for benchmarks that
// start without files), and the two ceilings a benchmark is judged against:
// the device-to-device copy rate and the GEMM rate in the activation type.
#include "cuda_kernels.cuh"

// splitmix64 of (seed, index): uniform in [-1, 1), independent of launch shape
__device__ float random_value(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

// chars have no lz_from_float: fill bytes through a float conversion
template <> __device__ __forceinline__ char lz_from_float<char>(float x) { return (char)(int)(x * 100.0f); }

template <typename T> __global__ void random_kernel(T *w, size_t n, float mean, float a, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        w[i] = lz_from_float<T>(mean + a * random_value(seed, i));
}

template <typename T> lz_status random_fill(lz_cuda_ctx *c, T *w, size_t n, float mean, float std, uint64_t seed) {
    random_kernel<T><<<4 * c->n_sms, 256, 0, c->stream>>>(w, n, mean, std * 1.7320508f, seed);
    LZ_LAUNCH_CHECK("random weight");
    return LZ_OK;
}

// Median of `reps` timed runs of fn(), with events, after one warm-up.
template <typename Fn> static lz_status time_median(lz_cuda_ctx *c, int reps, Fn fn, float *ms) {
    cudaEvent_t a, b;
    LZ_CUDA_TRY(cudaEventCreate(&a));
    LZ_CUDA_TRY(cudaEventCreate(&b));
    LZ_TRY(fn());
    float t[16];
    for (int r = 0; r < reps && r < 16; r++) {
        LZ_CUDA_TRY(cudaEventRecord(a, c->stream));
        LZ_TRY(fn());
        LZ_CUDA_TRY(cudaEventRecord(b, c->stream));
        LZ_CUDA_TRY(cudaEventSynchronize(b));
        LZ_CUDA_TRY(cudaEventElapsedTime(&t[r], a, b));
    }
    for (int i = 1; i < reps; i++) // insertion sort: reps is tiny
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *ms = t[reps / 2];
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return LZ_OK;
}

// Copy: 4 GiB device to device (bytes read + written). GEMM: 8192^3 on random data.
template <typename T> lz_status measure_ceilings(lz_cuda_ctx *c, double *copy_bps, double *gemm_flops) {
    const size_t bytes = (size_t)4 << 30, n = 8192;
    char *src = NULL, *dst = NULL;
    T *A = NULL, *B = NULL, *C = NULL;
    lz_status s = LZ_OK;
    float ms = 0;
    const char *why = lz_gpu_error_cleared(cudaMalloc(&src, bytes));
    why = why ? why : lz_gpu_error_cleared(cudaMalloc(&dst, bytes));
    why = why ? why : lz_gpu_error_cleared(cudaMalloc(&A, n * n * sizeof(T)));
    why = why ? why : lz_gpu_error_cleared(cudaMalloc(&B, n * n * sizeof(T)));
    why = why ? why : lz_gpu_error_cleared(cudaMalloc(&C, n * n * sizeof(T)));
    if (why)
        s = lz_fail(LZ_ERR_NOMEM, "ceilings: cannot allocate the test buffers: %s", why);
    if (s == LZ_OK)
        s = random_fill<char>(c, src, bytes, 0, 0, 1) == LZ_OK ? LZ_OK : LZ_ERR_INTERNAL;
    if (s == LZ_OK)
        s = time_median(c, 7, [&]() -> lz_status {
            LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
            return LZ_OK;
        }, &ms);
    if (s == LZ_OK) {
        *copy_bps = 2.0 * bytes / (ms * 1e-3);
        s = random_fill<T>(c, A, n * n, 0, 1, 2);
    }
    if (s == LZ_OK)
        s = random_fill<T>(c, B, n * n, 0, 1, 3);
    if (s == LZ_OK)
        s = time_median(c, 7, [&]() { return linear_forward<T>(c, C, A, B, (const T *)NULL, (int)n, (int)n, (int)n); },
                        &ms);
    if (s == LZ_OK)
        *gemm_flops = 2.0 * n * n * n / (ms * 1e-3);
    cudaFree(src), cudaFree(dst), cudaFree(A), cudaFree(B), cudaFree(C);
    return s;
}


#define LZ_RANDOM(T)                                                                           \
    template lz_status random_fill<T>(lz_cuda_ctx *, T *, size_t, float, float, uint64_t);     \
    template lz_status measure_ceilings<T>(lz_cuda_ctx *, double *, double *);
LZ_INSTANTIATE(LZ_RANDOM)
