// ptx.cuh - the PTX the tensor-core and streaming kernels share: asynchronous copies to shared
// memory (cp.async), ldmatrix, the bf16 m16n8k16 mma, exp2 in one MUFU instruction, and the small
// scalar helpers around them. One definition each (they had been written out in six files).
#ifndef LZ_PTX_CUH
#define LZ_PTX_CUH

#include <cuda_bf16.h> // __nv_bfloat162
#include <stdint.h>    // uint32_t

__device__ __forceinline__ uint32_t lz_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, bypassing L1; `valid` false writes zeros (and reads nothing).
__device__ __forceinline__ void lz_cp_async16(uint32_t dst, const void *src, bool valid = true) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void lz_cp_async16(void *dst, const void *src, bool valid = true) {
    lz_cp_async16(lz_smem_u32(dst), src, valid);
}
// 4 bytes global -> shared (through L1: cp.async.cg takes 16-byte copies only).
__device__ __forceinline__ void lz_cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(lz_smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void lz_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void lz_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// mbarriers and the copy engine's tensor copies (sm_90; a device pass for an older target compiles
// them to a trap, and their kernels check the code's version before they launch): a barrier counts
// `count` arrivals and the bytes it was told to expect; a phase completes when both reach zero.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define LZ_SM90_ASM(...) __trap()
#else
#define LZ_SM90_ASM(...) asm volatile(__VA_ARGS__)
#endif
__device__ __forceinline__ void lz_mbar_init(uint64_t *bar, unsigned count) {
    LZ_SM90_ASM("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(lz_smem_u32(bar)), "r"(count) : "memory");
}
// One arrival that also adds `bytes` to the phase's expected transaction count.
__device__ __forceinline__ void lz_mbar_arrive_expect_tx(uint64_t *bar, unsigned bytes) {
    LZ_SM90_ASM("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(lz_smem_u32(bar)), "r"(bytes) : "memory");
}
// Adds `bytes` to the phase's expected transaction count without arriving (the arrival comes later).
__device__ __forceinline__ void lz_mbar_expect_tx(uint64_t *bar, unsigned bytes) {
    LZ_SM90_ASM("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(lz_smem_u32(bar)), "r"(bytes) : "memory");
}
// Until the phase of parity `parity` has completed (its writes visible to this thread).
__device__ __forceinline__ void lz_mbar_wait(uint64_t *bar, unsigned parity) {
    LZ_SM90_ASM("{\n"
                ".reg .pred done;\n"
                "WAIT_%=:\n"
                "mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n"
                "@!done bra WAIT_%=;\n"
                "}\n" ::"r"(lz_smem_u32(bar)),
                "r"(parity)
                : "memory");
}
// A ring of `stages` stages each guarded by mbarriers: the current stage and the parity of its current
// use (the phase a wait on its barrier names), advanced one stage at a time.
struct lz_stage_slot {
    int st;
    unsigned parity;
    __device__ void advance(int stages) {
        if (++st == stages)
            st = 0, parity ^= 1u;
    }
};
// One arrival (release: this thread's earlier shared-memory accesses are done before the phase can
// complete), e.g. a consumer giving a stage back to the thread that refills it.
__device__ __forceinline__ void lz_mbar_arrive(uint64_t *bar) {
    LZ_SM90_ASM("mbarrier.arrive.shared.b64 _, [%0];\n" ::"r"(lz_smem_u32(bar)) : "memory");
}
// Orders this thread's generic-proxy shared-memory accesses (ordinary stores, cp.async) before later
// async-proxy ones (wgmma's reads, the copy engine's writes), and a barrier's initialisation before
// the copy engine signals it: in each writing thread, before the barrier.
__device__ __forceinline__ void lz_fence_proxy_async() { LZ_SM90_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// One thread's set-up of a ring of stages (lz_stage_slot): each stage's full barrier completed by one
// arrival (the producer's, with the copies' bytes), its empty barrier by `consumers` (each consumer
// warp giving it back); then the fence that orders the initialisations before the copy engine signals
// the barriers.
__device__ __forceinline__ void lz_stage_ring_init(uint64_t *full, uint64_t *empty, int stages, unsigned consumers) {
    for (int j = 0; j < stages; j++) {
        lz_mbar_init(&full[j], 1);
        lz_mbar_init(&empty[j], consumers);
    }
    lz_fence_proxy_async();
}
// A box of a 4-d tensor (map: a __grid_constant__ CUtensorMap) at coordinates c0..c3 (innermost
// first) into shared memory at dst, completing on bar.
__device__ __forceinline__ void lz_tma_load_4d(void *dst, const void *map, int c0, int c1, int c2, int c3, uint64_t *bar) {
    LZ_SM90_ASM("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                "%3, %4, %5}], [%6];\n" ::"r"(lz_smem_u32(dst)),
                "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(lz_smem_u32(bar))
                : "memory");
}
// A box of a 3-d tensor, the same way.
__device__ __forceinline__ void lz_tma_load_3d(void *dst, const void *map, int c0, int c1, int c2, uint64_t *bar) {
    LZ_SM90_ASM("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                "%3, %4}], [%5];\n" ::"r"(lz_smem_u32(dst)),
                "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(lz_smem_u32(bar))
                : "memory");
}
// A tensor map's descriptor into the copy engine's cache ahead of its first copy.
__device__ __forceinline__ void lz_prefetch_tensor_map(const void *map) {
    LZ_SM90_ASM("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
// `bytes` contiguous bytes (16-byte aligned, a multiple of 16) into L2 by the copy engine, nothing
// waiting for them; before sm_90 nothing.
__device__ __forceinline__ void lz_prefetch_l2(const void *p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}
// `bytes` contiguous bytes global -> shared by the copy engine, completing on bar (dst, src and bytes
// multiples of 16).
__device__ __forceinline__ void lz_bulk_load(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    LZ_SM90_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                    lz_smem_u32(dst)),
                "l"(src), "r"(bytes), "r"(lz_smem_u32(bar))
                : "memory");
}

// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void lz_ldsm_x4(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
// The same, each matrix transposed on the way.
__device__ __forceinline__ void lz_ldsm_x4_trans(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// c += a b: a 16x16 (row), b 16x8 (col), c 16x8 fp32. Lane l holds c rows l/4 (c[0..1])
// and l/4 + 8 (c[2..3]), columns 2 (l % 4) + {0, 1}; a the same rows, columns
// 2 (l % 4) + {0, 1} (a[0], a[1]) and + 8 (a[2], a[3]).
__device__ __forceinline__ void lz_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Named barriers (0 is __syncthreads'; the id a constant, so that the kernel reserves no more
// barriers than it names): sync waits until `count` threads have arrived at barrier ID, counting
// itself; arrive counts this thread and goes on. count: a multiple of 32.
template <int ID> __device__ __forceinline__ void lz_bar_sync(int count) {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "r"(count) : "memory");
}
template <int ID> __device__ __forceinline__ void lz_bar_arrive(int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "r"(count) : "memory");
}

// The same with the id in a register (a warp-uniform value: which of two roles the warp has), for
// code that must not branch around the barrier.
__device__ __forceinline__ void lz_bar_sync_id(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void lz_bar_arrive_id(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// 2^x in one MUFU instruction (exp2f adds a denormal-range fix-up); 2^-inf = 0.
__device__ __forceinline__ float lz_fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats as a bf16 pair: lo (the lower column) in the low half.
__device__ __forceinline__ uint32_t lz_pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}

// log(sigmoid(v)) without overflow for either sign: the Lizard gate's log decay.
__device__ __forceinline__ float lz_log_sigmoid(float v) { return v >= 0.0f ? -log1pf(expf(-v)) : v - log1pf(expf(v)); }

#endif
