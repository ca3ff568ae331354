// gla_decode.cu - the GLA decode step (one token per sequence) with each state head's value
// columns split over a thread-block cluster, so that a batch-1 step streams the state through
// n_seqs x Hs x C blocks (C <= 8; 64 at LLaMA-3-8B's shape) instead of n_seqs x Hs.
//
// Block r of the cluster of (sequence q, state head s) owns columns [r cpb, (r + 1) cpb) of S:
//   S[:, cols] = g S[:, cols] + phi_k v[cols]^T,  num_h[cols] = phi_q_h^T S[:, cols]  (h of the group)
// Its first loads are its slice of S (all rows in flight at once for F <= 4 x rows per pass), so
// the rest of the block's work hides under that one round trip. The normaliser z (F values) is
// shared by the cluster: every block reads z_old and computes z_new . phi_q_h itself (the
// denominators); block 0 writes z_new, after a cluster barrier that every block passes only once
// its copy of z_old is in shared memory.
//
// Fused form (gla_decode op): the block also computes the gate (log-sigmoid of the logit) and the
// Hedgehog feature maps of q (the group's heads) and k: each block of the cluster computes u = x . W
// for its share of the f features of every head, the cluster exchanges them through distributed
// shared memory, and every block then takes the two softmaxes (or exps) of the full u itself.
// So a decode step's GLA branch is one launch instead of four (log_sigmoid, two feature maps, GLA).
// From LIZARD_GLA_STREAM_MIN sequences on, the backend takes gla_decode_stream.cu's two launches.
//
// The cluster launch is also a programmatic dependent: the kernel waits for the previous one
// (griddepcontrol.wait), then lets the next one launch. Before the wait it loads its slice of S and
// prefetches into L1 its share of the feature maps' weights: S of this layer is written only by this
// kernel at the previous step, and every kernel here launches its dependents only after its own wait,
// so the kernel that wrote S is complete when this one starts (S is read through L2, __ldcg, so that
// no stale L1 line is read).
#include <cooperative_groups.h> // this_cluster: map_shared_rank, cluster barriers

#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_log_sigmoid
#include "gla_decode_common.cuh" // gd_sum_over_warp, gd_store_partial, gd_write_out

namespace cg = cooperative_groups;

enum { GD_THREADS = 256, GD_ROUND = 4, GD_MAX_CLUSTER = 8 };

template <typename T> struct gd_params {
    T *out;
    const T *phi_q, *phi_k;  // unfused: the feature maps, [n, Hq, F] and [n, Hs, F]
    const T *q, *k;          // fused: the raw q [n, Hq, d] and k [n, Hkv, d]
    const T *wq, *wk;        // fused: the feature maps' weights [n_wq, d, f], [n_wk, d, f]
    const T *v, *gate;       // gate: the logit (fused) or log gamma (unfused), [n]
    float *S, *z;
    const int32_t *start, *slot;
    int Hq, Hkv, Hs, d, f, n_wq, n_wk;
    bool normalize, exp_map;
};

// The feature map's weight [d, f] that head hh of state head s's maps takes: the group's query heads
// (hh < group), then the key head. df: d f.
template <typename T>
__device__ __forceinline__ const T *gd_map_weight(const gd_params<T> &p, int s, int group, int hh, int df) {
    return hh < group ? p.wq + (size_t)(p.n_wq == 1 ? 0 : s * group + hh) * df
                      : p.wk + (size_t)(p.n_wk == 1 ? 0 : s) * df;
}

// Cluster size: the most blocks (<= 8) that split d into whole float4 columns.
__host__ __device__ constexpr int gd_cluster_size(int d) {
    int C = GD_MAX_CLUSTER;
    while (C > 1 && d % (4 * C) != 0)
        C /= 2;
    return C;
}

