// window_attention.cu - the Lizard window branch: softmax attention over the
// last w positions with the meta-memory logits in the denominator (no RoPE),
// added as alpha * WIN to the GLA output; then this step's keys and values go
// into each sequence's ring (a second launch, so no block reads a ring row
// that another block of the same step has already overwritten). Prompts in
// bf16 take the tensor-core kernel of window_tc.cu.
#include "attention_common.cuh"
#include "attention_tile.cuh"

// grid (tokens, Hkv), block: `parts` warps per query head of the group. Warp
// (hq, r) takes the r-th slice of the window's keys; the slices' partial
// softmaxes are merged through shared memory, then added as alpha * WIN.
// smem: q [warps][d], partials [warps][d + 2]
template <typename T>
__global__ void window_kernel(T *out, const T *q, const T *k, const T *v, const T *ring_k, const T *ring_v,
                              const T *meta, int n_meta, float alpha, const int32_t *token_seq, const int32_t *slot,
                              const int32_t *start, const int32_t *pos, const int32_t *token_pos, int Hq, int Hkv, int d,
                              int w, int parts) {
    extern __shared__ float sm[];
    const int t = blockIdx.x, g = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = Hq / Hkv, n_dims = lz_lane_dims(d), s = token_seq[t], p = token_pos[t];
    const int hq = warp / parts, part = warp % parts, h = g * group + hq;
    const int pos0 = pos[s], row0 = start[s], first = p - w + 1 > 0 ? p - w + 1 : 0;
    const int span = ((p + 1 - first + parts - 1) / parts + 31) / 32 * 32; // whole rounds of 32 keys
    const int t0 = min(p + 1, first + part * span), t1 = min(p + 1, t0 + span);
    const size_t row = (size_t)Hkv * d, ring = (size_t)slot[s] * w * row + (size_t)g * d;
    float *qv = sm + warp * d, *partial = sm + blockDim.x / 32 * d + warp * (d + 2);
    for (int x = lane; x < d; x += 32)
        qv[x] = lz_to_float(q[((size_t)t * Hq + h) * d + x]);
    __syncwarp();
    lz_online_softmax st = {-INFINITY, 0.0f, {0}};
    if (part == 0) { // the meta logits: mass in the denominator only, counted once per head
        for (int j = 0; j < n_meta; j++)
            st.m = fmaxf(st.m, lz_to_float(meta[j]));
        for (int j = 0; j < n_meta; j++)
            st.l += expf(lz_to_float(meta[j]) - st.m);
    }
    auto key = [&](int key_pos) {
        return key_pos >= pos0 ? k + (size_t)(row0 + key_pos - pos0) * row + (size_t)g * d
                               : ring_k + ring + (size_t)(key_pos % w) * row;
    };
    auto value = [&](int key_pos) {
        return key_pos >= pos0 ? v + (size_t)(row0 + key_pos - pos0) * row + (size_t)g * d
                               : ring_v + ring + (size_t)(key_pos % w) * row;
    };
    lz_warp_attend<T>(&st, qv, d, t0, t1, rsqrtf((float)d), key, value);
    if (lane == 0) {
        partial[0] = st.m;
        partial[1] = st.l;
    }
    for (int i = 0; i < n_dims; i++)
        partial[2 + lane + 32 * i] = st.acc[i];
    __syncthreads();
    if (part != 0)
        return;
    float m = -INFINITY;
    for (int r = 0; r < parts; r++)
        m = fmaxf(m, partial[r * (d + 2)]);
    float l = 0.0f;
    for (int r = 0; r < parts; r++)
        l += partial[r * (d + 2) + 1] * (partial[r * (d + 2)] == -INFINITY ? 0.0f : expf(partial[r * (d + 2)] - m));
    T *o = out + ((size_t)t * Hq + h) * d;
    for (int x = lane; x < d; x += 32) {
        float acc = 0.0f;
        for (int r = 0; r < parts; r++) {
            const float mr = partial[r * (d + 2)];
            if (mr != -INFINITY)
                acc += partial[r * (d + 2) + 2 + x] * expf(mr - m);
        }
        o[x] = lz_from_float<T>(lz_to_float(o[x]) + alpha * acc / l);
    }
}

// grid (tokens, Hkv), block LZ_TILE_THREADS: the group's query heads over the
// window in shared-memory tiles (attention_tile.cuh); the meta logits start the
// softmax's denominator; then out += alpha * WIN.
template <typename T>
__global__ void window_tile_kernel(T *out, const T *q, const T *k, const T *v, const T *ring_k, const T *ring_v,
                                   const T *meta, int n_meta, float alpha, const int32_t *token_seq,
                                   const int32_t *slot, const int32_t *start, const int32_t *pos,
                                   const int32_t *token_pos, int Hq, int Hkv, int d, int w, int kt) {
    extern __shared__ float smem[];
    const int t = blockIdx.x, g = blockIdx.y, group = Hq / Hkv, s_ = token_seq[t], p = token_pos[t];
    const int pos0 = pos[s_], row0 = start[s_], first = p - w + 1 > 0 ? p - w + 1 : 0;
    const size_t row = (size_t)Hkv * d, ring = (size_t)slot[s_] * w * row + (size_t)g * d;
    const lz_tile s = lz_tile_carve<T>(smem, group, d, kt);
    const T *qg = q + ((size_t)t * Hq + (size_t)g * group) * d;
    for (int e = threadIdx.x; e < group * d; e += blockDim.x)
        s.q[e] = lz_to_float(qg[e]);
    if (threadIdx.x < group) { // the meta logits: mass in the denominator only
        float m = -INFINITY, l = 0.0f;
        for (int j = 0; j < n_meta; j++)
            m = fmaxf(m, lz_to_float(meta[j]));
        for (int j = 0; j < n_meta; j++)
            l += expf(lz_to_float(meta[j]) - m);
        s.m[threadIdx.x] = m, s.l[threadIdx.x] = l;
    }
    float acc[4 * LZ_TILE_UNITS] = {0};
    __syncthreads();
    lz_tile_attend<T>(acc, smem, s, first, p + 1, rsqrtf((float)d), [&](int key, const T *&kr, const T *&vr) {
        if (key >= pos0) { // this step's own tokens
            kr = k + (size_t)(row0 + key - pos0) * row + (size_t)g * d;
            vr = v + (size_t)(row0 + key - pos0) * row + (size_t)g * d;
        } else {
            kr = ring_k + ring + (size_t)(key % w) * row;
            vr = ring_v + ring + (size_t)(key % w) * row;
        }
    });
#pragma unroll
    for (int u = 0; u < LZ_TILE_UNITS; u++) {
        const int unit = threadIdx.x + u * blockDim.x;
        if (unit >= group * d / 4)
            continue;
        const int hq = unit * 4 / d, x = unit * 4 % d;
        T *o = out + ((size_t)t * Hq + (size_t)g * group + hq) * d + x;
        for (int i = 0; i < 4; i++)
            o[i] = lz_from_float<T>(lz_to_float(o[i]) + alpha * acc[4 * u + i] / s.l[hq]);
    }
}

