// softmax_attention.cu - retained softmax layers: causal GQA attention over each
// sequence's KV cache, keys split into ranges processed by separate blocks
// (flash-decoding) so that a single long sequence still fills the GPU; no T x T
// matrix is formed. Decode steps (one token a sequence, the usual head shapes)
// take attention_decode.cu's kernel: one launch that appends the new key and
// value, streams K/V through cp.async rings and merges the splits itself (its
// comment gives the design and the measurements behind it). Prompts and other shapes:
// kv_append, then the tiled or flash kernels, or the split kernels of older
// design with a separate merge (combine) kernel.
#include "attention_common.cuh"
#include "attention_decode.cuh"
#include "attention_tile.cuh"

enum { LZ_KEYS_PER_SPLIT = 64, LZ_MAX_PARTIALS = 1 << 21 };

// grid (tokens), block 256: copy k and v rows into the cache at (slot, position)
template <typename T>
__global__ void kv_append_kernel(T *kc, T *vc, const T *k, const T *v, const int32_t *token_seq, const int32_t *slot,
                                 const int32_t *token_pos, int row, int capacity) {
    const int t = blockIdx.x;
    const size_t dst = ((size_t)slot[token_seq[t]] * capacity + token_pos[t]) * row, src = (size_t)t * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        kc[dst + i] = k[src + i];
        vc[dst + i] = v[src + i];
    }
}

// grid (tokens, Hkv, splits); warp w takes query heads w, w + warps, ... of the group.
// partial: [tokens, Hq, splits] x (m, l, acc[d]) when splits > 1, else out directly.
template <typename T>
__global__ void attention_kernel(T *out, float *partial, const T *q, const T *kc, const T *vc,
                                 const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos, int Hq,
                                 int Hkv, int d, int capacity, int sliding_window, int splits, int keys_per_split) {
    __shared__ float q_s[8][32 * LZ_ATTN_MAX_DPL]; // one query per warp (at most 8 warps)
    const int t = blockIdx.x, g = blockIdx.y, split = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = Hq / Hkv, n_warps = blockDim.x >> 5, n_dims = lz_lane_dims(d), p = token_pos[t];
    const int first = sliding_window > 0 && p - sliding_window + 1 > 0 ? p - sliding_window + 1 : 0;
    const int t0 = max(first, split * keys_per_split), t1 = min(p + 1, (split + 1) * keys_per_split);
    const size_t row = (size_t)Hkv * d, base = (size_t)slot[token_seq[t]] * capacity * row + (size_t)g * d;
    const float scale = rsqrtf((float)d);
    for (int hq = warp; hq < group; hq += n_warps) {
        const int h = g * group + hq;
        float *qv = q_s[warp];
        __syncwarp();
        for (int x = lane; x < d; x += 32)
            qv[x] = lz_to_float(q[((size_t)t * Hq + h) * d + x]);
        __syncwarp();
        lz_online_softmax st = {-INFINITY, 0.0f, {0}};
        lz_warp_attend<T>(&st, qv, d, t0, t1, scale, [&](int key) { return kc + base + (size_t)key * row; },
                          [&](int key) { return vc + base + (size_t)key * row; });
        if (splits == 1) {
            T *o = out + ((size_t)t * Hq + h) * d + lane;
            for (int i = 0; i < n_dims; i++)
                o[32 * i] = lz_from_float<T>(st.acc[i] / st.l);
        } else {
            float *pp = partial + (((size_t)t * Hq + h) * splits + split) * (d + 2);
            if (lane == 0) {
                pp[0] = st.m;
                pp[1] = st.l;
            }
            for (int i = 0; i < n_dims; i++)
                pp[2 + lane + 32 * i] = st.acc[i];
        }
    }
}

