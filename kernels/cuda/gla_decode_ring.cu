// gla_decode_ring.cu - the state update of the streamed GLA decode (gla_decode_stream.cu's second
// launch) as a persistent kernel: one block an SM walks work items (value-column slice, state head,
// sequence: the stream kernel's blocks) with the next items' state slices already on their way into
// a ring of shared-memory stages, so that the SM's reads never stop while it updates, stores and
// reduces the current slice. A producer warp fills the stages (the copy engine: tensor copies of the
// state slice, bulk copies of the small arrays; full and empty mbarriers a stage), eight consumer
// warps update.
// Why: the stream kernel loads its 64 KiB slice, then updates and stores it, then reduces, then
// exits; its reads come in bursts, well below the copy rate.
// Per item, a stage holds the slice of S [F][cols] and the small arrays the update needs (the group's
// phi_q, phi_k, z after prep's update, the value columns; the gate logit, row and slot as indices).
// The first stages' state slices are requested before the PDL wait (no earlier kernel writes S: see
// gla_decode_stream.cu), their small arrays after it.
// The producer warp issues every copy (cp.async from all threads spent their issue slots on the
// copies' address arithmetic); a thread's rows go in quads (a quad's phi_q and phi_k in one 16-byte
// load each); the numerators meet by a barrier, not by shared-memory atomicAdd (a compare-and-swap
// loop). docs/benchmarks.md has the versions measured.
#include <stdint.h> // uintptr_t

#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_mbar_*, lz_stage_slot, lz_tma_load_3d, lz_bulk_load, lz_bar_sync, lz_log_sigmoid
#include "tensor_map.cuh" // lz_tensor_map_encoder_for
#include "gla_decode_common.cuh" // gd_denominators, gd_sum_over_warp, gd_store_partial, gd_write_out
#include "gla_decode_stream.cuh" // gs_params

enum {
    GR_CONSUMERS = 256, // 8 warps update an item; one more warp fills the stages
    GR_WARPS = GR_CONSUMERS / 32,
    GR_THREADS = GR_CONSUMERS + 32,
    GR_MAX_STAGES = 4,
    GR_BOX_ROWS = 256, // the copy engine's boxes: at most 256 rows
};

// A stage's layout in bytes (every part a multiple of 16, as the copy engine wants): S [F][cols] fp32,
// phi_q [group][F], phi_k [F], z [F], v [cols] of T, the item's indices.
struct gr_layout {
    int F, cols, group, v_bytes;
    __host__ __device__ size_t s_off() const { return 0; }
    __host__ __device__ size_t phiq_off() const { return (size_t)F * cols * 4; }
    __host__ __device__ size_t phik_off() const { return phiq_off() + (size_t)group * F * 4; }
    __host__ __device__ size_t z_off() const { return phik_off() + (size_t)F * 4; }
    __host__ __device__ size_t v_off() const { return z_off() + (size_t)F * 4; }
    __host__ __device__ size_t meta_off() const { return v_off() + (size_t)((v_bytes + 15) / 16 * 16); }
    __host__ __device__ size_t stage_bytes() const { return (meta_off() + 16 + 127) / 128 * 128; }
    // after the stages: the numerators' partial rows [warps][group][cols], two buffers of the
    // denominators [16], the stages' full and empty mbarriers
    __host__ __device__ size_t red_floats() const { return (size_t)GR_WARPS * group * cols + 2 * 16; }
    __host__ __device__ size_t fixed_bytes() const { return red_floats() * 4 + 2 * 8 * GR_MAX_STAGES; }
};

// The item's indices in a stage (written by the producer before it arrives on the stage's barrier)
struct gr_meta {
    int row, slot;
    float gate;
};

