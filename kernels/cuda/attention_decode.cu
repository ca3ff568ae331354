// attention_decode.cu - decode-step attention (one new token per sequence) in one launch: the
// retained softmax layers over their KV cache, and the Lizard window branch over its ring of the
// last w keys and values (meta-memory logits in the denominator, added as alpha * WIN).
//
// grid (tokens, Hkv, splits), block DEC_WARPS warps. A decode step's attention reads little (a few MB
// at batch 1), so its time is round trips and launches, not bytes. So:
// - each warp streams its own tiles of keys (every DEC_WARPS-th of the block's range) through a
//   cp.async ring of tiles in shared memory (CUDA cores: 4 stages, or 2 for long rows; mma: 3), and no
//   block barriers in the loop; all the query heads of the kv head share each tile;
// - bf16 (TCS > 0): a tile is 16 keys, and the scores and the weighted values are bf16 mma.sync
//   products with the group's query heads as the rows (q K^T, then P V with P as bf16, fp32
//   accumulation, as flash attention does), 3 ring stages (2 blocks an SM). fp32 and splits of <= 64
//   keys (see lz_attention_decode) keep the CUDA-core loop;
// - a warp keeps its own online softmax (log2 domain, exp2); the block merges its warps at the end;
// - the key range of a split follows the sequence's current length (read on the device), so all
//   splits of a sequence get work whatever the cache capacity, while the grid depends only on the
//   batch size and capacity (recorded graphs stay valid); splits past the length exit at once;
// - the splits merge in the same launch: each writes its partial (m, l, acc), and the last to
//   arrive at its (sequence, kv head) counter merges them and sets the counter back to zero;
// - the new key and value come from the k and v inputs (the block owning the last position also
//   writes them into the cache or ring), so no append launch. A ring row p % w held position
//   p - w, which no window of this step reads.
// - after the PDL wait, q's loads go out before the owning block's append (they overlap), and the
//   last split copies all partials into shared memory at once where they fit the rings, instead of
//   a round trip for m and l and then one for each 8 splits' accumulators.
// DEC_MAX_SPLITS: the merge's m and l [splits][group] must fit in the rings' shared memory.
#include "attention_decode.cuh"
#include "attention_tile.cuh" // lz_load4
#include "pdl.cuh" // lz_launch, lz_pdl_wait
#include "ptx.cuh" // lz_cp_async16, lz_ldsm_x4, lz_mma_bf16, lz_fast_exp2, lz_pack_bf16

// DEC_LONG_CACHE: above this capacity one sequence's split count aims at as many blocks an SM as fit
enum { DEC_WARPS = 4, DEC_MIN_KEYS = 64, DEC_MAX_SPLITS = 512, DEC_MAX_PARTIALS = 1 << 21, DEC_LONG_CACHE = 16384 };
#define DEC_LOG2E 1.4426950408889634f

