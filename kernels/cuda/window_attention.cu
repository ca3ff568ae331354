// window_attention.cu - the Lizard window branch: softmax attention over the
// last w positions with the meta-memory logits in the denominator (no RoPE),
// added as alpha * WIN to the GLA output; then this step's keys and values go
// into each sequence's ring (a second launch, so no block reads a ring row
// that another block of the same step has already overwritten). Prompts in
// bf16 take the tensor-core kernel of window_tc.cu. Decode steps (one token
// per sequence, any batch) take window_decode_kernel, which also does the ring
// store: a cluster of up to 8 blocks per (sequence, kv head) splits the keys,
// each block stages its share of the ring in shared memory with async copies,
// and the partial softmaxes merge through distributed shared memory.
// (One 8-warp block per (sequence, kv head) leaves most SMs idle at batch 1,
// and the tile kernel plus a ring store takes two launches.)
// Kernels here are launched through lz_launch and wait (lz_pdl_wait) before
// they touch activations or rings; the step's index arrays (copied by the host
// before the step's first kernel) and the meta logits (a weight) may go first.
// window_decode_kernel waits only before its output, so that
// it runs beside the GLA decode kernel before it: see there.
#include <stdint.h> // uintptr_t

#include <cooperative_groups.h> // this_cluster: map_shared_rank, cluster barriers

#include "attention_common.cuh"
#include "attention_decode.cuh"
#include "attention_tile.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait
#include "ptx.cuh" // lz_cp_async16, lz_cp_async_commit, lz_cp_async_wait
#include "window_decode_ring.cuh" // the persistent decode kernel of large batches

namespace cg = cooperative_groups;

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
    lz_pdl_wait();
    lz_pdl_launch_dependents();
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
    lz_pdl_wait();
    lz_pdl_launch_dependents();
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
        return; // overwritten later in this same step (touches no activation: no wait needed)
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const size_t dst = ((size_t)slot[s] * w + token_pos[t] % w) * row, src = (size_t)t * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        ring_k[dst + i] = k[src + i];
        ring_v[dst + i] = v[src + i];
    }
}

// Decode steps ------------------------------------------------------------------

// 16 bytes as floats and back (the pointer argument picks the type)
__device__ __forceinline__ void wd_unpack(float *f, uint4 raw, const __nv_bfloat16 *) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 x = __bfloat1622float2(h[i]);
        f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
}
__device__ __forceinline__ void wd_unpack(float *f, uint4 raw, const float *) {
    f[0] = __uint_as_float(raw.x), f[1] = __uint_as_float(raw.y), f[2] = __uint_as_float(raw.z);
    f[3] = __uint_as_float(raw.w);
}
__device__ __forceinline__ uint4 wd_pack(const float *f, const __nv_bfloat16 *) {
    uint4 raw;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&raw;
#pragma unroll
    for (int i = 0; i < 4; i++)
        h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return raw;
}
__device__ __forceinline__ uint4 wd_pack(const float *f, const float *) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
}

enum {
    WD_WARPS = 4,
    WD_MAX_CLUSTER = 8,     // portable cluster size
    WD_STAGE_BYTES = 32768, // K and V rows staged per pass
};
#define WD_LOG2E 1.4426950408889634f // softmax in base 2: exp2f

// Keys staged per pass: as many rows of K and V as WD_STAGE_BYTES holds.
template <typename T> __host__ __device__ constexpr int wd_chunk(int d) { return WD_STAGE_BYTES / (2 * d * (int)sizeof(T)); }

// Shared memory of window_decode_kernel in bytes: staged K, V rows (reused for the warps' partial
// acc), then the block's merged partial acc [group][d], m [group], l [group], the warps' m and l
// [WD_WARPS][group] each, the cluster's merge weights [WD_MAX_CLUSTER][group] and denominators [group].
static size_t wd_smem(int group, int d, int chunk, size_t tsize) {
    const size_t stage = 2 * (size_t)chunk * d * tsize, parts = sizeof(float) * (size_t)WD_WARPS * group * d;
    return (stage > parts ? stage : parts) + sizeof(float) * (size_t)group * (d + 3 + 2 * WD_WARPS + WD_MAX_CLUSTER);
}

