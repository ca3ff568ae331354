// wgmma.cuh - Hopper's warpgroup matrix instructions (sm_90a only): a warpgroup of 4
// consecutive warps issues an m64nNk16 product whose B operand (and A, or A from
// registers) the tensor cores read from shared memory themselves, asynchronously, through a
// 64-bit descriptor. On any other target the helpers trap: callers check lz_wgmma_built()
// (and the device) before they launch a kernel that uses them.
#ifndef LZ_WGMMA_CUH
#define LZ_WGMMA_CUH

#include <stdint.h> // uint32_t, uint64_t

#include "ptx.cuh" // lz_fence_proxy_async

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LZ_WGMMA_UNAVAILABLE 1 // a device pass for another target: the helpers compile to a trap
#endif

// Whether this build carries sm_90a code (CMake defines LIZARD_SM90A when CMAKE_CUDA_ARCHITECTURES names 90a).
static inline bool lz_wgmma_built() {
#ifdef LIZARD_SM90A
    return true;
#else
    return false;
#endif
}

// The descriptor of an operand tile in the 128-byte swizzle: rows of 128 bytes (64 bf16), 8-row
// groups of 1024 bytes, a group's 16-byte units XOR-ed with the row's index in it; the group
// must start 1024-byte aligned. Both offsets are 1024 bytes: for a K-major operand the stride
// between 8-row groups; for an MN-major one that spans a single 64-column group, the stride
// between 8-row groups along K (so the operand's other offset, never used, may take any value).
// Fields in 16-byte units: start 0-13, leading offset 16-29, stride offset 32-45, swizzle
// mode 1 (128 bytes) in bits 62-63.
__device__ __forceinline__ uint64_t lz_wgmma_desc(uint32_t smem_addr) {
    const uint64_t off = 1024 >> 4;
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | off << 16 | off << 32 | 1ull << 62;
}

// Orders this thread's register writes (accumulators, A fragments) before the next wgmma reads them.
__device__ __forceinline__ void lz_wgmma_fence() {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void lz_wgmma_commit() {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Until at most N of this warpgroup's committed groups are still running.
template <int N> __device__ __forceinline__ void lz_wgmma_wait() {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// (Shared memory written by ordinary stores or cp.async that wgmma reads next: lz_fence_proxy_async,
// ptx.cuh, in each writing thread after its writes land, before the barrier.)

// d[64 x 64] += A[64 x 16] B[16 x 64], bf16 in, fp32 accumulators (32 a thread, in the m16n8
// layout: warp w of the warpgroup holds rows 16 w .. 16 w + 15); A and B K-major in shared memory.
__device__ __forceinline__ void lz_wgmma_64x64_ss(float *d, uint64_t a_desc, uint64_t b_desc) {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(1));
#else
    __trap();
#endif
}

// The same with A from registers (the m16n8k16 A fragment of each warp's 16 rows) and B in shared
// memory MN-major (its rows run along K: the transpose bit set).
__device__ __forceinline__ void lz_wgmma_64x64_rs_bt(float *d, const uint32_t (&a)[4], uint64_t b_desc) {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
#else
    __trap();
#endif
}

#endif
