// gla_decode_stream.cu - the GLA decode step (op gla_decode) for many sequences, in two launches
// shaped so that the state streams near the copy rate:
//   prep:   per (feature-map head, tile of GP_SEQS sequences): u = x . W with the head's weight
//           read once into shared memory for the whole tile, then phi = [softmax(u) ++ softmax(-u)]
//           (or [exp(u) ++ exp(-u)]) as fp32 into scratch; the blocks of a state head's phi_k also
//           write z = gamma z + phi_k (z is read by no other block of this launch);
//   stream: per (slice of GS_COLS value columns, state head, sequence), no cluster, no atomics:
//           every thread issues its GS_ROWS float4 loads of S (32 KiB per block at d = 128) before
//           anything else, then S = gamma S + phi_k v^T over all 2f rows of its columns, stored,
//           with the numerators phi_q^T S of the group's query heads reduced in the block, and
//           the denominators phi_q . z from the z that prep wrote.
// Why: at LLaMA-3-8B's shape and 64 sequences the split kernel (gla_decode.cu) took 144 us a layer
// on the H200 against ~32 us for its 64 MiB read + 64 MiB written at the copy rate: each cluster
// issues its state loads once, then walks serial phases (the feature maps' GEMV from L2 with every
// (sequence, state head) re-reading the weights, cluster barriers, reductions). Here the feature
// maps read each weight once per GP_SEQS sequences, and the stream kernel does nothing but the
// state's own arithmetic. The backend takes this path from LIZARD_GLA_STREAM_MIN sequences on.
//
// Programmatic dependent launch (pdl.cuh): prep loads its weights before griddepcontrol.wait and
// lets the stream kernel launch only after the wait; so when a stream block starts, every kernel
// before prep has completed (each waited for its own predecessor), and nothing that writes S can
// still be running: the stream kernel issues its S loads (L2-only, ld.global.cg) before its own wait.
#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents

enum {
    GP_THREADS = 256,
    GP_SEQS = 16,            // sequences per prep block: the weight is read once for these
    GP_SPT = 8,              // sequences per prep thread (float4 pairs of x from shared memory)
    GP_WBYTES = 32768,       // weight rows staged in shared memory per pass
    GS_THREADS = 256,
    GS_COLS = 32,            // value columns per stream block (fewer where d asks)
    GS_ROWS = 8,             // float4 rows in flight per thread
    GS_WARPS = GS_THREADS / 32,
    GS_MAX_GROUP = 16,
};

template <typename T> struct gs_params {
    T *out;                    // [n, Hq, d]
    const T *q, *k, *v, *gate; // q [n, Hq, d], k and v [n, Hkv, d], gate logits [n] (one token per sequence)
    const T *wq, *wk;          // [n_wq, d, f], [n_wk, d, f] (1 row: shared by all heads)
    float *S, *z;              // [slots, Hs, F, d], [slots, Hs, F]
    float *phi_q, *phi_k;      // scratch: [n_seqs, Hq, F], [n_seqs, Hs, F]
    const int32_t *start, *slot;
    int n_seqs, Hq, Hkv, Hs, d, f, n_wq, n_wk, cols, wrows;
    bool normalize, exp_map;
};

static __device__ __forceinline__ float gs_log_sigmoid(float v) {
    return v >= 0.0f ? -log1pf(expf(-v)) : v - log1pf(expf(v));
}

static __device__ __forceinline__ void gs_cp_async16(void *dst, const void *src) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
static __device__ __forceinline__ void gs_cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// Weight rows [i0, i0 + rows) of W [d, f] into Ws: 16-byte async copies where rows of W are whole
// vectors, else plain loads.
template <typename T>
static __device__ void gs_stage_weights(T *Ws, const T *W, int i0, int rows, int f, bool vec) {
    const T *src = W + (size_t)i0 * f;
    const int n = rows * f;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        for (int e = threadIdx.x * V; e < n; e += GP_THREADS * V)
            gs_cp_async16(Ws + e, src + e);
    } else {
        for (int e = threadIdx.x; e < n; e += GP_THREADS)
            Ws[e] = src[e];
    }
}

