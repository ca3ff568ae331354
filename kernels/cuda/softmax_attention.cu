// softmax_attention.cu - retained softmax layers: append this step's keys and
// values to each sequence's KV cache, then causal GQA attention. Keys are split
// into ranges processed by separate blocks (flash-decoding), and the partial
// softmaxes are merged by a second kernel, so a single long sequence still
// fills the GPU. No T x T matrix is formed.
#include "attention_common.cuh"

enum { LZ_KEYS_PER_SPLIT = 256, LZ_MAX_PARTIALS = 1 << 20 };

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
    const int t = blockIdx.x, g = blockIdx.y, split = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = Hq / Hkv, n_warps = blockDim.x >> 5, n_dims = lz_lane_dims(d), p = token_pos[t];
    const int first = sliding_window > 0 && p - sliding_window + 1 > 0 ? p - sliding_window + 1 : 0;
    const int t0 = max(first, split * keys_per_split), t1 = min(p + 1, (split + 1) * keys_per_split);
    const size_t row = (size_t)Hkv * d, base = (size_t)slot[token_seq[t]] * capacity * row + (size_t)g * d;
    const float scale = rsqrtf((float)d);
    for (int hq = warp; hq < group; hq += n_warps) {
        const int h = g * group + hq;
        float qv[LZ_ATTN_MAX_DPL];
        lz_lane_load(qv, q + ((size_t)t * Hq + h) * d, d);
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

template <typename T>
lz_status softmax_attention_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims) {
    const int n = hb->n_tokens, Hq = dims->n_heads, Hkv = dims->n_kv_heads, d = dims->head_dim;
    if (dims->head_dim > 32 * LZ_ATTN_MAX_DPL)
        return lz_fail(LZ_ERR_INPUT, "CUDA attention supports head_dim <= %d, got %d", 32 * LZ_ATTN_MAX_DPL,
                       dims->head_dim);
    const int row = Hkv * d;
    kv_append_kernel<T><<<n, 256, 0, c->stream>>>((T *)st->k_cache, (T *)st->v_cache, k, v, b->token_seq, b->slot,
                                                  b->token_pos, row, dims->kv_capacity);
    LZ_LAUNCH_CHECK("kv_append");
    // Enough splits to fill the GPU on long contexts, bounded by the scratch for partials.
    int splits = (b->max_end + LZ_KEYS_PER_SPLIT - 1) / LZ_KEYS_PER_SPLIT;
    const int cap = (int)(LZ_MAX_PARTIALS / ((size_t)n * Hq));
    splits = splits < cap ? splits : (cap > 1 ? cap : 1);
    const int keys_per_split = (b->max_end + splits - 1) / splits;
    float *partial = NULL;
    if (splits > 1) {
        LZ_TRY(lz_cuda_scratch(c, sizeof(float) * (size_t)n * Hq * splits * (d + 2)));
        partial = (float *)c->scratch;
    }
    const int group = Hq / Hkv, warps = group < 8 ? group : 8;
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

#define LZ_SOFTMAX_ATTN(T)                                                                                          \
    template lz_status softmax_attention_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *,            \
                                                    lz_layer_state *, const lz_cuda_batch *, const lz_batch *,      \
                                                    const lz_attn_dims *);
LZ_INSTANTIATE(LZ_SOFTMAX_ATTN)