// grid (tokens, Hkv, splits), block LZ_TILE_THREADS: the query heads of kv head g
// over the split's key range in shared-memory tiles (attention_tile.cuh). Same
// outputs as attention_kernel: partials when splits > 1, else out directly.
template <typename T>
__global__ void attention_decode_kernel(T *out, float *partial, const T *q, const T *kc, const T *vc,
                                        const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos,
                                        int Hq, int Hkv, int d, int capacity, int sliding_window, int splits,
                                        int keys_per_split, int kt) {
    extern __shared__ float smem[];
    const int t = blockIdx.x, g = blockIdx.y, split = blockIdx.z, group = Hq / Hkv, p = token_pos[t];
    const int first = sliding_window > 0 && p - sliding_window + 1 > 0 ? p - sliding_window + 1 : 0;
    const int t0 = max(first, split * keys_per_split), t1 = min(p + 1, (split + 1) * keys_per_split);
    const size_t row = (size_t)Hkv * d, base = (size_t)slot[token_seq[t]] * capacity * row + (size_t)g * d;
    const lz_tile s = lz_tile_carve<T>(smem, group, d, kt);
    const T *qg = q + ((size_t)t * Hq + (size_t)g * group) * d; // the group's heads are adjacent
    for (int e = threadIdx.x; e < group * d; e += blockDim.x)
        s.q[e] = lz_to_float(qg[e]);
    for (int h = threadIdx.x; h < group; h += blockDim.x)
        s.m[h] = -INFINITY, s.l[h] = 0.0f;
    float acc[4 * LZ_TILE_UNITS] = {0};
    __syncthreads();
    lz_tile_attend<T>(acc, smem, s, t0, t1, rsqrtf((float)d), [&](int key, const T *&kr, const T *&vr) {
        kr = kc + base + (size_t)key * row;
        vr = vc + base + (size_t)key * row;
    });
#pragma unroll
    for (int u = 0; u < LZ_TILE_UNITS; u++) {
        const int unit = threadIdx.x + u * blockDim.x;
        if (unit >= group * d / 4)
            continue;
        const int hq = unit * 4 / d, x = unit * 4 % d, h = g * group + hq;
        if (splits == 1) {
            T *o = out + ((size_t)t * Hq + h) * d + x;
            for (int i = 0; i < 4; i++)
                o[i] = lz_from_float<T>(acc[4 * u + i] / s.l[hq]);
        } else {
            float *pp = partial + (((size_t)t * Hq + h) * splits + split) * (d + 2);
            if (x == 0)
                pp[0] = s.m[hq], pp[1] = s.l[hq];
            for (int i = 0; i < 4; i++)
                pp[2 + x + i] = acc[4 * u + i];
        }
    }
}

// grid (tokens, Hq), block d: merge the splits' partial softmaxes. The splits'
// weights are computed once into shared memory (all loads independent), then
// each thread sums its dimension over the splits. smem: w [splits], 32 floats.
template <typename T> __global__ void combine_weighted_kernel(T *out, const float *partial, int Hq, int d, int splits) {
    extern __shared__ float w[];
    float *red = w + splits;
    const int t = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    const float *pp = partial + ((size_t)t * Hq + h) * splits * (d + 2);
    float m = -INFINITY;
    for (int s = j; s < splits; s += blockDim.x) {
        const float *ps = pp + (size_t)s * (d + 2);
        w[s] = ps[1] > 0.0f ? ps[0] : -INFINITY; // an empty split (no keys for this token) weighs nothing
        m = fmaxf(m, w[s]);
    }
    m = lz_block_max(m, red);
    float l = 0.0f;
    for (int s = j; s < splits; s += blockDim.x) {
        const float ws = w[s] == -INFINITY ? 0.0f : expf(w[s] - m);
        w[s] = ws;
        l += ws * pp[(size_t)s * (d + 2) + 1];
    }
    l = lz_block_sum(l, red); // its barriers also publish w
    float acc = 0.0f;
#pragma unroll 8
    for (int s = 0; s < splits; s++)
        acc += w[s] * pp[(size_t)s * (d + 2) + 2 + j];
    out[((size_t)t * Hq + h) * d + j] = lz_from_float<T>(acc / l);
}

// grid (tokens, Hq), block d: merge the splits' partial softmaxes
template <typename T> __global__ void combine_kernel(T *out, const float *partial, int Hq, int d, int splits) {
    const int t = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    const float *pp = partial + ((size_t)t * Hq + h) * splits * (d + 2);
    float m = -INFINITY;
    for (int s = 0; s < splits; s++)
        m = fmaxf(m, pp[(size_t)s * (d + 2)]);
    float l = 0.0f, acc = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float *ps = pp + (size_t)s * (d + 2);
        if (ps[1] == 0.0f)
            continue; // an empty split (no keys for this token)
        const float w = expf(ps[0] - m);
        l += ps[1] * w;
        acc += ps[2 + j] * w;
    }
    out[((size_t)t * Hq + h) * d + j] = lz_from_float<T>(acc / l);
}

