// train_gla_backward.cu - backward of the chunked GLA (the equations of
// cpu/backward/gla_backward.inc, docs/distillation.md), chunk-parallel:
//   1. dnum_i = dy_i / den_i, dden_i = -(dy_i . out_i) / den_i;
//   2. E_c = sum_{i in c, heads of the group} e^{G_i} phi_q_i dnum_i^T (and e_c with dden):
//      the gradient of chunk c's start state from its own rows;
//   3. reverse scan: D_c (the gradient of chunk c's end state) = E_{c+1} + e^{G_L(c+1)} D_{c+1};
//   4. per chunk and state head, everything local: the carry term into phi_k and G,
//      the state and in-chunk terms of each query head of the group into phi_q, phi_k, G;
//   5. d log gamma_j = sum over state heads of the suffix sums of dG inside the chunk;
//   6. (fine-tuning, gla_backward_full's dv) per chunk and value head, over the state heads that read
//      it in order: dv_t += e^{G_L - G_t} D_c^T phi_k_t (the carry) and, for each query head of the
//      state head, dv_t += sum_{i >= t in the chunk} w_it dnum_i, w_it = (phi_q_i . phi_k_t) e^{G_i - G_t}.
// Every output element has one writer and every sum a fixed order: no atomics.
#include "train_gla.cuh" // train_gla_shape, lz_block_mm, load_chunk_gates

// ---- kernels -------------------------------------------------------------------------------------

// a warp per (token, query head)
__global__ void gla_dnum_kernel(float *dnum, float *dden, const float *dout, const float *out, const float *den,
                                long rows, int d, bool normalize) {
    const long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    const float *go = dout + r * d, *o = out + r * d;
    const float inv = normalize ? 1.0f / den[r] : 1.0f;
    float dot = 0.0f;
    for (int j = lane; j < d; j += 32) {
        dnum[r * d + j] = normalize ? go[j] / den[r] : go[j];
        dot += go[j] * o[j];
    }
    dot = lz_warp_sum(dot);
    if (lane == 0)
        dden[r] = normalize ? -dot * inv : 0.0f;
}

// grid (chunks - 1, Hs, n_seq): block x is chunk c = x + 1, writing D, dz slot c - 1
template <bool BF16>
__global__ void gla_state_grad_kernel(float *D, float *dz, const float *dnum, const float *dden, const float *phi_q,
                                      const float *G, train_gla_shape sh) {
    __shared__ __align__(32) float tiles[LZ_MM_SMEM];
    __shared__ float eG[GC];
    const int c = blockIdx.x + 1, s = blockIdx.y, b = blockIdx.z, n = sh.chunk_len(c);
    const size_t row0 = (size_t)b * sh.T + (size_t)c * GC;
    load_chunk_gates(eG, G, row0, n);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        eG[i] = expf(eG[i]);
    __syncthreads();
    float *Dc = D + sh.slot(b, c - 1, s) * sh.F * sh.d, *dzc = dz + sh.slot(b, c - 1, s) * sh.F;
    // k runs over (head of the group, row): h = s qps + k / n, i = k % n
    auto qrow = [&](int k) { return (row0 + k % n) * sh.Hq + s * sh.qps + k / n; };
    lz_mm<BF16, true, false>(
        sh.F, sh.d, n * sh.qps, [&](int a, int k) { return eG[k % n] * phi_q[qrow(k) * sh.F + a]; },
        [&](int k, int j) { return dnum[qrow(k) * sh.d + j]; },
        [&](int a, int j, float acc) { Dc[(size_t)a * sh.d + j] = acc; }, tiles);
    for (int a = threadIdx.x; a < sh.F; a += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < n * sh.qps; k++)
            acc += eG[k % n] * phi_q[qrow(k) * sh.F + a] * dden[qrow(k)];
        dzc[a] = acc;
    }
}