// Shared memory of the prep kernel in floats: x tile [d][GP_SEQS], u [GP_SEQS][f], then the weight
// rows as T [wrows][f].
static __host__ __device__ size_t gs_prep_smem(int d, int f, int wrows, size_t tsize) {
    return sizeof(float) * ((size_t)d * GP_SEQS + (size_t)GP_SEQS * f) + tsize * (size_t)wrows * f;
}

// grid (Hq + Hs map heads, ceil(n / GP_SEQS)), block GP_THREADS. Head h < Hq: phi_q of query head
// h; else phi_k of state head s = h - Hq (reading k head s / (Hs / Hkv)) and that head's z.
template <typename T> __global__ void __launch_bounds__(GP_THREADS) gla_decode_prep_kernel(gs_params<T> p) {
    extern __shared__ float4 gp_sm4[];
    float *xs = (float *)gp_sm4, *us = xs + (size_t)p.d * GP_SEQS;
    T *Ws = (T *)(us + (size_t)GP_SEQS * p.f);
    const int h = blockIdx.x, seq0 = blockIdx.y * GP_SEQS, d = p.d, f = p.f, F = 2 * f, tid = threadIdx.x;
    const bool is_k = h >= p.Hq;
    const int s = h - p.Hq;
    const T *W = is_k ? p.wk + (size_t)(p.n_wk == 1 ? 0 : s) * d * f : p.wq + (size_t)(p.n_wq == 1 ? 0 : h) * d * f;
    const bool vec = (f * sizeof(T)) % 16 == 0;
    // the first weight rows before the wait: no kernel writes weights
    gs_stage_weights(Ws, W, 0, min(p.wrows, d), f, vec);
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const int nseq = min(GP_SEQS, p.n_seqs - seq0);
    const T *x = is_k ? p.k : p.q;
    const int Hx = is_k ? p.Hkv : p.Hq, xh = is_k ? s / (p.Hs / p.Hkv) : h;
    for (int e = tid; e < GP_SEQS * d; e += GP_THREADS) {
        const int r = e / d, i = e % d;
        xs[i * GP_SEQS + r] = r < nseq ? lz_to_float(x[((size_t)p.start[seq0 + r] * Hx + xh) * d + i]) : 0.0f;
    }
    // u[r][j] = sum_i x[r][i] W[i][j]: item (feature j, GP_SPT sequences), accumulated in us over weight passes
    constexpr int PARTS = GP_SEQS / GP_SPT;
    for (int i0 = 0; i0 < d; i0 += p.wrows) {
        const int rows = min(p.wrows, d - i0);
        if (i0 > 0) {
            __syncthreads(); // the previous pass's weights are read
            gs_stage_weights(Ws, W, i0, rows, f, vec);
        }
        if (vec)
            gs_cp_async_wait_all();
        __syncthreads();
        for (int it = tid; it < f * PARTS; it += GP_THREADS) {
            const int j = it % f, r0 = (it / f) * GP_SPT;
            float acc[GP_SPT];
#pragma unroll
            for (int r = 0; r < GP_SPT; r++)
                acc[r] = 0.0f;
#pragma unroll 4
            for (int i = 0; i < rows; i++) {
                const float w = lz_to_float(Ws[(size_t)i * f + j]);
                const float4 *xv = (const float4 *)(xs + (size_t)(i0 + i) * GP_SEQS + r0);
#pragma unroll
                for (int v4 = 0; v4 < GP_SPT / 4; v4++) {
                    const float4 xx = xv[v4];
                    acc[4 * v4] += xx.x * w, acc[4 * v4 + 1] += xx.y * w;
                    acc[4 * v4 + 2] += xx.z * w, acc[4 * v4 + 3] += xx.w * w;
                }
            }
#pragma unroll
            for (int r = 0; r < GP_SPT; r++)
                us[(r0 + r) * f + j] = i0 == 0 ? acc[r] : us[(r0 + r) * f + j] + acc[r];
        }
    }
    __syncthreads();
    // phi of each sequence: one warp per sequence
    const int warp = tid >> 5, lane = tid & 31;
    for (int r = warp; r < nseq; r += GP_THREADS / 32) {
        const int qs = seq0 + r;
        const float *u = us + r * f;
        float *ph = is_k ? p.phi_k + ((size_t)qs * p.Hs + s) * F : p.phi_q + ((size_t)qs * p.Hq + h) * F;
        float *zh = is_k ? p.z + ((size_t)p.slot[qs] * p.Hs + s) * F : NULL;
        const float gamma = is_k ? expf(gs_log_sigmoid(lz_to_float(p.gate[p.start[qs]]))) : 0.0f;
        float mx = 0.0f, mn = 0.0f, ip = 1.0f, in = 1.0f;
        if (!p.exp_map) {
            mx = -INFINITY, mn = INFINITY;
            for (int j = lane; j < f; j += 32)
                mx = fmaxf(mx, u[j]), mn = fminf(mn, u[j]);
            mx = lz_warp_max(mx);
            mn = -lz_warp_max(-mn);
            float sp = 0.0f, sn = 0.0f;
            for (int j = lane; j < f; j += 32)
                sp += expf(u[j] - mx), sn += expf(mn - u[j]);
            ip = lz_warp_sum(sp), in = lz_warp_sum(sn);
        }
        for (int j = lane; j < f; j += 32) {
            const float a = expf(u[j] - mx) / ip, b = expf(mn - u[j]) / in;
            ph[j] = a, ph[f + j] = b;
            if (is_k)
                zh[j] = gamma * zh[j] + a, zh[f + j] = gamma * zh[f + j] + b;
        }
    }
}