// grid (blocks), block GR_THREADS; items it = blockIdx.x + j gridDim.x, it -> (column slice it % ncx,
// state head (it / ncx) % Hs, sequence it / (ncx Hs)), item j of a block in stage j % stages. The last
// warp's first lane runs ahead of the consumers: it waits until a stage is given back (its empty
// barrier: every consumer warp arrives once it has read the stage), writes the next item's indices and
// gate logit into it and has the copy engine fill it (S's slice by tensor copies of up to 256 rows,
// the small arrays by bulk copies), completing on the stage's full barrier. So no consumer thread
// issues a copy or waits on an index load. Consumer thread: column quad cq, row quads 4 rl, 4 (rl +
// rp), ... (a quad's phi_q and phi_k in one load each). The warps' partial numerators meet in shared
// memory between two barriers (one buffer: two would leave room for two stages only); the stage is
// given back before them, and the denominators are double-buffered.
template <typename T, int G>
__global__ void __launch_bounds__(GR_THREADS, 1)
    gla_decode_ring_kernel(const __grid_constant__ CUtensorMap ts, gs_params<T> p, int stages) {
    extern __shared__ __align__(128) unsigned char gr_sm[];
    // (the copy engine's tensor copies want 128-byte aligned destinations; offsets from the array
    // itself, so that the compiler emits shared-memory instructions)
    unsigned char *sm = gr_sm + ((128u - (lz_smem_u32(gr_sm) & 127u)) & 127u);
    const int cols = p.cols, d = p.d, F = 2 * p.f, ncx = d / cols;
    const gr_layout L = {F, cols, G, (int)(cols * sizeof(T))};
    const size_t stage_bytes = L.stage_bytes();
    float *red = (float *)(sm + stages * stage_bytes), *dens2 = red + GR_WARPS * G * cols; // dens2: [2][16]
    uint64_t *full = (uint64_t *)(red + L.red_floats()), *empty = full + GR_MAX_STAGES;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int n_items = ncx * p.Hs * p.n_seqs;
    if (tid == 0)
        lz_stage_ring_init(full, empty, stages, GR_WARPS);
    __syncthreads();

    if (warp == GR_WARPS) { // the producer
        if (lane != 0) {
            lz_pdl_wait(), lz_pdl_launch_dependents();
            return;
        }
        const int box_rows = F < GR_BOX_ROWS ? F : GR_BOX_ROWS;
        const unsigned s_bytes = (unsigned)(F * cols * 4), small_bytes = (unsigned)((G + 2) * F * 4 + cols * sizeof(T));
        const auto seq_of = [&](int it) { return it / (ncx * p.Hs); };
        // its S slice (no earlier kernel of the step writes S) by tensor copies of up to 256 rows
        auto load_state = [&](int st, int it, int slot) {
            const int cx = it % ncx, s = (it / ncx) % p.Hs;
            for (int r0 = 0; r0 < F; r0 += box_rows)
                lz_tma_load_3d(sm + st * stage_bytes + L.s_off() + (size_t)r0 * cols * 4, &ts, cx * cols, r0,
                               slot * p.Hs + s, &full[st]);
        };
        // its small arrays (written by prep and earlier kernels of the step: after the PDL wait)
        auto load_small = [&](int st, int it, int row, int slot) {
            unsigned char *stage = sm + st * stage_bytes;
            const int cx = it % ncx, s = (it / ncx) % p.Hs, q = it / (ncx * p.Hs);
            lz_bulk_load(stage + L.phiq_off(), p.phi_q + ((size_t)q * p.Hq + s * G) * F, G * F * 4, &full[st]);
            lz_bulk_load(stage + L.phik_off(), p.phi_k + ((size_t)q * p.Hs + s) * F, F * 4, &full[st]);
            lz_bulk_load(stage + L.z_off(), p.z + ((size_t)slot * p.Hs + s) * F, F * 4, &full[st]);
            const int vh = p.Hs == p.Hkv ? s : s / (p.Hq / p.Hkv);
            lz_bulk_load(stage + L.v_off(), p.v + ((size_t)row * p.Hkv + vh) * d + cx * cols, cols * sizeof(T), &full[st]);
        };
        // the first stages' S slices before the wait; the arrival (after the gate logit, which the
        // barrier's release then publishes) and the small arrays after it
        int i = 0;
        for (int it = blockIdx.x; i < stages && it < n_items; i++, it += gridDim.x) {
            gr_meta *m = (gr_meta *)(sm + i * stage_bytes + L.meta_off());
            m->row = p.start[seq_of(it)], m->slot = p.slot[seq_of(it)];
            lz_mbar_expect_tx(&full[i], s_bytes);
            load_state(i, it, m->slot);
        }
        lz_pdl_wait(); // prep's phi and z; v and the gate from earlier kernels
        lz_pdl_launch_dependents();
        for (int j = 0, it = blockIdx.x; j < i; j++, it += gridDim.x) {
            gr_meta *m = (gr_meta *)(sm + j * stage_bytes + L.meta_off());
            m->gate = lz_to_float(p.gate[m->row]);
            lz_mbar_arrive_expect_tx(&full[j], small_bytes);
            load_small(j, it, m->row, m->slot);
        }
        lz_stage_slot ring = {i % stages, (unsigned)(i / stages) & 1u};
        for (int it = blockIdx.x + i * gridDim.x; it < n_items; it += gridDim.x) {
            const int row = p.start[seq_of(it)], slot = p.slot[seq_of(it)];
            const float gate = lz_to_float(p.gate[row]);
            lz_mbar_wait(&empty[ring.st], ring.parity ^ 1u); // the consumers are done with the stage
            *(gr_meta *)(sm + ring.st * stage_bytes + L.meta_off()) = {row, slot, gate};
            lz_mbar_arrive_expect_tx(&full[ring.st], s_bytes + small_bytes); // (release: the indices)
            load_state(ring.st, it, slot);
            load_small(ring.st, it, row, slot);
            ring.advance(stages);
        }
        return;
    }

    lz_pdl_wait(); // (out is written below; S's rows are stored to global)
    lz_pdl_launch_dependents();
    const int qpr = cols / 4, rp = GR_CONSUMERS / qpr, cq = tid % qpr, rl = tid / qpr;
    lz_stage_slot ring = {0, 0u};
    unsigned buf = 0;
    for (int it = blockIdx.x; it < n_items; it += gridDim.x, buf ^= 1u) {
        lz_mbar_wait(&full[ring.st], ring.parity);
        const unsigned char *stage = sm + ring.st * stage_bytes;
        const float *Ss = (const float *)(stage + L.s_off()), *phis = (const float *)(stage + L.phiq_off());
        const float *pk = (const float *)(stage + L.phik_off()), *zs = (const float *)(stage + L.z_off());
        const T *vs = (const T *)(stage + L.v_off());
        const gr_meta meta = *(const gr_meta *)(stage + L.meta_off());
        const int cx = it % ncx, s = (it / ncx) % p.Hs, c0 = cx * cols;
        float *dens = dens2 + buf * 16;
        const float gamma = expf(lz_log_sigmoid(meta.gate));
        if (p.normalize) // denominators phi_q_g . z_new
            gd_denominators(dens, phis, zs, F, G, warp, lane, GR_WARPS);
        float acc[G][4];
#pragma unroll
        for (int g = 0; g < G; g++)
            acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
        const float4 v4 = make_float4(lz_to_float(vs[cq * 4]), lz_to_float(vs[cq * 4 + 1]), lz_to_float(vs[cq * 4 + 2]),
                                      lz_to_float(vs[cq * 4 + 3]));
        float *Sh = p.S + ((size_t)meta.slot * p.Hs + s) * F * d + c0 + cq * 4;
        // rows a .. a + 3: S_new = gamma S + phi_k[a] v (stored), its share phi_q_g[a] S_new of each numerator
#pragma unroll 2
        for (int a = 4 * rl; a < F; a += 4 * rp) {
            const float4 k4 = *(const float4 *)(pk + a);
            const float kr[4] = {k4.x, k4.y, k4.z, k4.w};
            float4 sv[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float4 sj = *(const float4 *)(Ss + (size_t)(a + j) * cols + cq * 4);
                sv[j] = make_float4(gamma * sj.x + kr[j] * v4.x, gamma * sj.y + kr[j] * v4.y,
                                    gamma * sj.z + kr[j] * v4.z, gamma * sj.w + kr[j] * v4.w);
                __stcs((float4 *)(Sh + (size_t)(a + j) * d), sv[j]);
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float4 w4 = *(const float4 *)(phis + g * F + a);
                const float wr[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc[g][0] += wr[j] * sv[j].x, acc[g][1] += wr[j] * sv[j].y;
                    acc[g][2] += wr[j] * sv[j].z, acc[g][3] += wr[j] * sv[j].w;
                }
            }
        }
        __syncwarp();
        if (lane == 0)
            lz_mbar_arrive(&empty[ring.st]); // (release: this warp's reads of the stage are done)
        gd_sum_over_warp<G>(acc, qpr);
        lz_bar_sync<1>(GR_CONSUMERS); // every thread has written out the previous item: the partial rows are free
        if (lane < qpr)
            gd_store_partial<G>(red, acc, warp, G, cols, cq);
        lz_bar_sync<1>(GR_CONSUMERS); // the partial rows and denominators complete
        gd_write_out<T>(p.out + ((size_t)meta.row * p.Hq + s * G) * d + c0, d, red, GR_WARPS, G, cols, dens,
                        p.normalize, GR_CONSUMERS);
        ring.advance(stages);
    }
}

