// attention_tile.cuh - one block attends the `group` query heads that share a
// key/value head over a range of key positions, KT keys at a time: the tile's
// keys and values are fetched with 16-byte loads by every thread at once
// (one memory round trip per tile), then scores, the online softmax and the
// weighted values are computed from shared memory. Used by decode steps of
// retained softmax layers (one block per key range, flash-decoding) and by the
// Lizard window branch (one block per token and kv head).
#ifndef LZ_ATTENTION_TILE_CUH
#define LZ_ATTENTION_TILE_CUH

#include "cuda_kernels.cuh"

enum {
    LZ_TILE_THREADS = 128,
    LZ_TILE_UNITS = 4,                  // 4-dim output units per thread
    LZ_TILE_MAX_OUT = LZ_TILE_THREADS * LZ_TILE_UNITS * 4, // group * head_dim a block can hold
    LZ_TILE_SMEM = 48 * 1024            // no opt-in needed
};

// Shared memory: q [group][d], scores [group][kt], m, l, corr [group] (floats,
// padded to 16 bytes), then K and V tiles [kt][ld] with rows 16 bytes longer
// than d, so that lanes reading different rows at one column hit different banks.
template <typename T> __host__ __device__ inline int lz_tile_ld(int d) { return d + 16 / (int)sizeof(T); }
__host__ __device__ inline int lz_tile_floats(int group, int d, int kt) {
    return (group * d + group * kt + 3 * group + 3) / 4 * 4;
}
template <typename T> __host__ __device__ inline size_t lz_tile_smem(int group, int d, int kt) {
    return sizeof(float) * (size_t)lz_tile_floats(group, d, kt) + sizeof(T) * 2 * (size_t)kt * lz_tile_ld<T>(d);
}

// Whether the tiled kernels take this shape (else the callers' warp kernels do).
template <typename T> inline bool lz_tile_fits(int group, int d) {
    return d % (16 / (int)sizeof(T)) == 0 && group * d <= LZ_TILE_MAX_OUT && lz_tile_smem<T>(group, d, 8) <= LZ_TILE_SMEM;
}
// The largest power-of-two tile (at most 64 keys) within LZ_TILE_SMEM.
template <typename T> inline int lz_tile_keys(int group, int d) {
    int kt = 64;
    while (kt > 8 && lz_tile_smem<T>(group, d, kt) > LZ_TILE_SMEM)
        kt /= 2;
    return kt;
}

struct lz_tile {
    float *q, *p, *m, *l, *corr;
    int group, d, kt, ld;
};

template <typename T> __device__ inline lz_tile lz_tile_carve(float *smem, int group, int d, int kt) {
    lz_tile s;
    s.q = smem;
    s.p = s.q + group * d;
    s.m = s.p + group * kt;
    s.l = s.m + group;
    s.corr = s.l + group;
    s.group = group, s.d = d, s.kt = kt, s.ld = lz_tile_ld<T>(d);
    return s;
}
template <typename T> __device__ inline T *lz_tile_keys_smem(float *smem, const lz_tile &s) {
    return (T *)(smem + lz_tile_floats(s.group, s.d, s.kt));
}

// four consecutive elements (8- or 16-byte aligned) as floats
__device__ inline void lz_load4(float *f, const __nv_bfloat16 *p) {
    const uint2 raw = *(const uint2 *)p;
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.x);
    const float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.y);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}
__device__ inline void lz_load4(float *f, const float *p) {
    const float4 v = *(const float4 *)p;
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
}

// The caller has filled s.q, set m = -inf (or the meta logits' max) and l, and
// zeroed acc. rows(t, &k_row, &v_row) gives key position t's rows for this kv head.
// acc[4u + i] holds output element 4 * (threadIdx.x + u * blockDim.x) + i of
// [group][d] (units past group * d / 4 are unused).
template <typename T, typename Rows>
__device__ void lz_tile_attend(float *acc, float *smem, const lz_tile &s, int t0, int t1, float scale, Rows rows) {
    constexpr int V = 16 / sizeof(T), NB = 8; // elements per 16-byte load; loads batched per thread
    T *ks = lz_tile_keys_smem<T>(smem, s), *vs = ks + (size_t)s.kt * s.ld;
    const int vecs = s.d / V, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const int units = s.group * s.d / 4;
    for (int tt = t0; tt < t1; tt += s.kt) {
        const int n = min(s.kt, t1 - tt), total = n * vecs;
        for (int e0 = threadIdx.x; e0 < total; e0 += NB * blockDim.x) { // NB loads of K and of V in flight
            uint4 kr[NB], vr[NB];
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const int e = e0 + b * blockDim.x;
                if (e < total) {
                    const T *kp, *vp;
                    rows(tt + e / vecs, kp, vp);
                    kr[b] = ((const uint4 *)kp)[e % vecs];
                    vr[b] = ((const uint4 *)vp)[e % vecs];
                }
            }
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const int e = e0 + b * blockDim.x;
                if (e < total) {
                    ((uint4 *)(ks + (size_t)(e / vecs) * s.ld))[e % vecs] = kr[b];
                    ((uint4 *)(vs + (size_t)(e / vecs) * s.ld))[e % vecs] = vr[b];
                }
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < s.group * n; e += blockDim.x) { // scores
            const int h = e / n, j = e % n;
            const float *qh = s.q + h * s.d;
            const T *kj = ks + (size_t)j * s.ld;
            float dot = 0.0f;
            for (int x = 0; x < s.d; x += V) {
                float kv[V];
                vec16<T>::load(kv, kj + x);
#pragma unroll
                for (int i = 0; i < V; i++)
                    dot += qh[x + i] * kv[i];
            }
            s.p[h * s.kt + j] = dot * scale;
        }
        __syncthreads();
        for (int h = warp; h < s.group; h += n_warps) { // online softmax, one warp per head
            float *ph = s.p + h * s.kt;
            float mx = -INFINITY;
            for (int j = lane; j < n; j += 32)
                mx = fmaxf(mx, ph[j]);
            const float m_old = s.m[h], m_new = fmaxf(m_old, lz_warp_max(mx));
            float sum = 0.0f;
            for (int j = lane; j < n; j += 32) {
                const float pj = m_new == -INFINITY ? 0.0f : expf(ph[j] - m_new);
                ph[j] = pj;
                sum += pj;
            }
            sum = lz_warp_sum(sum);
            if (lane == 0) {
                const float c = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
                s.corr[h] = c;
                s.l[h] = s.l[h] * c + sum;
                s.m[h] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < LZ_TILE_UNITS; u++) { // weighted values
            const int unit = threadIdx.x + u * blockDim.x;
            if (unit < units) {
                const int h = unit * 4 / s.d, x = unit * 4 % s.d;
                const float c = s.corr[h], *ph = s.p + h * s.kt;
                float a[4] = {acc[4 * u] * c, acc[4 * u + 1] * c, acc[4 * u + 2] * c, acc[4 * u + 3] * c};
                for (int j = 0; j < n; j++) {
                    float v4[4];
                    lz_load4(v4, vs + (size_t)j * s.ld + x);
                    const float pj = ph[j];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        a[i] += pj * v4[i];
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[4 * u + i] = a[i];
            }
        }
        __syncthreads();
    }
}

#endif
