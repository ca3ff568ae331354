// train_gla_forward.cu - chunked gated linear attention for training, forward
// (cpu/backward/gla_backward.inc's gla_train_forward), saving every chunk's
// start state S0, z0 and the normaliser. Chunk-parallel in three steps:
//   1. delta: for every chunk but the last, dS_c = sum_t e^{G_L - G_t} phi_k_t v_t^T
//      (and dz_c), written into the next chunk's S0 slot;
//   2. scan: per state element, S0[c] = e^{G_L(c-1)} S0[c-1] + dS_{c-1} in order;
//   3. out: per chunk and query head, num = e^{G_i} phi_q_i^T S0 + sum_{t<=i} w_it v_t,
//      den likewise with z0, w_it = (phi_q_i . phi_k_t) e^{G_i - G_t}.

#include "train_gla.cuh" // train_gla_shape, lz_mm
extern "C" {
#include "knobs.h" // lz_knobs_get
}

// ---- kernels -------------------------------------------------------------------------------------

// a thread per (sequence, chunk), summed in order as the CPU does
__global__ void gla_cumgates_kernel(float *G, const float *lg, int n_seq, int T) {
    const int chunks = (T + GC - 1) / GC, id = blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_seq * chunks)
        return;
    const int b = id / chunks, c = id % chunks;
    const size_t r0 = (size_t)b * T + (size_t)c * GC, r1 = r0 + min(GC, T - c * GC);
    float acc = 0.0f;
    for (size_t i = r0; i < r1; i++)
        G[i] = (acc += lg[i]);
}

// grid (chunks - 1, Hs, n_seq): chunk c's contribution into S0, z0 slot c + 1
template <bool BF16>
__global__ void gla_delta_kernel(float *S0, float *z0, const float *phi_k, const float *v, const float *G,
                                 train_gla_shape sh) {
    __shared__ __align__(32) float tiles[LZ_MM_SMEM];
    __shared__ float w[GC];
    const int c = blockIdx.x, s = blockIdx.y, b = blockIdx.z, n = sh.chunk_len(c), vh = sh.value_head(s);
    const size_t row0 = (size_t)b * sh.T + (size_t)c * GC;
    load_chunk_gates(w, G, row0, n);
    const float g_last = w[n - 1];
    __syncthreads();
    for (int t = threadIdx.x; t < n; t += blockDim.x)
        w[t] = expf(g_last - w[t]);
    __syncthreads();
    const float *pk = phi_k + (row0 * sh.Hs + s) * sh.F, *vv = v + (row0 * sh.Hkv + vh) * sh.d;
    float *S = S0 + sh.slot(b, c + 1, s) * sh.F * sh.d, *z = z0 + sh.slot(b, c + 1, s) * sh.F;
    const size_t pks = (size_t)sh.Hs * sh.F, vs = (size_t)sh.Hkv * sh.d;
    lz_mm<BF16, true, false>(
        sh.F, sh.d, n, [&](int a, int t) { return w[t] * pk[t * pks + a]; },
        [&](int t, int j) { return vv[t * vs + j]; }, [&](int a, int j, float acc) { S[(size_t)a * sh.d + j] = acc; },
        tiles);
    for (int a = threadIdx.x; a < sh.F; a += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < n; t++)
            acc += w[t] * pk[t * pks + a];
        z[a] = acc;
    }
}

// grid (ceil((F d + F) / 256), Hs, n_seq): a thread per state element walks the chunks in order
__global__ void gla_scan_kernel(float *S0, float *z0, const float *G, train_gla_shape sh) {
    const int s = blockIdx.y, b = blockIdx.z;
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x, Fd = (size_t)sh.F * sh.d;
    if (e >= Fd + sh.F)
        return;
    float *base = e < Fd ? S0 + e : z0 + (e - Fd);
    const size_t stride = e < Fd ? Fd : (size_t)sh.F;
    float prev = 0.0f;
    base[sh.slot(b, 0, s) * stride] = 0.0f;
    for (int c = 1; c < sh.chunks; c++) {
        const float keep = expf(G[(size_t)b * sh.T + (size_t)c * GC - 1]); // e^{G_L} of chunk c - 1
        float *cur = base + sh.slot(b, c, s) * stride;
        prev = keep * prev + *cur;
        *cur = prev;
    }
}