// grid (ceil((F d + F) / 256), Hs, n_seq): D_c += e^{G_L(c+1)} D_{c+1}, last chunk's zero
__global__ void gla_rscan_kernel(float *D, float *dz, const float *G, train_gla_shape sh) {
    const int s = blockIdx.y, b = blockIdx.z;
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x, Fd = (size_t)sh.F * sh.d;
    if (e >= Fd + sh.F)
        return;
    float *base = e < Fd ? D + e : dz + (e - Fd);
    const size_t stride = e < Fd ? Fd : (size_t)sh.F;
    float next = 0.0f;
    base[sh.slot(b, sh.chunks - 1, s) * stride] = 0.0f;
    for (int c = sh.chunks - 2; c >= 0; c--) {
        const int c1 = c + 1, last = (c1 + 1) * GC < sh.T ? (c1 + 1) * GC : sh.T; // chunk c + 1's end
        const float keep = expf(G[(size_t)b * sh.T + last - 1]);
        float *cur = base + sh.slot(b, c, s) * stride;
        next = *cur + keep * next;
        *cur = next;
    }
}

// grid (chunks, Hs, n_seq): every gradient of the chunk for state head s
template <bool BF16>
__global__ void gla_chunk_backward_kernel(float *dphi_q, float *dphi_k, float *dGpart, const float *dnum,
                                          const float *dden, const float *D, const float *dzs, const float *S0,
                                          const float *z0, const float *phi_q, const float *phi_k, const float *v,
                                          const float *G, train_gla_shape sh) {
    __shared__ __align__(32) float tiles[LZ_MM_SMEM];
    __shared__ float Gs[GC], wk[GC], ct[GC], dG[GC], gm[GC][GC + 1], am[GC][GC + 1];
    __shared__ float red[32];
    const int c = blockIdx.x, s = blockIdx.y, b = blockIdx.z, n = sh.chunk_len(c), vh = sh.value_head(s);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, L = n - 1;
    const size_t row0 = (size_t)b * sh.T + (size_t)c * GC, Fd = (size_t)sh.F * sh.d;
    const size_t pqs = (size_t)sh.Hq * sh.F, pks = (size_t)sh.Hs * sh.F, vs = (size_t)sh.Hkv * sh.d,
                 ds = (size_t)sh.Hq * sh.d;
    load_chunk_gates(Gs, G, row0, n);
    for (int t = threadIdx.x; t < n; t += blockDim.x)
        wk[t] = expf(Gs[L] - Gs[t]);
    __syncthreads();
    const float keep = expf(Gs[L]);
    const float *pk = phi_k + (row0 * sh.Hs + s) * sh.F, *vv = v + (row0 * sh.Hkv + vh) * sh.d;
    const float *S = S0 + sh.slot(b, c, s) * Fd, *z = z0 + sh.slot(b, c, s) * sh.F;
    const float *Dc = D + sh.slot(b, c, s) * Fd, *dz = dzs + sh.slot(b, c, s) * sh.F;
    float *dpk = dphi_k + (row0 * sh.Hs + s) * sh.F;

    // carry: dphi_k_t = e^{G_L - G_t} (D v_t + dz); c_t = phi_k_t . that
    lz_mm<BF16, false, true>(
        n, sh.F, sh.d, [&](int t, int j) { return vv[t * vs + j]; },
        [&](int j, int a) { return Dc[(size_t)a * sh.d + j]; },
        [&](int t, int a, float acc) { dpk[t * pks + a] = wk[t] * (acc + dz[a]); }, tiles);
    float sd = 0.0f; // <S0, D> + z0 . dz
    for (size_t e = threadIdx.x; e < Fd + sh.F; e += blockDim.x)
        sd += e < Fd ? S[e] * Dc[e] : z[e - Fd] * dz[e - Fd];
    sd = lz_block_sum(sd, red);
    __syncthreads();
    for (int t = warp; t < n; t += LZ_TB / 32) {
        float acc = 0.0f;
        for (int a = lane; a < sh.F; a += 32)
            acc += pk[t * pks + a] * dpk[t * pks + a];
        acc = lz_warp_sum(acc);
        if (lane == 0)
            ct[t] = acc;
    }
    __syncthreads();
    if (threadIdx.x < n) {
        float extra = 0.0f;
        if (threadIdx.x == L) {
            extra = keep * sd;
            for (int t = 0; t < n; t++)
                extra += ct[t];
        }
        dG[threadIdx.x] = extra - ct[threadIdx.x];
    }
    __syncthreads();

    for (int hl = 0; hl < sh.qps; hl++) {
        const int h = s * sh.qps + hl;
        const float *pq = phi_q + (row0 * sh.Hq + h) * sh.F, *dn = dnum + (row0 * sh.Hq + h) * sh.d;
        const float *ddn = dden + row0 * sh.Hq + h;
        float *dpq = dphi_q + (row0 * sh.Hq + h) * sh.F;
        // g_it = e^{G_i - G_t} (v_t . dnum_i + dden_i) for t <= i, then A_it = g_it (phi_q_i . phi_k_t)
        lz_mm<BF16, false, true>(
            n, n, sh.d, [&](int i, int j) { return dn[i * ds + j]; }, [&](int j, int t) { return vv[t * vs + j]; },
            [&](int i, int t, float acc) { gm[i][t] = t <= i ? expf(Gs[i] - Gs[t]) * (acc + ddn[i * sh.Hq]) : 0.0f; },
            tiles);
        lz_mm<BF16, false, true>( // same (n, n) shape: gm[i][t] is this thread's own
            n, n, sh.F, [&](int i, int a) { return pq[i * pqs + a]; }, [&](int a, int t) { return pk[t * pks + a]; },
            [&](int i, int t, float acc) { am[i][t] = gm[i][t] * acc; }, tiles);
        __syncthreads();
        if (threadIdx.x < n) { // dG_i += sum_t A_it
            float acc = 0.0f;
            for (int t = 0; t < n; t++)
                acc += am[threadIdx.x][t];
            dG[threadIdx.x] += acc;
        }
        __syncthreads();
        if (threadIdx.x < n) { // dG_t -= sum_i A_it
            float acc = 0.0f;
            for (int i = 0; i < n; i++)
                acc += am[i][threadIdx.x];
            dG[threadIdx.x] -= acc;
        }
        // state term: dphi_q_i = e^{G_i} (S0 dnum_i + z0 dden_i)
        lz_mm<BF16, false, true>(
            n, sh.F, sh.d, [&](int i, int j) { return dn[i * ds + j]; },
            [&](int j, int a) { return S[(size_t)a * sh.d + j]; },
            [&](int i, int a, float acc) { dpq[i * pqs + a] = expf(Gs[i]) * (acc + ddn[i * sh.Hq] * z[a]); }, tiles);
        __syncthreads();
        for (int i = warp; i < n; i += LZ_TB / 32) { // dG_i += phi_q_i . (the state term)
            float acc = 0.0f;
            for (int a = lane; a < sh.F; a += 32)
                acc += pq[i * pqs + a] * dpq[i * pqs + a];
            acc = lz_warp_sum(acc);
            if (lane == 0)
                dG[i] += acc;
        }
        __syncthreads();
        // in-chunk terms: dphi_q_i += sum_t g_it phi_k_t;  dphi_k_t += sum_i g_it phi_q_i
        lz_mm<BF16, false, false>(
            n, sh.F, n, [&](int i, int t) { return gm[i][t]; }, [&](int t, int a) { return pk[t * pks + a]; },
            [&](int i, int a, float acc) { dpq[i * pqs + a] += acc; }, tiles);
        lz_mm<BF16, false, false>( // the carry's (n, F) shape: dphi_k_t's elements are this thread's own
            n, sh.F, n, [&](int t, int i) { return gm[i][t]; }, [&](int i, int a) { return pq[i * pqs + a]; },
            [&](int t, int a, float acc) { dpk[t * pks + a] += acc; }, tiles);
        __syncthreads();
    }
    if (threadIdx.x < n)
        dGpart[(row0 + threadIdx.x) * sh.Hs + s] = dG[threadIdx.x];
}

