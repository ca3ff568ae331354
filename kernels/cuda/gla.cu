// gla.cu - gated linear attention on the GPU.
//
// Prompts (chunked, chunk-parallel; three launches):
//   1. chunk_state: for every chunk c and state head, dS_c = sum_t exp(G_last - G_t) phi_k_t v_t^T
//      and dz_c (G: chunk-local cumulative log-gates, so every weight is <= 1);
//   2. chunk_scan: per sequence, walk its chunks in order: keep S_prev(c) (the state before c)
//      in place of dS_c, S = exp(G_last(c)) S + dS_c; the final S, z go back to the slot;
//   3. chunk_output: per chunk and query head, out_i = [exp(G_i) phi_q_i^T S_prev + sum_{t<=i} a_it v_t]
//      / [exp(G_i) phi_q_i . z_prev + sum_{t<=i} a_it], a_it = phi_q_i . phi_k_t exp(G_i - G_t).
// Everything in fp32 arithmetic; S and z are fp32. No T x T matrix; memory linear in T.
// bf16 prompts take gla_prompt_tc.cu (the same three steps on tensor cores) where the shape allows;
// these kernels stay the fp32 path and the fallback.
// Decode (recurrent, one launch): S = g S + phi_k v^T, z = g z + phi_k, read out for every
// query head of the group while the state is in registers: the state is read and written once.
#include "cuda_kernels.cuh"

enum { LZ_CHUNK = 64, LZ_FTILE = 32, LZ_MAX_GROUP = 16 };

// Chunk-local cumulative log gates into g[0..n) (thread 0; n <= 64).
__device__ void chunk_cumsum(float *g, const float *lg_or_null, int n) {
    if (threadIdx.x == 0) {
        float acc = 0.0f;
        for (int i = 0; i < n; i++)
            g[i] = (acc += lg_or_null[i]);
    }
    __syncthreads();
}

template <typename T>
__device__ void load_log_gates(float *lg, const T *log_gamma, int row0, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        lg[i] = lz_to_float(log_gamma[row0 + i]);
    __syncthreads();
}

struct gla_shape {
    int Hq, Hkv, Hs, d, F; // F = 2f
    __device__ int value_head(int s) const { return Hs == Hkv ? s : s / (Hq / Hkv); }
};

// grid (chunks, Hs, F / FTILE), block 256; smem: phi_k tile [64][FTILE], v [64][d], weights [64]
template <typename T>
__global__ void chunk_state_kernel(float *dS, float *dz, float *decay, const T *phi_k, const T *v, const T *log_gamma,
                                   const int32_t *chunk_row0, const int32_t *chunk_len, gla_shape sh) {
    extern __shared__ float sm[];
    float *pk = sm, *vs = pk + LZ_CHUNK * LZ_FTILE, *wt = vs + LZ_CHUNK * sh.d, *lg = wt + LZ_CHUNK;
    const int c = blockIdx.x, s = blockIdx.y, a0 = blockIdx.z * LZ_FTILE, row0 = chunk_row0[c], L = chunk_len[c];
    const int vh = sh.value_head(s);
    load_log_gates(lg, log_gamma, row0, L);
    chunk_cumsum(wt, lg, L);
    const float g_last = wt[L - 1];
    __syncthreads();
    for (int i = threadIdx.x; i < L; i += blockDim.x)
        wt[i] = expf(g_last - wt[i]);
    if (threadIdx.x == 0 && s == 0 && blockIdx.z == 0)
        decay[c] = expf(g_last);
    for (int e = threadIdx.x; e < L * LZ_FTILE; e += blockDim.x) {
        const int t = e / LZ_FTILE, a = e % LZ_FTILE;
        pk[e] = a0 + a < sh.F ? lz_to_float(phi_k[((size_t)(row0 + t) * sh.Hs + s) * sh.F + a0 + a]) : 0.0f;
    }
    for (int e = threadIdx.x; e < L * sh.d; e += blockDim.x) {
        const int t = e / sh.d, j = e % sh.d;
        vs[e] = lz_to_float(v[((size_t)(row0 + t) * sh.Hkv + vh) * sh.d + j]);
    }
    __syncthreads();
    float *out = dS + ((size_t)c * sh.Hs + s) * sh.F * sh.d;
    for (int e = threadIdx.x; e < LZ_FTILE * sh.d; e += blockDim.x) {
        const int a = e / sh.d, j = e % sh.d;
        if (a0 + a >= sh.F)
            break;
        float acc = 0.0f;
        for (int t = 0; t < L; t++)
            acc += wt[t] * pk[t * LZ_FTILE + a] * vs[t * sh.d + j];
        out[(size_t)(a0 + a) * sh.d + j] = acc;
    }
    for (int a = threadIdx.x; a < LZ_FTILE && a0 + a < sh.F; a += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < L; t++)
            acc += wt[t] * pk[t * LZ_FTILE + a];
        dz[((size_t)c * sh.Hs + s) * sh.F + a0 + a] = acc;
    }
}

