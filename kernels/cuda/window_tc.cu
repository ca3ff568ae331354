// window_tc.cu - the prompt path of the Lizard window branch on tensor cores
// (bf16 in, fp32 accumulation), flash-attention style with the scores kept in
// registers: a block owns up to 64 query rows of one sequence (one GLA chunk)
// and one query head, 4 warps of 16 rows each; it walks the keys from the
// oldest one any row sees (p0 - w + 1) to its last row, 64 keys a tile,
// double-buffered with cp.async. Keys at positions before the step come from
// the sequence's ring (row p % w), later ones from this step's k, v.
//   S = Q K^T   (mma.sync m16n8k16, bf16 -> fp32 registers)
//   masked to each row's window (p - w, p], online softmax in fp32 whose
//   denominator starts with the meta logits' mass
//   O = c O + P V   (P rounded to bf16 in registers, O in fp32 registers)
//   out += alpha O / l
// The same function as window_tile_kernel (window_attention.cu), which keeps
// decode steps, fp32 and the shapes this one does not take.
#include <stdint.h> // uintptr_t

#include "cuda_kernels.cuh"
#include "ptx.cuh" // lz_cp_async16, lz_ldsm_x4, lz_mma_bf16, lz_pack_bf16

typedef __nv_bfloat16 bf16;

enum {
    WT_ROWS = 64,  // query rows per block (a GLA chunk)
    WT_KEYS = 64,  // keys per tile
    WT_WARPS = 4,  // 16 rows each
    WT_PAD = 8     // elements added to each shared-memory row: 16 bytes, so ldmatrix rows hit distinct banks
};

// Shared memory: Q [64][D + 8], then K and V tiles [2 stages][64][D + 8] (bf16). Once a warp has its Q
// fragments its Q rows receive the output rows it adds to; after the key loop the K tiles hold the
// output rows in fp32 [64][D + 4].
static size_t wt_smem(int d) { return sizeof(bf16) * (size_t)(WT_ROWS + 4 * WT_KEYS) * (d + WT_PAD); }

struct wt_args {
    bf16 *out;
    const bf16 *q, *k, *v, *ring_k, *ring_v, *meta;
    const int32_t *chunk_row0, *chunk_len, *token_seq, *slot, *start, *pos, *token_pos;
    int n_meta, Hq, Hkv, w;
    float alpha;
};

