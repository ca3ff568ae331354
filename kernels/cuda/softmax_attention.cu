// softmax_attention.cu - retained softmax layers: causal GQA attention over each
// sequence's KV cache, keys split into ranges processed by separate blocks
// (flash-decoding) so that a single long sequence still fills the GPU; no T x T
// matrix is formed. Decode steps (one token a sequence, the usual head shapes)
// take attention_split_kernel: one launch that appends the new key and value,
// streams K/V through cp.async rings and merges the splits itself (its comment
// gives the design and the measurements behind it). Prompts and other shapes:
// kv_append, then the tiled or flash kernels, or the split kernels of older
// design with a separate merge (combine) kernel.
#include <stdlib.h> // getenv, atoi

#include "attention_common.cuh"
#include "attention_tile.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait
#include "ptx.cuh" // lz_cp_async16, lz_cp_async_commit, lz_cp_async_wait

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

// Decode steps (one new token per sequence): the split-KV kernel below, one launch per layer.
// grid (tokens, Hkv, splits), block DEC_WARPS warps. Measured on the H200 (LLaMA-3-8B shapes): one
// 64-key tile per block ran at 32% of the copy rate at 64 sequences (one memory round trip per
// block, nothing in flight while it computed), and at one sequence the kernel (14 us), the merge
// kernel (9 us) and kv_append (5 us) cost ~30 us for ~2 us of KV reads. So:
// - each warp streams its own 8-key tiles (every DEC_WARPS-th of the block's range) through a
//   cp.async ring of 4 (or 2) tiles in shared memory: up to 3 tiles in flight per warp, ~144 KB
//   an SM, and no block barriers in the loop; all the query heads of the kv head share each tile;
// - a warp keeps its own online softmax (log2 domain, exp2); the block merges its warps at the end;
// - the key range of a split follows the sequence's current length (read on the device), so all
//   splits of a sequence get work whatever the cache capacity, while the grid depends only on the
//   batch size and capacity (recorded graphs stay valid); splits past the length exit at once;
// - the splits merge in the same launch: each writes its partial (m, l, acc), and the last to
//   arrive at its (sequence, kv head) counter merges them and sets the counter back to zero;
// - the new key and value come from the k and v inputs (the block owning the last position also
//   writes them into the cache), so no kv_append launch.
// DEC_MAX_SPLITS: the merge's m and l [splits][group] must fit in the rings' shared memory.
enum { DEC_WARPS = 4, DEC_KT = 8, DEC_MIN_KEYS = 64, DEC_MAX_SPLITS = 512 };

// ring stages per warp: 4 for rows up to 256 bytes, else 2 (3 blocks of ~70 KB an SM either way)
template <typename T, int DPL> __host__ __device__ constexpr int dec_stages() {
    return 32 * DPL * sizeof(T) <= 256 ? 4 : 2;
}
template <int G, int D> __host__ __device__ constexpr int dec_rec() { return (G * (D + 2) + 3) / 4 * 4; }
template <typename T, int DPL> __host__ __device__ constexpr int dec_ld() { return 32 * DPL + 16 / (int)sizeof(T); }
// shared memory: K/V rings [warps][stages][2][KT][ld] (T), q [G][d], p [warps][KT][G] (floats), flag
template <typename T, int G, int DPL> __host__ __device__ constexpr size_t dec_smem() {
    return sizeof(T) * DEC_WARPS * dec_stages<T, DPL>() * 2 * DEC_KT * dec_ld<T, DPL>() +
           sizeof(float) * (G * 32 * DPL + DEC_WARPS * DEC_KT * G + 4);
}

// DPL consecutive elements (aligned to their size) as floats
template <int DPL, typename T> __device__ __forceinline__ void dec_load_dims(float *f, const T *p) {
    if constexpr (DPL % 4 == 0) {
#pragma unroll
        for (int i = 0; i < DPL; i += 4)
            lz_load4(f + i, p + i);
    } else {
#pragma unroll
        for (int i = 0; i < DPL; i++)
            f[i] = lz_to_float(p[i]);
    }
}

// Key range of split `split` of a sequence at position p: [t0, t1); the number of non-empty splits.
__device__ __forceinline__ int dec_range(int p, int sliding_window, int splits, int split, int *t0, int *t1) {
    const int first = sliding_window > 0 && p - sliding_window + 1 > 0 ? p - sliding_window + 1 : 0;
    const int len = p + 1 - first;
    const int kps = max(DEC_MIN_KEYS, (len + splits - 1) / splits); // unrounded: every split gets keys
    *t0 = first + split * kps;
    *t1 = min(p + 1, *t0 + kps);
    return (len + kps - 1) / kps;
}