// grid (seqs, Hs, ceil(F*(d+1) / 256)), block 256: one element of [S | z] per thread
__global__ void chunk_scan_kernel(float *dS, float *dz, const float *decay, float *S, float *z,
                                  const int32_t *seq_chunk0, const int32_t *seq_chunks, const int32_t *slot,
                                  gla_shape sh) {
    const int q = blockIdx.x, s = blockIdx.y;
    const size_t e = (size_t)blockIdx.z * blockDim.x + threadIdx.x, n_s = (size_t)sh.F * sh.d;
    if (e >= n_s + sh.F)
        return;
    const bool is_z = e >= n_s;
    const size_t elem = is_z ? e - n_s : e;
    float *state = is_z ? z + ((size_t)slot[q] * sh.Hs + s) * sh.F + elem
                        : S + ((size_t)slot[q] * sh.Hs + s) * n_s + elem;
    float acc = *state;
    for (int c = seq_chunk0[q], end = c + seq_chunks[q]; c < end; c++) {
        float *cell = is_z ? dz + ((size_t)c * sh.Hs + s) * sh.F + elem : dS + ((size_t)c * sh.Hs + s) * n_s + elem;
        const float delta = *cell;
        *cell = acc; // now S_prev(c)
        acc = decay[c] * acc + delta;
    }
    *state = acc;
}

// Row stride of phi tiles in shared memory: one element of padding puts
// consecutive rows in different banks (the A loop reads down a column).
template <typename T> __host__ __device__ constexpr int padded(int F) { return F + (sizeof(T) == 2 ? 2 : 1); }

// grid (chunks, Hq), block 256; smem: A [64][65], g, den, lg [64] (fp32), phi_q, phi_k [64][F+pad], v [64][d] (T)
template <typename T>
__global__ void chunk_output_kernel(T *out, const T *phi_q, const T *phi_k, const T *v, const T *log_gamma,
                                    const float *S_prev, const float *z_prev, const int32_t *chunk_row0,
                                    const int32_t *chunk_len, gla_shape sh, bool normalize) {
    extern __shared__ float sm[];
    const int Fp = padded<T>(sh.F);
    float *A = sm, *g = A + LZ_CHUNK * (LZ_CHUNK + 1), *den = g + LZ_CHUNK, *lg = den + LZ_CHUNK;
    T *pq = (T *)(lg + LZ_CHUNK), *pk = pq + LZ_CHUNK * Fp, *vs = pk + LZ_CHUNK * Fp;
    const int c = blockIdx.x, h = blockIdx.y, row0 = chunk_row0[c], L = chunk_len[c];
    const int s = sh.Hs == sh.Hq ? h : h / (sh.Hq / sh.Hs), vh = sh.value_head(s);
    load_log_gates(lg, log_gamma, row0, L);
    chunk_cumsum(g, lg, L);
    for (int e = threadIdx.x; e < L * sh.F; e += blockDim.x) {
        const int t = e / sh.F, a = e % sh.F;
        pq[t * Fp + a] = phi_q[((size_t)(row0 + t) * sh.Hq + h) * sh.F + a];
        pk[t * Fp + a] = phi_k[((size_t)(row0 + t) * sh.Hs + s) * sh.F + a];
    }
    for (int e = threadIdx.x; e < L * sh.d; e += blockDim.x)
        vs[e] = v[((size_t)(row0 + e / sh.d) * sh.Hkv + vh) * sh.d + e % sh.d];
    __syncthreads();
    // A = (phi_q phi_k^T) masked causally, decayed by exp(G_i - G_t) <= 1
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        const int i = e / L, t = e % L;
        float acc = 0.0f;
        if (t <= i) {
            const T *qi = pq + i * Fp, *kt = pk + t * Fp;
            for (int a = 0; a < sh.F; a++)
                acc += lz_to_float(qi[a]) * lz_to_float(kt[a]);
            acc *= expf(g[i] - g[t]);
        }
        A[i * (LZ_CHUNK + 1) + t] = acc;
    }
    __syncthreads();
    const float *Sp = S_prev + ((size_t)c * sh.Hs + s) * sh.F * sh.d, *zp = z_prev + ((size_t)c * sh.Hs + s) * sh.F;
    // den_i = exp(G_i) phi_q_i . z_prev + sum_t A_it: one warp per row
    for (int i = threadIdx.x >> 5; i < L; i += blockDim.x >> 5) {
        float inter = 0.0f, intra = 0.0f;
        for (int a = threadIdx.x & 31; a < sh.F; a += 32)
            inter += lz_to_float(pq[i * Fp + a]) * zp[a];
        for (int t = threadIdx.x & 31; t <= i; t += 32)
            intra += A[i * (LZ_CHUNK + 1) + t];
        const float total = expf(g[i]) * lz_warp_sum(inter) + lz_warp_sum(intra);
        if ((threadIdx.x & 31) == 0)
            den[i] = total;
    }
    // out[i][j]: thread owns column j and rows i0, i0 + rpp, ...; the state
    // element S_prev[a][j] and v[t][j] are loaded once and used for all its rows.
    const int rpp = blockDim.x / sh.d, j = threadIdx.x % sh.d, i0 = threadIdx.x / sh.d; // blockDim = rpp * d
    float acc[LZ_CHUNK];