// grid (chunks, Hkv, n_seq): dv of chunk c's rows for value head vh (added to). The state heads of
// vh: vh alone (phi_k per kv head), or its Hq / Hkv query heads (phi_k per query head); all products
// have the (n, d) shape, so every dv element is the same thread's throughout.
template <bool BF16>
__global__ void gla_dv_kernel(float *dv, const float *dnum, const float *D, const float *phi_q, const float *phi_k,
                              const float *G, train_gla_shape sh) {
    __shared__ __align__(32) float tiles[LZ_MM_SMEM];
    __shared__ float Gs[GC], wk[GC], wm[GC][GC + 1];
    const int c = blockIdx.x, vh = blockIdx.y, b = blockIdx.z, n = sh.chunk_len(c), L = n - 1;
    const int spv = sh.Hs / sh.Hkv; // state heads per value head
    const size_t row0 = (size_t)b * sh.T + (size_t)c * GC, Fd = (size_t)sh.F * sh.d;
    const size_t pqs = (size_t)sh.Hq * sh.F, pks = (size_t)sh.Hs * sh.F, vs = (size_t)sh.Hkv * sh.d,
                 ds = (size_t)sh.Hq * sh.d;
    load_chunk_gates(Gs, G, row0, n);
    for (int t = threadIdx.x; t < n; t += blockDim.x)
        wk[t] = expf(Gs[L] - Gs[t]);
    __syncthreads();
    float *dvv = dv + (row0 * sh.Hkv + vh) * sh.d;
    for (int sl = 0; sl < spv; sl++) {
        const int s = vh * spv + sl;
        const float *pk = phi_k + (row0 * sh.Hs + s) * sh.F, *Dc = D + sh.slot(b, c, s) * Fd;
        if (c + 1 < sh.chunks) // the carry (the last chunk's end state has no gradient)
            lz_mm<BF16, false, false>(
                n, sh.d, sh.F, [&](int t, int a) { return wk[t] * pk[t * pks + a]; },
                [&](int a, int j) { return Dc[(size_t)a * sh.d + j]; },
                [&](int t, int j, float acc) { dvv[t * vs + j] += acc; }, tiles);
        for (int hl = 0; hl < sh.qps; hl++) {
            const int h = s * sh.qps + hl;
            const float *pq = phi_q + (row0 * sh.Hq + h) * sh.F, *dn = dnum + (row0 * sh.Hq + h) * sh.d;
            __syncthreads(); // the previous head's wm is read
            lz_mm<BF16, false, true>(
                n, n, sh.F, [&](int i, int a) { return pq[i * pqs + a]; },
                [&](int a, int t) { return pk[t * pks + a]; },
                [&](int i, int t, float acc) { wm[i][t] = t <= i ? acc * expf(Gs[i] - Gs[t]) : 0.0f; }, tiles);
            __syncthreads();
            lz_mm<BF16, false, false>(
                n, sh.d, n, [&](int t, int i) { return wm[i][t]; }, [&](int i, int j) { return dn[i * ds + j]; },
                [&](int t, int j, float acc) { dvv[t * vs + j] += acc; }, tiles);
        }
    }
}

