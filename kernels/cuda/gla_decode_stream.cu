// gla_decode_stream.cu - the GLA decode step (op gla_decode) for many sequences, in two launches
// shaped so that the state streams near the copy rate:
//   prep:   per (feature-map head, tile of GP_SEQS sequences): u = x . W with the head's weight
//           read once for the tile straight into registers (loaded before the PDL wait), then
//           phi = [softmax(u) ++ softmax(-u)] (or [exp(u) ++ exp(-u)]) as fp32 into scratch, a warp
//           a sequence; the blocks of a state head's phi_k also write z = gamma z + phi_k (z is
//           read by no other block of this launch); bf16 takes the tensor-core prep where the shape
//           allows (gla_decode_prep_tc.cu: 32 sequences a tile, the weight in shared memory);
//   stream: per (slice of GS_COLS value columns, state head, sequence), no cluster, no atomics:
//           every thread issues its GS_ROWS float4 loads of S (64 KiB per block at d = 128) before
//           anything else, then S = gamma S + phi_k v^T over all 2f rows of its columns, stored,
//           with the numerators phi_q^T S of the group's query heads reduced in the block, and
//           the denominators phi_q . z from the z that prep wrote.
// Why: at many sequences the split kernel (gla_decode.cu) is far from the copy rate: each cluster
// issues its state loads once, then walks serial phases (the feature maps' GEMV from L2 with every
// (sequence, state head) re-reading the weights, cluster barriers, reductions). Here the feature
// maps read each weight once per GP_SEQS sequences, and the stream kernel does nothing but the
// state's own arithmetic. The backend takes this path from LIZARD_GLA_STREAM_MIN sequences on.
// prep: 8 sequences a block (3 blocks an SM: one wave), the weight's first rows loaded into
// registers while the previous kernel drains, z copied while u is computed, a tile's phi at once.
// stream: 64 columns and 16 rows a thread (64 KiB, 128 registers, 2 blocks an SM), for more bytes
// in flight.
// Programmatic dependent launch (pdl.cuh): prep loads its weights before griddepcontrol.wait and
// lets the stream kernel launch only after the wait; so when a stream block starts, every kernel
// before prep has completed (each waited for its own predecessor), and nothing that writes S can
// still be running: the stream kernel issues its S loads (L2-only, ld.global.cg) before its own wait.
#include <stdint.h> // uintptr_t
#include <type_traits> // std::is_same

#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_cp_async4, lz_log_sigmoid
#include "gla_decode_common.cuh" // gd_denominators, gd_sum_over_warp, gd_store_partial, gd_write_out
#include "gla_decode_stream.cuh" // gs_params, the tensor-core prep

enum {
    GP_THREADS = 256,
    GP_SEQS = 8,             // sequences per prep block (a multiple of 4), one warp each for phi
    GP_WR = 8,               // weight rows a prep thread holds per pass
    GS_THREADS = 256,
    GS_COLS = 64,            // value columns per stream block (fewer where d asks)
    GS_ROWS = 16,            // float4 rows in flight per thread
    GS_WARPS = GS_THREADS / 32,
    GS_MAX_GROUP = 16,
};


// Shared memory of the prep kernel in floats: x [d][GP_SEQS], the row groups' partial sums
// [RG][GP_SEQS][f] (RG = GP_THREADS / (f / VF)), u [GP_SEQS][f], z [GP_SEQS][2f].
static __host__ __device__ size_t gs_prep_smem(int d, int f, int vf) {
    const size_t rg = GP_THREADS / (f / vf);
    return sizeof(float) * ((size_t)d * GP_SEQS + rg * GP_SEQS * f + (size_t)GP_SEQS * f + (size_t)GP_SEQS * 2 * f);
}