#pragma unroll
    for (int k = 0; k < LZ_CHUNK; k++)
        acc[k] = 0.0f;
    for (int a = 0; a < sh.F; a++) {
        const float sv = Sp[(size_t)a * sh.d + j];
#pragma unroll
        for (int k = 0; k < LZ_CHUNK; k++) {
            const int i = i0 + k * rpp;
            if (i < L)
                acc[k] += lz_to_float(pq[i * Fp + a]) * sv;
        }
    }
#pragma unroll
    for (int k = 0; k < LZ_CHUNK; k++) {
        const int i = i0 + k * rpp;
        if (i < L)
            acc[k] *= expf(g[i]);
    }
    for (int t = 0; t < L; t++) {
        const float vv = lz_to_float(vs[t * sh.d + j]);
#pragma unroll
        for (int k = 0; k < LZ_CHUNK; k++) {
            const int i = i0 + k * rpp;
            if (i < L && t <= i)
                acc[k] += A[i * (LZ_CHUNK + 1) + t] * vv;
        }
    }
    __syncthreads(); // den is complete
#pragma unroll
    for (int k = 0; k < LZ_CHUNK; k++) {
        const int i = i0 + k * rpp;
        if (i < L)
            out[((size_t)(row0 + i) * sh.Hq + h) * sh.d + j] = lz_from_float<T>(normalize ? acc[k] / den[i] : acc[k]);
    }
}

static gla_shape shape_of(const lz_attn_dims *d) {
    return gla_shape{d->n_heads, d->n_kv_heads, d->n_state_heads, d->head_dim, 2 * d->feature_dim};
}