// q, k, v: this step's rows [tokens, H, d] (rope applied); kc, vc: the cache. partial:
// [tokens, Hkv, splits] x dec_rec floats (acc [G][d], m [G], l [G]; 16-byte aligned records);
// count: [tokens * Hkv], zero on entry and on exit.
template <typename T, int G, int DPL>
__global__ void __launch_bounds__(DEC_WARPS * 32, 3)
    attention_split_kernel(T *out, float *partial, unsigned *count, const T *q, const T *k, const T *v, T *kc, T *vc,
                           const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos, int Hkv,
                           int capacity, int sliding_window, int splits) {
    constexpr int D = 32 * DPL, V = 16 / sizeof(T), CH = D / V, LD = dec_ld<T, DPL>(), KT = DEC_KT;
    constexpr int S = dec_stages<T, DPL>(), NW = DEC_WARPS;
    static_assert(sizeof(T) * NW * S * 2 * KT * LD >= sizeof(float) * NW * G * (D + 2), "the warp merge reuses the rings");
    static_assert(sizeof(T) * NW * S * 2 * KT * LD >= sizeof(float) * (2 * DEC_MAX_SPLITS + 1) * G, "so does the last one's");
    extern __shared__ __align__(16) unsigned char dec_sm[];
    T *ring = (T *)dec_sm;
    float *qs = (float *)(ring + (size_t)NW * S * 2 * KT * LD), *pbuf = qs + G * D;
    int *flag = (int *)(pbuf + NW * KT * G);
    const int t = blockIdx.x, g = blockIdx.y, split = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // The step's arrays were copied in before the step's first kernel, and cache positions below p
    // were written by earlier steps, long finished (a kernel starts at the earliest while the one
    // before it runs, past that one's lz_pdl_wait): both may be read before lz_pdl_wait.
    const int p = token_pos[t];
    int t0, t1;
    const int active = dec_range(p, sliding_window, splits, split, &t0, &t1);
    if (split >= active)
        return;
    const size_t row = (size_t)Hkv * D, cbase = (size_t)slot[token_seq[t]] * capacity * row + (size_t)g * D;
    const size_t nrow = ((size_t)t * Hkv + g) * D; // this step's k and v rows of head g
    T *wring = ring + (size_t)warp * S * 2 * KT * LD;
    const int n_tiles = (t1 - t0 + KT - 1) / KT, my_tiles = n_tiles > warp ? (n_tiles - warp + NW - 1) / NW : 0;
    // tile i of this warp (block tile warp + NW i) into stage i % S; always one commit group
    auto issue = [&](int i) {
        if (i < my_tiles) {
            const int k0 = t0 + KT * (warp + NW * i);
            T *ks = wring + (size_t)(i % S) * 2 * KT * LD, *vs = ks + KT * LD;
#pragma unroll
            for (int e = lane; e < KT * CH; e += 32) {
                const int j = e / CH, c = e % CH, key = k0 + j;
                if (key < t1 && key != p) { // the new key comes from k and v (after the wait)
                    lz_cp_async16(ks + j * LD + c * V, kc + cbase + (size_t)key * row + c * V);
                    lz_cp_async16(vs + j * LD + c * V, vc + cbase + (size_t)key * row + c * V);
                }
            }
        }
        lz_cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < S - 1; i++)
        issue(i);
    lz_pdl_wait(); // q, k, v come from the previous kernels; out, partial and count are shared
    lz_pdl_launch_dependents();
    const int Hq = Hkv * G;
    for (int e = threadIdx.x; e < G * D; e += blockDim.x)
        qs[e] = lz_to_float(q[((size_t)t * Hq + (size_t)g * G) * D + e]); // the group's heads are adjacent
    if (split == active - 1) // owns position p: append this step's key and value to the cache
        for (int x = threadIdx.x; x < D; x += blockDim.x) {
            kc[cbase + (size_t)p * row + x] = k[nrow + x];
            vc[cbase + (size_t)p * row + x] = v[nrow + x];
        }
    __syncthreads();

    const float scale = rsqrtf((float)D) * 1.4426950408889634f; // log2(e): exp2 below
    const int jj = lane & 7, part = lane >> 3; // scores: lane takes key jj, 16-byte chunks part, part + 4, ...
    float m[G], l[G], acc[G][DPL];
#pragma unroll
    for (int h = 0; h < G; h++) {
        m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
        for (int x = 0; x < DPL; x++)
            acc[h][x] = 0.0f;
    }
    float *wp = pbuf + warp * KT * G;
    for (int i = 0; i < my_tiles; i++) {
        issue(i + S - 1); // into the stage read in iteration i - 1 (released by its last __syncwarp)
        lz_cp_async_wait<S - 1>();
        const int k0 = t0 + KT * (warp + NW * i), n = min(KT, t1 - k0);
        T *ks = wring + (size_t)(i % S) * 2 * KT * LD, *vs = ks + KT * LD;
        if (p >= k0 && p < k0 + KT)
            for (int x = lane; x < D; x += 32) {
                ks[(p - k0) * LD + x] = k[nrow + x];
                vs[(p - k0) * LD + x] = v[nrow + x];
            }
        __syncwarp(); // every lane's copies of this tile are visible
        float dot[G];
#pragma unroll
        for (int h = 0; h < G; h++)
            dot[h] = 0.0f;
        const T *kr = ks + jj * LD;
#pragma unroll
        for (int c = part; c < CH; c += 4) {
            float kf[V];
            vec16<T>::load(kf, kr + c * V);
#pragma unroll
            for (int h = 0; h < G; h++) {
                const float4 *q4 = (const float4 *)(qs + h * D + c * V);
#pragma unroll
                for (int u = 0; u < V / 4; u++) {
                    const float4 qq = q4[u];
                    dot[h] += qq.x * kf[4 * u] + qq.y * kf[4 * u + 1] + qq.z * kf[4 * u + 2] + qq.w * kf[4 * u + 3];
                }
            }
        }
#pragma unroll
        for (int h = 0; h < G; h++) {
            float s = dot[h] + __shfl_xor_sync(0xffffffffu, dot[h], 8);
            s += __shfl_xor_sync(0xffffffffu, s, 16);
            s = jj < n ? s * scale : -INFINITY; // rows past n hold stale data
            float mx = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float m_new = fmaxf(m[h], mx); // finite: key k0 is in range
            const float corr = exp2f(m[h] - m_new), pj = exp2f(s - m_new);
            l[h] = l[h] * corr + pj; // this lane's key only; summed over the 8 keys at the end
            m[h] = m_new;
#pragma unroll
            for (int x = 0; x < DPL; x++)
                acc[h][x] *= corr;
            if (part == 0)
                wp[jj * G + h] = pj;
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < KT; j++) {
            if (j < n) {
                float vf[DPL], pv[G];
                dec_load_dims<DPL>(vf, vs + j * LD + lane * DPL);
#pragma unroll
                for (int h = 0; h < G; h++)
                    pv[h] = wp[j * G + h];
#pragma unroll
                for (int h = 0; h < G; h++)
#pragma unroll
                    for (int x = 0; x < DPL; x++)
                        acc[h][x] += pv[h] * vf[x];
            }
        }
        __syncwarp(); // the stage and wp are free
    }
    lz_cp_async_wait<0>();
#pragma unroll
    for (int h = 0; h < G; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 4);
    }
    // merge the warps through shared memory (the rings are free): [warp] x (m [G], l [G], acc [G][D])
    __syncthreads();
    float *ws = (float *)dec_sm, *mine = ws + warp * G * (D + 2);
