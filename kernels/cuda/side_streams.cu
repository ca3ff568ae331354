// side_streams.cu - the side streams of a CUDA context (cuda_kernels.cuh): independent launches of a
// step side by side. At a few sequences a layer's k and v GEMMs (a few MiB each, few blocks and a
// split-K reduction) and the gate's GEMV each leave most of the GPU idle: one after another they
// waste it, side by side they fill it (steps of up to LIZARD_FORK_TOKENS tokens).
#include "cuda_kernels.cuh"

lz_status lz_cuda_side_create(lz_cuda_ctx *c, size_t workspace_bytes, cublasMath_t math) {
    LZ_CUDA_TRY(cudaEventCreateWithFlags(&c->fork_event, cudaEventDisableTiming));
    for (int i = 0; i < LZ_SIDE_STREAMS; i++) {
        LZ_CUDA_TRY(cudaStreamCreateWithFlags(&c->side[i], cudaStreamNonBlocking));
        LZ_CUDA_TRY(cudaEventCreateWithFlags(&c->join_event[i], cudaEventDisableTiming));
        LZ_CUDA_TRY(cublasCreate(&c->side_cublas[i]));
        LZ_CUDA_TRY(cublasSetStream(c->side_cublas[i], c->side[i]));
        // its own workspace: two GEMMs side by side must not share split-K partials
        LZ_CUDA_TRY(cudaMalloc(&c->side_workspace[i], workspace_bytes));
        LZ_CUDA_TRY(cublasSetWorkspace(c->side_cublas[i], c->side_workspace[i], workspace_bytes));
        LZ_CUDA_TRY(cublasSetMathMode(c->side_cublas[i], math));
    }
    return LZ_OK;
}

void lz_cuda_side_destroy(lz_cuda_ctx *c) {
    for (int i = 0; i < LZ_SIDE_STREAMS; i++) {
        if (c->side[i])
            cudaStreamSynchronize(c->side[i]);
        if (c->side_cublas[i])
            cublasDestroy(c->side_cublas[i]);
        if (c->side_workspace[i])
            cudaFree(c->side_workspace[i]);
        if (c->join_event[i])
            cudaEventDestroy(c->join_event[i]);
        if (c->side[i])
            cudaStreamDestroy(c->side[i]);
        c->side[i] = NULL, c->side_cublas[i] = NULL, c->side_workspace[i] = NULL, c->join_event[i] = NULL;
    }
    if (c->fork_event)
        cudaEventDestroy(c->fork_event);
    c->fork_event = NULL;
}

lz_status lz_cuda_fork(lz_cuda_ctx *c, int n) {
    if (n < 0 || n > LZ_SIDE_STREAMS)
        return lz_fail(LZ_ERR_INTERNAL, "cuda: fork onto %d side streams (at most %d)", n, LZ_SIDE_STREAMS);
    if (n == 0)
        return LZ_OK;
    LZ_CUDA_TRY(cudaEventRecord(c->fork_event, c->stream));
    for (int i = 0; i < n; i++)
        LZ_CUDA_TRY(cudaStreamWaitEvent(c->side[i], c->fork_event, 0));
    return LZ_OK;
}

static lz_status join_side(lz_cuda_ctx *c, int i) {
    LZ_CUDA_TRY(cudaEventRecord(c->join_event[i], c->side[i]));
    LZ_CUDA_TRY(cudaStreamWaitEvent(c->stream, c->join_event[i], 0));
    return LZ_OK;
}

// Every side is joined even when one fails (a recording with a side left out cannot end); the first
// failure is the one reported.
lz_status lz_cuda_join(lz_cuda_ctx *c, int n) {
    if (n < 0 || n > LZ_SIDE_STREAMS)
        return lz_fail(LZ_ERR_INTERNAL, "cuda: join of %d side streams (at most %d)", n, LZ_SIDE_STREAMS);
    lz_status first = LZ_OK;
    for (int i = 0; i < n; i++) {
        const lz_status s = join_side(c, i);
        first = first != LZ_OK ? first : s;
    }
    return first;
}