template <typename T>
lz_status gla_chunked_forward(lz_cuda_ctx *c, T *out, const T *phi_q, const T *phi_k, const T *v, const T *log_gamma,
                              lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims) {
    const gla_shape sh = shape_of(dims);
    const int C = b->n_chunks;
    if constexpr (sizeof(T) == 2) { // bf16: state, scan and output on tensor cores when the shape allows
        if (lz_gla_prompt_fits(c, out, phi_q, phi_k, v, sh.Hq, sh.Hs, sh.d, sh.F))
            return lz_gla_prompt(c, out, phi_q, phi_k, v, log_gamma, st->S, st->z, b->chunk_row0, b->chunk_len,
                                 b->seq_chunk0, b->seq_chunks, b->slot, C, hb->n_seqs, sh.Hq, sh.Hkv, sh.Hs, sh.d,
                                 sh.F, dims->gla_normalize);
    }
    const size_t dS_elems = (size_t)C * sh.Hs * sh.F * sh.d, dz_elems = (size_t)C * sh.Hs * sh.F;
    LZ_TRY(lz_cuda_scratch(c, sizeof(float) * (dS_elems + dz_elems + C)));
    float *dS = (float *)c->scratch, *dz = dS + dS_elems, *decay = dz + dz_elems;

    const size_t smem_a = sizeof(float) * (LZ_CHUNK * LZ_FTILE + LZ_CHUNK * sh.d + 2 * LZ_CHUNK);
    const size_t smem_c = sizeof(float) * (LZ_CHUNK * (LZ_CHUNK + 1) + 3 * LZ_CHUNK) +
                          sizeof(T) * (2 * (size_t)LZ_CHUNK * padded<T>(sh.F) + (size_t)LZ_CHUNK * sh.d);
    const bool tensor_cores = sizeof(T) == 2 && lz_gla_tc_fits(c, sh.F, sh.d);
    if (smem_a > c->max_smem || (!tensor_cores && smem_c > c->max_smem))
        return lz_fail(LZ_ERR_INPUT, "GLA chunk kernel needs %zu bytes of shared memory (feature_dim %d, head_dim %d); "
                                     "the GPU offers %zu", smem_c, dims->feature_dim, sh.d, c->max_smem);

    chunk_state_kernel<T><<<dim3(C, sh.Hs, (sh.F + LZ_FTILE - 1) / LZ_FTILE), 256, smem_a, c->stream>>>(
        dS, dz, decay, phi_k, v, log_gamma, b->chunk_row0, b->chunk_len, sh);
    LZ_LAUNCH_CHECK("gla chunk_state");
    const size_t elems = (size_t)sh.F * (sh.d + 1);
    chunk_scan_kernel<<<dim3(hb->n_seqs, sh.Hs, (unsigned)((elems + 255) / 256)), 256, 0, c->stream>>>(
        dS, dz, decay, st->S, st->z, b->seq_chunk0, b->seq_chunks, b->slot, sh);
    LZ_LAUNCH_CHECK("gla chunk_scan");
    if constexpr (sizeof(T) == 2) { // bf16: the chunk output on tensor cores when the shape allows
        if (tensor_cores)
            return lz_gla_tc_output(c, out, phi_q, phi_k, v, log_gamma, dS, dz, b->chunk_row0, b->chunk_len, C, sh.Hq,
                                    sh.Hkv, sh.Hs, sh.d, sh.F, dims->gla_normalize);
    }
    // 256 threads = rows-per-pass x d columns; d > 256 would need more threads than rows fit
    if (sh.d > 256)
        return lz_fail(LZ_ERR_INPUT, "GLA chunk kernel supports head_dim <= 256, got %d", sh.d);
    chunk_output_kernel<T><<<dim3(C, sh.Hq), (256 / sh.d) * sh.d, smem_c, c->stream>>>(out, phi_q, phi_k, v, log_gamma, dS, dz,
                                                                         b->chunk_row0, b->chunk_len, sh,
                                                                         dims->gla_normalize);
    LZ_LAUNCH_CHECK("gla chunk_output");
    return LZ_OK;
}