// grid (CS tokens, Hkv), cluster (CS, 1, 1), block 32 WD_WARPS; one token per sequence. The cluster
// of (token t, kv head g) splits the window's keys: block r takes keys [r kb, (r + 1) kb), staged in
// passes of `chunk` rows of K and V into shared memory with 16-byte async copies (all of a pass in
// flight at once: one round trip), then a warp takes KPW = 32 / L keys at a time (a key row is
// L = d / V lanes of 16 bytes) for the group's query heads (at most GM), online softmax in base 2
// that rescales only when a warp's maximum grows. The warps merge in shared memory; the blocks of
// the cluster through distributed shared memory, each block finishing a 1 / CS share of the
// group's outputs (out += alpha * WIN, the meta logits in the denominator). The new key (position p) comes from k/v; the thread that stages it also stores it
// into ring row p % w, which held position p - w: no window of this step reads it (one token per
// sequence, a cluster owns its sequence and kv head).
// The kernel waits for its predecessor (the GLA decode, which adds into out first) only before it
// reads out, so all of it but the output runs beside the GLA kernel. That is safe because every
// kernel here calls lz_pdl_launch_dependents after its own lz_pdl_wait: when these blocks start, the
// GLA kernel has passed its wait, so the kernels before it (the q/k/v GEMV) are complete; q, k and v
// are read through L2 (__ldcg) so that no line an SM's L1 kept from the previous layer is read; the
// ring is this layer's own, written only by this kernel (at the previous step), and no other kernel
// of the step touches it.
// DC > 0: head_dim DC and a group of exactly GM fixed at compile time (window_decode), so that the index
// arithmetic folds (a chain of dependent instructions at batch 1, as gla_decode.cu's kernel).
template <typename T, int GM, int DC = 0>
__global__ void __launch_bounds__(32 * WD_WARPS, GM <= 4 ? 4 : 2)
    window_decode_kernel(T *out, const T *q, const T *k, const T *v, T *ring_k, T *ring_v, const T *meta, int n_meta,
                         float alpha, const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos, int Hq,
                         int Hkv, int d_arg, int w, int chunk_arg) {
    constexpr int V = 16 / sizeof(T);
    const int d = DC > 0 ? DC : d_arg, chunk = DC > 0 ? wd_chunk<T>(DC) : chunk_arg;
    extern __shared__ float4 wd_smem4[];
    cg::cluster_group cluster = cg::this_cluster();
    const int CS = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int t = blockIdx.x / CS, g = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int group = DC > 0 ? GM : Hq / Hkv, L = d / V, KPW = 32 / L, sub = lane / L, li = lane % L;
    const int p = token_pos[t], first = p - w + 1 > 0 ? p - w + 1 : 0, n_keys = p + 1 - first;
    const int kb = (n_keys + CS - 1) / CS, j0 = min(n_keys, rank * kb), j1 = min(n_keys, j0 + kb);
    const size_t row = (size_t)Hkv * d, ring = (size_t)slot[token_seq[t]] * w * row + (size_t)g * d;
    lz_trace_mark();
    // the meta logits (a weight): mass in the denominator only; logits from here on in log2 units
    float mm = -INFINITY, lm = 0.0f;
    for (int j = 0; j < n_meta; j++)
        mm = fmaxf(mm, lz_to_float(meta[j]));
    for (int j = 0; j < n_meta; j++)
        lm += expf(lz_to_float(meta[j]) - mm);
    mm *= WD_LOG2E;
    lz_pdl_launch_dependents();
    T *ks = (T *)wd_smem4, *vs = ks + (size_t)chunk * d;
    float *part = (float *)wd_smem4;
    const size_t stage = 2 * (size_t)chunk * d * sizeof(T), parts = sizeof(float) * (size_t)WD_WARPS * group * d;
    float *bacc = (float *)((char *)wd_smem4 + (stage > parts ? stage : parts)), *bm = bacc + group * d,
          *bl = bm + group, *pm = bl + group, *pl = pm + WD_WARPS * group, *cf = pl + WD_WARPS * group,
          *cden = cf + WD_MAX_CLUSTER * group;
    const T *kn = k + (size_t)t * row + (size_t)g * d, *vn = v + (size_t)t * row + (size_t)g * d;
    // this block's share of the group's outputs
    T *og = out + ((size_t)t * Hq + (size_t)g * group) * d;
    const int share = (group * d + CS - 1) / CS, e0 = rank * share, e1 = min(group * d, e0 + share);
    float qr[GM][V], acc[GM][V], m[GM], l[GM];
#pragma unroll
    for (int h = 0; h < GM; h++) {
        m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
        for (int i = 0; i < V; i++)
            acc[h][i] = 0.0f;
    }
    const float scale = rsqrtf((float)d) * WD_LOG2E;
    for (int c0 = j0; c0 < j1; c0 += chunk) { // block-uniform
        const int nk = min(chunk, j1 - c0);
        if (c0 > j0)
            __syncthreads(); // the previous pass's rows are read
        for (int e = tid; e < nk * L; e += blockDim.x) {
            const int j = e / L, x = e % L * V, kp = first + c0 + j;
            if (kp == p) { // the new key: staged and stored into the ring
                const uint4 kr = __ldcg((const uint4 *)(kn + x)), vr = __ldcg((const uint4 *)(vn + x));
                *(uint4 *)(ks + (size_t)j * d + x) = kr, *(uint4 *)(vs + (size_t)j * d + x) = vr;
                *(uint4 *)(ring_k + ring + (size_t)(p % w) * row + x) = kr;
                *(uint4 *)(ring_v + ring + (size_t)(p % w) * row + x) = vr;
            } else {
                lz_cp_async16(ks + (size_t)j * d + x, ring_k + ring + (size_t)(kp % w) * row + x);
                lz_cp_async16(vs + (size_t)j * d + x, ring_v + ring + (size_t)(kp % w) * row + x);
            }
        }
        if (c0 == j0) // q while the copies fly
#pragma unroll
            for (int h = 0; h < GM; h++)
                if (h < group)
                    wd_unpack(qr[h], __ldcg((const uint4 *)(q + ((size_t)t * Hq + (size_t)g * group + h) * d) + li), q);
        lz_cp_async_commit();
        lz_cp_async_wait<0>();
        __syncthreads();
        for (int base = warp * KPW; base < nk; base += WD_WARPS * KPW) { // warp-uniform; key `base` valid
            const int j = base + sub;
            const bool valid = j < nk;
            float kf[V], vf[V];
            wd_unpack(kf, valid ? ((const uint4 *)(ks + (size_t)j * d))[li] : make_uint4(0, 0, 0, 0), q);
            wd_unpack(vf, valid ? ((const uint4 *)(vs + (size_t)j * d))[li] : make_uint4(0, 0, 0, 0), q);
#pragma unroll
            for (int h = 0; h < GM; h++) {
                if (h >= group)
                    break;
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < V; i++)
                    dot += qr[h][i] * kf[i];
                for (int o = L / 2; o > 0; o >>= 1) // over the key's lanes
                    dot += __shfl_xor_sync(0xffffffffu, dot, o);
                const float sc = valid ? dot * scale : -INFINITY;
                float mx = sc;
                for (int o = L; o < 32; o <<= 1) // over the warp's keys
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                if (mx > m[h]) { // warp-uniform; rescaling only when the maximum grows
                    const float corr = exp2f(m[h] - mx);
                    m[h] = mx;
                    l[h] *= corr;
#pragma unroll
                    for (int i = 0; i < V; i++)
                        acc[h][i] *= corr;
                }
                const float pr = exp2f(sc - m[h]); // 0 for invalid keys
                l[h] += pr;
#pragma unroll
                for (int i = 0; i < V; i++)
                    acc[h][i] += pr * vf[i];
            }
        }
    }
    __syncthreads(); // the staged rows are read: the warps' partials go there
