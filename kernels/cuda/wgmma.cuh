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

// The same with the leading offset given: for an MN-major operand whose N spans more than one
// 64-column group, the bytes between those groups.
__device__ __forceinline__ uint64_t lz_wgmma_desc_lbo(uint32_t smem_addr, uint32_t lbo_bytes) {
    return (lz_wgmma_desc(smem_addr) & ~(0x3FFFull << 16)) | (uint64_t)((lbo_bytes >> 4) & 0x3FFF) << 16;
}

// A warp-specialised kernel's register split (sm_90a): every warp of a warpgroup gives back registers
// down to N a thread, or waits until it can take them up to N. Only when the kernel has a register cap
// at entry (__launch_bounds__(threads, 1)) and each role is one branch of an if/else.
template <int N> __device__ __forceinline__ void lz_setmaxnreg_dec() {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void lz_setmaxnreg_inc() {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
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
// Pins accumulator registers at this point of the program: the compiler sees them as produced by the
// asm instruction the wgmma is, not by the wait, so without this it may move their reads above the
// wait (or the registers' writes below an issue).
template <int N> __device__ __forceinline__ void lz_wgmma_fence_regs(float (&r)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; n++)
        asm volatile("" : "+f"(r[n][0]), "+f"(r[n][1]), "+f"(r[n][2]), "+f"(r[n][3])::"memory");
}
// Until at most N of this warpgroup's committed groups are still running.
template <int N> __device__ __forceinline__ void lz_wgmma_wait() {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// (Shared memory written by ordinary stores or cp.async that wgmma reads next: lz_fence_proxy_async,
// ptx.cuh, in each writing thread after its writes land, before the barrier.)

// The 64 accumulators of an m64n128 product (a thread's 16 m16n8 tiles of 4), as asm operands.
#define LZ_WGMMA_D64(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d[64 x 128] (+)= A[64 x 16] B[16 x 128]: A and B K-major in shared memory (B's 128 rows 1024 bytes an
// 8-row group apart); accumulate 0 overwrites d (the first k-step of a product).
__device__ __forceinline__ void lz_wgmma_64x128_ss(float *d, uint64_t a_desc, uint64_t b_desc, int accumulate) {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : LZ_WGMMA_D64(d)
                 : "l"(a_desc), "l"(b_desc), "r"(accumulate));
#else
    __trap();
#endif
}

// d[64 x 128] += A[64 x 16] B[16 x 128], A from registers (each warp's m16n8k16 A fragment), B MN-major
// in shared memory (rows along K; its two 64-column groups the descriptor's leading offset apart).
__device__ __forceinline__ void lz_wgmma_64x128_rs_bt(float *d, const uint32_t (&a)[4], uint64_t b_desc) {
#ifndef LZ_WGMMA_UNAVAILABLE
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : LZ_WGMMA_D64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
#else
    __trap();
#endif
}

#endif
