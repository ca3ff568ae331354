// attention_common.cuh - the inner loop shared by the softmax-attention and
// window kernels: one warp runs an online softmax of one query head over a
// range of keys; lane l holds dims l, l + 32, ... of q and of the output.
#ifndef LZ_ATTENTION_COMMON_CUH
#define LZ_ATTENTION_COMMON_CUH

#include "cuda_kernels.cuh"

enum { LZ_ATTN_MAX_DPL = 8 }; // dims per lane: head_dim <= 256 on the CUDA backend

struct lz_online_softmax {
    float m, l, acc[LZ_ATTN_MAX_DPL];
};

// keys(t) and values(t) return the row of key position t for this warp's kv head.
// Dims this lane holds for head_dim d.
__device__ __forceinline__ int lz_lane_dims(int d) { return (d - (threadIdx.x & 31) + 31) / 32; }

// q_s: this warp's query in shared memory (d floats). Keys are taken 32 at a
// time, one per lane: each lane computes its key's full dot product (16-byte
// loads when d allows), the warp folds the 32 scores into the running softmax,
// then every lane accumulates its dims over the 32 value rows (coalesced).
// All loads of a round are independent, so they overlap.
template <typename T, typename KeyRow, typename ValueRow>
__device__ void lz_warp_attend(lz_online_softmax *st, const float *q_s, int d, int t0, int t1, float scale,
                               KeyRow keys, ValueRow values) {
    constexpr int V = vec16<T>::N;
    const int lane = threadIdx.x & 31, n = lz_lane_dims(d);
    const bool vec = d % V == 0;
    for (int base = t0; base < t1; base += 32) {
        const int t = base + lane, cnt = min(32, t1 - base);
        float s = -INFINITY;
        if (t < t1) {
            const T *kr = keys(t);
            float dot = 0.0f;
            if (vec) {
                for (int x = 0; x < d; x += V) {
                    float kv[V];
                    vec16<T>::load(kv, kr + x);
#pragma unroll
                    for (int i = 0; i < V; i++)
                        dot += q_s[x + i] * kv[i];
                }
            } else {
                for (int x = 0; x < d; x++)
                    dot += q_s[x] * lz_to_float(kr[x]);
            }
            s = dot * scale;
        }
        const float m_new = fmaxf(st->m, lz_warp_max(s));
        const float p = t < t1 ? expf(s - m_new) : 0.0f, keep = expf(st->m - m_new);
        st->l = st->l * keep + lz_warp_sum(p);
        st->m = m_new;
        for (int i = 0; i < n; i++)
            st->acc[i] *= keep;
#pragma unroll 8
        for (int j = 0; j < cnt; j++) { // unrolled: eight value rows in flight per lane
            const float pj = __shfl_sync(0xffffffffu, p, j);
            const T *vr = values(base + j);
            for (int i = 0; i < n; i++)
                st->acc[i] += pj * lz_to_float(vr[lane + 32 * i]);
        }
    }
}

#endif