// a thread per (sequence, chunk): d log gamma_j = sum_{i >= j in the chunk} sum_s dG_i
__global__ void gla_dlg_kernel(float *dlg, const float *dGpart, int n_seq, train_gla_shape sh) {
    const int id = blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_seq * sh.chunks)
        return;
    const int b = id / sh.chunks, c = id % sh.chunks;
    const size_t r0 = (size_t)b * sh.T + (size_t)c * GC;
    float suffix = 0.0f;
    for (int i = sh.chunk_len(c) - 1; i >= 0; i--) {
        float acc = 0.0f;
        for (int s = 0; s < sh.Hs; s++)
            acc += dGpart[(r0 + i) * sh.Hs + s];
        dlg[r0 + i] = (suffix += acc);
    }
}

// ---- launchers -----------------------------------------------------------------------------------

// scratch: G [N], dnum [N Hq d], dden [N Hq], dGpart [N Hs], D [n_seq chunks Hs F d], dz [.. F]
extern "C" size_t lz_cuda_gla_backward_scratch(int n_seq, int T, const lz_lizard_geom *g) {
    const size_t N = (size_t)n_seq * T, F = 2 * (size_t)g->f, slots = (size_t)n_seq * lz_train_chunks(T) * g->Hs;
    return N + N * g->Hq * g->d + N * g->Hq + N * g->Hs + slots * F * g->d + slots * F;
}