// Shared memory of the stream kernel in floats.
static __host__ __device__ size_t gs_stream_smem(int group, int F, int cols) {
    return sizeof(float) * ((size_t)(group + 1) * F + F + cols + group + (size_t)GS_WARPS * group * cols);
}

// grid (d / cols, Hs, n), block GS_THREADS; G >= group. Thread: column quad cq of the slice,
// rows rl, rl + rp, ... (rp = rows per pass).
template <typename T, int G> __global__ void __launch_bounds__(GS_THREADS) gla_decode_stream_kernel(gs_params<T> p) {
    extern __shared__ float4 gs_sm4[];
    const int cols = p.cols, qpr = cols / 4, rp = GS_THREADS / qpr, tid = threadIdx.x, cq = tid % qpr, rl = tid / qpr;
    const int c0 = blockIdx.x * cols, s = blockIdx.y, q = blockIdx.z, d = p.d, F = 2 * p.f, group = p.Hq / p.Hs;
    // the step's arrays come from a copy before the step's first kernel
    const int row = p.start[q], slot = p.slot[q];
    float *Sh = p.S + ((size_t)slot * p.Hs + s) * F * d + c0 + cq * 4;
    float4 st[GS_ROWS];
#pragma unroll
    for (int k = 0; k < GS_ROWS; k++) {
        const int a = rl + k * rp;
        st[k] = a < F ? __ldcg((const float4 *)(Sh + (size_t)a * d)) : make_float4(0, 0, 0, 0);
    }
    lz_pdl_wait(); // prep's phi and z; q, k, v, gate from earlier kernels
    lz_pdl_launch_dependents();
    float *sm = (float *)gs_sm4, *phis = sm, *pk = phis + group * F, *zs = pk + F, *vs = zs + F, *dens = vs + cols;
    float *red = dens + group;
    const float gamma = expf(gs_log_sigmoid(lz_to_float(p.gate[row])));
    const int vh = p.Hs == p.Hkv ? s : s / (p.Hq / p.Hkv);
    const float *pq_src = p.phi_q + ((size_t)q * p.Hq + s * group) * F, *pk_src = p.phi_k + ((size_t)q * p.Hs + s) * F;
    const float *z_src = p.z + ((size_t)slot * p.Hs + s) * F;
    for (int e = tid; e < group * F; e += GS_THREADS)
        phis[e] = pq_src[e];
    for (int e = tid; e < F; e += GS_THREADS)
        pk[e] = pk_src[e], zs[e] = z_src[e];
    for (int e = tid; e < cols; e += GS_THREADS)
        vs[e] = lz_to_float(p.v[((size_t)row * p.Hkv + vh) * d + c0 + e]);
    __syncthreads();
    // denominators phi_q_g . z_new: one warp per query head of the group
    const int warp = tid >> 5, lane = tid & 31;
    if (p.normalize)
        for (int g = warp; g < group; g += GS_WARPS) {
            float acc = 0.0f;
            for (int a = lane; a < F; a += 32)
                acc += phis[g * F + a] * zs[a];
            acc = lz_warp_sum(acc);
            if (lane == 0)
                dens[g] = acc;
        }
    // S: update, store, numerators
    float acc[G][4];
#pragma unroll
    for (int g = 0; g < G; g++)
        acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
    const float v0 = vs[cq * 4], v1 = vs[cq * 4 + 1], v2 = vs[cq * 4 + 2], v3 = vs[cq * 4 + 3];
    for (int a0 = 0; a0 < F; a0 += GS_ROWS * rp) {
        if (a0 > 0) { // 2f beyond one pass of rows: the next ones
#pragma unroll
            for (int k = 0; k < GS_ROWS; k++) {
                const int a = a0 + rl + k * rp;
                st[k] = a < F ? __ldcg((const float4 *)(Sh + (size_t)a * d)) : make_float4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int k = 0; k < GS_ROWS; k++) {
            const int a = a0 + rl + k * rp;
            if (a < F) {
                const float pa = pk[a];
                float4 sv;
                sv.x = gamma * st[k].x + pa * v0;
                sv.y = gamma * st[k].y + pa * v1;
                sv.z = gamma * st[k].z + pa * v2;
                sv.w = gamma * st[k].w + pa * v3;
                __stcs((float4 *)(Sh + (size_t)a * d), sv); // read again only at the next step
#pragma unroll
                for (int g = 0; g < G; g++) {
                    if (g < group) {
                        const float w = phis[g * F + a];
                        acc[g][0] += w * sv.x, acc[g][1] += w * sv.y, acc[g][2] += w * sv.z, acc[g][3] += w * sv.w;
                    }
                }
            }
        }
    }
    // numerators over the row lanes: shuffles within the warp (qpr is a power of two <= 8), then warps
    for (int off = qpr; off < 32; off <<= 1) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            acc[g][0] += __shfl_xor_sync(0xffffffffu, acc[g][0], off);
            acc[g][1] += __shfl_xor_sync(0xffffffffu, acc[g][1], off);
            acc[g][2] += __shfl_xor_sync(0xffffffffu, acc[g][2], off);
            acc[g][3] += __shfl_xor_sync(0xffffffffu, acc[g][3], off);
        }
    }
    if (lane < qpr) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            if (g < group) {
                float *dst = red + ((size_t)warp * group + g) * cols + cq * 4;
                dst[0] = acc[g][0], dst[1] = acc[g][1], dst[2] = acc[g][2], dst[3] = acc[g][3];
            }
        }
    }
    __syncthreads();
    for (int e = tid; e < group * cols; e += GS_THREADS) {
        const int g = e / cols, c = e % cols;
        float num = 0.0f;
#pragma unroll
        for (int w = 0; w < GS_WARPS; w++)
            num += red[((size_t)w * group + g) * cols + c];
        p.out[((size_t)row * p.Hq + s * group + g) * d + c0 + c] = lz_from_float<T>(p.normalize ? num / dens[g] : num);
    }
}