// grid (Hq + Hs map heads, ceil(n / GP_SEQS)), block GP_THREADS. Head h < Hq: phi_q of query head
// h; else phi_k of state head s = h - Hq (reading k head s / (Hs / Hkv)) and that head's z.
// Thread (row group rg, feature group jq) holds VF features of weight rows rg, rg + RG, ... (GP_WR
// rows a pass, the first pass loaded before the PDL wait: all in flight at once, no staging),
// accumulates u for the tile's sequences against x in shared memory; the row groups are summed in
// shared memory; then warp r finishes sequence r (phi, z from an async copy issued at the start).
static_assert(GP_SEQS % 4 == 0 && GP_SEQS <= GP_THREADS / 32, "prep: float4s of x, a warp a sequence");
template <typename T, int VF> __global__ void __launch_bounds__(GP_THREADS, 3) gla_decode_prep_kernel(gs_params<T> p) {
    struct alignas(sizeof(T) * VF) wvec {
        T e[VF];
    };
    extern __shared__ float4 gp_sm4[];
    const int h = blockIdx.x, seq0 = blockIdx.y * GP_SEQS, d = p.d, f = p.f, F = 2 * f, tid = threadIdx.x;
    const int FQ = f / VF, RG = GP_THREADS / FQ, jq = tid % FQ, rg = tid / FQ, warp = tid >> 5, lane = tid & 31;
    float *xs = (float *)gp_sm4, *red = xs + (size_t)d * GP_SEQS, *us = red + (size_t)RG * GP_SEQS * f;
    float *zs = us + (size_t)GP_SEQS * f;
    const bool is_k = h >= p.Hq;
    const int s = h - p.Hq, nseq = min(GP_SEQS, p.n_seqs - seq0);
    const T *W = is_k ? p.wk + (size_t)(p.n_wk == 1 ? 0 : s) * d * f : p.wq + (size_t)(p.n_wq == 1 ? 0 : h) * d * f;
    wvec wr[GP_WR];
    auto load_rows = [&](int i0) {
#pragma unroll
        for (int k = 0; k < GP_WR; k++) {
            const int i = i0 + rg + k * RG;
            if (rg < RG && i < d)
                wr[k] = *(const wvec *)(W + (size_t)i * f + jq * VF);
            else
                for (int c = 0; c < VF; c++)
                    wr[k].e[c] = lz_from_float<T>(0.0f);
        }
    };
    load_rows(0); // no kernel writes weights
    // the step's arrays come from a copy before the step's first kernel
    const int my_row = warp < nseq ? p.start[seq0 + warp] : 0;
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const float gate = is_k && warp < nseq ? lz_to_float(p.gate[my_row]) : 0.0f;
    if (is_k) // z, needed last: its copy overlaps the GEMV (no other block of this launch touches it)
        for (int e = tid; e < nseq * F; e += GP_THREADS)
            lz_cp_async4(zs + e, p.z + ((size_t)p.slot[seq0 + e / F] * p.Hs + s) * F + e % F);
    lz_cp_async_commit();
    const T *x = is_k ? p.k : p.q;
    const int Hx = is_k ? p.Hkv : p.Hq, xh = is_k ? s / (p.Hs / p.Hkv) : h;
    for (int e = tid; e < GP_SEQS * d; e += GP_THREADS) {
        const int r = e / d, i = e % d;
        xs[i * GP_SEQS + r] = r < nseq ? lz_to_float(x[((size_t)p.start[seq0 + r] * Hx + xh) * d + i]) : 0.0f;
    }
    __syncthreads();
    // u[r][j] = sum_i x[r][i] W[i][j]: GP_SEQS x VF independent accumulators a thread
    float acc[GP_SEQS][VF];
#pragma unroll
    for (int r = 0; r < GP_SEQS; r++)
#pragma unroll
        for (int c = 0; c < VF; c++)
            acc[r][c] = 0.0f;
    for (int i0 = 0; i0 < d; i0 += GP_WR * RG) {
        if (i0 > 0)
            load_rows(i0);
#pragma unroll
        for (int k = 0; k < GP_WR; k++) {
            const int i = i0 + rg + k * RG;
            if (rg < RG && i < d) {
                float wf[VF];
#pragma unroll
                for (int c = 0; c < VF; c++)
                    wf[c] = lz_to_float(wr[k].e[c]);
                const float4 *xv = (const float4 *)(xs + (size_t)i * GP_SEQS);
#pragma unroll
                for (int v4 = 0; v4 < GP_SEQS / 4; v4++) {
                    const float4 xx = xv[v4];
#pragma unroll
                    for (int c = 0; c < VF; c++) {
                        acc[4 * v4][c] += xx.x * wf[c], acc[4 * v4 + 1][c] += xx.y * wf[c];
                        acc[4 * v4 + 2][c] += xx.z * wf[c], acc[4 * v4 + 3][c] += xx.w * wf[c];
                    }
                }
            }
        }
    }
    if (rg < RG)
#pragma unroll
        for (int r = 0; r < GP_SEQS; r++)
#pragma unroll
            for (int c = 0; c < VF; c++)
                red[((size_t)rg * GP_SEQS + r) * f + jq * VF + c] = acc[r][c];
    __syncthreads();
    for (int e = tid; e < GP_SEQS * f; e += GP_THREADS) {
        float u = 0.0f;
        for (int g = 0; g < RG; g++)
            u += red[(size_t)g * GP_SEQS * f + e];
        us[e] = u;
    }
    lz_cp_async_wait<0>();
    __syncthreads();
    // phi of sequence `warp`
    if (warp >= nseq)
        return;
    const int qs = seq0 + warp;
    const float *u = us + warp * f;
    float *ph = is_k ? p.phi_k + ((size_t)qs * p.Hs + s) * F : p.phi_q + ((size_t)qs * p.Hq + h) * F;
    float *zh = is_k ? p.z + ((size_t)p.slot[qs] * p.Hs + s) * F : NULL;
    const float *zo = zs + warp * F;
    const float gamma = is_k ? expf(lz_log_sigmoid(gate)) : 0.0f;
    float mx = 0.0f, mn = 0.0f, ip = 1.0f, in = 1.0f;
    if (!p.exp_map) {
        mx = -INFINITY, mn = INFINITY;
        for (int j = lane; j < f; j += 32)
            mx = fmaxf(mx, u[j]), mn = fminf(mn, u[j]);
        mx = lz_warp_max(mx);
        mn = -lz_warp_max(-mn);
        float sp = 0.0f, sn = 0.0f;
        for (int j = lane; j < f; j += 32)
            sp += expf(u[j] - mx), sn += expf(mn - u[j]);
        ip = lz_warp_sum(sp), in = lz_warp_sum(sn);
    }
    for (int j = lane; j < f; j += 32) {
        const float a = expf(u[j] - mx) / ip, b = expf(mn - u[j]) / in;
        ph[j] = a, ph[f + j] = b;
        if (is_k)
            zh[j] = gamma * zo[j] + a, zh[f + j] = gamma * zo[f + j] + b;
    }
}

