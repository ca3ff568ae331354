// trace.cuh - a timeline of a decode step written by the kernels themselves (cmake -DLIZARD_TRACE=ON;
// without it every call here compiles to nothing). Nsight Systems makes no reports on the GPU
// machines this project measures on, and batch 1's critical path runs through kernels that start
// early under PDL, so thread 0 of every block stamps %globaltimer where it enters and leaves
// griddepcontrol.wait (lz_pdl_wait) and, where a kernel calls lz_trace_mark, at that point. Each
// stamp names its call site (translation unit and line) and its launch (%gridid); trace.cu writes
// them to the file LIZARD_TRACE names when the backend is destroyed, and
// tests/bench/trace_summary.py turns them into a per-kernel timeline.
// The stamps cost time (each is an atomic round trip by thread 0: a traced step runs a few percent
// slower), and the marks inside the GLA kernel lengthen its chain, so a phase's length read from them
// is an upper bound.
#ifndef LZ_TRACE_CUH
#define LZ_TRACE_CUH

#include <stdint.h>

typedef struct {
    uint64_t grid, t0, t1; // t1: after the wait (= t0 for a mark)
    uint32_t block, n_blocks, tu_line, smid; // tu_line: translation unit << 16 | line
} lz_trace_rec;

// A ring of LZ_TRACE_SM_CAP records an SM (so that the atomic counters are contended only by the
// blocks of one SM): a batch-1 step of the 8B shape writes ~1,600 an SM.
typedef struct {
    lz_trace_rec *recs; // [LZ_TRACE_SMS][LZ_TRACE_SM_CAP]
    unsigned long long *count; // [LZ_TRACE_SMS] records written an SM
    uint32_t tu;
} lz_trace_target;

enum { LZ_TRACE_SMS = 256, LZ_TRACE_SM_CAP = 1 << 14 };

#ifdef LIZARD_TRACE
#include <cuda_runtime.h>

// Each translation unit has its own copy (no relocatable device code): trace.cu sets them all.
static __device__ lz_trace_target lz_trace_here;

__device__ __forceinline__ uint64_t lz_trace_now() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void lz_trace_write(uint64_t t0, uint64_t t1, int line) {
    if (threadIdx.x + threadIdx.y + threadIdx.z != 0 || !lz_trace_here.recs)
        return;
    uint64_t grid;
    uint32_t smid;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    const unsigned long long i = atomicAdd(lz_trace_here.count + smid % LZ_TRACE_SMS, 1ull) % LZ_TRACE_SM_CAP;
    lz_trace_rec r;
    r.grid = grid, r.t0 = t0, r.t1 = t1, r.smid = smid;
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.n_blocks = gridDim.x * gridDim.y * gridDim.z;
    r.tu_line = lz_trace_here.tu << 16 | (uint32_t)line;
    lz_trace_here.recs[(size_t)(smid % LZ_TRACE_SMS) * LZ_TRACE_SM_CAP + i] = r;
}

__device__ __forceinline__ void lz_trace_mark(int line = __builtin_LINE()) {
    const uint64_t t = lz_trace_now();
    lz_trace_write(t, t, line);
}

// Host: hand this translation unit's copy of lz_trace_here to trace.cu's registry.
typedef cudaError_t (*lz_trace_setter)(lz_trace_target);
int lz_trace_register(lz_trace_setter set, const char *file);
static cudaError_t lz_trace_set_here(lz_trace_target t) {
    return cudaMemcpyToSymbol(lz_trace_here, &t, sizeof t);
}
static const int lz_trace_tu = lz_trace_register(lz_trace_set_here, __BASE_FILE__);
#else
__device__ __forceinline__ void lz_trace_mark() {}
#endif

#endif
