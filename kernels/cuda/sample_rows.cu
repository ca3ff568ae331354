// sample_rows.cu - sampling logit rows on the device by the rule of
// kernels/sample_rule.h, one block per row, without sorting the vocabulary:
// the top-k boundary by radix selection on the order keys (four passes of 8
// bits counting tokens), the top-p boundary the same way summing integer
// weights, then a pick in index order (per-warp chunks: tie ranks by ballot,
// kept weight by warp sums, the winning warp scans its chunk). Integer
// weights make every sum order-free: the id equals the CPU reference's
// (kernels/cpu/sample_rows.c) for the same logits, bit for bit.
#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait

extern "C" {
#include "sample_rule.h" // lz_sample_key, lz_sample_mass, lz_sample_frac53
}

enum { SR_THREADS = 512, SR_WARPS = SR_THREADS / 32, SR_NONE = 0xFFFFFFFFu };
typedef unsigned long long u64; // atomicAdd's and the shuffles' 64-bit type

struct sr_shared {
    u64 hist[256];
    u64 red[SR_WARPS];
    u64 warp_sum[SR_WARPS], warp_base[SR_WARPS], warp_ties[SR_WARPS];
    u64 need, target;
    uint32_t digit;
    int32_t id;
    float redf[32];
};

__device__ __forceinline__ u64 warp_sum64(u64 v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ u64 warp_max64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) {
        const u64 w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
__device__ __forceinline__ u64 warp_scan64(u64 v) { // inclusive, over lanes
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        const u64 t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += t;
    }
    return v;
}
__device__ u64 block_sum64(u64 v, sr_shared *sh) {
    v = warp_sum64(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        sh->red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_sum64((threadIdx.x & 31) < SR_WARPS ? sh->red[threadIdx.x & 31] : 0);
}
__device__ u64 block_max64(u64 v, sr_shared *sh) {
    v = warp_max64(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        sh->red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_max64((threadIdx.x & 31) < SR_WARPS ? sh->red[threadIdx.x & 31] : 0);
}

// f(i, x) for this thread's elements i = threadIdx.x + k * blockDim.x, in that
// order, with SR_UNROLL loads issued before they are used (a pass is bound by
// load latency, not bandwidth, when each load waits for the previous one).
enum { SR_UNROLL = 8 };
template <typename T, typename F> __device__ __forceinline__ void for_row(const T *row, int C, F f) {
    int i = threadIdx.x;
    for (; i + (SR_UNROLL - 1) * (int)blockDim.x < C; i += SR_UNROLL * blockDim.x) {
        float v[SR_UNROLL];
#pragma unroll
        for (int u = 0; u < SR_UNROLL; u++)
            v[u] = lz_to_float(row[i + u * blockDim.x]);
#pragma unroll
        for (int u = 0; u < SR_UNROLL; u++)
            f(i + u * (int)blockDim.x, v[u]);
    }
    for (; i < C; i += blockDim.x)
        f(i, lz_to_float(row[i]));
}

// The first index of the largest key: (key, reversed index) packed, then the maximum.
template <typename T> __device__ int32_t first_largest(const T *row, int C, sr_shared *sh) {
    u64 best = 0;
    for_row(row, C, [&](int i, float x) {
        const u64 v = ((u64)lz_sample_key(x) << 32) | (u64)(SR_NONE - (uint32_t)i);
        best = v > best ? v : best;
    });
    best = block_max64(best, sh);
    return (int32_t)(SR_NONE - (uint32_t)(best & SR_NONE));
}

// One radix pass: hist[digit at `shift`] += 1 (counts) or the token's weight
// (MASS: tokens with key > above only), over the tokens whose higher digits
// are `prefix`. Each thread keeps two running bins in registers, so the few
// crowded bins of the first passes take few shared-memory atomics.
template <typename T, bool MASS>
__device__ void radix_pass(const T *row, int C, uint32_t prefix, uint32_t mask, int shift, uint32_t above, float m,
                           float c, sr_shared *sh) {
    uint32_t b0 = SR_NONE, b1 = SR_NONE;
    u64 s0 = 0, s1 = 0;
    for_row(row, C, [&](int, float x) {
        const uint32_t key = lz_sample_key(x);
        if ((key & mask) != prefix || (MASS && key <= above))
            return;
        const uint32_t bin = (key >> shift) & 255u;
        const u64 v = MASS ? lz_sample_mass(x, m, c) : 1;
        if (bin == b0) {
            s0 += v;
        } else if (bin == b1) {
            s1 += v;
        } else {
            if (b1 != SR_NONE)
                atomicAdd(&sh->hist[b1], s1);
            b1 = b0, s1 = s0, b0 = bin, s0 = v;
        }
    });
    if (b0 != SR_NONE)
        atomicAdd(&sh->hist[b0], s0);
    if (b1 != SR_NONE)
        atomicAdd(&sh->hist[b1], s1);
}

// Warp 0: the bin, scanning 255 down to 0, where the running total reaches
// `need`, and what is still needed inside it (none: bin 0, need unchanged),
// as find_bin in kernels/cpu/sample_rows.c. Lane l holds bins 255 - 8l - j.
__device__ void find_bin(sr_shared *sh, u64 need) {
    const int lane = threadIdx.x & 31;
    u64 local = 0;
    for (int j = 0; j < 8; j++)
        local += sh->hist[255 - 8 * lane - j];
    const u64 incl = warp_scan64(local), excl = incl - local;
    const unsigned found = __ballot_sync(0xffffffffu, excl < need && incl >= need);
    if (!found) {
        if (lane == 0)
            sh->digit = 0, sh->need = need;
        return;
    }
    if (lane == __ffs(found) - 1) {
        u64 before = excl;
        for (int j = 0; j < 8; j++) {
            const int b = 255 - 8 * lane - j;
            if (before + sh->hist[b] >= need) {
                sh->digit = (uint32_t)b, sh->need = need - before;
                break;
            }
            before += sh->hist[b];
        }
    }
}

// Top-k (MASS false: need = k) or top-p (MASS true: need from the first
// pass's total) boundary: its key *tau and count *r. For top-p, K is {key >
// tk} plus the first rk tokens of key tk, all of weight wk.
template <typename T, bool MASS>
__device__ void select(const T *row, int C, u64 need, uint64_t p53, uint32_t tk, u64 rk, float m, float c,
                       sr_shared *sh, uint32_t *tau, u64 *r) {
    const u64 wk = MASS ? lz_sample_mass(lz_sample_key_value(tk), m, c) : 0;
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x)
            sh->hist[b] = 0;
        __syncthreads();
        radix_pass<T, MASS>(row, C, prefix, mask, shift, tk, m, c, sh);
        __syncthreads();
        if (MASS && threadIdx.x == 0 && (tk & mask) == prefix)
            sh->hist[(tk >> shift) & 255u] += rk * wk;
        __syncthreads();
        if (MASS && shift == 24) { // all of K: its weight Z sets the target
            const u64 z = block_sum64(threadIdx.x < 256 ? sh->hist[threadIdx.x] : 0, sh);
            need = lz_sample_frac53(z, p53);
            need = need > 0 ? need : 1;
        }
        if (threadIdx.x < 32)
            find_bin(sh, need);
        __syncthreads();
        prefix |= sh->digit << shift;
        mask |= 255u << shift;
        need = sh->need;
        __syncthreads(); // everyone has read digit and need before the next pass
    }
    *tau = prefix;
    if (MASS) {
        const u64 w = lz_sample_mass(lz_sample_key_value(prefix), m, c);
        *r = w > 0 ? (need + w - 1) / w : 1;
    } else {
        *r = need;
    }
}

