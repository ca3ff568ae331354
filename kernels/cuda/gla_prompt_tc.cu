// gla_prompt_tc.cu - the chunked GLA prompt path (see gla.cu) for bf16, on tensor cores (mma.sync
// m16n8k16, bf16 in, fp32 accumulators), three launches:
//   1. chunk_state_mma:  dS_c = K_c^T (w * V_c), w_t = exp(G_last - G_t) <= 1; dz_c = sum_t w_t k_t (fp32);
//   2. chunk_scan_bf16:  per sequence, S = exp(G_last(c)) S + dS_c in fp32 (as gla.cu), several chunks'
//                        loads in flight per thread; S_prev(c) goes out as bf16 in the order the output
//                        kernel's mma wants it (16 bytes per lane, coalesced), z_prev in place in fp32;
//   3. chunk_output_mma: one block per (chunk, state head) for its whole group of query heads (K, V,
//                        S_prev copied into shared memory once per group), one warp per (query head, 16
//                        rows) with those rows in shared memory too; scores, decay, causal mask and
//                        normaliser in registers. Its shared memory (output_smem: 195 KB at F = 256,
//                        d = 128) bounds the shapes it takes; larger ones go to gla_tc.cu.
// Same function and numerics contract as gla.cu (chunk-local log-gates, every exp argument <= 0, S and z
// fp32 between chunks and in the slot); bf16 roundings: S_prev, the decayed scores and w * v.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A (16 x 16): {a0,a1} row g, k 2t..2t+1; {a2,a3} row g+8; {a4,a5} row g, k 2t+8..; {a6,a7} row g+8, k 2t+8..
//   B (16 x 8):  {b0,b1} k 2t..2t+1, col g; {b2,b3} k 2t+8..2t+9, col g
//   C (16 x 8):  {c0,c1} row g, cols 2t..2t+1; {c2,c3} row g+8
// Where both operands come from our own loads (Q K^T, Q S_prev), the feature axis is permuted so that
// each lane loads 8 consecutive features in one 16-byte access: in a 32-feature block, lane t holds
// features 8t..8t+7; mma step 0 uses 8t+0..3 as its k {2t, 2t+1, 2t+8, 2t+9}, step 1 uses 8t+4..7.
// A dot product does not care about the order of its terms, as long as both sides agree.
#include <stdint.h> // uint32_t

#include "cuda_kernels.cuh" // lz_cuda_ctx, LZ_LAUNCH_CHECK
#include "ptx.cuh"          // lz_mma_bf16, lz_ldsm_x4_trans, lz_pack_bf16

typedef __nv_bfloat16 bf16;

enum {
    PT_CHUNK = 64,        // rows per chunk (as gla.cu and the batch layout)
    PT_COLS = 64,         // output columns per pass of the output kernel (8 n-tiles of accumulators)
    PT_STATE_THREADS = 256,
    PT_SCAN_THREADS = 128,
    PT_SCAN_UNROLL = 8,   // chunks whose loads are in flight at once in the scan
    PT_MAX_WARPS = 8,     // output kernel: warps per block (tasks = 4 row blocks x group); 2 blocks per SM
                          // so that one block's tile loads overlap the other's tensor-core work
};

struct pt_shape {
    int Hq, Hkv, Hs, d, F, group; // group = Hq / Hs query heads per state head
    __device__ int value_head(int s) const { return Hs == Hkv ? s : s / (Hq / Hkv); }
};


// Row strides (bf16 elements) of the shared tiles. ldmatrix reads 8 rows of 16 bytes: a stride of
// 4 (mod 8) words spreads them over all banks. The output kernel's K is read 16 bytes per lane,
// 2 rows x 64 bytes per quarter warp: a stride of 16 (mod 32) words keeps the two rows apart.
__host__ __device__ inline int ldsm_stride(int n) { return n + 8; }
__host__ __device__ inline int k16_stride(int F) { return (F / 2) % 32 == 16 ? F : F + 32; }

static size_t state_smem(int F, int d) {
    return sizeof(bf16) * PT_CHUNK * ((size_t)ldsm_stride(F) + ldsm_stride(d)) + sizeof(float) * 2 * PT_CHUNK;
}
static int output_warps(int group) { return 4 * group < PT_MAX_WARPS ? 4 * group : PT_MAX_WARPS; }
static size_t output_smem(int F, int d, int group) {
    return sizeof(bf16) * (PT_CHUNK * ((size_t)k16_stride(F) + ldsm_stride(d)) + (size_t)F * d +
                           16 * (size_t)output_warps(group) * k16_stride(F)) +
           sizeof(float) * (PT_CHUNK + F);
}