#pragma unroll
    for (int h = 0; h < GM; h++) {
        if (h >= group)
            break;
        for (int o = L; o < 32; o <<= 1) { // the warp's keys together
            l[h] += __shfl_xor_sync(0xffffffffu, l[h], o);
#pragma unroll
            for (int i = 0; i < V; i++)
                acc[h][i] += __shfl_xor_sync(0xffffffffu, acc[h][i], o);
        }
        if (lane < L)
#pragma unroll
            for (int i = 0; i < V; i++)
                part[((size_t)warp * group + h) * d + li * V + i] = acc[h][i];
        if (lane == 0)
            pm[warp * group + h] = m[h], pl[warp * group + h] = l[h];
    }
    __syncthreads();
    for (int e = tid; e < group * d; e += blockDim.x) { // the block's partial (m = -inf: no keys)
        const int h = e / d;
        float mx = -INFINITY;
#pragma unroll
        for (int r = 0; r < WD_WARPS; r++)
            mx = fmaxf(mx, pm[r * group + h]);
        float a = 0.0f, den = 0.0f;
#pragma unroll
        for (int r = 0; r < WD_WARPS; r++) {
            const float mr = pm[r * group + h], f = mr == -INFINITY ? 0.0f : exp2f(mr - mx);
            a += part[(size_t)r * group * d + e] * f;
            den += pl[r * group + h] * f;
        }
        bacc[e] = a;
        if (e % d == 0)
            bm[h] = mx, bl[h] = den;
    }
    cluster.sync(); // every block's partial is complete
    if (tid < group) { // per query head: the blocks' weights and the denominator (peers' m, l read at once)
        const int h = tid;
        float bmr[WD_MAX_CLUSTER], blr[WD_MAX_CLUSTER], mx = mm;
#pragma unroll
        for (int r = 0; r < WD_MAX_CLUSTER; r++)
            if (r < CS) {
                bmr[r] = cluster.map_shared_rank(bm, r)[h], blr[r] = cluster.map_shared_rank(bl, r)[h];
                mx = fmaxf(mx, bmr[r]);
            }
        float den = n_meta > 0 ? lm * exp2f(mm - mx) : 0.0f;
#pragma unroll
        for (int r = 0; r < WD_MAX_CLUSTER; r++)
            if (r < CS) {
                const float f = bmr[r] == -INFINITY ? 0.0f : exp2f(bmr[r] - mx); // -inf: a block without keys
                cf[r * group + h] = f;
                den += blr[r] * f;
            }
        cden[h] = den;
    }
    __syncthreads();
    lz_pdl_wait(); // the GLA output is in out
    for (int e = e0 + tid; e < e1; e += blockDim.x) {
        const int h = e / d;
        float a = 0.0f;
#pragma unroll
        for (int r = 0; r < WD_MAX_CLUSTER; r++)
            if (r < CS)
                a += cluster.map_shared_rank(bacc, r)[e] * cf[r * group + h];
        og[e] = lz_from_float<T>(lz_to_float(og[e]) + alpha * a / cden[h]);
    }
    lz_trace_mark();
    cluster.sync(); // no block leaves while a peer may still read its partial
}