// Value columns per stream block: 32, or the largest power-of-two multiple of 4 dividing d.
static int stream_cols(int d) {
    for (int c = GS_COLS; c >= 4; c /= 2)
        if (d % c == 0)
            return c;
    return 0;
}

// Weight rows per prep pass: as many as GP_WBYTES holds.
template <typename T> static int prep_wrows(int d, int f) {
    const int r = GP_WBYTES / (f * (int)sizeof(T));
    return r < 1 ? 1 : r > d ? d : r;
}

template <typename T> bool gla_decode_stream_fits(const lz_cuda_ctx *c, const lz_attn_dims *dims) {
    const int d = dims->head_dim, f = dims->feature_dim, Hq = dims->n_heads, Hkv = dims->n_kv_heads,
              Hs = dims->n_state_heads;
    if (c->fuse_off || Hs <= 0 || Hkv <= 0 || f < 1 || Hq % Hs != 0 || Hq / Hs > GS_MAX_GROUP || Hq % Hkv != 0 ||
        (Hs % Hkv != 0 && Hs != Hq) || stream_cols(d) == 0)
        return false;
    return gs_prep_smem(d, f, prep_wrows<T>(d, f), sizeof(T)) <= c->max_smem &&
           gs_stream_smem(Hq / Hs, 2 * f, stream_cols(d)) <= c->max_smem;
}

