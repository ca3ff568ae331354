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

template <typename T>
__device__ void lz_lane_load(float *dst, const T *row, int d) {
    const int lane = threadIdx.x & 31;
    for (int i = 0; i < lz_lane_dims(d); i++)
        dst[i] = lz_to_float(row[lane + 32 * i]);
}

template <typename T, typename KeyRow, typename ValueRow>
__device__ void lz_warp_attend(lz_online_softmax *st, const float *q, int d, int t0, int t1, float scale,
                               KeyRow keys, ValueRow values) {
    const int lane = threadIdx.x & 31, n = lz_lane_dims(d);
    for (int t = t0; t < t1; t++) {
        const T *kr = keys(t);
        float s = 0.0f;
        for (int i = 0; i < n; i++)
            s += q[i] * lz_to_float(kr[lane + 32 * i]);
        s = lz_warp_sum(s) * scale;
        const float m_new = fmaxf(st->m, s), keep = expf(st->m - m_new), e = expf(s - m_new);
        const T *vr = values(t);
        for (int i = 0; i < n; i++)
            st->acc[i] = st->acc[i] * keep + e * lz_to_float(vr[lane + 32 * i]);
        st->l = st->l * keep + e;
        st->m = m_new;
    }
}

#endif