// Shared-memory layout (floats), the same on host and device.
struct gd_layout {
    int nh, group, cpb, qpr, rp, nred, fpb, vw, nv, parts;
    bool shfl; // column quads tile a warp: numerators reduced by warp shuffles first
    int phis, zs, vs, dens, red, xs, upart, uloc, uall, total;
    __host__ __device__ gd_layout(int Hq, int Hs, int d, int f, int C, int tvec, bool fused) {
        const int F = 2 * f;
        group = Hq / Hs;
        nh = group + 1;
        cpb = d / C;
        qpr = cpb / 4;
        rp = GD_THREADS / qpr;
        shfl = (qpr & (qpr - 1)) == 0 && qpr <= 32;
        nred = shfl ? GD_THREADS / 32 : rp; // partial rows: one per warp, or one per row lane
        // features of the fused maps: contiguous shares of whole 16-byte vectors where f allows
        vw = f % tvec == 0 ? tvec : 1;
        fpb = vw * ((f / vw + C - 1) / C);
        nv = fpb / vw;
        const int items = nh * nv;
        parts = items >= GD_THREADS ? 1 : GD_THREADS / items;
        parts = parts > d ? d : parts;
        int o = 0;
        phis = o, o += nh * F;
        zs = o, o += F;
        vs = o, o += cpb;
        dens = o, o += group;
        red = o, o += nred * group * cpb;
        xs = uloc = uall = upart = o;
        if (fused) {
            xs = o, o += nh * d;
            upart = o, o += parts * nh * fpb;
            uloc = o, o += nh * fpb;
            uall = o, o += nh * f;
        }
        total = o;
    }
};

