// flash_fragments.cuh - what the prompt attention's kernels share. The mma.sync kernel
// (attention_flash.cu) takes all of it: a block's chunk and its walk over the keys, the copies of Q
// and of each K/V tile into shared memory, the register-level steps. The wgmma kernel
// (attention_wgmma.cu, whose copies the copy engine makes) takes the register-level steps. Both hold
// a warp's 16 query rows of S = Q K^T and of O in the m16n8 accumulator layout (wgmma's m64nN layout
// is four warps of it): lane l holds rows l/4 (elements 0, 1) and l/4 + 8 (elements 2, 3) of each
// 8-column tile, columns 2 (l % 4) + {0, 1}. So the masking, the online softmax, P's packing into an
// A operand and the final O / l are the same code for both.
#ifndef LZ_FLASH_FRAGMENTS_CUH
#define LZ_FLASH_FRAGMENTS_CUH

#include "ptx.cuh" // lz_cp_async16, lz_fast_exp2, lz_pack_bf16

// A block's chunk (rows row0 .. row0 + L - 1 of one sequence, at positions p0 .. p_last) and its walk
// over the keys of one K/V head: from k_first (the sliding window's first key, or 0) in tiles of FB
// keys from the diagonal down, tile j holding keys t0(j) .. t0(j) + FB - 1.
template <int FB, int D> struct flash_chunk {
    int row0, L, p0, p_last, k_first, n_tiles;
    size_t kv_row;                  // elements between a key's rows
    const __nv_bfloat16 *kb, *vb;   // the head's K and V of the sequence's first key
    __device__ __forceinline__ flash_chunk(int c, int kv_head, const __nv_bfloat16 *kc, const __nv_bfloat16 *vc,
                                           const int32_t *chunk_row0, const int32_t *chunk_len,
                                           const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos,
                                           int Hkv, int capacity, int sw) {
        row0 = chunk_row0[c], L = chunk_len[c];
        p0 = token_pos[row0], p_last = token_pos[row0 + L - 1];
        k_first = sw > 0 && p0 - sw + 1 > 0 ? p0 - sw + 1 : 0;
        n_tiles = (p_last - k_first) / FB + 1;
        kv_row = (size_t)Hkv * D;
        const size_t base = (size_t)slot[token_seq[row0]] * capacity * kv_row + (size_t)kv_head * D;
        kb = kc + base, vb = vc + base;
    }
    __device__ __forceinline__ int t0(int j) const { return p_last - (FB - 1) - FB * j; }
};

// K and V of tile j into the tiles at sK and sV (16-byte unit u of row r at swz(r, u)) by NT threads
// through cp.async; keys before k_first (or before 0) become zeros.
template <int NT, int FB, int D, typename Swz>
__device__ __forceinline__ void flash_load_kv(const flash_chunk<FB, D> &ch, int j, int tid, uint32_t sK, uint32_t sV,
                                              Swz swz) {
    constexpr int UPR = D / 8; // 16-byte units per row
    const int t0 = ch.t0(j);
#pragma unroll
    for (int i = 0; i < FB * UPR / NT; i++) {
        const int e = tid + i * NT, r = e / UPR, u = e % UPR, t = t0 + r;
        const bool ok = t >= ch.k_first;
        const size_t off = ok ? (size_t)t * ch.kv_row + u * 8 : 0;
        const uint32_t dst = swz(r, u);
        lz_cp_async16(sK + dst, ch.kb + off, ok);
        lz_cp_async16(sV + dst, ch.vb + off, ok);
    }
}

// Before tile j's products: tile j + 1 (if any) starts streaming into the other of the two buffers
// (tile_bytes apart from sK0, sV0), and this thread waits for its copies of tile j (and of Q).
template <int NT, int FB, int D, typename Swz>
__device__ __forceinline__ void flash_next_tile(const flash_chunk<FB, D> &ch, int j, int tid, uint32_t sK0,
                                                uint32_t sV0, uint32_t tile_bytes, Swz swz) {
    if (j + 1 < ch.n_tiles) {
        const uint32_t other = ((j & 1) ^ 1) * tile_bytes;
        flash_load_kv<NT>(ch, j + 1, tid, sK0 + other, sV0 + other, swz);
        lz_cp_async_commit();
        lz_cp_async_wait<1>();
    } else {
        lz_cp_async_wait<0>();
    }
}

// The chunk's rows of query heads h0 .. h0 + HPB - 1 into tiles of tile_bytes from sQ; rows past
// the chunk become zeros.
template <int NT, int HPB, int FB, int D, typename Swz>
__device__ __forceinline__ void flash_load_q(const flash_chunk<FB, D> &ch, const __nv_bfloat16 *q, int Hq, int h0,
                                             int tid, uint32_t sQ, uint32_t tile_bytes, Swz swz) {
    constexpr int UPR = D / 8;
#pragma unroll
    for (int i = 0; i < HPB * FB * UPR / NT; i++) {
        const int e = tid + i * NT, qh = e / (FB * UPR), r = e / UPR % FB, u = e % UPR;
        const bool ok = r < ch.L;
        lz_cp_async16(sQ + qh * tile_bytes + swz(r, u),
                      q + (ok ? ((size_t)(ch.row0 + r) * Hq + h0 + qh) * D + u * 8 : 0), ok);
    }
}

