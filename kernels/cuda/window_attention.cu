// window_attention.cu - the Lizard window branch: softmax attention over the
// last w positions with the meta-memory logits in the denominator (no RoPE),
// added as alpha * WIN to the GLA output; then this step's keys and values go
// into each sequence's ring (a second launch, so no block reads a ring row
// that another block of the same step has already overwritten).
#include "attention_common.cuh"

// grid (tokens, Hkv), warps over the query heads of the group
template <typename T>
__global__ void window_kernel(T *out, const T *q, const T *k, const T *v, const T *ring_k, const T *ring_v,
                              const T *meta, int n_meta, float alpha, const int32_t *token_seq, const int32_t *slot,
                              const int32_t *start, const int32_t *pos, const int32_t *token_pos, int Hq, int Hkv, int d,
                              int w) {
    __shared__ float q_s[8][32 * LZ_ATTN_MAX_DPL]; // one query per warp (at most 8 warps)
    const int t = blockIdx.x, g = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = Hq / Hkv, n_warps = blockDim.x >> 5, n_dims = lz_lane_dims(d), s = token_seq[t], p = token_pos[t];
    const int pos0 = pos[s], row0 = start[s], first = p - w + 1 > 0 ? p - w + 1 : 0;
    const size_t row = (size_t)Hkv * d, ring = (size_t)slot[s] * w * row + (size_t)g * d;
    float mm = -INFINITY;
    for (int j = 0; j < n_meta; j++)
        mm = fmaxf(mm, lz_to_float(meta[j]));
    for (int hq = warp; hq < group; hq += n_warps) {
        const int h = g * group + hq;
        float *qv = q_s[warp];
        __syncwarp();
        for (int x = lane; x < d; x += 32)
            qv[x] = lz_to_float(q[((size_t)t * Hq + h) * d + x]);
        __syncwarp();
        // meta logits: mass in the denominator only
        lz_online_softmax st = {mm, 0.0f, {0}};
        for (int j = 0; j < n_meta; j++)
            st.l += expf(lz_to_float(meta[j]) - mm);
        auto key = [&](int key_pos) {
            return key_pos >= pos0 ? k + (size_t)(row0 + key_pos - pos0) * row + (size_t)g * d
                                   : ring_k + ring + (size_t)(key_pos % w) * row;
        };
        auto value = [&](int key_pos) {
            return key_pos >= pos0 ? v + (size_t)(row0 + key_pos - pos0) * row + (size_t)g * d
                                   : ring_v + ring + (size_t)(key_pos % w) * row;
        };
        lz_warp_attend<T>(&st, qv, d, first, p + 1, rsqrtf((float)d), key, value);
        T *o = out + ((size_t)t * Hq + h) * d + lane;
        for (int i = 0; i < n_dims; i++)
            o[32 * i] = lz_from_float<T>(lz_to_float(o[32 * i]) + alpha * st.acc[i] / st.l);
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
    const int group = Hq / Hkv, warps = group < 8 ? group : 8;
    window_kernel<T><<<dim3(n, Hkv), 32 * warps, 0, c->stream>>>(
        out, q, k, v, (const T *)st->ring_k, (const T *)st->ring_v, meta, dims->n_meta, alpha, b->token_seq, b->slot,
        b->start, b->pos, b->token_pos, Hq, Hkv, d, w);
    LZ_LAUNCH_CHECK("window");
    ring_store_kernel<T><<<n, 256, 0, c->stream>>>((T *)st->ring_k, (T *)st->ring_v, k, v, b->token_seq, b->slot,
                                                   b->start, b->len, b->token_pos, Hkv * d, w);
    LZ_LAUNCH_CHECK("ring_store");
    return LZ_OK;
}

#define LZ_WINDOW(T)                                                                                               \
    template lz_status window_attention_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *, \
                                                   float, lz_layer_state *, const lz_cuda_batch *,                 \
                                                   const lz_batch *, const lz_attn_dims *);
LZ_INSTANTIATE(LZ_WINDOW)
