// train_feature_map.cu - the Hedgehog feature map for training: forward
// phi = [softmax(u) ++ softmax(-u)] (or [exp(u) ++ exp(-u)]), u = x . W, the
// backward to W and (fine-tuning) to x (the arithmetic of cpu/backward/feature_map_backward.inc).
#include "train_common.cuh" // lz_block_mm, LZ_TB

enum { FM_ROWS = 8, FM_SLICE = 512 }; // tokens per forward block; rows per partial sum of dW

// ---- kernels -------------------------------------------------------------------------------------

// grid (ceil(N / 8), Hout), block 256; smem xs [8][d], u [8][f]
__global__ void fm_forward_kernel(float *out, const float *x, const float *w, int n_w, int N, int Hx, int Hout, int d,
                                  int f, bool exp_map) {
    extern __shared__ float sm[];
    float *xs = sm, *u = sm + FM_ROWS * d;
    const int t0 = blockIdx.x * FM_ROWS, o = blockIdx.y, rep = Hout / Hx, rows = min(FM_ROWS, N - t0);
    const float *wh = w + (size_t)(n_w == 1 ? 0 : o) * d * f;
    for (int e = threadIdx.x; e < FM_ROWS * d; e += blockDim.x) {
        const int r = e / d, i = e % d;
        xs[e] = r < rows ? x[((size_t)(t0 + r) * Hx + o / rep) * d + i] : 0.0f;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < f; j += blockDim.x) {
        float acc[FM_ROWS] = {0};
        for (int i = 0; i < d; i++) {
            const float wv = wh[(size_t)i * f + j];
            for (int r = 0; r < FM_ROWS; r++)
                acc[r] += xs[r * d + i] * wv;
        }
        for (int r = 0; r < FM_ROWS; r++)
            u[r * f + j] = acc[r];
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32; // warp r: token t0 + r
    if (warp >= rows)
        return;
    const float *ur = u + warp * f;
    float *po = out + ((size_t)(t0 + warp) * Hout + o) * 2 * f;
    if (exp_map) {
        for (int j = lane; j < f; j += 32)
            po[j] = expf(ur[j]), po[f + j] = expf(-ur[j]);
        return;
    }
    float mp = -INFINITY, mn = -INFINITY;
    for (int j = lane; j < f; j += 32)
        mp = fmaxf(mp, ur[j]), mn = fmaxf(mn, -ur[j]);
    mp = lz_warp_max(mp), mn = lz_warp_max(mn);
    float sp = 0.0f, sn = 0.0f;
    for (int j = lane; j < f; j += 32)
        sp += expf(ur[j] - mp), sn += expf(-ur[j] - mn);
    sp = lz_warp_sum(sp), sn = lz_warp_sum(sn);
    for (int j = lane; j < f; j += 32)
        po[j] = expf(ur[j] - mp) / sp, po[f + j] = expf(-ur[j] - mn) / sn;
}

// du [R, f] of every row (token, head); a warp per row
__global__ void fm_du_kernel(float *du, const float *dphi, const float *phi, long R, int f, bool exp_map) {
    const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= R)
        return;
    const float *p = phi + row * 2 * f, *g = dphi + row * 2 * f;
    float *o = du + row * f;
    if (exp_map) {
        for (int j = lane; j < f; j += 32)
            o[j] = g[j] * p[j] - g[f + j] * p[f + j];
        return;
    }
    float pg = 0.0f, pgn = 0.0f;
    for (int j = lane; j < f; j += 32)
        pg += p[j] * g[j], pgn += p[f + j] * g[f + j];
    pg = lz_warp_sum(pg), pgn = lz_warp_sum(pgn);
    for (int j = lane; j < f; j += 32)
        o[j] = p[j] * (g[j] - pg) - p[f + j] * (g[f + j] - pgn);
}

// grid (n_w, slices), block 256: partial[slice][w] = x^T du over the slice's rows of weight w
__global__ void fm_dw_partial_kernel(float *partial, const float *du, const float *x, int n_w, int N, int Hx, int Hout,
                                     int d, int f) {
    __shared__ __align__(32) float tiles[LZ_MM_SMEM];
    const int w = blockIdx.x, slice = blockIdx.y, hpw = Hout / n_w, rep = Hout / Hx;
    const long r0 = (long)slice * FM_SLICE, R = (long)N * hpw;
    const int K = (int)min((long)FM_SLICE, R - r0);
    float *dst = partial + ((size_t)slice * n_w + w) * d * f;
    auto row_t = [=](int r) { return (r0 + r) / hpw; };
    auto row_o = [=](int r) { return w * hpw + (int)((r0 + r) % hpw); };
    lz_block_mm<true, false>(
        d, f, K, [&](int i, int r) { return x[((size_t)row_t(r) * Hx + row_o(r) / rep) * d + i]; },
        [&](int r, int j) { return du[((size_t)row_t(r) * Hout + row_o(r)) * f + j]; },
        [&](int i, int j, float acc) { dst[(size_t)i * f + j] = acc; }, tiles);
}

