// feature_map.cu - Hedgehog feature maps: one block per (token, output head),
// thread j computes u_j = x . W[:, j] (coalesced over j), then the two
// softmaxes (or exps) over the f features.
#include "cuda_kernels.cuh"

// grid (n, Hout), block f rounded up to a warp multiple; smem: x head [d]
template <typename T>
__global__ void feature_map_kernel(T *out, const T *x, const T *w, int n_w, int Hx, int Hout, int d, int f,
                                   bool exp_map) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    const int t = blockIdx.x, o = blockIdx.y, j = threadIdx.x, rep = Hout / Hx;
    const T *xh = x + ((size_t)t * Hx + o / rep) * d;
    const T *wh = w + (size_t)(n_w == 1 ? 0 : o) * d * f;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        xs[i] = lz_to_float(xh[i]);
    __syncthreads();
    float u = 0.0f;
    if (j < f)
        for (int i = 0; i < d; i++)
            u += xs[i] * lz_to_float(wh[(size_t)i * f + j]);
    T *po = out + ((size_t)t * Hout + o) * 2 * f;
    if (exp_map) {
        if (j < f) {
            po[j] = lz_from_float<T>(expf(u));
            po[f + j] = lz_from_float<T>(expf(-u));
        }
        return;
    }
    const float mx = lz_block_max(j < f ? u : -INFINITY, red), mn = -lz_block_max(j < f ? -u : -INFINITY, red);
    const float ep = j < f ? expf(u - mx) : 0.0f, en = j < f ? expf(mn - u) : 0.0f;
    const float sp = lz_block_sum(ep, red), sn = lz_block_sum(en, red);
    if (j < f) {
        po[j] = lz_from_float<T>(ep / sp);
        po[f + j] = lz_from_float<T>(en / sn);
    }
}

template <typename T>
lz_status feature_map_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, int n_w, int n, int Hx, int Hout, int d,
                              int f, bool exp_map) {
    const int block = ((f + 31) / 32) * 32;
    feature_map_kernel<T><<<dim3(n, Hout), block, sizeof(float) * d, c->stream>>>(out, x, w, n_w, Hx, Hout, d, f,
                                                                                   exp_map);
    LZ_LAUNCH_CHECK("feature_map");
    return LZ_OK;
}

#define LZ_FMAP(T)                                                                                               \
    template lz_status feature_map_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, int, int, int, int, int,  \
                                              int, bool);
LZ_INSTANTIATE(LZ_FMAP)
