// pdl.cuh - programmatic dependent launch (Hopper): a decode step is hundreds of small
// dependent kernels, and each one's launch and ramp-up would otherwise wait for the previous
// kernel's last block. A kernel launched with lz_launch may start while its
// predecessor drains; it must call lz_pdl_wait() before it reads anything a previous kernel wrote
// or writes anything a previous kernel reads (loads of weights, which no kernel writes, may go
// first). lz_pdl_launch_dependents() lets the next kernel start launching; without it that happens
// when this kernel ends. Launched without the attribute, both instructions do nothing.
// Only kernels that call lz_pdl_wait() may be launched through lz_launch.
#ifndef LZ_PDL_CUH
#define LZ_PDL_CUH

#include <utility> // std::forward

#include "cuda_kernels.cuh" // lz_cuda_ctx
#include "trace.cuh" // lz_trace_write (cmake -DLIZARD_TRACE=ON)

#ifdef LIZARD_TRACE
__device__ __forceinline__ void lz_pdl_wait(int line = __builtin_LINE()) {
    const uint64_t t0 = lz_trace_now();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    lz_trace_write(t0, lz_trace_now(), line);
}
#else
__device__ __forceinline__ void lz_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
#endif
__device__ __forceinline__ void lz_pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// kernel<<<grid, block, smem, c->stream>>>(args...), as a programmatic dependent.
template <typename... KArgs, typename... Args>
static inline lz_status lz_launch(const lz_cuda_ctx *c, const char *what, void (*kernel)(KArgs...), dim3 grid,
                                  dim3 block, size_t smem, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    LZ_LAUNCH_TRY(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
    return LZ_OK;
}

// The launch configuration of a kernel in clusters of cluster_x blocks along x, as a programmatic
// dependent (for cudaLaunchKernelEx / cudaLaunchKernelExC; attr must outlive the launch).
static inline cudaLaunchConfig_t lz_cluster_config(const lz_cuda_ctx *c, dim3 grid, dim3 block, size_t smem,
                                                   unsigned cluster_x, cudaLaunchAttribute attr[2]) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster_x;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
    return cfg;
}

#endif