// grid (C, Hs, n_seqs), cluster (C, 1, 1), block GD_THREADS. G >= the group size (query heads per state head).
// DC, FC > 0: head_dim DC, feature_dim FC and a group of exactly G, fixed at compile time (pick), so that
// the index arithmetic (divisions by d, f, the shares) folds away: at batch 1 the kernel is a chain of
// dependent instructions, so every instruction a warp need not issue is time.
template <typename T, bool FUSED, int G, int DC = 0, int FC = 0>
__global__ void __launch_bounds__(GD_THREADS) gla_decode_split_kernel(gd_params<T> p) {
    constexpr bool SPEC = DC > 0;
    extern __shared__ float sm[];
    cg::cluster_group cluster = cg::this_cluster();
    const int C = SPEC ? gd_cluster_size(DC) : (int)gridDim.x;
    const int r = (int)cluster.block_rank(), s = blockIdx.y, q = blockIdx.z, tid = threadIdx.x;
    const int d = SPEC ? DC : p.d, f = SPEC ? FC : p.f;
    const gd_layout L(SPEC ? G : p.Hq, SPEC ? 1 : p.Hs, d, f, C, vec16<T>::N, FUSED);
    const int F = 2 * f, group = L.group, cpb = L.cpb, c0 = r * cpb;
    const int row = p.start[q], slot = p.slot[q], vh = p.Hs == p.Hkv ? s : s / (p.Hq / p.Hkv);
    const int cq = tid % L.qpr, rl = tid / L.qpr, rp = L.rp;
    const bool in_state = rl < rp;
    float *Sh = p.S + ((size_t)slot * p.Hs + s) * F * d, *zh = p.z + ((size_t)slot * p.Hs + s) * F;
    float *phis = sm + L.phis, *zs = sm + L.zs, *vs = sm + L.vs, *dens = sm + L.dens, *red = sm + L.red;
    lz_trace_mark();

    // 1. This block's slice of S (the first GD_ROUND passes), then everything small: all in flight together.
    float4 st[GD_ROUND];
#pragma unroll
    for (int k = 0; k < GD_ROUND; k++) {
        const int a = rl + k * rp;
        st[k] = in_state && a < F ? __ldcg((const float4 *)(Sh + (size_t)a * d + c0 + cq * 4)) : make_float4(0, 0, 0, 0);
    }
    if constexpr (FUSED) { // this block's features of every head's map: one line a weight row
        const int j0 = r * L.fpb;
        if (j0 < f)
            for (int e = tid; e < L.nh * d; e += GD_THREADS) {
                const int hh = e / d, i = e % d;
                asm volatile("prefetch.global.L1 [%0];" ::"l"(gd_map_weight(p, s, group, hh, d * f) + (size_t)i * f + j0));
            }
    }
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    for (int e = tid; e < F; e += GD_THREADS)
        zs[e] = zh[e];
    for (int e = tid; e < cpb; e += GD_THREADS)
        vs[e] = lz_to_float(p.v[((size_t)row * p.Hkv + vh) * d + c0 + e]);
    const float lg = lz_to_float(p.gate[row]);
    const float gamma = expf(FUSED ? lz_log_sigmoid(lg) : lg);
    if constexpr (!FUSED) {
        for (int e = tid; e < group * F; e += GD_THREADS)
            phis[e] = lz_to_float(p.phi_q[((size_t)row * p.Hq + s * group + e / F) * F + e % F]);
        for (int e = tid; e < F; e += GD_THREADS)
            phis[group * F + e] = lz_to_float(p.phi_k[((size_t)row * p.Hs + s) * F + e]);
    } else {
        float *xs = sm + L.xs, *upart = sm + L.upart, *uloc = sm + L.uloc, *uall = sm + L.uall;
        const int kh = s / (p.Hs / p.Hkv); // the k head that phi_k of state head s reads
        for (int e = tid; e < group * d; e += GD_THREADS)
            xs[e] = lz_to_float(p.q[((size_t)row * p.Hq + s * group + e / d) * d + e % d]);
        for (int e = tid; e < d; e += GD_THREADS)
            xs[group * d + e] = lz_to_float(p.k[((size_t)row * p.Hkv + kh) * d + e]);
        __syncthreads();
        lz_trace_mark();
        // 2. u for features [j0, j0 + nf) of every head: item (head, vector of vw features), parts over d
        // (the compile-time shape's features split evenly: pick)
        const int j0 = r * L.fpb, nf = SPEC ? L.fpb : max(0, min(f, j0 + L.fpb) - j0), nv = nf / L.vw, items = L.nh * nv;
        for (int it = tid; it < items * L.parts; it += GD_THREADS) {
            const int part = it / items, e = it % items, hh = e / nv, jv = (e % nv) * L.vw;
            const T *W = gd_map_weight(p, s, group, hh, d * f);
            const float *x = xs + hh * d;
            constexpr int VW = vec16<T>::N;
            float acc[VW];
#pragma unroll
            for (int k = 0; k < VW; k++)
                acc[k] = 0.0f;
            if (L.vw == VW) {
#pragma unroll 4
                for (int i = part; i < d; i += L.parts) {
                    float wv[VW];
                    vec16<T>::load(wv, W + (size_t)i * f + j0 + jv);
                    const float xv = x[i];
#pragma unroll
                    for (int k = 0; k < VW; k++)
                        acc[k] += xv * wv[k];
                }
            } else {
#pragma unroll 4
                for (int i = part; i < d; i += L.parts)
                    acc[0] += x[i] * lz_to_float(W[(size_t)i * f + j0 + jv]);
            }
#pragma unroll
            for (int k = 0; k < VW; k++)
                if (k < L.vw)
                    upart[(part * L.nh + hh) * L.fpb + jv + k] = acc[k];
        }
        __syncthreads();
        for (int e = tid; e < L.nh * nf; e += GD_THREADS) {
            const int hh = e / nf, j = e % nf;
            float u = 0.0f;
            for (int pt = 0; pt < L.parts; pt++)
                u += upart[(pt * L.nh + hh) * L.fpb + j];
            uloc[hh * L.fpb + j] = u;
        }
        lz_trace_mark();
        // 3. every block's u (and z_old in every block) complete: exchange u through the cluster
        cluster.sync();
        for (int e = tid; e < L.nh * f; e += GD_THREADS) {
            const int hh = e / f, j = e % f;
            const float *peer = cluster.map_shared_rank(uloc, j / L.fpb);
            uall[e] = peer[hh * L.fpb + j % L.fpb];
        }
        __cluster_barrier_arrive(); // done reading the peers' shared memory; waited for before exit
        __syncthreads();
        // 4. phi of every head: one warp per head, [softmax(u) ++ softmax(-u)] or [exp(u) ++ exp(-u)]
        const int warp = tid >> 5, lane = tid & 31;
        for (int hh = warp; hh < L.nh; hh += GD_THREADS / 32) {
            const float *u = uall + hh * f;
            float *ph = phis + hh * F;
            if (p.exp_map) {
                for (int j = lane; j < f; j += 32) {
                    ph[j] = expf(u[j]);
                    ph[f + j] = expf(-u[j]);
                }
                continue;
            }
            float mx = -INFINITY, mn = INFINITY;
            for (int j = lane; j < f; j += 32)
                mx = fmaxf(mx, u[j]), mn = fminf(mn, u[j]);
            mx = lz_warp_max(mx);
            mn = -lz_warp_max(-mn);
            float sp = 0.0f, sn = 0.0f;
            for (int j = lane; j < f; j += 32) {
                const float ep = expf(u[j] - mx), en = expf(mn - u[j]);
                ph[j] = ep, ph[f + j] = en;
                sp += ep, sn += en;
            }
            sp = lz_warp_sum(sp), sn = lz_warp_sum(sn);
            __syncwarp();
            for (int j = lane; j < f; j += 32)
                ph[j] /= sp, ph[f + j] /= sn;
        }
    }
    if constexpr (!FUSED)
        cluster.sync(); // every block's z_old is in its shared memory: block 0 may overwrite z
    __syncthreads();    // phis, zs, vs complete
    lz_trace_mark();
    const float *pk = phis + group * F;

    // 5. z (block 0) and the denominators (every block, from its own z_old): one warp per query head
    if (r == 0)
        for (int e = tid; e < F; e += GD_THREADS)
            zh[e] = gamma * zs[e] + pk[e];
    {
        const int warp = tid >> 5, lane = tid & 31;
        for (int g = warp; g < group; g += GD_THREADS / 32) {
            float acc = 0.0f;
            for (int a = lane; a < F; a += 32)
                acc += phis[g * F + a] * (gamma * zs[a] + pk[a]);
            acc = lz_warp_sum(acc);
            if (lane == 0)
                dens[g] = acc;
        }
    }

    // 6. S: update, store, and the numerators of the group's query heads
    float acc[G][4];
#pragma unroll
    for (int g = 0; g < G; g++)
        acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
    const float4 v4 = make_float4(vs[cq * 4], vs[cq * 4 + 1], vs[cq * 4 + 2], vs[cq * 4 + 3]);
    for (int a0 = 0; a0 < F; a0 += GD_ROUND * rp) {
        if (a0 > 0) { // F beyond GD_ROUND passes: the next rows
#pragma unroll
            for (int k = 0; k < GD_ROUND; k++) {
                const int a = a0 + rl + k * rp;
                st[k] = in_state && a < F ? *(const float4 *)(Sh + (size_t)a * d + c0 + cq * 4)
                                          : make_float4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int k = 0; k < GD_ROUND; k++) {
            const int a = a0 + rl + k * rp;
            if (in_state && a < F) {
                const float4 sv = gd_update_row<G>(st[k], gamma, pk[a], v4, phis, F, a, group, acc);
                *(float4 *)(Sh + (size_t)a * d + c0 + cq * 4) = sv;
            }
        }
    }

    lz_trace_mark();
    // 7. numerators summed over the row lanes: warp shuffles (lanes of one column quad) where the
    // quads tile the warp, then one partial row per warp (or per row lane) in shared memory
    int red_row = rl;
    if (L.shfl) { // every thread is a row lane here (GD_THREADS is a multiple of qpr)
        gd_sum_over_warp<G>(acc, L.qpr);
        red_row = (tid & 31) < L.qpr ? tid >> 5 : -1;
    }
    if (in_state && red_row >= 0)
        gd_store_partial<G>(red, acc, red_row, group, cpb, cq);
    __syncthreads();
    gd_write_out<T>(p.out + ((size_t)row * p.Hq + s * group) * d + c0, d, red, L.nred, group, cpb, dens, p.normalize);
    lz_trace_mark();
    if constexpr (FUSED)
        __cluster_barrier_wait(); // no block leaves while a peer may still read its u
}

// The compile-time shape of the fused kernel: LZ_FIXED_HEAD_DIM, LZ_FIXED_GROUP (cuda_kernels.cuh) and the
// paper's 128 features; the features split evenly over the cluster.
enum { GD_SPEC_D = LZ_FIXED_HEAD_DIM, GD_SPEC_F = 128, GD_SPEC_GROUP = LZ_FIXED_GROUP };
static_assert(GD_SPEC_F % (gd_cluster_size(GD_SPEC_D) * 8) == 0, "the features of a block: whole 16-byte vectors");

template <typename T, bool FUSED> static const void *pick(int group, int d, int f) {
    if (FUSED && group == GD_SPEC_GROUP && d == GD_SPEC_D && f == GD_SPEC_F)
        return (const void *)gla_decode_split_kernel<T, true, GD_SPEC_GROUP, GD_SPEC_D, GD_SPEC_F>;
    if (group <= 2)
        return (const void *)gla_decode_split_kernel<T, FUSED, 2>;
    if (group <= 4)
        return (const void *)gla_decode_split_kernel<T, FUSED, 4>;
    if (group <= 8)
        return (const void *)gla_decode_split_kernel<T, FUSED, 8>;
    return (const void *)gla_decode_split_kernel<T, FUSED, 16>;
}

// Whether the split kernel takes this shape (else the caller uses the unsplit path).
template <typename T> bool gla_decode_split_fits(const lz_cuda_ctx *c, const lz_attn_dims *dims, bool fused) {
    const int d = dims->head_dim, f = dims->feature_dim, Hq = dims->n_heads, Hs = dims->n_state_heads;
    if (d % 4 != 0 || Hs <= 0 || Hq % Hs != 0 || Hq / Hs > 16 || dims->n_kv_heads <= 0 ||
        (Hs % dims->n_kv_heads != 0 && Hs != Hq) || f < 1)
        return false;
    const int C = gd_cluster_size(d);
    if (d / C / 4 > GD_THREADS)
        return false;
    const gd_layout L(Hq, Hs, d, f, C, vec16<T>::N, fused);
    return sizeof(float) * (size_t)L.total <= c->max_smem;
}

// The launch's shared memory: the layout's, or at steps of up to LIZARD_GLA_SPREAD sequences enough
// that no third block fits on an SM (the next multiple of 8 KiB above a third of the SM's).
// Why: launched early (PDL) behind the q/k/v GEMV, the kernel's blocks take SMs as the GEMV's blocks
// leave, and at one sequence its blocks would pile onto the first few SMs, sharing their issue slots
// and load bandwidth along their whole chain. At four sequences and more the spread costs more than
// it gains (docs/benchmarks.md).
static size_t gd_launch_smem(const lz_cuda_ctx *c, size_t need, int n_seqs) {
    if (n_seqs > c->gla_spread_max)
        return need;
    const size_t spread = (c->sm_smem / 3 + 1 + 8191) / 8192 * 8192;
    return spread > need && spread <= c->max_smem ? spread : need;
}

template <typename T, bool FUSED>
static lz_status launch(lz_cuda_ctx *c, const gd_params<T> &p, int n_seqs) {
    const int C = gd_cluster_size(p.d);
    const gd_layout L(p.Hq, p.Hs, p.d, p.f, C, vec16<T>::N, FUSED);
    cudaLaunchAttribute attr[2];
    const size_t smem = gd_launch_smem(c, sizeof(float) * (size_t)L.total, n_seqs);
    const cudaLaunchConfig_t cfg = lz_cluster_config(c, dim3((unsigned)C, (unsigned)p.Hs, (unsigned)n_seqs),
                                                     dim3(GD_THREADS, 1, 1), smem, (unsigned)C, attr);
    void *args[] = {(void *)&p};
    LZ_LAUNCH_TRY(cudaLaunchKernelExC(&cfg, pick<T, FUSED>(L.group, p.d, p.f), args), "gla decode (split)");
    LZ_LAUNCH_CHECK("gla decode (split)");
    return LZ_OK;
}

template <typename T>
lz_status gla_decode_split_forward(lz_cuda_ctx *c, T *out, const T *phi_q, const T *phi_k, const T *v,
                                   const T *log_gamma, lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb,
                                   const lz_attn_dims *dims) {
    gd_params<T> p = {};
    p.out = out, p.phi_q = phi_q, p.phi_k = phi_k, p.v = v, p.gate = log_gamma, p.S = st->S, p.z = st->z;
    p.start = b->start, p.slot = b->slot;
    p.Hq = dims->n_heads, p.Hkv = dims->n_kv_heads, p.Hs = dims->n_state_heads, p.d = dims->head_dim;
    p.f = dims->feature_dim, p.normalize = dims->gla_normalize;
    return launch<T, false>(c, p, hb->n_seqs);
}

template <typename T>
lz_status gla_decode_fused_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *gate_logit,
                                   const T *wq, int n_wq, const T *wk, int n_wk, bool exp_map, lz_layer_state *st,
                                   const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims) {
    gd_params<T> p = {};
    p.out = out, p.q = q, p.k = k, p.v = v, p.gate = gate_logit, p.wq = wq, p.wk = wk, p.n_wq = n_wq, p.n_wk = n_wk;
    p.S = st->S, p.z = st->z, p.start = b->start, p.slot = b->slot;
    p.Hq = dims->n_heads, p.Hkv = dims->n_kv_heads, p.Hs = dims->n_state_heads, p.d = dims->head_dim;
    p.f = dims->feature_dim, p.normalize = dims->gla_normalize, p.exp_map = exp_map;
    return launch<T, true>(c, p, hb->n_seqs);
}