// Whether window_decode_kernel takes this step: one token per sequence, a key row of 1 to 32 lanes of
// 16 bytes (a power of two), at most 8 query heads per kv head, shared memory within the default
// 48 KB, 16-byte aligned rows, and at most two (sequence, kv head) pairs an SM (beyond that the tile
// kernel and the ring store are faster).
template <typename T>
static bool window_decode_fits(const lz_cuda_ctx *c, const lz_batch *hb, const lz_attn_dims *dims, const void *out,
                               const void *q, const void *k, const void *v, const void *ring_k, const void *ring_v) {
    const int V = 16 / (int)sizeof(T), d = dims->head_dim, group = dims->n_heads / dims->n_kv_heads, L = d / V;
    const uintptr_t align = (uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)ring_k |
                            (uintptr_t)ring_v;
    return hb->n_tokens == hb->n_seqs &&
           (size_t)hb->n_seqs * (size_t)dims->n_kv_heads <= 2 * (size_t)c->n_sms && dims->window >= 1 && d % V == 0 &&
           L >= 1 && L <= 32 && (L & (L - 1)) == 0 && group >= 1 && group <= 8 && wd_chunk<T>(d) >= 1 &&
           wd_smem(group, d, wd_chunk<T>(d), sizeof(T)) <= 48 * 1024 &&
           (align & 15) == 0;
}

// Cluster size: blocks split the keys until the grid has about 4 blocks an SM (batch 1 at LLaMA's
// shape: 8 kv heads x 8 = 64 blocks of 16 keys; 64 sequences: clusters of 2, 64 keys a block).
static int wd_cluster(const lz_cuda_ctx *c, int pairs, int w) {
    int cs = 1;
    while (cs < WD_MAX_CLUSTER && (size_t)pairs * cs < 4 * (size_t)c->n_sms && w / (2 * cs) >= 4)
        cs *= 2;
    return cs;
}