// grid (seqs, Hs), block 1024 = d columns x (1024 / d) feature parts; smem: phi_q of the group, phi_k, v, partials
template <typename T>
__global__ void __launch_bounds__(1024) gla_decode_kernel(T *out, const T *phi_q, const T *phi_k, const T *v, const T *log_gamma, float *S,
                                  float *z, const int32_t *start, const int32_t *slot, gla_shape sh, bool normalize) {
    extern __shared__ float sm[];
    const int q = blockIdx.x, s = blockIdx.y, row = start[q], group = sh.Hq / sh.Hs, vh = sh.value_head(s);
    const int parts = blockDim.x / sh.d, j = threadIdx.x % sh.d, part = threadIdx.x / sh.d;
    float *pq = sm, *pk = pq + group * sh.F, *vs = pk + sh.F, *nums = vs + sh.d, *dens = nums + parts * group * sh.d;
    const float gamma = expf(lz_to_float(log_gamma[row]));
    for (int e = threadIdx.x; e < group * sh.F; e += blockDim.x)
        pq[e] = lz_to_float(phi_q[((size_t)row * sh.Hq + s * group + e / sh.F) * sh.F + e % sh.F]);
    for (int e = threadIdx.x; e < sh.F; e += blockDim.x)
        pk[e] = lz_to_float(phi_k[((size_t)row * sh.Hs + s) * sh.F + e]);
    for (int e = threadIdx.x; e < sh.d; e += blockDim.x)
        vs[e] = lz_to_float(v[((size_t)row * sh.Hkv + vh) * sh.d + e]);
    __syncthreads();
    float num[LZ_MAX_GROUP] = {0};
    float *Sh = S + ((size_t)slot[q] * sh.Hs + s) * sh.F * sh.d;
    // Rows of S (and of z) are loaded R at a time into registers before any is
    // written back, so that a decode step's few blocks keep R loads in flight
    // per thread (the compiler cannot reorder loads past stores to S itself).
    constexpr int R = 8;
    if (part < parts) {
        const int a_per = (sh.F + parts - 1) / parts, a_end = min(sh.F, (part + 1) * a_per);
        for (int a0 = part * a_per; a0 < a_end; a0 += R) {
            float old[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                old[r] = a0 + r < a_end ? Sh[(size_t)(a0 + r) * sh.d + j] : 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int a = a0 + r;
                if (a < a_end) {
                    const float sv = gamma * old[r] + pk[a] * vs[j];
                    Sh[(size_t)a * sh.d + j] = sv;
                    for (int hq = 0; hq < group; hq++)
                        num[hq] += pq[hq * sh.F + a] * sv;
                }
            }
        }
        for (int hq = 0; hq < group; hq++)
            nums[(part * group + hq) * sh.d + j] = num[hq];
    }
    // z and the denominators: warp 0
    float *zh = z + ((size_t)slot[q] * sh.Hs + s) * sh.F;
    if (threadIdx.x < 32) {
        float den[LZ_MAX_GROUP] = {0};
        constexpr int RZ = 8;
        for (int a0 = 0; a0 < sh.F; a0 += 32 * RZ) {
            float old[RZ];
#pragma unroll
            for (int r = 0; r < RZ; r++) {
                const int a = a0 + r * 32 + (int)threadIdx.x;
                old[r] = a < sh.F ? zh[a] : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < RZ; r++) {
                const int a = a0 + r * 32 + (int)threadIdx.x;
                if (a < sh.F) {
                    const float zv = gamma * old[r] + pk[a];
                    zh[a] = zv;
                    for (int hq = 0; hq < group; hq++)
                        den[hq] += pq[hq * sh.F + a] * zv;
                }
            }
        }
        for (int hq = 0; hq < group; hq++) {
            const float dsum = lz_warp_sum(den[hq]);
            if (threadIdx.x == 0)
                dens[hq] = dsum;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < group * sh.d; e += blockDim.x) {
        const int hq = e / sh.d, col = e % sh.d;
        float acc = 0.0f;
        for (int p = 0; p < parts; p++)
            acc += nums[(p * group + hq) * sh.d + col];
        out[((size_t)row * sh.Hq + s * group + hq) * sh.d + col] = lz_from_float<T>(normalize ? acc / dens[hq] : acc);
    }
}

template <typename T>
lz_status gla_recurrent_forward(lz_cuda_ctx *c, T *out, const T *phi_q, const T *phi_k, const T *v,
                                const T *log_gamma, lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb,
                                const lz_attn_dims *dims) {
    // each state head's columns over a cluster of blocks, while there are few sequences to spread over the GPU
    if (gla_decode_split_fits<T>(c, dims, false) && hb->n_seqs <= LZ_GLA_SPLIT_MAX_SEQS)
        return gla_decode_split_forward<T>(c, out, phi_q, phi_k, v, log_gamma, st, b, hb, dims);
    const gla_shape sh = shape_of(dims);
    // 1024 threads: d columns x (1024 / d) feature parts, so that the state streams through many warps
    const int group = sh.Hq / sh.Hs, block = sh.d >= 1024 ? sh.d : (1024 / sh.d) * sh.d, parts = block / sh.d;
    if (group > LZ_MAX_GROUP)
        return lz_fail(LZ_ERR_INPUT, "GLA decode supports at most %d query heads per state head, got %d", LZ_MAX_GROUP,
                       group);
    const size_t smem = sizeof(float) * ((size_t)group * sh.F + sh.F + sh.d + (size_t)parts * group * sh.d + group);
    if (smem > c->max_smem)
        return lz_fail(LZ_ERR_INPUT, "GLA decode kernel needs %zu bytes of shared memory; the GPU offers %zu", smem,
                       c->max_smem);
    gla_decode_kernel<T><<<dim3(hb->n_seqs, sh.Hs), block, smem, c->stream>>>(out, phi_q, phi_k, v, log_gamma, st->S,
                                                                               st->z, b->start, b->slot, sh,
                                                                               dims->gla_normalize);
    LZ_LAUNCH_CHECK("gla decode");
    return LZ_OK;
}

// Once per backend (not per launch, so that decode steps can be captured in graphs).
template <typename T> lz_status gla_init(lz_cuda_ctx *c) {
    const int max = (int)c->max_smem;
    LZ_CUDA_TRY(cudaFuncSetAttribute(chunk_state_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(chunk_output_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    return LZ_OK;
}

#define LZ_GLA(T)                                                                                                  \
    template lz_status gla_init<T>(lz_cuda_ctx *);                                                                 \
    template lz_status gla_chunked_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *,      \
                                              lz_layer_state *, const lz_cuda_batch *, const lz_batch *,           \
                                              const lz_attn_dims *);                                               \
    template lz_status gla_recurrent_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *,    \
                                                lz_layer_state *, const lz_cuda_batch *, const lz_batch *,         \
                                                const lz_attn_dims *);
LZ_INSTANTIATE(LZ_GLA)
