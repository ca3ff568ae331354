// nccl_p2p.cu - activations between the GPUs of a pipeline: one NCCL
// communicator over all ranks (its unique id broadcast by the caller over
// MPI), ncclSend / ncclRecv on the backend's compute stream, so a transfer is
// ordered after the kernels that produced the data and before those that use it.
#include <nccl.h> // ncclCommInitRank, ncclSend, ncclRecv

#include "cuda_kernels.cuh"

// (LZ_CUDA_TRY takes NCCL's status too)
static inline const char *lz_gpu_error(ncclResult_t r) { return r == ncclSuccess ? NULL : ncclGetErrorString(r); }

lz_status lz_nccl_id(void *id, size_t *len) {
    ncclUniqueId uid;
    LZ_CUDA_TRY(ncclGetUniqueId(&uid));
    memcpy(id, &uid, sizeof uid);
    *len = sizeof uid;
    return LZ_OK;
}

lz_status lz_nccl_init(lz_cuda_ctx *c, void **comm, const void *id, size_t len, int rank, int n_ranks) {
    if (len != sizeof(ncclUniqueId))
        return lz_fail(LZ_ERR_INTERNAL, "nccl: unique id of %zu bytes, expected %zu", len, sizeof(ncclUniqueId));
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t cm;
    LZ_CUDA_TRY(ncclCommInitRank(&cm, n_ranks, uid, rank));
    *comm = cm;
    return LZ_OK;
}

lz_status lz_nccl_send(lz_cuda_ctx *c, void *comm, const void *buf, size_t bytes, int peer) {
    LZ_CUDA_TRY(ncclSend(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, c->stream));
    return LZ_OK;
}

lz_status lz_nccl_recv(lz_cuda_ctx *c, void *comm, void *buf, size_t bytes, int peer) {
    LZ_CUDA_TRY(ncclRecv(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, c->stream));
    return LZ_OK;
}

void lz_nccl_free(void *comm) {
    if (comm)
        ncclCommDestroy((ncclComm_t)comm);
}
