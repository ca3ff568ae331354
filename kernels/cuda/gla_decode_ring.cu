// gla_decode_ring.cu - the state update of the streamed GLA decode (gla_decode_stream.cu's second
// launch) as a persistent kernel: one block an SM walks work items (value-column slice, state head,
// sequence: the stream kernel's blocks) with the next items' state slices already on their way into
// a ring of shared-memory stages (cp.async), so that the SM's reads never stop while it updates,
// stores and reduces the current slice.
// Why: the stream kernel loads its 64 KiB slice, then updates and stores it, then reduces, then
// exits; its reads come in bursts, and at 256 sequences of the 8B shape it moved its 512 MB (read +
// written) at 2.98 TB/s, 70% of the copy rate, with DRAM 63% busy and 65% of cycles without an
// eligible warp (Nsight Compute, session 14), the same with 2 or 3 blocks an SM.
// Per item, a stage holds the slice of S [F][cols] and the small arrays the update needs (the group's
// phi_q, phi_k, z after prep's update, the value columns, the gate logit, the item's row and slot), so
// that no load of the item waits on L2 while the block computes. The state's rows a thread copies
// are the rows it updates (no barrier between copy and use); the small arrays are shared, so an item
// starts at a barrier. The first stages' state slices are requested before the PDL wait (no earlier
// kernel writes S: see gla_decode_stream.cu), their small arrays after it.
#include <stdint.h> // uintptr_t

#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_cp_async16, lz_cp_async4, lz_log_sigmoid
#include "gla_decode_common.cuh" // gd_update_row, gd_denominators, gd_sum_over_warp, gd_store_partial, gd_write_out
#include "gla_decode_stream.cuh" // gs_params

enum {
    GR_THREADS = 256,
    GR_WARPS = GR_THREADS / 32,
    GR_MAX_STAGES = 4, // (items in flight: stages - 1)
};

// A stage's layout in bytes (every part a multiple of 16): S [F][cols] fp32, phi_q [group][F], phi_k
// [F], z [F], v [cols] of T, the gate logit's aligned 4 bytes, the item's row and slot.
struct gr_layout {
    int F, cols, group, v_bytes;
    __host__ __device__ size_t s_off() const { return 0; }
    __host__ __device__ size_t phiq_off() const { return (size_t)F * cols * 4; }
    __host__ __device__ size_t phik_off() const { return phiq_off() + (size_t)group * F * 4; }
    __host__ __device__ size_t z_off() const { return phik_off() + (size_t)F * 4; }
    __host__ __device__ size_t v_off() const { return z_off() + (size_t)F * 4; }
    __host__ __device__ size_t gate_off() const { return v_off() + (size_t)((v_bytes + 15) / 16 * 16); }
    __host__ __device__ size_t meta_off() const { return gate_off() + 16; }
    __host__ __device__ size_t stage_bytes() const { return meta_off() + 16; }
    // after the stages: the numerators' partial rows [warps][group][cols] and the denominators
    __host__ __device__ size_t fixed_bytes() const { return (size_t)GR_WARPS * group * cols * 4 + 16 * ((group + 3) / 4); }
};