// the mma with the a fragment as four scalars (this file's fragments come from 16-byte loads)
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    const uint32_t a[4] = {a0, a1, a2, a3};
    lz_mma_bf16(c, a, b0, b1);
}

__device__ __forceinline__ float2 unpack_bf16(uint32_t u) {
    __nv_bfloat162 v;
    *reinterpret_cast<uint32_t *>(&v) = u;
    return __bfloat1622float2(v);
}

__device__ __forceinline__ uint4 load16(const bf16 *p, bool ok) {
    return ok ? *reinterpret_cast<const uint4 *>(p) : make_uint4(0, 0, 0, 0);
}

// Chunk-local inclusive cumulative log-gates g[0..64) by warp 0 (a shuffle scan); rows >= L add
// nothing, so g there repeats G[L-1]. The caller synchronises.
__device__ void gate_cumsum(float *g, const bf16 *log_gamma, int row0, int L) {
    if (threadIdx.x >= 32)
        return;
    const int l = threadIdx.x;
    float x0 = l < L ? __bfloat162float(log_gamma[row0 + l]) : 0.0f;
    float x1 = l + 32 < L ? __bfloat162float(log_gamma[row0 + l + 32]) : 0.0f;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y0 = __shfl_up_sync(0xffffffffu, x0, o), y1 = __shfl_up_sync(0xffffffffu, x1, o);
        if (l >= o)
            x0 += y0, x1 += y1;
    }
    g[l] = x0;
    g[l + 32] = x1 + __shfl_sync(0xffffffffu, x0, 31);
}

// Rows [0, 64) of a [rows][n] bf16 tensor slice into a shared tile of row stride `stride`, rows >= L zero;
// 16 bytes per thread (n % 8 == 0, 16-byte aligned rows).
__device__ void load_rows16(bf16 *tile, int stride, const bf16 *src, size_t src_stride, int n, int L) {
    const int per_row = n / 8;
    for (int e = threadIdx.x; e < PT_CHUNK * per_row; e += blockDim.x) {
        const int r = e / per_row, c8 = (e % per_row) * 8;
        *reinterpret_cast<uint4 *>(tile + r * stride + c8) = load16(src + r * src_stride + c8, r < L);
    }
}