// TCS: 0 the CUDA-core loop, else the mma loop with TCS ring stages a warp.
// Keys a tile: 16 for the mma (its k and n dimensions), 8 for the CUDA-core loop.
template <int TCS> __host__ __device__ constexpr int dec_kt() { return TCS ? 16 : 8; }
// ring stages per warp: the mma's TCS; CUDA cores 4 for rows up to 256 bytes, else 2
template <typename T, int DPL, int TCS> __host__ __device__ constexpr int dec_stages() {
    return TCS ? TCS : 32 * DPL * sizeof(T) <= 256 ? 4 : 2;
}
// blocks an SM the registers must allow: 3 (rings of ~70 KB), 2 for 3 mma stages (~105 KB)
template <int TCS> __host__ __device__ constexpr int dec_min_blocks() { return TCS == 3 ? 2 : 3; }
template <int G, int D> __host__ __device__ constexpr int dec_rec() { return (G * (D + 2) + 3) / 4 * 4; }
// a ring row: the head's dims and 16 bytes of padding (ldmatrix rows fall in different banks)
template <typename T, int DPL> __host__ __device__ constexpr int dec_ld() { return 32 * DPL + 16 / (int)sizeof(T); }
template <typename T, int DPL, int TCS> __host__ __device__ constexpr size_t dec_ring_bytes() {
    return sizeof(T) * DEC_WARPS * dec_stages<T, DPL, TCS>() * 2 * dec_kt<TCS>() * dec_ld<T, DPL>();
}
// shared memory: K/V rings [warps][stages][2][KT][ld] (T); CUDA cores also q [G][d] and
// p [warps][KT][G] (floats); a flag
template <typename T, int G, int DPL, int TCS> __host__ __device__ constexpr size_t dec_smem() {
    return dec_ring_bytes<T, DPL, TCS>() + sizeof(float) * ((TCS ? 0 : G * 32 * DPL + DEC_WARPS * 8 * G) + 4);
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

// q, k, v: this step's rows [tokens, H, d] (rope applied); kc, vc: the cache [slots][capacity][Hkv][d],
// or with ring the window rings [slots][w = capacity][Hkv][d] (row of key position x: x % w).
// partial: [tokens, Hkv, splits] x dec_rec floats (acc [G][d], m [G], l [G]; 16-byte aligned
// records); count: [tokens * Hkv], zero on entry and on exit. ring (the window): out += alpha *
// result instead of out = result, and the n_meta meta-memory logits (meta) add their mass to the
// denominator.
template <typename T, int G, int DPL, int TCS>
__global__ void __launch_bounds__(DEC_WARPS * 32, dec_min_blocks<TCS>())
    attention_split_kernel(T *out, float *partial, unsigned *count, const T *q, const T *k, const T *v, T *kc, T *vc,
                           const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos, int Hkv,
                           int capacity, int sliding_window, int splits, int ring, const T *meta, int n_meta,
                           float alpha) {
    constexpr bool TC = TCS > 0;
    constexpr int D = 32 * DPL, V = 16 / sizeof(T), CH = D / V, LD = dec_ld<T, DPL>(), KT = dec_kt<TCS>();
    constexpr int S = dec_stages<T, DPL, TCS>(), NW = DEC_WARPS;
    static_assert(dec_ring_bytes<T, DPL, TCS>() >= sizeof(float) * NW * G * (D + 2), "the warp merge reuses the rings");
    static_assert(dec_ring_bytes<T, DPL, TCS>() >= sizeof(float) * (2 * DEC_MAX_SPLITS + 2) * G,
                  "so does the last one's");
    static_assert(!TC || (sizeof(T) == 2 && G <= 16 && D % 16 == 0), "the mma takes bf16, 16 rows, k of 16");
    extern __shared__ __align__(16) unsigned char dec_sm[];
    T *ring_base = (T *)dec_sm;
    float *qs = (float *)(dec_sm + dec_ring_bytes<T, DPL, TCS>()), *pbuf = qs + (TC ? 0 : G * D);
    int *flag = (int *)(pbuf + (TC ? 0 : NW * KT * G));
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
    auto crow = [&](int key) { return cbase + (size_t)(ring ? key % capacity : key) * row; };
    T *wring = ring_base + (size_t)warp * S * 2 * KT * LD;
    const int n_tiles = (t1 - t0 + KT - 1) / KT, my_tiles = n_tiles > warp ? (n_tiles - warp + NW - 1) / NW : 0;
    // tile i of this warp (block tile warp + NW i) into stage i % S; always one commit group. The
    // mma reads whole tiles: rows past t1 are zero-filled (stale rows could hold NaN patterns).
    auto issue = [&](int i) {
        if (i < my_tiles) {
            const int k0 = t0 + KT * (warp + NW * i);
            T *ks = wring + (size_t)(i % S) * 2 * KT * LD, *vs = ks + KT * LD;
#pragma unroll
            for (int e = lane; e < KT * CH; e += 32) {
                const int j = e / CH, c = e % CH, key = k0 + j;
                if (key != p && (TC || key < t1)) { // the new key comes from k and v (after the wait)
                    const size_t src = (key < t1 ? crow(key) : cbase) + c * V;
                    lz_cp_async16(ks + j * LD + c * V, kc + src, key < t1);
                    lz_cp_async16(vs + j * LD + c * V, vc + src, key < t1);
                }
            }
        }
        lz_cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < S - 1; i++)
        issue(i);
    // the meta logits (a weight): their mass in log2 units, mm + log2(lm)
    float mm = -INFINITY, lm = 0.0f;
    if (meta) {
        for (int j = 0; j < n_meta; j++)
            mm = fmaxf(mm, lz_to_float(meta[j]));
        for (int j = 0; j < n_meta; j++)
            lm += expf(lz_to_float(meta[j]) - mm);
        mm *= DEC_LOG2E;
    }
    lz_pdl_wait(); // q, k, v come from the previous kernels; out, partial and count are shared
    lz_pdl_launch_dependents();
    const int Hq = Hkv * G;
    const T *qg = q + ((size_t)t * Hq + (size_t)g * G) * D; // the group's heads are adjacent
    // q first, so that its loads and the append's are in flight together. mma: lane holds rows (query
    // heads) r and r + 8 of the 16-row tiles, key / dim pair 2 cq + {0, 1}; q as the A operand, rows
    // past G zero.
    const int r = lane >> 2, cq = lane & 3;
    uint32_t qa[TC ? D / 16 : 1][4];
    if constexpr (TC) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const int c0 = kk * 16 + 2 * cq;
            qa[kk][0] = r < G ? *(const uint32_t *)(qg + r * D + c0) : 0u;
            qa[kk][1] = r + 8 < G ? *(const uint32_t *)(qg + (r + 8) * D + c0) : 0u;
            qa[kk][2] = r < G ? *(const uint32_t *)(qg + r * D + c0 + 8) : 0u;
            qa[kk][3] = r + 8 < G ? *(const uint32_t *)(qg + (r + 8) * D + c0 + 8) : 0u;
        }
    } else {
        for (int e = threadIdx.x; e < G * D; e += blockDim.x)
            qs[e] = lz_to_float(qg[e]);
    }
    if (split == active - 1) // owns position p: append this step's key and value to the cache
        for (int x = threadIdx.x; x < D; x += blockDim.x) {
            kc[crow(p) + x] = k[nrow + x];
            vc[crow(p) + x] = v[nrow + x];
        }
    if constexpr (!TC)
        __syncthreads(); // qs (the mma's q is in registers, the rings are per warp, the cache is not read back)

    const float scale = rsqrtf((float)D) * DEC_LOG2E; // exp2 below
    float *ws = (float *)dec_sm, *mine = ws + warp * G * (D + 2); // the warps' (m [G], l [G], acc [G][D])
    // the tile of this warp's i-th iteration: its first key, the stage; the new key's row written in
    auto tile_at = [&](int i, T *&ks, T *&vs) {
        const int k0 = t0 + KT * (warp + NW * i);
        ks = wring + (size_t)(i % S) * 2 * KT * LD, vs = ks + KT * LD;
        if (p >= k0 && p < k0 + KT)
            for (int x = lane; x < D; x += 32) {
                ks[(p - k0) * LD + x] = k[nrow + x];
                vs[(p - k0) * LD + x] = v[nrow + x];
            }
        __syncwarp(); // every lane's copies of this tile are visible
        return k0;
    };
    if constexpr (TC) {
        float o[D / 8][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++)
            o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
        for (int i = 0; i < my_tiles; i++) {
            issue(i + S - 1); // into the stage read in iteration i - 1 (released by its last __syncwarp)
            lz_cp_async_wait<S - 1>();
            T *ks, *vs;
            const int k0 = tile_at(i, ks, vs);
            float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}}; // keys 0-7, 8-15
            // x4: keys 0-7 dims +0 / +8, keys 8-15 dims +0 / +8: the B operands of both key halves
            const uint32_t kaddr = lz_smem_u32(ks + ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t b[4];
                lz_ldsm_x4(b, kaddr + kk * 16 * (uint32_t)sizeof(T));
                lz_mma_bf16(s[0], qa[kk], b[0], b[1]);
                lz_mma_bf16(s[1], qa[kk], b[2], b[3]);
            }
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool in = k0 + h2 * 8 + 2 * cq + (e & 1) < t1;
                    s[h2][e] = in ? s[h2][e] * scale : -INFINITY;
                    if (e < 2)
                        mx0 = fmaxf(mx0, s[h2][e]);
                    else
                        mx1 = fmaxf(mx1, s[h2][e]);
                }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1); // finite: key k0 is in range
            const float c0 = lz_fast_exp2(m0 - n0), c1 = lz_fast_exp2(m1 - n1);
            m0 = n0, m1 = n1;
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                s[h2][0] = lz_fast_exp2(s[h2][0] - n0), s[h2][1] = lz_fast_exp2(s[h2][1] - n0);
                s[h2][2] = lz_fast_exp2(s[h2][2] - n1), s[h2][3] = lz_fast_exp2(s[h2][3] - n1);
            }
            l0 = l0 * c0 + (s[0][0] + s[0][1] + s[1][0] + s[1][1]); // this lane's keys; the quad sums at the end
            l1 = l1 * c1 + (s[0][2] + s[0][3] + s[1][2] + s[1][3]);
            // P as the A operand (16 heads x 16 keys): the two score tiles' accumulators, as bf16
            const uint32_t pa[4] = {lz_pack_bf16(s[0][0], s[0][1]), lz_pack_bf16(s[0][2], s[0][3]),
                                    lz_pack_bf16(s[1][0], s[1][1]), lz_pack_bf16(s[1][2], s[1][3])};
            // x4.trans: keys 0-7 / 8-15 of dims 8 nd and of 8 (nd + 1): B operands of two dim tiles
            const uint32_t vaddr = lz_smem_u32(vs + (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);
#pragma unroll
            for (int nd = 0; nd < D / 8; nd += 2) {
                o[nd][0] *= c0, o[nd][1] *= c0, o[nd][2] *= c1, o[nd][3] *= c1;
                o[nd + 1][0] *= c0, o[nd + 1][1] *= c0, o[nd + 1][2] *= c1, o[nd + 1][3] *= c1;
                uint32_t b[4];
                lz_ldsm_x4_trans(b, vaddr + nd * 8 * (uint32_t)sizeof(T));
                lz_mma_bf16(o[nd], pa, b[0], b[1]);
                lz_mma_bf16(o[nd + 1], pa, b[2], b[3]);
            }
            __syncwarp(); // the stage is free
        }
        lz_cp_async_wait<0>();
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        __syncthreads(); // every warp is past its rings: they hold the warps' results from here
        if (cq == 0 && r < G)
            mine[r] = m0, mine[G + r] = l0;
        if (cq == 0 && r + 8 < G)
            mine[r + 8] = m1, mine[G + r + 8] = l1;
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++) {
            const int x = nd * 8 + 2 * cq;
            if (r < G)
                mine[2 * G + r * D + x] = o[nd][0], mine[2 * G + r * D + x + 1] = o[nd][1];
            if (r + 8 < G)
                mine[2 * G + (r + 8) * D + x] = o[nd][2], mine[2 * G + (r + 8) * D + x + 1] = o[nd][3];
        }
    } else {
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
            T *ks, *vs;
            const int k0 = tile_at(i, ks, vs), n = min(KT, t1 - k0);
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
        __syncthreads(); // every warp is past its rings: they hold the warps' results from here
#pragma unroll
        for (int h = 0; h < G; h++) {
            if (lane == 0)
                mine[h] = m[h], mine[G + h] = l[h];
#pragma unroll
            for (int x = 0; x < DPL; x++)
                mine[2 * G + h * D + lane * DPL + x] = acc[h][x];
        }
    }
    lz_trace_mark(); // (LIZARD_TRACE) past its tiles
    __syncthreads();
    // one output: the softmax's numerator A and denominator L at maximum M (log2 units)
    auto emit = [&](int h, int x, float A, float M, float L) {
        T *o = out + ((size_t)t * Hq + (size_t)g * G + h) * D + x;
        if (ring) // the window: the meta logits' mass joins the denominator; onto the GLA output
            *o = lz_from_float<T>(lz_to_float(*o) + alpha * A / (L + lm * exp2f(mm - M)));
        else
            *o = lz_from_float<T>(A / L);
    };
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
            emit(h, x, A, M, L);
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
    lz_trace_mark(); // its partial written and counted
    if (!*flag)
        return;
    __threadfence();
    // The last split merges all of them, from L2 (other SMs wrote them). Where they fit the rings
    // (17 splits of the 8B shape: 35 KB), all records are copied into shared memory at once (one
    // round trip, not one for m and l and then one per 8 splits); else m and l go there and the
    // accumulators are read from L2, 8 splits' loads in flight. The m are turned into weights.
    const float *pp = partial + pair * splits * REC;
    const bool staged = ((size_t)active * (REC + 2 * G) + 2 * G) * sizeof(float) <= dec_ring_bytes<T, DPL, TCS>();
    float *rec = (float *)dec_sm; // staged: the records [active][REC]
    float *wt = rec + (staged ? (size_t)active * REC : 0), *lt = wt + active * G, *Msum = lt + active * G,
          *Lsum = Msum + G;
    if (staged) {
        for (int e = threadIdx.x; e < active * REC / 4; e += blockDim.x)
            lz_cp_async16(rec + 4 * e, pp + 4 * e);
        lz_cp_async_commit();
        lz_cp_async_wait<0>();
        __syncthreads();
    }
    lz_trace_mark(); // the last split's records staged
    const float *src = staged ? rec : pp; // the records, in shared memory or in L2
    auto load = [staged](const auto *p) { return staged ? *p : __ldcg(p); }; // (ld.global.cg: not shared)
    for (int e = threadIdx.x; e < active * G; e += blockDim.x) {
        const float *o = src + (size_t)(e / G) * REC + G * D + e % G;
        wt[e] = load(o);
        lt[e] = load(o + G);
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
            Msum[h] = M, Lsum[h] = L;
    }
    __syncthreads();
    constexpr int U = (G * D / 4 + NW * 32 - 1) / (NW * 32); // 4-column groups a thread
    float4 A[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        A[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = 0; s < active; s++) {
        const float4 *o = (const float4 *)(src + (size_t)s * REC);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = threadIdx.x + u * NW * 32;
            if (e < G * D / 4) {
                const float c = wt[s * G + e * 4 / D];
                const float4 a = load(o + e);
                A[u].x += c * a.x, A[u].y += c * a.y, A[u].z += c * a.z, A[u].w += c * a.w;
            }
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int e = threadIdx.x + u * NW * 32;
        if (e < G * D / 4) {
            const int h = e * 4 / D, x = e * 4 % D;
            emit(h, x, A[u].x, Msum[h], Lsum[h]), emit(h, x + 1, A[u].y, Msum[h], Lsum[h]);
            emit(h, x + 2, A[u].z, Msum[h], Lsum[h]), emit(h, x + 3, A[u].w, Msum[h], Lsum[h]);
        }
    }
    lz_trace_mark(); // merged and written
}