#pragma unroll
    for (int h = 0; h < G; h++) {
        if (lane == 0)
            mine[h] = m[h], mine[G + h] = l[h];
#pragma unroll
        for (int x = 0; x < DPL; x++)
            mine[2 * G + h * D + lane * DPL + x] = acc[h][x];
    }
    __syncthreads();
    const size_t pair = (size_t)t * Hkv + g;
    constexpr int REC = dec_rec<G, D>();
    float *part_out = partial + (pair * splits + split) * REC;
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
        const int h = e / D, x = e % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++)
            M = fmaxf(M, ws[w * G * (D + 2) + h]);
        float L = 0.0f, A = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) { // a warp without keys has m = -inf: weight 0
            const float *o = ws + w * G * (D + 2), c = exp2f(o[h] - M);
            L += c * o[G + h];
            A += c * o[2 * G + h * D + x];
        }
        if (active == 1) {
            out[((size_t)t * Hq + (size_t)g * G + h) * D + x] = lz_from_float<T>(A / L);
        } else {
            if (x == 0)
                part_out[G * D + h] = M, part_out[G * D + G + h] = L;
            part_out[e] = A;
        }
    }
    if (active == 1)
        return;
    __threadfence(); // the partial is visible before the arrival is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned arrived = atomicAdd(count + pair, 1u);
        *flag = arrived == (unsigned)active - 1;
        if (*flag)
            count[pair] = 0; // every split has arrived: ready for the next launch
    }
    __syncthreads();
    if (!*flag)
        return;
    __threadfence();
    // The last split merges all of them, from L2 (other SMs wrote them). The splits' m and l first,
    // into shared memory (the rings are free), turned into weights; then each thread sums 4-column
    // groups over the splits, 8 splits' loads in flight.
    const float *pp = partial + pair * splits * REC;
    float *wt = (float *)dec_sm, *lt = wt + active * G, *Lsum = lt + active * G; // [active][G] x 2, [G]
    for (int e = threadIdx.x; e < active * G; e += blockDim.x) {
        const float *o = pp + (size_t)(e / G) * REC + G * D + e % G;
        wt[e] = __ldcg(o);
        lt[e] = __ldcg(o + G);
    }
    __syncthreads();
    for (int h = warp; h < G; h += NW) {
        float M = -INFINITY, L = 0.0f;
        for (int s = lane; s < active; s += 32)
            M = fmaxf(M, wt[s * G + h]);
        M = lz_warp_max(M); // finite: every active split has keys
        for (int s = lane; s < active; s += 32) {
            const float c = exp2f(wt[s * G + h] - M);
            wt[s * G + h] = c;
            L += c * lt[s * G + h];
        }
        L = lz_warp_sum(L);
        if (lane == 0)
            Lsum[h] = L;
    }
    __syncthreads();
    constexpr int U = (G * D / 4 + NW * 32 - 1) / (NW * 32); // 4-column groups a thread
    float4 A[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        A[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = 0; s < active; s++) {
        const float4 *o = (const float4 *)(pp + (size_t)s * REC);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = threadIdx.x + u * NW * 32;
            if (e < G * D / 4) {
                const float c = wt[s * G + e * 4 / D];
                const float4 a = __ldcg(o + e);
                A[u].x += c * a.x, A[u].y += c * a.y, A[u].z += c * a.z, A[u].w += c * a.w;
            }
        }
    }
    T *o = out + ((size_t)t * Hq + (size_t)g * G) * D;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int e = threadIdx.x + u * NW * 32;
        if (e < G * D / 4) {
            const float inv = 1.0f / Lsum[e * 4 / D];
            o[4 * e] = lz_from_float<T>(A[u].x * inv), o[4 * e + 1] = lz_from_float<T>(A[u].y * inv);
            o[4 * e + 2] = lz_from_float<T>(A[u].z * inv), o[4 * e + 3] = lz_from_float<T>(A[u].w * inv);
        }
    }
}