// Prompt path: a block takes one chunk of up to 64 rows of one sequence and one
// query head, and walks the keys in tiles of 64 through shared memory with an
// online softmax (flash-attention style, on CUDA cores): no T x T matrix.
// grid (chunks, Hq), block rpp x d; smem: S [64][65], m, l, c [64] (fp32); Q, K [64][d+pad], V [64][d] (T)
template <typename T> __host__ __device__ constexpr int kpad(int d) { return d + (sizeof(T) == 2 ? 2 : 1); }

template <typename T>
__global__ void attention_tiled_kernel(T *out, const T *q, const T *kc, const T *vc, const int32_t *chunk_row0,
                                       const int32_t *chunk_len, const int32_t *token_seq, const int32_t *slot,
                                       const int32_t *token_pos, int Hq, int Hkv, int d, int capacity,
                                       int sliding_window) {
    extern __shared__ float sm[];
    const int TILE = 64, dp = kpad<T>(d);
    float *S = sm, *m = S + TILE * (TILE + 1), *l = m + TILE, *cscale = l + TILE;
    T *Qs = (T *)(cscale + TILE), *Ks = Qs + TILE * dp, *Vs = Ks + TILE * dp;
    const int c = blockIdx.x, h = blockIdx.y, g = h / (Hq / Hkv), row0 = chunk_row0[c], L = chunk_len[c];
    const int p0 = token_pos[row0], p_last = token_pos[row0 + L - 1];
    const size_t row = (size_t)Hkv * d, base = (size_t)slot[token_seq[row0]] * capacity * row + (size_t)g * d;
    const float scale = rsqrtf((float)d);
    for (int e = threadIdx.x; e < L * d; e += blockDim.x)
        Qs[(e / d) * dp + e % d] = q[((size_t)(row0 + e / d) * Hq + h) * d + e % d];
    for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const int rpp = blockDim.x / d, j = threadIdx.x % d, i0 = threadIdx.x / d;
    float acc[TILE];
#pragma unroll
    for (int k = 0; k < TILE; k++)
        acc[k] = 0.0f;
    const int k_first = sliding_window > 0 && p0 - sliding_window + 1 > 0 ? p0 - sliding_window + 1 : 0;
    for (int t0 = k_first; t0 <= p_last; t0 += TILE) {
        const int n_keys = min(TILE, p_last + 1 - t0);
        __syncthreads(); // the previous tile is consumed
        for (int e = threadIdx.x; e < n_keys * d; e += blockDim.x) {
            const size_t src = base + (size_t)(t0 + e / d) * row + e % d;
            Ks[(e / d) * dp + e % d] = kc[src];
            Vs[(e / d) * d + e % d] = vc[src];
        }
        __syncthreads();
        for (int e = threadIdx.x; e < L * TILE; e += blockDim.x) {
            const int i = e / TILE, tt = e % TILE, t = t0 + tt, p = p0 + i;
            const bool visible = tt < n_keys && t <= p && (sliding_window <= 0 || t > p - sliding_window);
            float sc = -INFINITY;
            if (visible) {
                sc = 0.0f;
                for (int x = 0; x < d; x++)
                    sc += lz_to_float(Qs[i * dp + x]) * lz_to_float(Ks[tt * dp + x]);
                sc *= scale;
            }
            S[i * (TILE + 1) + tt] = sc;
        }
        __syncthreads();
        for (int i = threadIdx.x >> 5; i < L; i += blockDim.x >> 5) { // one warp per row
            const int lane = threadIdx.x & 31;
            float *Si = S + i * (TILE + 1);
            const float mx = lz_warp_max(fmaxf(Si[lane], Si[lane + 32])), m_new = fmaxf(m[i], mx);
            const float e0 = m_new == -INFINITY ? 0.0f : expf(Si[lane] - m_new);
            const float e1 = m_new == -INFINITY ? 0.0f : expf(Si[lane + 32] - m_new);
            Si[lane] = e0;
            Si[lane + 32] = e1;
            const float sum = lz_warp_sum(e0 + e1);
            if (lane == 0) {
                const float keep = m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);
                cscale[i] = keep;
                l[i] = l[i] * keep + sum;
                m[i] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; k++) {
            const int i = i0 + k * rpp;
            if (i < L)
                acc[k] *= cscale[i];
        }
        for (int tt = 0; tt < n_keys; tt++) {
            const float vv = lz_to_float(Vs[tt * d + j]);
#pragma unroll
            for (int k = 0; k < TILE; k++) {
                const int i = i0 + k * rpp;
                if (i < L)
                    acc[k] += S[i * (TILE + 1) + tt] * vv;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < TILE; k++) {
        const int i = i0 + k * rpp;
        if (i < L)
            out[((size_t)(row0 + i) * Hq + h) * d + j] = lz_from_float<T>(acc[k] / l[i]);
    }
}

template <typename T>
lz_status softmax_attention_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims) {
    const int n = hb->n_tokens, Hq = dims->n_heads, Hkv = dims->n_kv_heads, d = dims->head_dim;
    if (dims->head_dim > 32 * LZ_ATTN_MAX_DPL)
        return lz_fail(LZ_ERR_INPUT, "CUDA attention supports head_dim <= %d, got %d", 32 * LZ_ATTN_MAX_DPL,
                       dims->head_dim);
    const int row = Hkv * d, group = Hq / Hkv;
    if (b->max_len == 1 && lz_attention_decode_fits<T>(c, group, d)) // decode: attention_decode.cu
        return lz_attention_decode<T>(c, out, q, k, v, (T *)st->k_cache, (T *)st->v_cache, b, n, Hq, Hkv, d,
                                      dims->kv_capacity, dims->sliding_window, false, NULL, 0, 0.0f);
    kv_append_kernel<T><<<n, 256, 0, c->stream>>>((T *)st->k_cache, (T *)st->v_cache, k, v, b->token_seq, b->slot,
                                                  b->token_pos, row, dims->kv_capacity);
    LZ_LAUNCH_CHECK("kv_append");
    if (b->max_len > 1) { // a prompt in the step: the tiled kernel for every row
        if constexpr (sizeof(T) == 2) {
            if (lz_attention_wgmma_fits(c, d, Hq, Hkv, b->n_chunks, q, st->k_cache, st->v_cache))
                return lz_attention_wgmma(c, out, q, (const T *)st->k_cache, (const T *)st->v_cache, b->chunk_row0,
                                          b->chunk_len, b->token_seq, b->slot, b->token_pos, n, b->n_chunks, Hq, Hkv,
                                          dims->kv_capacity, dims->sliding_window);
            if (lz_attention_flash_fits(c, d, Hq, Hkv, b->n_chunks))
                return lz_attention_flash(c, out, q, (const T *)st->k_cache, (const T *)st->v_cache, b->chunk_row0,
                                          b->chunk_len, b->token_seq, b->slot, b->token_pos, b->n_chunks, Hq, Hkv, d,
                                          dims->kv_capacity, dims->sliding_window);
            if (lz_attention_tc_fits(c, d))
                return lz_attention_tc(c, out, q, (const T *)st->k_cache, (const T *)st->v_cache, b->chunk_row0,
                                       b->chunk_len, b->token_seq, b->slot, b->token_pos, b->n_chunks, Hq, Hkv, d,
                                       dims->kv_capacity, dims->sliding_window);
        }
        if (d > 256)
            return lz_fail(LZ_ERR_INPUT, "CUDA prompt attention supports head_dim <= 256, got %d", d);
        const size_t smem = sizeof(float) * (64 * 65 + 3 * 64) + sizeof(T) * (2 * 64 * (size_t)kpad<T>(d) + 64 * (size_t)d);
        if (smem > c->max_smem)
            return lz_fail(LZ_ERR_INPUT, "prompt attention needs %zu bytes of shared memory; the GPU offers %zu", smem,
                           c->max_smem);
        attention_tiled_kernel<T><<<dim3(b->n_chunks, Hq), (256 / d) * d, smem, c->stream>>>(
            out, q, (const T *)st->k_cache, (const T *)st->v_cache, b->chunk_row0, b->chunk_len, b->token_seq, b->slot,
            b->token_pos, Hq, Hkv, d, dims->kv_capacity, dims->sliding_window);
        LZ_LAUNCH_CHECK("attention tiled");
        return LZ_OK;
    }
    // Decode: the keys split into ranges so that one long sequence fills the GPU. The
    // split count follows the cache capacity, not the current length, so that every
    // decode step of a state launches the same grid (and can be replayed as a graph).
    int splits = (dims->kv_capacity + LZ_KEYS_PER_SPLIT - 1) / LZ_KEYS_PER_SPLIT;
    // ...but no more than a few waves of blocks: with many sequences each block walks many tiles
    // (many one-tile splits leave the copy rate far behind). Still fixed for a
    // given batch size and capacity, so a recorded graph stays valid.
    const int enough = (4 * c->n_sms + n * Hkv - 1) / (n * Hkv);
    splits = splits < enough ? splits : (enough > 1 ? enough : 1);
    const int cap = (int)(LZ_MAX_PARTIALS / ((size_t)n * Hq));
    splits = splits < cap ? splits : (cap > 1 ? cap : 1);
    const int keys_per_split = (dims->kv_capacity + splits - 1) / splits;
    float *partial = NULL;
    if (splits > 1) {
        LZ_TRY(lz_cuda_scratch(c, sizeof(float) * (size_t)n * Hq * splits * (d + 2)));
        partial = (float *)c->scratch;
    }
    if (lz_tile_fits<T>(group, d) && (size_t)splits * sizeof(float) + 128 <= LZ_TILE_SMEM) {
        const int kt = lz_tile_keys<T>(group, d);
        attention_decode_kernel<T><<<dim3(n, Hkv, splits), LZ_TILE_THREADS, lz_tile_smem<T>(group, d, kt), c->stream>>>(
            out, partial, q, (const T *)st->k_cache, (const T *)st->v_cache, b->token_seq, b->slot, b->token_pos, Hq,
            Hkv, d, dims->kv_capacity, dims->sliding_window, splits, keys_per_split, kt);
        LZ_LAUNCH_CHECK("attention decode");
        if (splits > 1 && d % 32 == 0) { // whole warps for the block reductions
            combine_weighted_kernel<T><<<dim3(n, Hq), d, sizeof(float) * ((size_t)splits + 32), c->stream>>>(
                out, partial, Hq, d, splits);
            LZ_LAUNCH_CHECK("attention combine");
        } else if (splits > 1) {
            combine_kernel<T><<<dim3(n, Hq), d, 0, c->stream>>>(out, partial, Hq, d, splits);
            LZ_LAUNCH_CHECK("attention combine");
        }
        return LZ_OK;
    }
    const int warps = group < 8 ? group : 8; // shapes the tiles do not take: one warp per query head
    attention_kernel<T><<<dim3(n, Hkv, splits), 32 * warps, 0, c->stream>>>(
        out, partial, q, (const T *)st->k_cache, (const T *)st->v_cache, b->token_seq, b->slot, b->token_pos, Hq, Hkv, d,
        dims->kv_capacity, dims->sliding_window, splits, keys_per_split);
    LZ_LAUNCH_CHECK("attention");
    if (splits > 1) {
        combine_kernel<T><<<dim3(n, Hq), d, 0, c->stream>>>(out, partial, Hq, d, splits);
        LZ_LAUNCH_CHECK("attention combine");
    }
    return LZ_OK;
}

// Once per backend (not per launch, so that decode steps can be captured in graphs).
template <typename T> lz_status attention_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(attention_tiled_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return lz_attention_decode_init<T>(c);
}

#define LZ_SOFTMAX_ATTN(T)                                                                                          \
    template lz_status attention_init<T>(lz_cuda_ctx *);                                                           \
    template lz_status softmax_attention_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *,            \
                                                    lz_layer_state *, const lz_cuda_batch *, const lz_batch *,      \
                                                    const lz_attn_dims *);
LZ_INSTANTIATE(LZ_SOFTMAX_ATTN)