// grid (tokens), block 256: the last w tokens of each sequence into its ring
template <typename T>
__global__ void ring_store_kernel(T *ring_k, T *ring_v, const T *k, const T *v, const int32_t *token_seq,
                                  const int32_t *slot, const int32_t *start, const int32_t *len,
                                  const int32_t *token_pos, int row, int w) {
    const int t = blockIdx.x, s = token_seq[t];
    if (t - start[s] < len[s] - w)
        return; // overwritten later in this same step
    const size_t dst = ((size_t)slot[s] * w + token_pos[t] % w) * row, src = (size_t)t * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        ring_k[dst + i] = k[src + i];
        ring_v[dst + i] = v[src + i];
    }
}

template <typename T>
lz_status window_attention_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *meta,
                                   float alpha, lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb,
                                   const lz_attn_dims *dims) {
    const int n = hb->n_tokens, Hq = dims->n_heads, Hkv = dims->n_kv_heads, d = dims->head_dim, w = dims->window;
    if (dims->head_dim > 32 * LZ_ATTN_MAX_DPL)
        return lz_fail(LZ_ERR_INPUT, "CUDA attention supports head_dim <= %d, got %d", 32 * LZ_ATTN_MAX_DPL,
                       dims->head_dim);
    // one warp per 32 keys of the window for every query head, at most 32 warps a block
    const int group = Hq / Hkv;
    if (group > 32)
        return lz_fail(LZ_ERR_INPUT, "window attention supports at most 32 query heads per kv head, got %d", group);
    // prompts in bf16: 64 rows of a sequence per block on tensor cores (chunks mostly full;
    // a step of many one-token sequences keeps the per-token kernels)
    bool tc = false;
    if constexpr (sizeof(T) == 2) {
        tc = n >= 8 * b->n_chunks && lz_window_tc_fits(c, dims, out, q, k, v, st->ring_k, st->ring_v);
        if (tc)
            LZ_TRY(lz_window_tc(c, out, q, k, v, meta, alpha, st, b, dims));
    }
    if (!tc && lz_tile_fits<T>(group, d)) {
        const int kt = lz_tile_keys<T>(group, d);
        window_tile_kernel<T><<<dim3(n, Hkv), LZ_TILE_THREADS, lz_tile_smem<T>(group, d, kt), c->stream>>>(
            out, q, k, v, (const T *)st->ring_k, (const T *)st->ring_v, meta, dims->n_meta, alpha, b->token_seq,
            b->slot, b->start, b->pos, b->token_pos, Hq, Hkv, d, w, kt);
        LZ_LAUNCH_CHECK("window");
    } else if (!tc) { // shapes the tiles do not take: one warp per 32 keys and query head
        int parts = (w + 31) / 32;
        parts = parts * group > 32 ? 32 / group : parts;
        const size_t smem = sizeof(float) * (size_t)group * parts * (2 * d + 2);
        window_kernel<T><<<dim3(n, Hkv), 32 * group * parts, smem, c->stream>>>(
            out, q, k, v, (const T *)st->ring_k, (const T *)st->ring_v, meta, dims->n_meta, alpha, b->token_seq,
            b->slot, b->start, b->pos, b->token_pos, Hq, Hkv, d, w, parts);
        LZ_LAUNCH_CHECK("window");
    }
    ring_store_kernel<T><<<n, 256, 0, c->stream>>>((T *)st->ring_k, (T *)st->ring_v, k, v, b->token_seq, b->slot,
                                                   b->start, b->len, b->token_pos, Hkv * d, w);
    LZ_LAUNCH_CHECK("ring_store");
    return LZ_OK;
}

// Once per backend: the merge buffers may pass 48 KB (32 warps x head_dim 256);
// the tensor-core kernel takes 87 KB at head_dim 128.
template <typename T> lz_status window_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(window_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->max_smem));
    if (sizeof(T) == 2)
        LZ_TRY(lz_window_tc_init(c));
    return LZ_OK;
}

#define LZ_WINDOW(T)                                                                                               \
    template lz_status window_init<T>(lz_cuda_ctx *);                                                              \
    template lz_status window_attention_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *, \
                                                   float, lz_layer_state *, const lz_cuda_batch *,                 \
                                                   const lz_batch *, const lz_attn_dims *);
LZ_INSTANTIATE(LZ_WINDOW)