// Shared memory of the stream kernel in floats.
static __host__ __device__ size_t gs_stream_smem(int group, int F, int cols) {
    return sizeof(float) * ((size_t)(group + 1) * F + F + cols + group + (size_t)GS_WARPS * group * cols);
}

// grid (d / cols, Hs, n), block GS_THREADS; G >= group. Thread: column quad cq of the slice,
// rows rl, rl + rp, ... (rp = rows per pass).
template <typename T, int G> __global__ void __launch_bounds__(GS_THREADS) gla_decode_stream_kernel(gs_params<T> p) {
    extern __shared__ float4 gs_sm4[];
    const int cols = p.cols, qpr = cols / 4, rp = GS_THREADS / qpr, tid = threadIdx.x, cq = tid % qpr, rl = tid / qpr;
    const int c0 = blockIdx.x * cols, s = blockIdx.y, q = blockIdx.z, d = p.d, F = 2 * p.f, group = p.Hq / p.Hs;
    // the step's arrays come from a copy before the step's first kernel
    const int row = p.start[q], slot = p.slot[q];
    float *Sh = p.S + ((size_t)slot * p.Hs + s) * F * d + c0 + cq * 4;
    float4 st[GS_ROWS];
#pragma unroll
    for (int k = 0; k < GS_ROWS; k++) {
        const int a = rl + k * rp;
        st[k] = a < F ? __ldcg((const float4 *)(Sh + (size_t)a * d)) : make_float4(0, 0, 0, 0);
    }
    lz_pdl_wait(); // prep's phi and z; q, k, v, gate from earlier kernels
    lz_pdl_launch_dependents();
    float *sm = (float *)gs_sm4, *phis = sm, *pk = phis + group * F, *zs = pk + F, *vs = zs + F, *dens = vs + cols;
    float *red = dens + group;
    const float gamma = expf(lz_log_sigmoid(lz_to_float(p.gate[row])));
    const int vh = p.Hs == p.Hkv ? s : s / (p.Hq / p.Hkv);
    const float *pq_src = p.phi_q + ((size_t)q * p.Hq + s * group) * F, *pk_src = p.phi_k + ((size_t)q * p.Hs + s) * F;
    const float *z_src = p.z + ((size_t)slot * p.Hs + s) * F;
    for (int e = tid; e < group * F; e += GS_THREADS)
        phis[e] = pq_src[e];
    for (int e = tid; e < F; e += GS_THREADS)
        pk[e] = pk_src[e], zs[e] = z_src[e];
    for (int e = tid; e < cols; e += GS_THREADS)
        vs[e] = lz_to_float(p.v[((size_t)row * p.Hkv + vh) * d + c0 + e]);
    __syncthreads();
    // denominators phi_q_g . z_new: one warp per query head of the group
    const int warp = tid >> 5, lane = tid & 31;
    if (p.normalize)
        gd_denominators(dens, phis, zs, F, group, warp, lane, GS_WARPS);
    // S: update, store, numerators
    float acc[G][4];
#pragma unroll
    for (int g = 0; g < G; g++)
        acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
    const float4 v4 = make_float4(vs[cq * 4], vs[cq * 4 + 1], vs[cq * 4 + 2], vs[cq * 4 + 3]);
    for (int a0 = 0; a0 < F; a0 += GS_ROWS * rp) {
        if (a0 > 0) { // 2f beyond one pass of rows: the next ones
#pragma unroll
            for (int k = 0; k < GS_ROWS; k++) {
                const int a = a0 + rl + k * rp;
                st[k] = a < F ? __ldcg((const float4 *)(Sh + (size_t)a * d)) : make_float4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int k = 0; k < GS_ROWS; k++) {
            const int a = a0 + rl + k * rp;
            if (a < F) {
                const float4 sv = gd_update_row<G>(st[k], gamma, pk[a], v4, phis, F, a, group, acc);
                __stcs((float4 *)(Sh + (size_t)a * d), sv); // read again only at the next step
            }
        }
    }
    // numerators over the row lanes: shuffles within the warp (qpr is a power of two <= 16), then warps
    gd_sum_over_warp<G>(acc, qpr);
    if (lane < qpr)
        gd_store_partial<G>(red, acc, warp, group, cols, cq);
    __syncthreads();
    gd_write_out<T>(p.out + ((size_t)row * p.Hq + s * group) * d + c0, d, red, GS_WARPS, group, cols, dens, p.normalize);
}

// Value columns per stream block: GS_COLS, or the largest power-of-two multiple of 4 dividing d.
static int stream_cols(int d) {
    for (int c = GS_COLS; c >= 4; c /= 2)
        if (d % c == 0)
            return c;
    return 0;
}

// Features a prep thread takes: 4 where rows of W are whole vectors of 4.
template <typename T> static int prep_vf(int f, const T *wq, const T *wk) {
    return f % 4 == 0 && (((uintptr_t)wq | (uintptr_t)wk) & (4 * sizeof(T) - 1)) == 0 ? 4 : 1;
}

template <typename T> bool gla_decode_stream_fits(const lz_cuda_ctx *c, const lz_attn_dims *dims) {
    const int d = dims->head_dim, f = dims->feature_dim, Hq = dims->n_heads, Hkv = dims->n_kv_heads,
              Hs = dims->n_state_heads;
    if (Hs <= 0 || Hkv <= 0 || f < 1 || f > GP_THREADS || Hq % Hs != 0 || Hq / Hs > GS_MAX_GROUP ||
        Hq % Hkv != 0 || (Hs % Hkv != 0 && Hs != Hq) || stream_cols(d) == 0)
        return false;
    return gs_prep_smem(d, f, 1) <= c->max_smem && (f % 4 != 0 || gs_prep_smem(d, f, 4) <= c->max_smem) &&
           gs_stream_smem(Hq / Hs, 2 * f, stream_cols(d)) <= c->max_smem;
}

template <typename T> size_t gla_decode_stream_scratch(const lz_attn_dims *dims, int n_seqs) {
    return sizeof(float) * (size_t)n_seqs * (size_t)(dims->n_heads + dims->n_state_heads) * 2 * dims->feature_dim;
}

template <typename T, int G> static lz_status launch_stream(lz_cuda_ctx *c, const gs_params<T> &p, size_t smem) {
    return lz_launch(c, "gla decode (stream)", gla_decode_stream_kernel<T, G>,
                     dim3((unsigned)(p.d / p.cols), (unsigned)p.Hs, (unsigned)p.n_seqs), dim3(GS_THREADS), smem, p);
}

// The first launch: bf16 on tensor cores where the shape allows (gla_decode_prep_tc.cu), else CUDA cores.
template <typename T> static lz_status launch_prep(lz_cuda_ctx *c, const gs_params<T> &p) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        if (gla_decode_prep_tc_fits(c, p))
            return gla_decode_prep_tc(c, p);
    const dim3 grid((unsigned)(p.Hq + p.Hs), (unsigned)((p.n_seqs + GP_SEQS - 1) / GP_SEQS));
    const int vf = prep_vf<T>(p.f, p.wq, p.wk);
    return lz_launch(c, "gla decode (prep)", vf == 4 ? gla_decode_prep_kernel<T, 4> : gla_decode_prep_kernel<T, 1>,
                     grid, dim3(GP_THREADS), gs_prep_smem(p.d, p.f, vf), p);
}