// The driver's tensor-map encoder; NULL where unavailable or the kernels were built for an older target.
static PFN_cuTensorMapEncodeTiled_v12000 gr_encode;

// S [slots][Hs][F][d] fp32 as a 3-d tensor (d innermost, then F, then slot * Hs + head) of boxes
// [rows][cols]. The third extent is a bound no slot reaches (the map is recorded into graphs).
static bool gr_map(CUtensorMap *map, const float *S, int d, int F, int cols) {
    const cuuint64_t dims[3] = {(cuuint64_t)d, (cuuint64_t)F, (cuuint64_t)1 << 30};
    const cuuint64_t strides[2] = {(cuuint64_t)d * 4, (cuuint64_t)F * d * 4};
    const cuuint32_t box[3] = {(cuuint32_t)cols, (cuuint32_t)(F < GR_BOX_ROWS ? F : GR_BOX_ROWS), 1},
                     elem[3] = {1, 1, 1};
    return gr_encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)S, dims, strides, box, elem,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Stages that fit beside the fixed part (at most GR_MAX_STAGES), for `cols` value columns an item.
template <typename T> static int ring_stages(const lz_cuda_ctx *c, int F, int cols, int group) {
    const gr_layout L = {F, cols, group, (int)(cols * sizeof(T))};
    if (128 + L.fixed_bytes() >= c->max_smem)
        return 0;
    return (int)min((size_t)GR_MAX_STAGES, (c->max_smem - 128 - L.fixed_bytes()) / L.stage_bytes());
}