// The instantiations the launcher picks from: group 1, 2, 4, 8 and head_dim 64, 128, 256
// (group x dims per lane <= 32 floats of accumulators); bf16 head_dim 64 and 128 on the mma too.
template <typename T>
using dec_kernel_t = void (*)(T *, float *, unsigned *, const T *, const T *, const T *, T *, T *, const int32_t *,
                              const int32_t *, const int32_t *, int, int, int, int, int, const T *, int, float);
template <typename T> struct dec_entry {
    int group, d, tcs;
    dec_kernel_t<T> fn;
    size_t smem;
    int fit; // blocks an SM (lz_attention_decode_init), 0 where it does not fit
};
template <typename T, int G, int DPL, int TCS> constexpr dec_entry<T> dec_make() {
    return {G, 32 * DPL, TCS, attention_split_kernel<T, G, DPL, TCS>, dec_smem<T, G, DPL, TCS>(), 0};
}
template <typename T, int G, int TCS> constexpr dec_entry<T> dec_make_tc(int d) {
    if constexpr (sizeof(T) == 2)
        return d == 64 ? dec_make<T, G, 2, TCS>() : dec_make<T, G, 4, TCS>();
    return {0, 0, 0, NULL, 0, 0};
}
template <typename T> static dec_entry<T> *dec_find(int group, int d, int tcs) {
    static dec_entry<T> table[] = {
        dec_make<T, 1, 2, 0>(),      dec_make<T, 1, 4, 0>(),      dec_make<T, 1, 8, 0>(),      dec_make<T, 2, 2, 0>(),
        dec_make<T, 2, 4, 0>(),      dec_make<T, 2, 8, 0>(),      dec_make<T, 4, 2, 0>(),      dec_make<T, 4, 4, 0>(),
        dec_make<T, 4, 8, 0>(),      dec_make<T, 8, 2, 0>(),      dec_make<T, 8, 4, 0>(),      dec_make_tc<T, 1, 2>(64),
        dec_make_tc<T, 1, 2>(128),   dec_make_tc<T, 2, 2>(64),    dec_make_tc<T, 2, 2>(128),   dec_make_tc<T, 4, 2>(64),
        dec_make_tc<T, 4, 2>(128),   dec_make_tc<T, 8, 2>(64),    dec_make_tc<T, 8, 2>(128),   dec_make_tc<T, 1, 3>(64),
        dec_make_tc<T, 1, 3>(128),   dec_make_tc<T, 2, 3>(64),    dec_make_tc<T, 2, 3>(128),   dec_make_tc<T, 4, 3>(64),
        dec_make_tc<T, 4, 3>(128),   dec_make_tc<T, 8, 3>(64),    dec_make_tc<T, 8, 3>(128),   {0, 0, 0, NULL, 0, 0},
    };
    for (dec_entry<T> *e = table; e->group; e++)
        if (e->group == group && e->d == d && e->tcs == tcs)
            return e;
    return NULL;
}