template <typename T>
lz_status gla_decode_stream_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *gate_logit,
                                    const T *wq, int n_wq, const T *wk, int n_wk, bool exp_map, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims) {
    const int n = hb->n_seqs;
    if (n <= 0)
        return LZ_OK;
    // the first (eager) run of a step sizes the scratch; a recorded step finds it large enough
    LZ_TRY(lz_cuda_scratch(c, gla_decode_stream_scratch<T>(dims, n)));
    gs_params<T> p = {};
    p.out = out, p.q = q, p.k = k, p.v = v, p.gate = gate_logit, p.wq = wq, p.wk = wk;
    p.S = st->S, p.z = st->z, p.start = b->start, p.slot = b->slot;
    p.n_seqs = n, p.Hq = dims->n_heads, p.Hkv = dims->n_kv_heads, p.Hs = dims->n_state_heads, p.d = dims->head_dim;
    p.f = dims->feature_dim, p.n_wq = n_wq, p.n_wk = n_wk, p.normalize = dims->gla_normalize, p.exp_map = exp_map;
    p.cols = stream_cols(p.d);
    p.phi_q = (float *)c->scratch;
    p.phi_k = p.phi_q + (size_t)n * p.Hq * 2 * p.f;
    LZ_TRY(launch_prep<T>(c, p));
    if (gla_decode_ring_fits<T>(c, p))
        return gla_decode_ring<T>(c, p);
    const int group = p.Hq / p.Hs;
    const size_t smem = gs_stream_smem(group, 2 * p.f, p.cols);
    if (group == 1)
        return launch_stream<T, 1>(c, p, smem);
    if (group == 2)
        return launch_stream<T, 2>(c, p, smem);
    if (group <= 4)
        return launch_stream<T, 4>(c, p, smem);
    if (group <= 8)
        return launch_stream<T, 8>(c, p, smem);
    return launch_stream<T, 16>(c, p, smem);
}

// Once per backend (not per launch, so that decode steps can be captured in graphs).
template <typename T> lz_status gla_decode_stream_init(lz_cuda_ctx *c) {
    const int max = (int)c->max_smem;
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_prep_kernel<T, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_prep_kernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_stream_kernel<T, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_TRY(gla_decode_ring_init<T>(c));
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        return gla_decode_prep_tc_init(c);
    return LZ_OK;
}

#define LZ_GLA_DECODE_STREAM(T)                                                                                    \
    template bool gla_decode_stream_fits<T>(const lz_cuda_ctx *, const lz_attn_dims *);                           \
    template size_t gla_decode_stream_scratch<T>(const lz_attn_dims *, int);                                      \
    template lz_status gla_decode_stream_init<T>(lz_cuda_ctx *);                                                  \
    template lz_status gla_decode_stream_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *, \
                                                    const T *, int, const T *, int, bool, lz_layer_state *,        \
                                                    const lz_cuda_batch *, const lz_batch *, const lz_attn_dims *);
LZ_INSTANTIATE(LZ_GLA_DECODE_STREAM)