template <typename T> bool gla_decode_ring_fits(const lz_cuda_ctx *c, const gs_params<T> &p) {
    const int F = 2 * p.f, group = p.Hq / p.Hs;
    const uintptr_t align = (uintptr_t)p.S | (uintptr_t)p.z | (uintptr_t)p.phi_q | (uintptr_t)p.phi_k | (uintptr_t)p.v;
    // (a group of 1, 2, 4, 8 or 16 query heads a state head: the kernel's G is the group itself;
    // the copy engine's boxes: whole 16-byte rows, at most 256 of them or a multiple of 256)
    if (!gr_encode || (group & (group - 1)) != 0 || group > 16 || p.cols < 4 || p.cols > 256 ||
        GR_CONSUMERS % (p.cols / 4) != 0 || F % 4 != 0 || (F > GR_BOX_ROWS && F % GR_BOX_ROWS != 0) ||
        p.d % 4 != 0 || (p.cols * sizeof(T)) % 16 != 0 || (p.d * sizeof(T)) % 16 != 0 || (align & 15) != 0)
        return false;
    return ring_stages<T>(c, F, p.cols, group) >= 3;
}

template <typename T, int G> static lz_status launch_ring(lz_cuda_ctx *c, const gs_params<T> &p) {
    const int F = 2 * p.f, stages = ring_stages<T>(c, F, p.cols, G);
    const gr_layout L = {F, p.cols, G, (int)(p.cols * sizeof(T))};
    const size_t smem = 128 + stages * L.stage_bytes() + L.fixed_bytes();
    const int items = (p.d / p.cols) * p.Hs * p.n_seqs;
    const int blocks = min(items, c->gla_ring_blocks > 0 ? c->gla_ring_blocks : c->n_sms);
    CUtensorMap ts;
    if (!gr_map(&ts, p.S, p.d, F, p.cols))
        return lz_fail(LZ_ERR_INTERNAL, "gla decode (ring): cuTensorMapEncodeTiled failed (d %d, F %d, cols %d)", p.d,
                       F, p.cols);
    return lz_launch(c, "gla decode (ring)", gla_decode_ring_kernel<T, G>, dim3((unsigned)blocks),
                     dim3(GR_THREADS), smem, ts, p, stages);
}

template <typename T> lz_status gla_decode_ring(lz_cuda_ctx *c, const gs_params<T> &p) {
    switch (p.Hq / p.Hs) {
    case 1: return launch_ring<T, 1>(c, p);
    case 2: return launch_ring<T, 2>(c, p);
    case 4: return launch_ring<T, 4>(c, p);
    case 8: return launch_ring<T, 8>(c, p);
    default: return launch_ring<T, 16>(c, p);
    }
}

template <typename T, int G> static lz_status gr_init_one(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_ring_kernel<T, G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return LZ_OK;
}

template <typename T> lz_status gla_decode_ring_init(lz_cuda_ctx *c) {
    LZ_TRY((gr_init_one<T, 1>(c)));
    LZ_TRY((gr_init_one<T, 2>(c)));
    LZ_TRY((gr_init_one<T, 4>(c)));
    LZ_TRY((gr_init_one<T, 8>(c)));
    LZ_TRY((gr_init_one<T, 16>(c)));
    return lz_tensor_map_encoder_for((const void *)gla_decode_ring_kernel<T, 4>, &gr_encode);
}

#define LZ_GLA_DECODE_RING(T)                                                                                     \
    template bool gla_decode_ring_fits<T>(const lz_cuda_ctx *, const gs_params<T> &);                            \
    template lz_status gla_decode_ring<T>(lz_cuda_ctx *, const gs_params<T> &);                                  \
    template lz_status gla_decode_ring_init<T>(lz_cuda_ctx *);
LZ_INSTANTIATE(LZ_GLA_DECODE_RING)