// Warp `warp`'s chunk of the row in the pick, rank = the tokens of key tau
// before it. Kept: key > tau, or key == tau among the first r such (by index).
// walk false: the chunk's kept weight (every lane gets it); walk true: the
// index whose running weight, from `base`, first exceeds `target` (-1: none).
template <typename T>
__device__ int64_t chunk(const T *row, int beg, int end, uint32_t tau, u64 r, u64 rank, float m, float c, bool walk,
                         u64 base, u64 target) {
    const int lane = threadIdx.x & 31;
    const unsigned below = (1u << lane) - 1;
    u64 sum = 0;
    for (int t0 = beg; t0 < end; t0 += 32 * SR_UNROLL) { // SR_UNROLL tiles of 32 loaded, then used in order
        float v[SR_UNROLL];
#pragma unroll
        for (int u = 0; u < SR_UNROLL; u++)
            v[u] = t0 + 32 * u + lane < end ? lz_to_float(row[t0 + 32 * u + lane]) : 0.0f;
#pragma unroll
        for (int u = 0; u < SR_UNROLL; u++) {
            const int i0 = t0 + 32 * u, i = i0 + lane;
            if (i0 >= end) // warp-uniform
                break;
            const uint32_t key = i < end ? lz_sample_key(v[u]) : 0;
            const bool tie = i < end && key == tau;
            const unsigned tb = __ballot_sync(0xffffffffu, tie);
            const bool kept = i < end && (key > tau || (tie && rank + __popc(tb & below) < r));
            const u64 w = kept ? lz_sample_mass(v[u], m, c) : 0;
            rank += __popc(tb);
            if (!walk) {
                sum += w;
                continue;
            }
            const u64 incl = warp_scan64(w);
            const unsigned hit = __ballot_sync(0xffffffffu, w > 0 && base + incl - w <= target && target < base + incl);
            if (hit)
                return i0 + __ffs(hit) - 1;
            base += __shfl_sync(0xffffffffu, incl, 31);
        }
    }
    return walk ? -1 : (int64_t)warp_sum64(sum); // < 2^63 (LZ_SAMPLE_MAX_VOCAB)
}