// grid (ceil(N / 8), Hx), block 256, smem dus [8][f]: dx_t += sum_j W[i][j] du_j of the 8 tokens of the
// block and input head xh, from each output head reading it in order (one writer: no atomics); warp w
// takes dimensions i = w, w + 8, ..., its lane r writes token t0 + r
__global__ void fm_dx_kernel(float *dx, const float *du, const float *w, int n_w, int N, int Hx, int Hout, int d,
                             int f) {
    extern __shared__ float dus[];
    const int t0 = blockIdx.x * FM_ROWS, xh = blockIdx.y, rep = Hout / Hx, rows = min(FM_ROWS, N - t0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int ol = 0; ol < rep; ol++) {
        const int o = xh * rep + ol;
        const float *wh = w + (size_t)(n_w == 1 ? 0 : o) * d * f;
        __syncthreads(); // the previous head's du is read
        for (int e = threadIdx.x; e < FM_ROWS * f; e += blockDim.x) {
            const int r = e / f, j = e % f;
            dus[e] = r < rows ? du[((size_t)(t0 + r) * Hout + o) * f + j] : 0.0f;
        }
        __syncthreads();
        for (int i = warp; i < d; i += LZ_TB / 32) {
            float acc[FM_ROWS];
#pragma unroll
            for (int r = 0; r < FM_ROWS; r++)
                acc[r] = 0.0f;
            for (int j = lane; j < f; j += 32) {
                const float wv = wh[(size_t)i * f + j];
#pragma unroll
                for (int r = 0; r < FM_ROWS; r++)
                    acc[r] += wv * dus[r * f + j];
            }
#pragma unroll
            for (int r = 0; r < FM_ROWS; r++) {
                const float sum = lz_warp_sum(acc[r]);
                if (lane == r && r < rows)
                    dx[((size_t)(t0 + r) * Hx + xh) * d + i] += sum;
            }
        }
    }
}

// dst[e] += sum over slices of partial[slice][e], in slice order
static __global__ void sum_slices_kernel(float *dst, const float *partial, size_t n, int slices) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n)
        return;
    float acc = 0.0f;
    for (int s = 0; s < slices; s++)
        acc += partial[(size_t)s * n + e];
    dst[e] += acc;
}

// ---- launchers -----------------------------------------------------------------------------------

extern "C" lz_status lz_cuda_feature_map_train_forward(float *out, const float *x, const float *w, int n_w, int N,
                                                       int Hx, int Hout, int d, int f, bool exp_map) {
    if (N <= 0)
        return LZ_OK;
    const size_t smem = sizeof(float) * FM_ROWS * (d + f); // <= 48 KiB at d = 1024, f = 512
    fm_forward_kernel<<<dim3(lz_div_up(N, FM_ROWS), Hout), LZ_TB, smem, lz_train_stream()>>>(out, x, w, n_w, N, Hx,
                                                                                             Hout, d, f, exp_map);
    LZ_LAUNCH_CHECK("fm_forward");
    return LZ_OK;
}

static int fm_slices(int n_w, int N, int Hout) { return lz_div_up((long)N * (Hout / n_w), FM_SLICE); }

extern "C" size_t lz_cuda_feature_map_backward_scratch(int n_w, int N, int Hout, int d, int f) {
    return (size_t)N * Hout * f + (size_t)fm_slices(n_w, N, Hout) * n_w * d * f;
}

extern "C" lz_status lz_cuda_feature_map_backward(float *dw, const float *dphi, const float *phi, const float *x,
                                                  int n_w, int N, int Hx, int Hout, int d, int f, bool exp_map,
                                                  float *scratch) {
    if (N <= 0)
        return LZ_OK;
    const long R = (long)N * Hout;
    float *du = scratch, *partial = scratch + (size_t)R * f;
    fm_du_kernel<<<lz_div_up(R, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(du, dphi, phi, R, f, exp_map);
    LZ_LAUNCH_CHECK("fm_du");
    const int slices = fm_slices(n_w, N, Hout);
    fm_dw_partial_kernel<<<dim3(n_w, slices), LZ_TB, 0, lz_train_stream()>>>(partial, du, x, n_w, N, Hx, Hout, d, f);
    LZ_LAUNCH_CHECK("fm_dw_partial");
    const size_t n = (size_t)n_w * d * f;
    return lz_cuda_sum_slices(dw, partial, n, slices);
}

extern "C" lz_status lz_cuda_feature_map_backward_input(float *dx, const float *dphi, const float *phi, const float *w,
                                                        int n_w, int N, int Hx, int Hout, int d, int f, bool exp_map,
                                                        float *scratch) {
    if (N <= 0)
        return LZ_OK;
    const long R = (long)N * Hout;
    fm_du_kernel<<<lz_div_up(R, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(scratch, dphi, phi, R, f, exp_map);
    LZ_LAUNCH_CHECK("fm_du");
    const size_t smem = sizeof(float) * FM_ROWS * f; // 16 KiB at f = 512
    fm_dx_kernel<<<dim3(lz_div_up(N, FM_ROWS), Hx), LZ_TB, smem, lz_train_stream()>>>(dx, scratch, w, n_w, N, Hx, Hout,
                                                                                        d, f);
    LZ_LAUNCH_CHECK("fm_dx");
    return LZ_OK;
}

lz_status lz_cuda_sum_slices(float *dst, const float *partial, size_t n, int slices) {
    sum_slices_kernel<<<lz_div_up((long)n, LZ_TB), LZ_TB, 0, lz_train_stream()>>>(dst, partial, n, slices);
    LZ_LAUNCH_CHECK("sum_slices");
    return LZ_OK;
}