// The kernel's arrival counters: at least n zeros (grown outside graph recording: every step
// shape runs once eagerly first).
static lz_status dec_counters(lz_cuda_ctx *c, int n) {
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

// The mma loop with a ring of 3 stages; a window ring of at most 2 tiles a warp (w <= 128) never fills
// a third stage: 2, so that 3 blocks fit an SM instead of 2. Else the CUDA-core loop.
template <typename T> static const dec_entry<T> *dec_pick(const lz_cuda_ctx *c, int group, int d, int ring_keys = 0) {
    const int stages = ring_keys > 0 && ring_keys <= 2 * dec_kt<2>() * DEC_WARPS ? 2 : 3;
    const dec_entry<T> *e = dec_find<T>(group, d, stages);
    e = e ? e : dec_find<T>(group, d, 0);
    return e && e->fit > 0 ? e : NULL;
}

template <typename T> bool lz_attention_decode_fits(const lz_cuda_ctx *c, int group, int d) {
    return dec_pick<T>(c, group, d) != NULL;
}

template <typename T>
lz_status lz_attention_decode(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, T *kc, T *vc,
                              const lz_cuda_batch *b, int n, int Hq, int Hkv, int d, int capacity, int sliding_window,
                              bool ring, const T *meta, int n_meta, float alpha) {
    const int group = Hq / Hkv;
    const dec_entry<T> *e = dec_pick<T>(c, group, d, ring ? capacity : 0);
    if (!e)
        return lz_fail(LZ_ERR_INTERNAL, "decode attention: no kernel for %d query heads per kv head, head_dim %d", group, d);
    // The grid follows the batch size and the cache capacity only (graphs stay valid); about
    // per_sm blocks an SM in all, each split at least DEC_MIN_KEYS keys of the capacity: the mma loop
    // 3 blocks an SM up to 256 (sequence, kv head) pairs, else 4; up to 32 pairs one block an SM, except
    // one sequence above 16K positions (as many as fit); the CUDA-core loop 8.
    const int pairs = n * Hkv;
    int per_sm = c->decode_attn; // (LIZARD_DECODE_ATTN; -1: by the batch)
    if (per_sm < 0 && e->tcs && pairs <= 32)
        per_sm = n == 1 && capacity > DEC_LONG_CACHE ? e->fit : 1;
    else if (per_sm < 0)
        per_sm = !e->tcs ? 8 : pairs <= 256 ? 3 : 4;
    per_sm = per_sm > 0 ? per_sm : 1;
    // The window's ring (w keys, 128 in the paper's layers): one split, no merge, unless
    // LIZARD_DECODE_ATTN says otherwise.
    const int want = ring && c->decode_attn < 0 ? 1 : (per_sm * c->n_sms + pairs - 1) / pairs;
    int splits = (capacity + DEC_MIN_KEYS - 1) / DEC_MIN_KEYS;
    splits = splits < want ? splits : want;
    const int cap = (int)(DEC_MAX_PARTIALS / ((size_t)n * Hq));
    splits = splits < cap ? splits : cap;
    splits = splits < DEC_MAX_SPLITS ? splits : DEC_MAX_SPLITS;
    splits = splits > 1 ? splits : 1;
    // Splits of at most DEC_MIN_KEYS keys (a short cache, few sequences) leave one 16-key tile a warp,
    // where the CUDA-core loop is ahead. Not for the rings: the window is faster on the mma either way.
    if (e->tcs && !ring && c->decode_attn < 0 && (size_t)splits * DEC_MIN_KEYS >= (size_t)capacity) {
        const dec_entry<T> *cc = dec_find<T>(group, d, 0);
        e = cc && cc->fit > 0 ? cc : e;
    }
    float *partial = NULL;
    if (splits > 1) {
        LZ_TRY(lz_cuda_scratch(c, sizeof(float) * (size_t)pairs * splits * ((group * (d + 2) + 3) / 4 * 4)));
        partial = (float *)c->scratch;
    }
    LZ_TRY(dec_counters(c, pairs));
    return lz_launch(c, ring ? "window decode" : "attention decode", e->fn, dim3(n, Hkv, splits), dim3(DEC_WARPS * 32),
                     e->smem, out, partial, c->attn_count, q, k, v, kc, vc, b->token_seq, b->slot, b->token_pos, Hkv,
                     capacity, sliding_window, splits, ring ? 1 : 0, meta, n_meta, alpha);
}

// Once per backend (not per launch, so that decode steps can be captured in graphs): each kernel's
// shared memory limit and how many of its blocks fit an SM (0: more shared memory than the GPU has).
template <typename T> lz_status lz_attention_decode_init(lz_cuda_ctx *c) {
    for (int group = 1; group <= 8; group *= 2)
        for (int d = 64; d <= 256; d *= 2)
            for (int tcs = 0; tcs <= 3; tcs++) {
                dec_entry<T> *e = dec_find<T>(group, d, tcs);
                if (!e)
                    continue;
                e->fit = 0;
                if (e->smem > c->max_smem)
                    continue;
                LZ_CUDA_TRY(cudaFuncSetAttribute(e->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)e->smem));
                LZ_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&e->fit, e->fn, DEC_WARPS * 32, e->smem));
            }
    return LZ_OK;
}

#define LZ_ATTN_DECODE(T)                                                                                            \
    template bool lz_attention_decode_fits<T>(const lz_cuda_ctx *, int, int);                                       \
    template lz_status lz_attention_decode_init<T>(lz_cuda_ctx *);                                                  \
    template lz_status lz_attention_decode<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, T *, T *,          \
                                              const lz_cuda_batch *, int, int, int, int, int, int, bool, const T *,   \
                                              int, float);
LZ_INSTANTIATE(LZ_ATTN_DECODE)