// The pick: per-warp chunks of the row in index order; the tokens of key tau
// before each chunk, each chunk's kept weight, then the warp whose share holds
// floor(M * u) finds the index.
template <typename T>
__device__ int32_t pick(const T *row, int C, uint32_t tau, u64 r, uint64_t u53, float m, float c, sr_shared *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int size = ((C + SR_WARPS - 1) / SR_WARPS + 31) / 32 * 32;
    const int beg = min(C, warp * size), end = min(C, beg + size);
    u64 ties = 0;
    if (r < (u64)C) // else every token of key tau is kept: ranks do not matter
        for (int t0 = beg; t0 < end; t0 += 32 * SR_UNROLL) {
            bool tie[SR_UNROLL];
#pragma unroll
            for (int u = 0; u < SR_UNROLL; u++) {
                const int i = t0 + 32 * u + lane;
                tie[u] = i < end && lz_sample_key(lz_to_float(row[i])) == tau;
            }
#pragma unroll
            for (int u = 0; u < SR_UNROLL; u++)
                ties += __popc(__ballot_sync(0xffffffffu, tie[u]));
        }
    if (lane == 0)
        sh->warp_ties[warp] = ties;
    __syncthreads();
    if (warp == 0) {
        const u64 t = lane < SR_WARPS ? sh->warp_ties[lane] : 0, incl = warp_scan64(t);
        if (lane < SR_WARPS)
            sh->warp_ties[lane] = incl - t;
    }
    __syncthreads();
    const u64 rank = sh->warp_ties[warp];
    const u64 sum = (u64)chunk(row, beg, end, tau, r, rank, m, c, false, 0, 0);
    if (lane == 0)
        sh->warp_sum[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        const u64 s = lane < SR_WARPS ? sh->warp_sum[lane] : 0, incl = warp_scan64(s);
        if (lane < SR_WARPS)
            sh->warp_base[lane] = incl - s;
        const u64 total = __shfl_sync(0xffffffffu, incl, 31);
        if (lane == 0)
            sh->target = lz_sample_frac53(total, u53), sh->id = -1;
    }
    __syncthreads();
    const u64 base = sh->warp_base[warp], target = sh->target;
    if (base <= target && target < base + sum) { // one warp: the sums are consecutive ranges
        const int64_t id = chunk(row, beg, end, tau, r, rank, m, c, true, base, target);
        if (lane == 0)
            sh->id = (int32_t)id;
    }
    __syncthreads();
    return sh->id;
}

// Per row: what the host computed from lz_sample_row (sample_rows_params).
template <typename T>
__global__ void __launch_bounds__(SR_THREADS) sample_rows_kernel(int32_t *ids, const T *x, int C,
                                                                 const lz_sample_dev *params) {
    __shared__ sr_shared sh;
    lz_pdl_wait(); // the logits come from the previous kernel
    lz_pdl_launch_dependents();
    const T *row = x + (size_t)blockIdx.x * C;
    const lz_sample_dev p = params[blockIdx.x];
    float m = -INFINITY;
    for_row(row, C, [&](int, float x) { m = fmaxf(m, x); }); // NaN is skipped
    m = lz_block_max(m, sh.redf);
    int32_t id;
    if (p.greedy || !(m > -INFINITY)) {
        id = first_largest(row, C, &sh);
    } else {
        uint32_t tau = 0; // keep all
        u64 r = (u64)C;
        if (p.top_k > 0 && p.top_k < C)
            select<T, false>(row, C, (u64)p.top_k, 0, 0, 0, m, p.c, &sh, &tau, &r);
        if (p.p53 < (1ull << 53))
            select<T, true>(row, C, 0, p.p53, tau, r, m, p.c, &sh, &tau, &r);
        id = pick(row, C, tau, r, p.u53, m, p.c, &sh);
        if (id < 0) // not reached: the largest logit weighs 2^40 and is kept
            id = first_largest(row, C, &sh);
    }
    if (threadIdx.x == 0)
        ids[blockIdx.x] = id;
}

template <typename T>
lz_status sample_rows_forward(lz_cuda_ctx *c, int32_t *ids, const T *x, int n, int C, const lz_sample_dev *params) {
    return lz_launch(c, "sample_rows", sample_rows_kernel<T>, dim3((unsigned)n), dim3(SR_THREADS), 0, ids, x, C, params);
}

lz_sample_dev lz_sample_dev_of(const lz_sample_row *p) {
    lz_sample_dev d = {};
    d.greedy = !(p->temperature > 0);
    d.c = d.greedy ? 0.0f : lz_sample_scale(p->temperature); // as kernels/cpu/sample_rows.c
    d.top_k = p->top_k;
    d.p53 = p->top_p < 1 ? lz_sample_to53(p->top_p) : (1ull << 53);
    const uint64_t u53 = lz_sample_to53(p->u);
    d.u53 = u53 < (1ull << 53) ? u53 : (1ull << 53) - 1;
    return d;
}

#define LZ_SAMPLE(T) template lz_status sample_rows_forward<T>(lz_cuda_ctx *, int32_t *, const T *, int, int, const lz_sample_dev *);
LZ_INSTANTIATE(LZ_SAMPLE)