// Where some key of the tile (keys t0 .. t0 + 8 NT - 1, for the rows at positions pA and pA + 8)
// is past a row, before k_first or out of the sliding window sw (0: none), the scores of the keys
// a row must not see become -inf. Only the diagonal tile and those the window or the first key
// cut take the test.
template <int NT>
__device__ __forceinline__ void flash_mask(float (&s)[NT][4], int t0, int p0, int p_last, int k_first, int sw, int pA,
                                           int qd) {
    if (!(t0 + 8 * NT - 1 > p0 || t0 < k_first || (sw > 0 && t0 <= p_last - sw)))
        return;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int t = t0 + 8 * n + 2 * qd + (e & 1), p = e < 2 ? pA : pA + 8;
            const bool visible = t >= k_first && t <= p && (sw <= 0 || t > p - sw);
            s[n][e] = visible ? s[n][e] : -INFINITY;
        }
}

// The online softmax over one tile of raw scores: the row max m over the quad, S becomes
// P = 2^(S scale_log2 - m scale_log2) (one FFMA and one MUFU an element) and the running sum l (this
// lane's share) takes alpha = 2^((old m - new m) scale_log2). Returns whether O must be rescaled by
// alpha (flash_rescale_o): always unless SKIP, and with SKIP only where some row of the warp has a
// new max (not in most tiles of a long row).
template <int NT, bool SKIP>
__device__ __forceinline__ bool flash_softmax_scores(float (&s)[NT][4], float (&m_r)[2], float (&l_r)[2],
                                                     float scale_log2, float (&alpha)[2]) {
    float mx[2] = {m_r[0], m_r[1]};
#pragma unroll
    for (int n = 0; n < NT; n++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        base[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * scale_log2; // a row with no visible key yet: every p is 0
        alpha[r] = mx[r] == m_r[r] ? 1.0f : lz_fast_exp2(m_r[r] * scale_log2 - base[r]);
    }
    const bool rescale = !SKIP || __any_sync(0xffffffffu, mx[0] != m_r[0] || mx[1] != m_r[1]);
    m_r[0] = mx[0], m_r[1] = mx[1];
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < NT; n++) {
        s[n][0] = lz_fast_exp2(fmaf(s[n][0], scale_log2, -base[0]));
        s[n][1] = lz_fast_exp2(fmaf(s[n][1], scale_log2, -base[0]));
        s[n][2] = lz_fast_exp2(fmaf(s[n][2], scale_log2, -base[1]));
        s[n][3] = lz_fast_exp2(fmaf(s[n][3], scale_log2, -base[1]));
        sum[0] += s[n][0] + s[n][1];
        sum[1] += s[n][2] + s[n][3];
    }
    l_r[0] = l_r[0] * alpha[0] + sum[0];
    l_r[1] = l_r[1] * alpha[1] + sum[1];
    return rescale;
}

// O's rows scaled by alpha (rows l/4 and l/4 + 8 of each accumulator tile).
template <int OT> __device__ __forceinline__ void flash_rescale_o(float (&o)[OT][4], const float (&alpha)[2]) {
#pragma unroll
    for (int n = 0; n < OT; n++) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
    }
}

// Both steps at once, O always rescaled (the mma.sync kernel: the skip did not pay there).
template <int NT, int OT>
__device__ __forceinline__ void flash_online_softmax(float (&s)[NT][4], float (&o)[OT][4], float (&m_r)[2],
                                                     float (&l_r)[2], float scale_log2) {
    float alpha[2];
    flash_softmax_scores<NT, false>(s, m_r, l_r, scale_log2, alpha);
    flash_rescale_o(o, alpha);
}

// P's A operand (bf16) for keys 16 kk .. 16 kk + 15: accumulator tiles 2 kk and 2 kk + 1.
template <int NT>
__device__ __forceinline__ void flash_pack_p(const float (&s)[NT][4], int kk, uint32_t (&a)[4]) {
    a[0] = lz_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    a[1] = lz_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    a[2] = lz_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = lz_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// O / l into rows row0 + rA and row0 + rA + 8 of head h (those below the chunk's L rows);
// every row of a chunk saw its own key, so l > 0.
template <int D>
__device__ __forceinline__ void flash_store_rows(__nv_bfloat16 *out, const float (&o)[D / 8][4], float (&l_r)[2],
                                                 int row0, int L, int rA, int Hq, int h, int qd) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
        inv[r] = 1.0f / l_r[r];
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = rA + 8 * r;
        if (i >= L)
            continue;
        __nv_bfloat16 *orow = out + ((size_t)(row0 + i) * Hq + h) * D + 2 * qd;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *(__nv_bfloat162 *)(orow + 8 * n) = __floats2bfloat162_rn(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
    }
}

#endif
