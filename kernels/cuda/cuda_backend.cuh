// cuda_backend.cuh - the CUDA backend's context (struct lz_backend), for the files that build its
// op tables: cuda_backend.cu (inference) and backward_ops_cuda.cu (training).
#ifndef LZ_CUDA_BACKEND_CUH
#define LZ_CUDA_BACKEND_CUH

#include "cuda_kernels.cuh" // lz_cuda_ctx, lz_cuda_batch, lz_sample_dev

// LIZARD_PROFILE=1: every op is bracketed by stream syncs and its wall time
// added to a per-op total, printed when the backend is destroyed.
enum { LZ_PROFILE_OPS = 32 };
struct lz_profile {
    bool on;
    const char *name[LZ_PROFILE_OPS];
    double seconds[LZ_PROFILE_OPS];
    long calls[LZ_PROFILE_OPS];
};

// Recorded decode steps, by signature (see lz_ops.graph_begin).
enum { LZ_GRAPHS = 8 };
struct lz_graph_cache {
    bool off;               // LIZARD_NO_GRAPHS=1, or profiling
    uint64_t sig[LZ_GRAPHS];
    bool seen[LZ_GRAPHS];   // a step runs once eagerly (warming cuBLAS and scratch) before it is recorded
    cudaGraphExec_t exec[LZ_GRAPHS];
    int next;               // round-robin replacement
    int mode;               // 0: eager, 1: recording, 2: replaying
    int current;
};

struct lz_backend {
    void *nccl; // the pipeline's communicator (ncclComm_t), when there is one
    lz_graph_cache graphs;
    void *cublas_workspace;
    lz_profile prof;
    int device;
    lz_dtype dtype;
    lz_cuda_ctx ctx;
    // the current step's arrays: one pinned host buffer, one device buffer
    int32_t *h_step, *d_step;
    size_t step_cap; // int32 elements
    lz_cuda_batch batch;
    void *h_stage; // pinned staging for act_to_host
    size_t stage_cap;
    int32_t *d_ids; // argmax_rows output
    int ids_cap;
    lz_sample_dev *d_sample; // sample_rows: each row's parameters, then its id (after the last row's)
    int sample_cap;
};

#endif