// grid (blocks), block GR_THREADS; items it = blockIdx.x + j gridDim.x, it -> (column slice it % ncx,
// state head (it / ncx) % Hs, sequence it / (ncx Hs)). Thread: column quad cq, rows rl, rl + rp, ...
template <typename T, int G> __global__ void __launch_bounds__(GR_THREADS, 1) gla_decode_ring_kernel(gs_params<T> p, int stages) {
    extern __shared__ float4 gr_sm4[];
    unsigned char *sm = (unsigned char *)gr_sm4;
    const int cols = p.cols, d = p.d, F = 2 * p.f, group = p.Hq / p.Hs, ncx = d / cols;
    const gr_layout L = {F, cols, group, (int)(cols * sizeof(T))};
    const size_t stage_bytes = L.stage_bytes();
    float *red = (float *)(sm + stages * stage_bytes), *dens = red + (size_t)GR_WARPS * group * cols;
    const int qpr = cols / 4, rp = GR_THREADS / qpr, tid = threadIdx.x, cq = tid % qpr, rl = tid / qpr;
    const int n_items = ncx * p.Hs * p.n_seqs;
    // the state rows of item it (this thread's share) into stage `st`; row and slot are its sequence's
    auto copy_state = [&](int it, int st, int slot) {
        const int cx = it % ncx, s = (it / ncx) % p.Hs;
        const float *src = p.S + ((size_t)slot * p.Hs + s) * F * d + cx * cols + cq * 4;
        float *dst = (float *)(sm + st * stage_bytes + L.s_off()) + cq * 4;
        for (int a = rl; a < F; a += rp)
            lz_cp_async16(dst + (size_t)a * cols, src + (size_t)a * d);
    };
    // the item's small arrays (written by prep, so after the PDL wait), shared by the block's threads
    auto copy_small = [&](int it, int st, int row, int slot) {
        const int cx = it % ncx, s = (it / ncx) % p.Hs, q = it / (ncx * p.Hs);
        unsigned char *stage = sm + st * stage_bytes;
        const float *pq = p.phi_q + ((size_t)q * p.Hq + s * group) * F, *pk = p.phi_k + ((size_t)q * p.Hs + s) * F;
        const float *z = p.z + ((size_t)slot * p.Hs + s) * F;
        for (int e = tid * 4; e < group * F; e += GR_THREADS * 4)
            lz_cp_async16(stage + L.phiq_off() + e * 4, pq + e);
        for (int e = tid * 4; e < F; e += GR_THREADS * 4) {
            lz_cp_async16(stage + L.phik_off() + e * 4, pk + e);
            lz_cp_async16(stage + L.z_off() + e * 4, z + e);
        }
        const int vh = p.Hs == p.Hkv ? s : s / (p.Hq / p.Hkv);
        const T *v = p.v + ((size_t)row * p.Hkv + vh) * d + cx * cols;
        for (int e = tid * 16; e < cols * (int)sizeof(T); e += GR_THREADS * 16)
            lz_cp_async16(stage + L.v_off() + e, (const unsigned char *)v + e);
        if (tid == 0) { // the aligned 4 bytes holding the gate logit (bf16: it and its neighbour)
            const uintptr_t g = (uintptr_t)(p.gate + row);
            lz_cp_async4(stage + L.gate_off(), (const void *)(g & ~(uintptr_t)3));
            int *meta = (int *)(stage + L.meta_off());
            meta[0] = row, meta[1] = slot;
        }
    };
    auto seq_of = [&](int it) { return it / (ncx * p.Hs); };

    // prologue: items 0 .. stages - 2 of this block (the state before the wait, the rest after it)
    int it = blockIdx.x;
    for (int j = 0; j < stages - 1; j++) {
        const int ij = it + j * (int)gridDim.x;
        if (ij < n_items)
            copy_state(ij, j, p.slot[seq_of(ij)]); // (the step's arrays come from a copy before its first kernel)
    }
    lz_pdl_wait(); // prep's phi and z; q, k, v, gate from earlier kernels
    lz_pdl_launch_dependents();
    for (int j = 0; j < stages - 1; j++) {
        const int ij = it + j * (int)gridDim.x;
        if (ij < n_items)
            copy_small(ij, j, p.start[seq_of(ij)], p.slot[seq_of(ij)]);
    }
    lz_cp_async_commit();
    // the row and slot of the next item to request, loaded an item ahead of their use
    int next = it + (stages - 1) * (int)gridDim.x;
    int next_row = next < n_items ? p.start[seq_of(next)] : 0, next_slot = next < n_items ? p.slot[seq_of(next)] : 0;
    const int warp = tid >> 5, lane = tid & 31;
    for (int i = 0; it < n_items; i++, it += gridDim.x, next += gridDim.x) {
        lz_cp_async_wait_upto(min(i, stages - 2)); // (the prologue is one group, then one an item)
        __syncthreads(); // the item's small arrays; the stage refilled below is no longer read
        if (next < n_items) {
            const int st = (i + stages - 1) % stages;
            copy_state(next, st, next_slot);
            copy_small(next, st, next_row, next_slot);
        }
        lz_cp_async_commit(); // (empty at the end: one group an item keeps the count)
        const int after = next + (int)gridDim.x;
        if (after < n_items)
            next_row = p.start[seq_of(after)], next_slot = p.slot[seq_of(after)];

        const unsigned char *stage = sm + (i % stages) * stage_bytes;
        const float *Ss = (const float *)(stage + L.s_off()), *phis = (const float *)(stage + L.phiq_off());
        const float *pk = (const float *)(stage + L.phik_off()), *zs = (const float *)(stage + L.z_off());
        const T *vs = (const T *)(stage + L.v_off());
        const int row = ((const int *)(stage + L.meta_off()))[0], slot = ((const int *)(stage + L.meta_off()))[1];
        const int cx = it % ncx, s = (it / ncx) % p.Hs, c0 = cx * cols;
        const T *gate_word = (const T *)(stage + L.gate_off()); // (bf16: the logit is the word's upper half
        const int half = sizeof(T) == 2 ? (int)(((uintptr_t)(p.gate + row) >> 1) & 1) : 0; // at odd addresses)
        const float gate = lz_to_float(gate_word[half]);
        const float gamma = expf(lz_log_sigmoid(gate));
        if (p.normalize) // denominators phi_q_g . z_new
            gd_denominators(dens, phis, zs, F, group, warp, lane, GR_WARPS);
        float acc[G][4];
#pragma unroll
        for (int g = 0; g < G; g++)
            acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
        const float4 v4 = make_float4(lz_to_float(vs[cq * 4]), lz_to_float(vs[cq * 4 + 1]), lz_to_float(vs[cq * 4 + 2]),
                                      lz_to_float(vs[cq * 4 + 3]));
        float *Sh = p.S + ((size_t)slot * p.Hs + s) * F * d + c0 + cq * 4;
#pragma unroll 4
        for (int a = rl; a < F; a += rp) {
            const float4 st = *(const float4 *)(Ss + (size_t)a * cols + cq * 4);
            __stcs((float4 *)(Sh + (size_t)a * d), gd_update_row<G>(st, gamma, pk[a], v4, phis, F, a, group, acc));
        }
        gd_sum_over_warp<G>(acc, qpr);
        if (lane < qpr)
            gd_store_partial<G>(red, acc, warp, group, cols, cq);
        __syncthreads();
        gd_write_out<T>(p.out + ((size_t)row * p.Hq + s * group) * d + c0, d, red, GR_WARPS, group, cols, dens,
                        p.normalize);
    }
    lz_cp_async_wait<0>(); // (nothing left in flight at exit)
}

