// stream_ceiling.cu - what the H200's memory gives the access patterns of the decode kernels that
// stream per-sequence state (standalone: nvcc -O3 -arch=sm_90a -o stream_ceiling stream_ceiling.cu).
// The decode bound divides bytes by the rate of a device-to-device copy; the GLA state update reads
// and writes the same addresses (S = gamma S + phi_k v^T) and the window reads its rings only. This
// measures, on buffers far larger than L2, the rate (bytes read + written / time) of: a copy kernel,
// an in-place update (plain and streaming cache operators, grid-stride and 64 KiB blocks), a read-only
// sum, and cudaMemcpy, each the best and the median of 20 runs.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "bench_check.cuh" // CK

__global__ void copy_k(float4 *dst, const float4 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
template <bool STREAMING, int U> __global__ void update_k(float4 *a, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride * U) {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * stride < n)
                v[u] = STREAMING ? __ldcg(a + i + u * stride) : a[i + u * stride];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * stride < n) {
                float4 r = make_float4(v[u].x * 0.99f + 1.0f, v[u].y * 0.99f + 1.0f, v[u].z * 0.99f + 1.0f, v[u].w * 0.99f + 1.0f);
                if (STREAMING)
                    __stcs(a + i + u * stride, r);
                else
                    a[i + u * stride] = r;
            }
    }
}
// a block a 64 KiB slice (256 threads x 16 float4), all loads first: the stream kernel's shape
__global__ void update_blocks_k(float4 *a) {
    float4 *p = a + (size_t)blockIdx.x * 4096 + threadIdx.x;
    float4 v[16];
#pragma unroll
    for (int u = 0; u < 16; u++)
        v[u] = __ldcg(p + u * 256);
#pragma unroll
    for (int u = 0; u < 16; u++)
        __stcs(p + u * 256, make_float4(v[u].x * 0.99f + 1.0f, v[u].y * 0.99f, v[u].z, v[u].w + 1.0f));
}
template <int U> __global__ void read_k(const float4 *a, size_t n, float *out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float s = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride * U) {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = i + u * stride < n ? __ldcg(a + i + u * stride) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++)
            s += v[u].x + v[u].y + v[u].z + v[u].w;
    }
    if (s == 12345.0f)
        *out = s;
}

template <typename F> static void time_it(const char *what, double bytes, F &&launch) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int r = 0; r < 20; r++) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaGetLastError());
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    printf("%-44s %8.1f us best  %6.2f TB/s best  %6.2f TB/s median\n", what, ms[0] * 1e3, bytes / (ms[0] * 1e-3) / 1e12,
           bytes / (ms[10] * 1e-3) / 1e12);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
}

int main(int argc, char **argv) {
    const size_t mb = argc > 1 ? (size_t)atoi(argv[1]) : 256, bytes = mb << 20, n = bytes / 16;
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    float4 *x, *y;
    float *out;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&y, bytes));
    CK(cudaMalloc(&out, 4));
    CK(cudaMemset(x, 0, bytes));
    CK(cudaMemset(y, 0, bytes));
    printf("buffers of %zu MiB, %d SMs; rates are bytes read + written over time\n", mb, sms);
    time_it("cudaMemcpy D2D", 2.0 * bytes, [&] { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); });
    for (int bps : {2, 4, 8})
        time_it(bps == 2 ? "copy kernel, 2 blocks/SM" : bps == 4 ? "copy kernel, 4 blocks/SM" : "copy kernel, 8 blocks/SM",
                2.0 * bytes, [&] { copy_k<<<sms * bps, 256>>>(y, x, n); });
    time_it("in place, plain, U=1, 8 blocks/SM", 2.0 * bytes, [&] { update_k<false, 1><<<sms * 8, 256>>>(x, n); });
    time_it("in place, plain, U=4, 4 blocks/SM", 2.0 * bytes, [&] { update_k<false, 4><<<sms * 4, 256>>>(x, n); });
    time_it("in place, ldcg/stcs, U=1, 8 blocks/SM", 2.0 * bytes, [&] { update_k<true, 1><<<sms * 8, 256>>>(x, n); });
    time_it("in place, ldcg/stcs, U=4, 4 blocks/SM", 2.0 * bytes, [&] { update_k<true, 4><<<sms * 4, 256>>>(x, n); });
    time_it("in place, ldcg/stcs, U=8, 2 blocks/SM", 2.0 * bytes, [&] { update_k<true, 8><<<sms * 2, 256>>>(x, n); });
    time_it("in place, 64 KiB blocks (stream kernel shape)", 2.0 * bytes,
            [&] { update_blocks_k<<<(unsigned)(n / 4096), 256>>>(x); });
    time_it("read only, U=4, 4 blocks/SM", 1.0 * bytes, [&] { read_k<4><<<sms * 4, 256>>>(x, n, out); });
    time_it("read only, U=8, 8 blocks/SM", 1.0 * bytes, [&] { read_k<8><<<sms * 8, 256>>>(x, n, out); });
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(out));
    return 0;
}
