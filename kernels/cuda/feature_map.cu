// feature_map.cu - Hedgehog feature maps: one block per (token, output head),
// u = x . W (coalesced over the f features), then the two softmaxes (or exps)
// over the f features.
#include "cuda_kernels.cuh"

// grid (n, Hout), block fb x parts (fb = f rounded up to a warp multiple):
// thread (j, part) sums u_j over rows part, part + parts, ... of W, so that a
// decode step's few blocks still have many loads in flight; the parts meet in
// shared memory. smem: x head [d], partial u [parts][fb]
template <typename T>
__global__ void feature_map_kernel(T *out, const T *x, const T *w, int n_w, int Hx, int Hout, int d, int f, int fb,
                                   bool exp_map) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    float *part_u = xs + d;
    const int t = blockIdx.x, o = blockIdx.y, j = threadIdx.x % fb, part = threadIdx.x / fb, parts = blockDim.x / fb;
    const int rep = Hout / Hx;
    const T *xh = x + ((size_t)t * Hx + o / rep) * d;
    const T *wh = w + (size_t)(n_w == 1 ? 0 : o) * d * f;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        xs[i] = lz_to_float(xh[i]);
    __syncthreads();
    float u = 0.0f;
    if (j < f) {
#pragma unroll 8
        for (int i = part; i < d; i += parts)
            u += xs[i] * lz_to_float(wh[(size_t)i * f + j]);
    }
    part_u[part * fb + j] = u;
    __syncthreads();
    u = 0.0f;
    for (int p = 0; p < parts; p++)
        u += part_u[p * fb + j];
    const bool mine = part == 0 && j < f; // every part now holds the full u_j; part 0 writes
    T *po = out + ((size_t)t * Hout + o) * 2 * f;
    if (exp_map) {
        if (mine) {
            po[j] = lz_from_float<T>(expf(u));
            po[f + j] = lz_from_float<T>(expf(-u));
        }
        return;
    }
    const bool valid = j < f;
    const float mx = lz_block_max(valid ? u : -INFINITY, red), mn = -lz_block_max(valid ? -u : -INFINITY, red);
    const float ep = mine ? expf(u - mx) : 0.0f, en = mine ? expf(mn - u) : 0.0f;
    const float sp = lz_block_sum(ep, red), sn = lz_block_sum(en, red);
    if (mine) {
        po[j] = lz_from_float<T>(ep / sp);
        po[f + j] = lz_from_float<T>(en / sn);
    }
}

template <typename T>
lz_status feature_map_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, int n_w, int n, int Hx, int Hout, int d,
                              int f, bool exp_map) {
    const int fb = ((f + 31) / 32) * 32;
    if (fb > 1024)
        return lz_fail(LZ_ERR_INPUT, "CUDA feature map supports feature_dim <= 1024, got %d", f);
    int parts = 512 / fb; // about 512 threads a block, and no more parts than rows
    parts = parts < 1 ? 1 : (parts > d ? d : parts);
    const size_t smem = sizeof(float) * ((size_t)d + (size_t)parts * fb);
    if (smem > 48 * 1024) // the default limit: no opt-in needed
        return lz_fail(LZ_ERR_INPUT, "CUDA feature map needs %zu bytes of shared memory for head_dim %d (at most 48 KB)",
                       smem, d);
    feature_map_kernel<T><<<dim3(n, Hout), fb * parts, smem, c->stream>>>(out, x, w, n_w, Hx, Hout, d, f, fb,
                                                                           exp_map);
    LZ_LAUNCH_CHECK("feature_map");
    return LZ_OK;
}

#define LZ_FMAP(T)                                                                                               \
    template lz_status feature_map_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, int, int, int, int, int,  \
                                              int, bool);
LZ_INSTANTIATE(LZ_FMAP)