// grid (chunks, Hq), block 32 * WT_WARPS. Fragment layouts (PTX ISA, mma.m16n8k16):
// lane = 4 g + t; an accumulator's c[0], c[1] are row g, columns 2t, 2t + 1 and
// c[2], c[3] row g + 8, the same columns.
template <int D> __global__ void __launch_bounds__(32 * WT_WARPS) window_tc_kernel(wt_args a) {
    constexpr int LD = D + WT_PAD, KS = D / 16, NT = WT_KEYS / 8, ON = D / 8, LDO = D + 4;
    extern __shared__ __align__(128) unsigned char wt_smem_raw[];
    bf16 *Qs = (bf16 *)wt_smem_raw, *Ks = Qs + WT_ROWS * LD, *Vs = Ks + 2 * WT_KEYS * LD;
    const int c = blockIdx.x, h = blockIdx.y, kvh = h / (a.Hq / a.Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = a.chunk_row0[c], L = a.chunk_len[c], s = a.token_seq[row0];
    const int p0 = a.token_pos[row0], pos0 = a.pos[s], srow0 = a.start[s], w = a.w;
    const size_t row = (size_t)a.Hkv * D, ring = (size_t)a.slot[s] * w * row + (size_t)kvh * D;
    const int k_first = max(0, p0 - w + 1), k_end = p0 + L; // keys [k_first, k_end)
    const int n_tiles = (k_end - k_first + WT_KEYS - 1) / WT_KEYS;

    // Q rows (zeros past L) and key tile `it` into stage it & 1, each thread 16 bytes at a time
    constexpr int VPR = D / 8; // 16-byte vectors per row
    for (int e = threadIdx.x; e < WT_ROWS * VPR; e += blockDim.x) {
        const int r = e / VPR, x = (e % VPR) * 8;
        lz_cp_async16(Qs + r * LD + x, a.q + ((size_t)(row0 + min(r, L - 1)) * a.Hq + h) * D + x, r < L);
    }
    auto load_tile = [&](int it) {
        bf16 *ks = Ks + (it & 1) * WT_KEYS * LD, *vs = Vs + (it & 1) * WT_KEYS * LD;
        const int t0 = k_first + it * WT_KEYS;
        for (int e = threadIdx.x; e < WT_KEYS * VPR; e += blockDim.x) {
            const int r = e / VPR, x = (e % VPR) * 8, key = t0 + r;
            const bool valid = key < k_end;
            size_t off; // element offset of the key's row for this kv head
            const bf16 *kb, *vb;
            if (key >= pos0) { // this step's own rows
                off = (size_t)(srow0 + min(key, k_end - 1) - pos0) * row + (size_t)kvh * D + x;
                kb = a.k, vb = a.v;
            } else {
                off = ring + (size_t)(key % w) * row + x;
                kb = a.ring_k, vb = a.ring_v;
            }
            lz_cp_async16(ks + r * LD + x, kb + off, valid);
            lz_cp_async16(vs + r * LD + x, vb + off, valid);
        }
    };
    load_tile(0);
    lz_cp_async_commit();

    // the meta logits start each row's softmax: max m (log2 units) and, counted
    // once per row (lane t == 0 of the row's quad), their mass
    const float scale = rsqrtf((float)D) * 1.4426950408889634f; // scores in log2 units
    float m_meta = -INFINITY, l_meta = 0.0f;
    for (int j = 0; j < a.n_meta; j++)
        m_meta = fmaxf(m_meta, __bfloat162float(a.meta[j]) * 1.4426950408889634f);
    for (int j = 0; j < a.n_meta; j++)
        l_meta += exp2f(__bfloat162float(a.meta[j]) * 1.4426950408889634f - m_meta);
    float m[2] = {m_meta, m_meta}, l[2] = {t == 0 ? l_meta : 0.0f, t == 0 ? l_meta : 0.0f};
    float o[ON][4];
#pragma unroll
    for (int j = 0; j < ON; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    uint32_t qf[KS][4];

    const int wr0 = warp * 16; // the warp's first row
    const int q_lo = p0 + wr0, q_hi = p0 + min(wr0 + 15, L - 1);
    for (int it = 0; it < n_tiles; it++) {
        if (it + 1 < n_tiles) { // the next tile streams in while this one is used
            load_tile(it + 1);
            lz_cp_async_commit();
            lz_cp_async_wait<1>();
        } else {
            lz_cp_async_wait<0>();
        }
        __syncthreads();
        if (it == 0) { // Q fragments: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15) of each 16-column step
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                lz_ldsm_x4(qf[kk], lz_smem_u32(Qs + (wr0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + kk * 16 + 8 * (lane >> 4)));
            // The warp's Q rows are free now: the output rows the epilogue adds to stream into them
            // meanwhile (they ride with the next tile's copy group), instead of a wait at the end.
            __syncwarp();
            for (int e = lane; e < 16 * VPR; e += 32) {
                const int r = wr0 + e / VPR, x = (e % VPR) * 8;
                lz_cp_async16(Qs + r * LD + x, a.out + ((size_t)(row0 + min(r, L - 1)) * a.Hq + h) * D + x, r < L);
            }
        }
        const int t0 = k_first + it * WT_KEYS;
        // the warp's rows see none of this tile: past their last position, or all older than w
        const bool skip = wr0 >= L || t0 > q_hi || t0 + WT_KEYS - 1 <= q_lo - w;
        if (!skip) {
            const bf16 *ks = Ks + (it & 1) * WT_KEYS * LD, *vs = Vs + (it & 1) * WT_KEYS * LD;
            float sc[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++)
                sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
            // S = Q K^T: ldmatrix of K rows gives the column-major B directly; one x4 covers
            // keys (0-7 | 8-15) x dims (0-7 | 8-15) of a 16-key, 16-dim block
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
#pragma unroll
                for (int jp = 0; jp < NT / 2; jp++) {
                    uint32_t b[4];
                    lz_ldsm_x4(b, lz_smem_u32(ks + (jp * 16 + (lane & 7) + 8 * (lane >> 4)) * LD + kk * 16 + 8 * ((lane >> 3) & 1)));
                    lz_mma_bf16(sc[2 * jp], qf[kk], b[0], b[1]);
                    lz_mma_bf16(sc[2 * jp + 1], qf[kk], b[2], b[3]);
                }
            }
            // mask to the window, scale, and fold into the running softmax (rows g and g + 8)
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = wr0 + g + 8 * (e >> 1), key = t0 + 8 * j + 2 * t + (e & 1), qp = p0 + r;
                    const bool visible = r < L && key <= qp && key > qp - w;
                    sc[j][e] = visible ? sc[j][e] * scale : -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], sc[j][e]);
                }
            }
            float corr[2], m_new[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                m_new[r] = fmaxf(m[r], mx[r]);
                corr[r] = m_new[r] == -INFINITY ? 1.0f : exp2f(m[r] - m_new[r]); // exp2(-inf) = 0 for a first max
                m[r] = m_new[r];
            }
            float sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float mr = m_new[e >> 1];
                    sc[j][e] = mr == -INFINITY ? 0.0f : exp2f(sc[j][e] - mr);
                    sum[e >> 1] += sc[j][e];
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++)
                l[r] = l[r] * corr[r] + sum[r]; // this lane's columns only; the quad is summed at the end