template <typename T, bool FUSED> static lz_status set_smem(int max) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_split_kernel<T, FUSED, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_split_kernel<T, FUSED, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_split_kernel<T, FUSED, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_split_kernel<T, FUSED, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    return LZ_OK;
}

// Once per backend (not per launch, so that decode steps can be captured in graphs).
template <typename T> lz_status gla_decode_init(lz_cuda_ctx *c) {
    LZ_TRY((set_smem<T, false>((int)c->max_smem)));
    LZ_TRY((set_smem<T, true>((int)c->max_smem)));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_split_kernel<T, true, GD_SPEC_GROUP, GD_SPEC_D, GD_SPEC_F>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->max_smem));
    return gla_decode_stream_init<T>(c);
}

#define LZ_GLA_DECODE(T)                                                                                         \
    template bool gla_decode_split_fits<T>(const lz_cuda_ctx *, const lz_attn_dims *, bool);                     \
    template lz_status gla_decode_init<T>(lz_cuda_ctx *);                                                       \
    template lz_status gla_decode_split_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *, \
                                                   lz_layer_state *, const lz_cuda_batch *, const lz_batch *,     \
                                                   const lz_attn_dims *);                                         \
    template lz_status gla_decode_fused_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, const T *, \
                                                   const T *, int, const T *, int, bool, lz_layer_state *,        \
                                                   const lz_cuda_batch *, const lz_batch *, const lz_attn_dims *);
LZ_INSTANTIATE(LZ_GLA_DECODE)