extern "C" lz_status lz_cuda_gla_backward_full(float *dphi_q, float *dphi_k, float *dlog_gamma, float *dv,
                                               const float *dout, const float *out, const float *S0, const float *z0,
                                               const float *den, const float *phi_q, const float *phi_k,
                                               const float *v, const float *log_gamma, int n_seq, int T,
                                               const lz_lizard_geom *g, float *scratch) {
    if (n_seq <= 0 || T <= 0)
        return LZ_OK;
    const train_gla_shape sh = train_gla_shape_of(g, T);
    const bool bf16 = lz_cuda_train_gla_precision() == LZ_GLA_BF16;
    const size_t N = (size_t)n_seq * T, slots = (size_t)n_seq * sh.chunks * sh.Hs;
    float *G = scratch, *dnum = G + N, *dden = dnum + N * sh.Hq * sh.d, *dGpart = dden + N * sh.Hq;
    float *D = dGpart + N * sh.Hs, *dz = D + slots * sh.F * sh.d;
    LZ_TRY(lz_cuda_gla_cumulative_gates(G, log_gamma, n_seq, T));
    const long rows = (long)N * sh.Hq;
    gla_dnum_kernel<<<lz_div_up(rows, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(dnum, dden, dout, out, den, rows,
                                                                                  sh.d, g->normalize);
    LZ_LAUNCH_CHECK("gla_dnum");
    if (sh.chunks > 1) {
        const dim3 grid(sh.chunks - 1, sh.Hs, n_seq);
        if (bf16)
            gla_state_grad_kernel<true><<<grid, LZ_TB, 0, lz_train_stream()>>>(D, dz, dnum, dden, phi_q, G, sh);
        else
            gla_state_grad_kernel<false><<<grid, LZ_TB, 0, lz_train_stream()>>>(D, dz, dnum, dden, phi_q, G, sh);
        LZ_LAUNCH_CHECK("gla_state_grad");
    }
    gla_rscan_kernel<<<dim3(lz_div_up((long)sh.F * sh.d + sh.F, LZ_TB), sh.Hs, n_seq), LZ_TB, 0,
                       lz_train_stream()>>>(D, dz, G, sh);
    LZ_LAUNCH_CHECK("gla_rscan");
    const dim3 grid(sh.chunks, sh.Hs, n_seq);
    if (bf16)
        gla_chunk_backward_kernel<true><<<grid, LZ_TB, 0, lz_train_stream()>>>(dphi_q, dphi_k, dGpart, dnum, dden, D,
                                                                               dz, S0, z0, phi_q, phi_k, v, G, sh);
    else
        gla_chunk_backward_kernel<false><<<grid, LZ_TB, 0, lz_train_stream()>>>(dphi_q, dphi_k, dGpart, dnum, dden, D,
                                                                                dz, S0, z0, phi_q, phi_k, v, G, sh);
    LZ_LAUNCH_CHECK("gla_chunk_backward");
    gla_dlg_kernel<<<lz_div_up((long)n_seq * sh.chunks, LZ_TB), LZ_TB, 0, lz_train_stream()>>>(dlog_gamma, dGpart,
                                                                                                n_seq, sh);
    LZ_LAUNCH_CHECK("gla_dlg");
    if (dv) {
        const dim3 dv_grid(sh.chunks, sh.Hkv, n_seq);
        if (bf16)
            gla_dv_kernel<true><<<dv_grid, LZ_TB, 0, lz_train_stream()>>>(dv, dnum, D, phi_q, phi_k, G, sh);
        else
            gla_dv_kernel<false><<<dv_grid, LZ_TB, 0, lz_train_stream()>>>(dv, dnum, D, phi_q, phi_k, G, sh);
        LZ_LAUNCH_CHECK("gla_dv");
    }
    return LZ_OK;
}

extern "C" lz_status lz_cuda_gla_backward(float *dphi_q, float *dphi_k, float *dlog_gamma, const float *dout,
                                          const float *out, const float *S0, const float *z0, const float *den,
                                          const float *phi_q, const float *phi_k, const float *v,
                                          const float *log_gamma, int n_seq, int T, const lz_lizard_geom *g,
                                          float *scratch) {
    return lz_cuda_gla_backward_full(dphi_q, dphi_k, dlog_gamma, NULL, dout, out, S0, z0, den, phi_q, phi_k, v,
                                     log_gamma, n_seq, T, g, scratch);
}