#pragma unroll
            for (int j = 0; j < ON; j++) {
                o[j][0] *= corr[0], o[j][1] *= corr[0];
                o[j][2] *= corr[1], o[j][3] *= corr[1];
            }
            // O += P V: the score accumulators of keys 16kk.. are the A fragment of step kk;
            // ldmatrix.trans of V rows gives B: keys (0-7 | 8-15) x dims (0-7 | 8-15)
#pragma unroll
            for (int kk = 0; kk < WT_KEYS / 16; kk++) {
                uint32_t pa[4] = {lz_pack_bf16(sc[2 * kk][0], sc[2 * kk][1]), lz_pack_bf16(sc[2 * kk][2], sc[2 * kk][3]),
                                  lz_pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                  lz_pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
                for (int np = 0; np < D / 16; np++) {
                    uint32_t b[4];
                    lz_ldsm_x4_trans(b, lz_smem_u32(vs + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + np * 16 + 8 * (lane >> 4)));
                    lz_mma_bf16(o[2 * np], pa, b[0], b[1]);
                    lz_mma_bf16(o[2 * np + 1], pa, b[2], b[3]);
                }
            }
        }
        __syncthreads(); // every warp is done with this stage before it is refilled
    }

    // out += alpha O / l: through shared memory (the K stages, fp32 [64][D + 4])
    // so that each row goes out in 16-byte pieces
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    lz_cp_async_commit(); // the output rows (still uncommitted when there was one tile)
    lz_cp_async_wait<0>();
    __syncwarp();
    float *Os = (float *)Ks;
    const float inv0 = a.alpha / l[0], inv1 = a.alpha / l[1]; // rows past L are never written out
#pragma unroll
    for (int j = 0; j < ON; j++) {
        *(float2 *)(Os + (wr0 + g) * LDO + 8 * j + 2 * t) = make_float2(o[j][0] * inv0, o[j][1] * inv0);
        *(float2 *)(Os + (wr0 + g + 8) * LDO + 8 * j + 2 * t) = make_float2(o[j][2] * inv1, o[j][3] * inv1);
    }
    __syncwarp(); // each warp reads back only its own 16 rows
    for (int e = lane; e < 16 * VPR; e += 32) {
        const int r = wr0 + e / VPR, x = (e % VPR) * 8;
        if (r >= L)
            continue;
        bf16 *dst = a.out + ((size_t)(row0 + r) * a.Hq + h) * D + x;
        uint4 raw = *(const uint4 *)(Qs + r * LD + x);
        __nv_bfloat162 *hv = (__nv_bfloat162 *)&raw;
        const float *src = Os + r * LDO + x;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __bfloat1622float2(hv[i]);
            hv[i] = __floats2bfloat162_rn(f.x + src[2 * i], f.y + src[2 * i + 1]);
        }
        *(uint4 *)dst = raw;
    }
}

template <int D> static lz_status wt_set_smem(const lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(window_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return LZ_OK;
}

lz_status lz_window_tc_init(lz_cuda_ctx *c) {
    LZ_TRY(wt_set_smem<32>(c));
    LZ_TRY(wt_set_smem<64>(c));
    LZ_TRY(wt_set_smem<128>(c));
    return LZ_OK;
}

bool lz_window_tc_fits(const lz_cuda_ctx *c, const lz_attn_dims *dims, const void *out, const void *q, const void *k,
                       const void *v, const void *ring_k, const void *ring_v) {
    const int d = dims->head_dim;
    const uintptr_t any = (uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)ring_k |
                          (uintptr_t)ring_v;
    return (d == 32 || d == 64 || d == 128) && (any & 15) == 0 && dims->window >= 1 &&
           dims->n_heads % dims->n_kv_heads == 0 && wt_smem(d) <= c->max_smem;
}

lz_status lz_window_tc(lz_cuda_ctx *c, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *meta,
                       float alpha, const lz_layer_state *st, const lz_cuda_batch *b, const lz_attn_dims *dims) {
    const wt_args a = {out, q, k, v, (const bf16 *)st->ring_k, (const bf16 *)st->ring_v, meta, b->chunk_row0,
                       b->chunk_len, b->token_seq, b->slot, b->start, b->pos, b->token_pos, dims->n_meta,
                       dims->n_heads, dims->n_kv_heads, dims->window, alpha};
    const dim3 grid(b->n_chunks, dims->n_heads);
    const size_t smem = wt_smem(dims->head_dim);
    switch (dims->head_dim) {
    case 32:
        window_tc_kernel<32><<<grid, 32 * WT_WARPS, smem, c->stream>>>(a);
        break;
    case 64:
        window_tc_kernel<64><<<grid, 32 * WT_WARPS, smem, c->stream>>>(a);
        break;
    default:
        window_tc_kernel<128><<<grid, 32 * WT_WARPS, smem, c->stream>>>(a);
        break;
    }
    LZ_LAUNCH_CHECK("window (tensor cores)");
    return LZ_OK;
}