template <typename T> size_t gla_decode_stream_scratch(const lz_attn_dims *dims, int n_seqs) {
    return sizeof(float) * (size_t)n_seqs * (size_t)(dims->n_heads + dims->n_state_heads) * 2 * dims->feature_dim;
}

template <typename T, int G> static lz_status launch_stream(lz_cuda_ctx *c, const gs_params<T> &p, size_t smem) {
    return lz_launch(c, "gla decode (stream)", gla_decode_stream_kernel<T, G>,
                     dim3((unsigned)(p.d / p.cols), (unsigned)p.Hs, (unsigned)p.n_seqs), dim3(GS_THREADS), smem, p);
}

template <typename T>
lz_status gla_decode_stream_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *gate_logit,
                                    const T *wq, int n_wq, const T *wk, int n_wk, bool exp_map, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims) {
    const int n = hb->n_seqs;
    if (n <= 0)
        return LZ_OK;
    // the first (eager) run of a step sizes the scratch; a recorded step finds it large enough
    LZ_TRY(lz_cuda_scratch(c, gla_decode_stream_scratch<T>(dims, n)));
    gs_params<T> p = {};
    p.out = out, p.q = q, p.k = k, p.v = v, p.gate = gate_logit, p.wq = wq, p.wk = wk;
    p.S = st->S, p.z = st->z, p.start = b->start, p.slot = b->slot;
    p.n_seqs = n, p.Hq = dims->n_heads, p.Hkv = dims->n_kv_heads, p.Hs = dims->n_state_heads, p.d = dims->head_dim;
    p.f = dims->feature_dim, p.n_wq = n_wq, p.n_wk = n_wk, p.normalize = dims->gla_normalize, p.exp_map = exp_map;
    p.cols = stream_cols(p.d), p.wrows = prep_wrows<T>(p.d, p.f);
    p.phi_q = (float *)c->scratch;
    p.phi_k = p.phi_q + (size_t)n * p.Hq * 2 * p.f;
    const dim3 prep_grid((unsigned)(p.Hq + p.Hs), (unsigned)((n + GP_SEQS - 1) / GP_SEQS));
    LZ_TRY(lz_launch(c, "gla decode (prep)", gla_decode_prep_kernel<T>, prep_grid, dim3(GP_THREADS),
                     gs_prep_smem(p.d, p.f, p.wrows, sizeof(T)), p));
    const int group = p.Hq / p.Hs;
    const size_t smem = gs_stream_smem(group, 2 * p.f, p.cols);
    if (group == 1)
        return launch_stream<T, 1>(c, p, smem);
    if (group == 2)
        return launch_stream<T, 2>(c, p, smem);
    if (group <= 4)
        return launch_stream<T, 4>(c, p, smem);
    if (group <= 8)
        return launch_stream<T, 8>(c, p, smem);
    return launch_stream<T, 16>(c, p, smem);
}

// Once per backend (not per launch, so that decode steps can be captured in graphs).
template <typename T> lz_status gla_decode_stream_init(lz_cuda_ctx *c) {
    const int max = (int)c->max_smem;
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_prep_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    return LZ_OK;
}

#define LZ_GLA_DECODE_STREAM(T)                                                                                    \
    template bool gla_decode_stream_fits<T>(const lz_cuda_ctx *, const lz_attn_dims *);                           \
    template size_t gla_decode_stream_scratch<T>(const lz_attn_dims *, int);                                      \
    template lz_status gla_decode_stream_init<T>(lz_cuda_ctx *);                                                  \
    template lz_status gla_decode_stream_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *, \
                                                    const T *, int, const T *, int, bool, lz_layer_state *,        \
                                                    const lz_cuda_batch *, const lz_batch *, const lz_attn_dims *);
LZ_INSTANTIATE(LZ_GLA_DECODE_STREAM)