// The instantiations the launcher picks from: group 1, 2, 4, 8 and head_dim 64, 128, 256
// (group x dims per lane <= 32 floats of accumulators).
template <typename T>
using dec_kernel_t = void (*)(T *, float *, unsigned *, const T *, const T *, const T *, T *, T *, const int32_t *,
                              const int32_t *, const int32_t *, int, int, int, int);
template <typename T> struct dec_entry {
    int group, d;
    dec_kernel_t<T> fn;
    size_t smem;
};
template <typename T, int G, int DPL> constexpr dec_entry<T> dec_make() {
    return {G, 32 * DPL, attention_split_kernel<T, G, DPL>, dec_smem<T, G, DPL>()};
}
template <typename T> static const dec_entry<T> *dec_find(int group, int d) {
    static const dec_entry<T> table[] = {
        dec_make<T, 1, 2>(), dec_make<T, 1, 4>(), dec_make<T, 1, 8>(), dec_make<T, 2, 2>(),
        dec_make<T, 2, 4>(), dec_make<T, 2, 8>(), dec_make<T, 4, 2>(), dec_make<T, 4, 4>(),
        dec_make<T, 4, 8>(), dec_make<T, 8, 2>(), dec_make<T, 8, 4>(), {0, 0, NULL, 0},
    };
    for (const dec_entry<T> *e = table; e->fn; e++)
        if (e->group == group && e->d == d)
            return e;
    return NULL;
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

// LIZARD_DECODE_ATTN: blocks an SM that the decode kernel's split count aims at (default 8); 0: the
// older decode kernels with kv_append and a merge kernel (for comparison). Read by attention_init.
static int dec_blocks_per_sm = 8;

// The decode kernel's arrival counters: at least n zeros (grown outside graph recording: every
// step shape runs once eagerly first).
static lz_status attention_counters(lz_cuda_ctx *c, int n) {
    if (n <= c->attn_count_n)
        return LZ_OK;
    const int want = n > 16384 ? n : 16384;
    LZ_CUDA_TRY(cudaStreamSynchronize(c->stream));
    if (c->attn_count)
        LZ_CUDA_TRY(cudaFree(c->attn_count));
    c->attn_count = NULL;
    c->attn_count_n = 0;
    LZ_CUDA_TRY(cudaMalloc(&c->attn_count, sizeof(unsigned) * want));
    LZ_CUDA_TRY(cudaMemsetAsync(c->attn_count, 0, sizeof(unsigned) * want, c->stream));
    c->attn_count_n = want;
    c->buffers_moved = true;
    return LZ_OK;
}

template <typename T>
lz_status softmax_attention_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims) {
    const int n = hb->n_tokens, Hq = dims->n_heads, Hkv = dims->n_kv_heads, d = dims->head_dim;
    if (dims->head_dim > 32 * LZ_ATTN_MAX_DPL)
        return lz_fail(LZ_ERR_INPUT, "CUDA attention supports head_dim <= %d, got %d", 32 * LZ_ATTN_MAX_DPL,
                       dims->head_dim);
    const int row = Hkv * d, group = Hq / Hkv;
    const dec_entry<T> *fast = b->max_len == 1 && dec_blocks_per_sm > 0 ? dec_find<T>(group, d) : NULL;
    if (fast && fast->smem <= c->max_smem) {
        // Decode: the grid follows the batch size and the cache capacity only (graphs stay valid);
        // about dec_blocks_per_sm blocks an SM in all (~3 waves: 3 blocks fit an SM), each split at
        // least DEC_MIN_KEYS keys of the capacity.
        const int pairs = n * Hkv, want = (dec_blocks_per_sm * c->n_sms + pairs - 1) / pairs;
        int splits = (dims->kv_capacity + DEC_MIN_KEYS - 1) / DEC_MIN_KEYS;
        splits = splits < want ? splits : want;
        const int cap = (int)(LZ_MAX_PARTIALS / ((size_t)n * Hq));
        splits = splits < cap ? splits : cap;
        splits = splits < DEC_MAX_SPLITS ? splits : DEC_MAX_SPLITS;
        splits = splits > 1 ? splits : 1;
        float *partial = NULL;
        if (splits > 1) {
            LZ_TRY(lz_cuda_scratch(c, sizeof(float) * (size_t)pairs * splits * ((group * (d + 2) + 3) / 4 * 4)));
            partial = (float *)c->scratch;
        }
        LZ_TRY(attention_counters(c, pairs));
        return lz_launch(c, "attention decode", fast->fn, dim3(n, Hkv, splits), dim3(DEC_WARPS * 32), fast->smem, out,
                         partial, c->attn_count, q, k, v, (T *)st->k_cache, (T *)st->v_cache, b->token_seq, b->slot,
                         b->token_pos, Hkv, dims->kv_capacity, dims->sliding_window, splits);
    }
    kv_append_kernel<T><<<n, 256, 0, c->stream>>>((T *)st->k_cache, (T *)st->v_cache, k, v, b->token_seq, b->slot,
                                                  b->token_pos, row, dims->kv_capacity);
    LZ_LAUNCH_CHECK("kv_append");
    if (b->max_len > 1) { // a prompt in the step: the tiled kernel for every row
        if constexpr (sizeof(T) == 2) {
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
    // (64 sequences in 33 one-tile splits ran at 32% of the copy rate on the H200). Still fixed for a
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
    const char *env = getenv("LIZARD_DECODE_ATTN");
    dec_blocks_per_sm = env && *env ? atoi(env) : 8;
    LZ_CUDA_TRY(cudaFuncSetAttribute(attention_tiled_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    for (int group = 1; group <= 8; group *= 2)
        for (int d = 64; d <= 256; d *= 2) {
            const dec_entry<T> *e = dec_find<T>(group, d);
            if (e && e->smem <= c->max_smem)
                LZ_CUDA_TRY(cudaFuncSetAttribute(e->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)e->smem));
        }
    return LZ_OK;
}

#define LZ_SOFTMAX_ATTN(T)                                                                                          \
    template lz_status attention_init<T>(lz_cuda_ctx *);                                                           \
    template lz_status softmax_attention_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *,            \
                                                    lz_layer_state *, const lz_cuda_batch *, const lz_batch *,      \
                                                    const lz_attn_dims *);
LZ_INSTANTIATE(LZ_SOFTMAX_ATTN)