// grid (chunks, Hs), block 256; smem: K [64][F+8], w*V [64][d+8] (bf16), g, w [64]
__global__ void __launch_bounds__(PT_STATE_THREADS)
    chunk_state_mma_kernel(float *__restrict__ dS, float *__restrict__ dz, float *__restrict__ decay,
                           const bf16 *__restrict__ phi_k, const bf16 *__restrict__ v,
                           const bf16 *__restrict__ log_gamma, const int32_t *chunk_row0, const int32_t *chunk_len,
                           pt_shape sh) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int F = sh.F, d = sh.d, KS = ldsm_stride(F), VS = ldsm_stride(d);
    bf16 *Ks = (bf16 *)smem_raw, *Vs = Ks + PT_CHUNK * KS;
    float *g = (float *)(Vs + PT_CHUNK * VS), *w = g + PT_CHUNK;
    const int c = blockIdx.x, s = blockIdx.y, row0 = chunk_row0[c], L = chunk_len[c], vh = sh.value_head(s);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    gate_cumsum(g, log_gamma, row0, L);
    load_rows16(Ks, KS, phi_k + ((size_t)row0 * sh.Hs + s) * F, (size_t)sh.Hs * F, F, L);
    __syncthreads();
    for (int t = threadIdx.x; t < PT_CHUNK; t += blockDim.x)
        w[t] = t < L ? expf(g[L - 1] - g[t]) : 0.0f;
    if (threadIdx.x == 0 && s == 0)
        decay[c] = expf(g[L - 1]);
    __syncthreads();
    { // w_t v_t, rounded to bf16 once (the products below accumulate in fp32)
        const int per_row = d / 8;
        const bf16 *src = v + ((size_t)row0 * sh.Hkv + vh) * d;
        for (int e = threadIdx.x; e < PT_CHUNK * per_row; e += blockDim.x) {
            const int t = e / per_row, j8 = (e % per_row) * 8;
            const uint4 raw = load16(src + (size_t)t * sh.Hkv * d + j8, t < L);
            const float wt = w[t];
            const uint32_t in[4] = {raw.x, raw.y, raw.z, raw.w};
            uint32_t o[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 f = unpack_bf16(in[k]);
                o[k] = lz_pack_bf16(wt * f.x, wt * f.y);
            }
            *reinterpret_cast<uint4 *>(Vs + t * VS + j8) = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
    __syncthreads();
    for (int a = threadIdx.x; a < F; a += blockDim.x) { // dz in fp32 from the bf16 keys
        float acc = 0.0f;
        for (int t = 0; t < L; t++)
            acc += w[t] * __bfloat162float(Ks[t * KS + a]);
        dz[((size_t)c * sh.Hs + s) * F + a] = acc;
    }
    // dS [F][d]: a warp task is 16 feature rows x 64 columns, k = the 64 chunk positions
    const int row_blocks = F / 16, col_groups = (d + PT_COLS - 1) / PT_COLS;
    float *out = dS + ((size_t)c * sh.Hs + s) * F * d;
    const int gq = lane >> 2, tq = lane & 3;
    for (int task = warp; task < row_blocks * col_groups; task += blockDim.x >> 5) {
        const int mb = task % row_blocks, col0 = (task / row_blocks) * PT_COLS;
        float acc[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < PT_CHUNK / 16; kk++) {
            // A = K^T (16 features x 16 positions): matrix m = lane / 8 holds features +8 (m & 1), positions +8 (m >> 1)
            uint32_t a[4];
            const int m = lane >> 3;
            lz_ldsm_x4_trans(a, lz_smem_u32(Ks + (16 * kk + (m >> 1) * 8 + (lane & 7)) * KS + 16 * mb + (m & 1) * 8));
#pragma unroll
            for (int p = 0; p < PT_COLS / 16; p++) {
                const int n0 = col0 + 16 * p;
                if (n0 < d) { // B = w*V (16 positions x 16 columns): matrix m holds positions +8 (m & 1), columns +8 (m >> 1)
                    uint32_t b[4];
                    lz_ldsm_x4_trans(b, lz_smem_u32(Vs + (16 * kk + (m & 1) * 8 + (lane & 7)) * VS + n0 + (m >> 1) * 8));
                    mma_bf16(acc[2 * p], a[0], a[1], a[2], a[3], b[0], b[1]);
                    mma_bf16(acc[2 * p + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            const int col = col0 + 8 * nt + 2 * tq, r = 16 * mb + gq;
            if (col0 + 8 * nt < d) {
                *reinterpret_cast<float2 *>(out + (size_t)r * d + col) = make_float2(acc[nt][0], acc[nt][1]);
                *reinterpret_cast<float2 *>(out + (size_t)(r + 8) * d + col) = make_float2(acc[nt][2], acc[nt][3]);
            }
        }
    }
}

// grid (seqs, Hs, ceil((F d / 8 + F) / 128)), block 128. Thread u < F d / 8 owns the 8 state elements
// S[32 kb + 8 t + e][8 nb + g] (e = 0..7) of fragment slot u = (kb (d / 8) + nb) 32 + (4 g + t) and writes
// them as 16 bytes at Sb[chunk][head][u]; the next F threads own one element of z each.
__global__ void __launch_bounds__(PT_SCAN_THREADS)
    chunk_scan_bf16_kernel(const float *__restrict__ dS, float *__restrict__ dz, const float *__restrict__ decay,
                           uint4 *__restrict__ Sb, float *__restrict__ S, float *__restrict__ z,
                           const int32_t *seq_chunk0, const int32_t *seq_chunks, const int32_t *slot, pt_shape sh) {
    constexpr int U = PT_SCAN_UNROLL;
    const int q = blockIdx.x, s = blockIdx.y, u = blockIdx.z * blockDim.x + threadIdx.x;
    const int n_frag = sh.F * sh.d / 8, c0 = seq_chunk0[q], end = c0 + seq_chunks[q];
    const size_t n_s = (size_t)sh.F * sh.d;
    if (u < n_frag) {
        const int lane = u & 31, nb = (u >> 5) % (sh.d / 8), kb = (u >> 5) / (sh.d / 8);
        const size_t off = (size_t)(32 * kb + 8 * (lane & 3)) * sh.d + 8 * nb + (lane >> 2);
        float *st = S + ((size_t)slot[q] * sh.Hs + s) * n_s + off;
        float acc[8];
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[e] = st[(size_t)e * sh.d];
        for (int c = c0; c < end; c += U) {
            float delta[U][8], dc[U]; // all loads of U chunks issued before the dependent updates
#pragma unroll
            for (int k = 0; k < U; k++) {
                const bool ok = c + k < end;
                const float *cell = dS + ((size_t)(c + k) * sh.Hs + s) * n_s + off;
                dc[k] = ok ? decay[c + k] : 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    delta[k][e] = ok ? cell[(size_t)e * sh.d] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < U; k++) {
                if (c + k < end) {
                    Sb[((size_t)(c + k) * sh.Hs + s) * n_frag + u] =
                        make_uint4(lz_pack_bf16(acc[0], acc[1]), lz_pack_bf16(acc[2], acc[3]), lz_pack_bf16(acc[4], acc[5]),
                                   lz_pack_bf16(acc[6], acc[7]));
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        acc[e] = dc[k] * acc[e] + delta[k][e];
                }
            }
        }
#pragma unroll
        for (int e = 0; e < 8; e++)
            st[(size_t)e * sh.d] = acc[e];
    } else if (u < n_frag + sh.F) {
        const int a = u - n_frag;
        float *st = z + ((size_t)slot[q] * sh.Hs + s) * sh.F + a;
        float acc = *st;
        for (int c = c0; c < end; c += U) {
            float delta[U], dc[U];
#pragma unroll
            for (int k = 0; k < U; k++) {
                const bool ok = c + k < end;
                dc[k] = ok ? decay[c + k] : 0.0f;
                delta[k] = ok ? dz[((size_t)(c + k) * sh.Hs + s) * sh.F + a] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < U; k++) {
                if (c + k < end) {
                    dz[((size_t)(c + k) * sh.Hs + s) * sh.F + a] = acc; // now z_prev(c)
                    acc = dc[k] * acc + delta[k];
                }
            }
        }
        *st = acc;
    }
}

// Rows [0, rows) of a [.][n] bf16 tensor slice into a shared tile of row stride `stride` by cp.async
// (rows >= L zero-filled), 16 bytes per copy from lanes `first`, `first` + step, ...
__device__ void copy_rows16(bf16 *tile, int stride, const bf16 *src, size_t src_stride, int n, int rows, int L,
                            int first, int step) {
    const int per_row = n / 8;
    for (int e = first; e < rows * per_row; e += step) {
        const int r = e / per_row, c8 = (e % per_row) * 8;
        lz_cp_async16(tile + r * stride + c8, src + (size_t)max(min(r, L - 1), 0) * src_stride + c8, r < L);
    }
}

// grid (chunks, Hs), block 32 min(8, 4 group); smem (output_smem): K [64][k16_stride(F)], V [64][d+8] (bf16),
// S_prev [F d / 8] (16-byte fragments, as the scan wrote them), per warp its task's Q rows [16][k16_stride(F)],
// g [64], z_prev [F]. Warp task (query head hh of the group, row block rb): rows 16 rb .. 16 rb + 15 of the chunk.
// Every operand of the products comes from shared memory (read from L1/L2 in the inner loops, they
// stalled the warps most of the time): K, V and S_prev are copied once a block; a warp's next Q rows
// stream in while it finishes the current task.
__global__ void __launch_bounds__(32 * PT_MAX_WARPS, 1)
    chunk_output_mma_kernel(bf16 *__restrict__ out, const bf16 *__restrict__ phi_q, const bf16 *__restrict__ phi_k,
                            const bf16 *__restrict__ v, const bf16 *__restrict__ log_gamma,
                            const uint4 *__restrict__ Sb, const float *__restrict__ z_prev, const int32_t *chunk_row0,
                            const int32_t *chunk_len, pt_shape sh, bool normalize) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int F = sh.F, d = sh.d, KS = k16_stride(F), VS = ldsm_stride(d), n_frag = F * d / 8;
    const int n_warps = blockDim.x >> 5, n_tasks = 4 * sh.group;
    bf16 *Ks = (bf16 *)smem_raw, *Vs = Ks + PT_CHUNK * KS;
    uint4 *Ss = (uint4 *)(Vs + PT_CHUNK * VS);
    bf16 *Qw = (bf16 *)(Ss + n_frag);
    float *g = (float *)(Qw + n_warps * 16 * KS), *zp = g + PT_CHUNK;
    const int c = blockIdx.x, s = blockIdx.y, row0 = chunk_row0[c], L = chunk_len[c], vh = sh.value_head(s);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    bf16 *Qs = Qw + warp * 16 * KS; // this warp's Q rows
    const size_t q_stride = (size_t)sh.Hq * F;

    // Task t: query head t / 4 of the group, row block t % 4, reversed in odd rounds of the warps (warps
    // are a multiple of 4), so that a warp's causal work (rb + 1 key blocks) evens out over its tasks.
    auto row_block = [&](int task) { return (task & 3) ^ ((task / n_warps) & 1 ? 3 : 0); };
    // a task's Q rows: 16 rows of query head h from chunk row 16 rb (rows >= L zero)
    auto copy_q = [&](int task) {
        const int rb = row_block(task), h = s * sh.group + (task >> 2);
        copy_rows16(Qs, KS, phi_q + ((size_t)(row0 + 16 * rb) * sh.Hq + h) * F, q_stride, F, 16, L - 16 * rb,
                    lane, 32);
    };
    copy_rows16(Ks, KS, phi_k + ((size_t)row0 * sh.Hs + s) * F, (size_t)sh.Hs * F, F, PT_CHUNK, L, threadIdx.x,
                blockDim.x);
    copy_rows16(Vs, VS, v + ((size_t)row0 * sh.Hkv + vh) * d, (size_t)sh.Hkv * d, d, PT_CHUNK, L, threadIdx.x,
                blockDim.x);
    const uint4 *Sc = Sb + ((size_t)c * sh.Hs + s) * n_frag;
    for (int u = threadIdx.x; u < n_frag; u += blockDim.x)
        lz_cp_async16(Ss + u, Sc + u);
    copy_q(warp); // (n_warps <= n_tasks: every warp has a first task)
    lz_cp_async_commit();
    gate_cumsum(g, log_gamma, row0, L);
    for (int a = threadIdx.x; a < F; a += blockDim.x)
        zp[a] = z_prev[((size_t)c * sh.Hs + s) * F + a];
    lz_cp_async_wait<0>();
    __syncthreads();

    for (int task = warp; task < n_tasks; task += n_warps) {
        const int rb = row_block(task), h = s * sh.group + (task >> 2);
        const int r_lo = 16 * rb + gq, r_hi = r_lo + 8;
        const bool ok_lo = r_lo < L, ok_hi = r_hi < L;
        const bf16 *q_lo = Qs + gq * KS + 8 * tq, *q_hi = Qs + (gq + 8) * KS + 8 * tq;
        const int nt_end = 2 * rb + 2; // score columns < 16 (rb + 1): the causal part
        const bool live = 16 * rb < L; // some row of this block is in the chunk (warp-uniform)

        // scores Q K^T (16 x 64) and q . z_prev, one pass over the features
        float sc[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
        float qz_lo = 0.0f, qz_hi = 0.0f;
        for (int a0 = 0; live && a0 < F; a0 += 32) {
            const uint4 ql = *reinterpret_cast<const uint4 *>(q_lo + a0), qh = *reinterpret_cast<const uint4 *>(q_hi + a0);
            const uint32_t wl[4] = {ql.x, ql.y, ql.z, ql.w}, wh[4] = {qh.x, qh.y, qh.z, qh.w};
            const float *zz = zp + a0 + 8 * tq;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 fl = unpack_bf16(wl[k]), fh = unpack_bf16(wh[k]);
                qz_lo += fl.x * zz[2 * k] + fl.y * zz[2 * k + 1];
                qz_hi += fh.x * zz[2 * k] + fh.y * zz[2 * k + 1];
            }
            uint4 kv[8];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                if (nt < nt_end)
                    kv[nt] = *reinterpret_cast<const uint4 *>(Ks + (8 * nt + gq) * KS + a0 + 8 * tq);
#pragma unroll
            for (int nt = 0; nt < 8; nt++) // the two halves of the 32 features apart: no mma waits on the one before
                if (nt < nt_end)
                    mma_bf16(sc[nt], ql.x, qh.x, ql.y, qh.y, kv[nt].x, kv[nt].y);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                if (nt < nt_end)
                    mma_bf16(sc[nt], ql.z, qh.z, ql.w, qh.w, kv[nt].z, kv[nt].w);
        }
        // decay exp(G_i - G_t) <= 1 and the causal mask on the fp32 scores; row sums from the same
        // values; the bf16 copy becomes the A operand of (A V) straight from the accumulators
        const float g_lo = g[r_lo], g_hi = g[r_hi];
        float rs_lo = 0.0f, rs_hi = 0.0f;
        uint32_t pa[4][4];
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            const int t0 = 8 * nt + 2 * tq;
            float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (nt < nt_end) {
                const float gt0 = g[t0], gt1 = g[t0 + 1];
                e[0] = t0 <= r_lo ? sc[nt][0] * expf(g_lo - gt0) : 0.0f;
                e[1] = t0 + 1 <= r_lo ? sc[nt][1] * expf(g_lo - gt1) : 0.0f;
                e[2] = t0 <= r_hi ? sc[nt][2] * expf(g_hi - gt0) : 0.0f;
                e[3] = t0 + 1 <= r_hi ? sc[nt][3] * expf(g_hi - gt1) : 0.0f;
            }
            rs_lo += e[0] + e[1];
            rs_hi += e[2] + e[3];
            pa[nt >> 1][(nt & 1) * 2] = lz_pack_bf16(e[0], e[1]);
            pa[nt >> 1][(nt & 1) * 2 + 1] = lz_pack_bf16(e[2], e[3]);
        }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) { // the quad holds one row
            rs_lo += __shfl_xor_sync(0xffffffffu, rs_lo, o);
            rs_hi += __shfl_xor_sync(0xffffffffu, rs_hi, o);
            qz_lo += __shfl_xor_sync(0xffffffffu, qz_lo, o);
            qz_hi += __shfl_xor_sync(0xffffffffu, qz_hi, o);
        }
        const float ex_lo = expf(g_lo), ex_hi = expf(g_hi);
        const float inv_lo = normalize ? 1.0f / (ex_lo * qz_lo + rs_lo) : 1.0f;
        const float inv_hi = normalize ? 1.0f / (ex_hi * qz_hi + rs_hi) : 1.0f;

        for (int col0 = 0; col0 < d; col0 += PT_COLS) {
            // X = Q S_prev (16 x 64 columns)
            float acc[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
            for (int a0 = 0; live && a0 < F; a0 += 32) {
                const uint4 ql = *reinterpret_cast<const uint4 *>(q_lo + a0), qh = *reinterpret_cast<const uint4 *>(q_hi + a0);
                const uint4 *sf = Ss + ((a0 / 32) * (d / 8) + col0 / 8) * 32 + lane;
                uint4 sv[8];
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
                    if (col0 + 8 * nt < d)
                        sv[nt] = sf[nt * 32];
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
                    if (col0 + 8 * nt < d)
                        mma_bf16(acc[nt], ql.x, qh.x, ql.y, qh.y, sv[nt].x, sv[nt].y);
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
                    if (col0 + 8 * nt < d)
                        mma_bf16(acc[nt], ql.z, qh.z, ql.w, qh.w, sv[nt].z, sv[nt].w);
            }
            if (col0 + PT_COLS >= d) { // the last read of this task's Q rows: the warp's next task's stream in
                __syncwarp();
                if (task + n_warps < n_tasks)
                    copy_q(task + n_warps);
                lz_cp_async_commit();
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                acc[nt][0] *= ex_lo, acc[nt][1] *= ex_lo;
                acc[nt][2] *= ex_hi, acc[nt][3] *= ex_hi;
            }
            // + A V over the causal position blocks kk <= rb
#pragma unroll
            for (int kk = 0; kk < PT_CHUNK / 16; kk++) {
                const int m = lane >> 3;
#pragma unroll
                for (int p = 0; p < PT_COLS / 16; p++) {
                    const int n0 = col0 + 16 * p;
                    if (kk <= rb && n0 < d) { // matrix m: positions +8 (m & 1), columns +8 (m >> 1)
                        uint32_t b[4];
                        lz_ldsm_x4_trans(b, lz_smem_u32(Vs + (16 * kk + (m & 1) * 8 + (lane & 7)) * VS + n0 + (m >> 1) * 8));
                        mma_bf16(acc[2 * p], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b[0], b[1]);
                        mma_bf16(acc[2 * p + 1], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b[2], b[3]);
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const int col = col0 + 8 * nt + 2 * tq;
                if (col0 + 8 * nt < d) {
                    if (ok_lo)
                        *reinterpret_cast<uint32_t *>(out + ((size_t)(row0 + r_lo) * sh.Hq + h) * d + col) =
                            lz_pack_bf16(acc[nt][0] * inv_lo, acc[nt][1] * inv_lo);
                    if (ok_hi)
                        *reinterpret_cast<uint32_t *>(out + ((size_t)(row0 + r_hi) * sh.Hq + h) * d + col) =
                            lz_pack_bf16(acc[nt][2] * inv_hi, acc[nt][3] * inv_hi);
                }
            }
        }
        lz_cp_async_wait<0>(); // the next task's Q rows
        __syncwarp();
    }
}

lz_status lz_gla_prompt_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(chunk_state_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    LZ_CUDA_TRY(cudaFuncSetAttribute(chunk_output_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return LZ_OK;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

bool lz_gla_prompt_fits(const lz_cuda_ctx *c, const bf16 *out, const bf16 *phi_q, const bf16 *phi_k, const bf16 *v,
                        int Hq, int Hs, int d, int F) {
    return F % 32 == 0 && F > 0 && d % 16 == 0 && d > 0 && d <= 256 && Hs > 0 &&
           Hq % Hs == 0 && aligned16(phi_q) && aligned16(phi_k) && aligned16(v) && ((uintptr_t)out & 3) == 0 &&
           state_smem(F, d) <= c->max_smem && output_smem(F, d, Hq / Hs) <= c->max_smem;
}

lz_status lz_gla_prompt(lz_cuda_ctx *c, bf16 *out, const bf16 *phi_q, const bf16 *phi_k, const bf16 *v,
                        const bf16 *log_gamma, float *S, float *z, const int32_t *chunk_row0, const int32_t *chunk_len,
                        const int32_t *seq_chunk0, const int32_t *seq_chunks, const int32_t *slot, int n_chunks,
                        int n_seqs, int Hq, int Hkv, int Hs, int d, int F, bool normalize) {
    const pt_shape sh = {Hq, Hkv, Hs, d, F, Hq / Hs};
    const size_t n_s = (size_t)n_chunks * Hs * F * d, n_z = (size_t)n_chunks * Hs * F;
    // scratch: S_prev in bf16 fragments (first: 16-byte aligned), dS, dz, decay
    LZ_TRY(lz_cuda_scratch(c, sizeof(bf16) * n_s + sizeof(float) * (n_s + n_z + n_chunks)));
    uint4 *Sb = (uint4 *)c->scratch;
    float *dS = (float *)((bf16 *)c->scratch + n_s), *dz = dS + n_s, *decay = dz + n_z;

    chunk_state_mma_kernel<<<dim3(n_chunks, Hs), PT_STATE_THREADS, state_smem(F, d), c->stream>>>(
        dS, dz, decay, phi_k, v, log_gamma, chunk_row0, chunk_len, sh);
    LZ_LAUNCH_CHECK("gla chunk_state (tensor cores)");
    const int scan_items = F * d / 8 + F;
    chunk_scan_bf16_kernel<<<dim3(n_seqs, Hs, (scan_items + PT_SCAN_THREADS - 1) / PT_SCAN_THREADS), PT_SCAN_THREADS,
                             0, c->stream>>>(dS, dz, decay, Sb, S, z, seq_chunk0, seq_chunks, slot, sh);
    LZ_LAUNCH_CHECK("gla chunk_scan (bf16 S_prev)");
    chunk_output_mma_kernel<<<dim3(n_chunks, Hs), 32 * output_warps(sh.group), output_smem(F, d, sh.group), c->stream>>>(
        out, phi_q, phi_k, v, log_gamma, Sb, dz, chunk_row0, chunk_len, sh, normalize);
    LZ_LAUNCH_CHECK("gla chunk_output (tensor cores, per group)");
    return LZ_OK;
}