// grid (chunks, Hq, n_seq): rows of chunk c, query head h
template <bool BF16>
__global__ void gla_out_kernel(float *out, float *den_out, const float *S0, const float *z0, const float *phi_q,
                               const float *phi_k, const float *v, const float *G, train_gla_shape sh, bool normalize) {
    __shared__ __align__(32) float tiles[LZ_MM_SMEM];
    __shared__ float Gs[GC], den[GC], aw[GC][GC + 1];
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, s = h / sh.qps, vh = sh.value_head(s);
    const int n = sh.chunk_len(c), lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const size_t row0 = (size_t)b * sh.T + (size_t)c * GC;
    load_chunk_gates(Gs, G, row0, n);
    const size_t pqs = (size_t)sh.Hq * sh.F, pks = (size_t)sh.Hs * sh.F, vs = (size_t)sh.Hkv * sh.d,
                 os = (size_t)sh.Hq * sh.d;
    const float *pq = phi_q + (row0 * sh.Hq + h) * sh.F, *pk = phi_k + (row0 * sh.Hs + s) * sh.F;
    const float *vv = v + (row0 * sh.Hkv + vh) * sh.d, *S = S0 + sh.slot(b, c, s) * sh.F * sh.d,
                *z = z0 + sh.slot(b, c, s) * sh.F;
    float *o = out + (row0 * sh.Hq + h) * sh.d;
    lz_mm<BF16, false, true>(
        n, n, sh.F, [&](int i, int a) { return pq[i * pqs + a]; }, [&](int a, int t) { return pk[t * pks + a]; },
        [&](int i, int t, float acc) { aw[i][t] = t <= i ? acc * expf(Gs[i] - Gs[t]) : 0.0f; }, tiles);
    __syncthreads();
    for (int i = warp; i < n; i += LZ_TB / 32) { // den_i = e^{G_i} phi_q_i . z0 + sum_t w_it
        float acc = 0.0f;
        for (int a = lane; a < sh.F; a += 32)
            acc += pq[i * pqs + a] * z[a];
        acc = lz_warp_sum(acc);
        if (lane == 0) {
            float d = expf(Gs[i]) * acc;
            for (int t = 0; t <= i; t++)
                d += aw[i][t];
            den[i] = d;
            if (normalize)
                den_out[(row0 + i) * sh.Hq + h] = d;
        }
    }
    __syncthreads();
    lz_mm<BF16, false, false>(
        n, sh.d, sh.F, [&](int i, int a) { return pq[i * pqs + a]; },
        [&](int a, int j) { return S[(size_t)a * sh.d + j]; },
        [&](int i, int j, float acc) { o[i * os + j] = expf(Gs[i]) * acc; }, tiles);
    lz_mm<BF16, false, false>( // the same (n, d) shape: each output is the same thread's, no barrier needed
        n, sh.d, n, [&](int i, int t) { return aw[i][t]; }, [&](int t, int j) { return vv[t * vs + j]; },
        [&](int i, int j, float acc) {
            const float num = o[i * os + j] + acc;
            o[i * os + j] = normalize ? num / den[i] : num;
        },
        tiles);
}

// ---- launchers -----------------------------------------------------------------------------------

lz_status lz_cuda_gla_cumulative_gates(float *G, const float *log_gamma, int n_seq, int T) {
    const int jobs = n_seq * lz_train_chunks(T);
    gla_cumgates_kernel<<<lz_div_up(jobs, LZ_TB), LZ_TB, 0, lz_train_stream()>>>(G, log_gamma, n_seq, T);
    LZ_LAUNCH_CHECK("gla_cumgates");
    return LZ_OK;
}

static int gla_precision = -1; // unset: LIZARD_TRAIN_GLA (knobs.h) at the first use

extern "C" void lz_cuda_train_set_gla_precision(lz_gla_precision p) { gla_precision = p; }

extern "C" lz_gla_precision lz_cuda_train_gla_precision(void) {
    if (gla_precision < 0) {
        gla_precision = lz_knobs_get()->train_gla_bf16 ? LZ_GLA_BF16 : LZ_GLA_FP32;
    }
    return (lz_gla_precision)gla_precision;
}

static lz_status gla_forward_launch(float *out, float *S0, float *z0, float *den, const float *phi_q,
                                    const float *phi_k, const float *v, const float *log_gamma, int n_seq,
                                    const train_gla_shape &sh, bool normalize, float *G) {
    const bool bf16 = lz_cuda_train_gla_precision() == LZ_GLA_BF16;
    LZ_TRY(lz_cuda_gla_cumulative_gates(G, log_gamma, n_seq, sh.T));
    if (sh.chunks > 1) {
        if (bf16)
            gla_delta_kernel<true>
                <<<dim3(sh.chunks - 1, sh.Hs, n_seq), LZ_TB, 0, lz_train_stream()>>>(S0, z0, phi_k, v, G, sh);
        else
            gla_delta_kernel<false>
                <<<dim3(sh.chunks - 1, sh.Hs, n_seq), LZ_TB, 0, lz_train_stream()>>>(S0, z0, phi_k, v, G, sh);
        LZ_LAUNCH_CHECK("gla_delta");
    }
    gla_scan_kernel<<<dim3(lz_div_up((long)sh.F * sh.d + sh.F, LZ_TB), sh.Hs, n_seq), LZ_TB, 0,
                      lz_train_stream()>>>(S0, z0, G, sh);
    LZ_LAUNCH_CHECK("gla_scan");
    const dim3 grid(sh.chunks, sh.Hq, n_seq);
    if (bf16)
        gla_out_kernel<true>
            <<<grid, LZ_TB, 0, lz_train_stream()>>>(out, den, S0, z0, phi_q, phi_k, v, G, sh, normalize);
    else
        gla_out_kernel<false>
            <<<grid, LZ_TB, 0, lz_train_stream()>>>(out, den, S0, z0, phi_q, phi_k, v, G, sh, normalize);
    LZ_LAUNCH_CHECK("gla_out");
    return LZ_OK;
}

extern "C" lz_status lz_cuda_gla_train_forward(float *out, float *S0, float *z0, float *den, const float *phi_q,
                                               const float *phi_k, const float *v, const float *log_gamma, int n_seq,
                                               int T, const lz_lizard_geom *g) {
    if (n_seq <= 0 || T <= 0)
        return LZ_OK;
    const train_gla_shape sh = train_gla_shape_of(g, T);
    float *G; // stream-ordered: freed after the kernels that read it
    LZ_CUDA_TRY(cudaMallocAsync((void **)&G, sizeof(float) * (size_t)n_seq * T, lz_train_stream()));
    const lz_status st = gla_forward_launch(out, S0, z0, den, phi_q, phi_k, v, log_gamma, n_seq, sh, g->normalize, G);
    LZ_CUDA_TRY(cudaFreeAsync(G, lz_train_stream()));
    return st;
}