// Stages that fit beside the fixed part (at most GR_MAX_STAGES), for `cols` value columns an item.
template <typename T> static int ring_stages(const lz_cuda_ctx *c, int F, int cols, int group) {
    const gr_layout L = {F, cols, group, (int)(cols * sizeof(T))};
    if (L.fixed_bytes() >= c->max_smem)
        return 0;
    return (int)min((size_t)GR_MAX_STAGES, (c->max_smem - L.fixed_bytes()) / L.stage_bytes());
}

template <typename T> bool gla_decode_ring_fits(const lz_cuda_ctx *c, const gs_params<T> &p) {
    const int F = 2 * p.f, group = p.Hq / p.Hs;
    const uintptr_t align = (uintptr_t)p.S | (uintptr_t)p.z | (uintptr_t)p.phi_q | (uintptr_t)p.phi_k | (uintptr_t)p.v;
    if (!c->gla_ring || p.cols < 4 || GR_THREADS % (p.cols / 4) != 0 || F % 4 != 0 || p.d % 4 != 0 ||
        (p.cols * sizeof(T)) % 16 != 0 || (p.d * sizeof(T)) % 16 != 0 || (align & 15) != 0 ||
        ((uintptr_t)p.gate & (sizeof(T) - 1)) != 0)
        return false;
    return ring_stages<T>(c, F, p.cols, group) >= 3;
}

template <typename T, int G> static lz_status launch_ring(lz_cuda_ctx *c, const gs_params<T> &p) {
    const int F = 2 * p.f, group = p.Hq / p.Hs, stages = ring_stages<T>(c, F, p.cols, group);
    const gr_layout L = {F, p.cols, group, (int)(p.cols * sizeof(T))};
    const size_t smem = stages * L.stage_bytes() + L.fixed_bytes();
    const int items = (p.d / p.cols) * p.Hs * p.n_seqs;
    const int blocks = min(items, c->gla_ring_blocks > 0 ? c->gla_ring_blocks : c->n_sms);
    return lz_launch(c, "gla decode (ring)", gla_decode_ring_kernel<T, G>, dim3((unsigned)blocks), dim3(GR_THREADS),
                     smem, p, stages);
}

template <typename T> lz_status gla_decode_ring(lz_cuda_ctx *c, const gs_params<T> &p) {
    const int group = p.Hq / p.Hs;
    if (group == 1)
        return launch_ring<T, 1>(c, p);
    if (group == 2)
        return launch_ring<T, 2>(c, p);
    if (group <= 4)
        return launch_ring<T, 4>(c, p);
    if (group <= 8)
        return launch_ring<T, 8>(c, p);
    return launch_ring<T, 16>(c, p);
}

template <typename T> lz_status gla_decode_ring_init(lz_cuda_ctx *c) {
    const int max = (int)c->max_smem;
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_ring_kernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_ring_kernel<T, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_ring_kernel<T, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_ring_kernel<T, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_ring_kernel<T, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, max));
    return LZ_OK;
}

#define LZ_GLA_DECODE_RING(T)                                                                                     \
    template bool gla_decode_ring_fits<T>(const lz_cuda_ctx *, const gs_params<T> &);                            \
    template lz_status gla_decode_ring<T>(lz_cuda_ctx *, const gs_params<T> &);                                  \
    template lz_status gla_decode_ring_init<T>(lz_cuda_ctx *);
LZ_INSTANTIATE(LZ_GLA_DECODE_RING)