template <typename T, int GM>
static lz_status window_decode(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *meta, float alpha,
                               lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb,
                               const lz_attn_dims *dims) {
    const int Hq = dims->n_heads, Hkv = dims->n_kv_heads, d = dims->head_dim, group = Hq / Hkv, w = dims->window;
    const int cs = wd_cluster(c, hb->n_tokens * Hkv, w), chunk = wd_chunk<T>(d);
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = lz_cluster_config(c, dim3((unsigned)(cs * hb->n_tokens), (unsigned)Hkv),
                                                     dim3(32 * WD_WARPS), wd_smem(group, d, chunk, sizeof(T)),
                                                     (unsigned)cs, attr);
    // the compile-time head shape (cuda_kernels.cuh) where the layer has it
    auto kernel = window_decode_kernel<T, GM>;
    if constexpr (GM == LZ_FIXED_GROUP)
        if (group == LZ_FIXED_GROUP && d == LZ_FIXED_HEAD_DIM)
            kernel = window_decode_kernel<T, LZ_FIXED_GROUP, LZ_FIXED_HEAD_DIM>;
    LZ_LAUNCH_TRY(cudaLaunchKernelEx(&cfg, kernel, out, q, k, v, (T *)st->ring_k, (T *)st->ring_v, meta, dims->n_meta,
                                     alpha, b->token_seq, b->slot, b->token_pos, Hq, Hkv, d, w, chunk),
                  "window (decode)");
    LZ_LAUNCH_CHECK("window (decode)");
    // at one sequence this kernel and the GLA one before it wait on a chain of small steps with HBM
    // nearly idle: o_proj, next, may pull its weights into L2 meanwhile (gemv_kernel.cuh)
    c->hbm_idle_next = hb->n_seqs == 1;
    return LZ_OK;
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
    // decode steps: one kernel, the ring store included: below LIZARD_WINDOW_SPLIT_MIN sequences the
    // cluster kernel below (up to two (sequence, kv head) pairs an SM), else attention_decode.cu's
    // split kernel over the rings; in bf16 from LIZARD_WINDOW_RING sequences the persistent kernel of
    // window_decode_ring.cu comes first. Other shapes: the tile kernel and the ring store.
    const bool decode = hb->n_tokens == hb->n_seqs;
    const bool split_first = hb->n_seqs >= c->window_split_min;
    if (decode) {
        const wr_params<T> rp = {out, q, k, v, (T *)st->ring_k, (T *)st->ring_v, meta, b->token_seq, b->slot,
                                 b->token_pos, n, Hq, Hkv, d, w, dims->n_meta, alpha};
        if (window_decode_ring_fits<T>(c, rp))
            return window_decode_ring<T>(c, rp);
    }
    if (decode && !split_first && window_decode_fits<T>(c, hb, dims, out, q, k, v, st->ring_k, st->ring_v))
        return group <= 4 ? window_decode<T, 4>(c, out, q, k, v, meta, alpha, st, b, hb, dims)
                          : window_decode<T, 8>(c, out, q, k, v, meta, alpha, st, b, hb, dims);
    if (decode && lz_attention_decode_fits<T>(c, group, d))
        return lz_attention_decode<T>(c, out, q, k, v, (T *)st->ring_k, (T *)st->ring_v, b, n, Hq, Hkv, d, w, w, true,
                                      meta, dims->n_meta, alpha);
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
        LZ_TRY(lz_launch(c, "window", window_tile_kernel<T>, dim3((unsigned)n, (unsigned)Hkv), dim3(LZ_TILE_THREADS),
                         lz_tile_smem<T>(group, d, kt), out, q, k, v, (const T *)st->ring_k, (const T *)st->ring_v, meta,
                         dims->n_meta, alpha, b->token_seq, b->slot, b->start, b->pos, b->token_pos, Hq, Hkv, d, w, kt));
    } else if (!tc) { // shapes the tiles do not take: one warp per 32 keys and query head
        int parts = (w + 31) / 32;
        parts = parts * group > 32 ? 32 / group : parts;
        const size_t smem = sizeof(float) * (size_t)group * parts * (2 * d + 2);
        LZ_TRY(lz_launch(c, "window", window_kernel<T>, dim3((unsigned)n, (unsigned)Hkv), dim3(32 * group * parts), smem,
                         out, q, k, v, (const T *)st->ring_k, (const T *)st->ring_v, meta, dims->n_meta, alpha,
                         b->token_seq, b->slot, b->start, b->pos, b->token_pos, Hq, Hkv, d, w, parts));
    }
    return lz_launch(c, "ring_store", ring_store_kernel<T>, dim3((unsigned)n), dim3(256), 0, (T *)st->ring_k,
                     (T *)st->ring_v, k, v, b->token_seq, b->slot, b->start, b->len, b->token_pos, Hkv * d, w);
}

// Once per backend: the merge buffers may pass 48 KB (32 warps x head_dim 256);
// the tensor-core kernel takes 87 KB at head_dim 128.
template <typename T> lz_status window_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(window_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->max_smem));
    LZ_TRY(window_decode_ring_init<T>(c));
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
