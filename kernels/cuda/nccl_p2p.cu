// nccl_p2p.cu - activations between the GPUs of a pipeline: one NCCL
// communicator over all ranks (its unique id broadcast by the caller over
// MPI), ncclSend / ncclRecv on the backend's compute stream, so a transfer is
// ordered after the kernels that produced the data and before those that use it.
#include <nccl.h> // ncclCommInitRank, ncclSend, ncclRecv

#include "cuda_kernels.cuh"

#define LZ_NCCL_TRY(call)                                                                                   \
    do {                                                                                                    \
        ncclResult_t lz_r_ = (call);                                                                        \
        if (lz_r_ != ncclSuccess)                                                                           \
            return lz_fail(LZ_ERR_INTERNAL, "nccl: %s failed: %s (%s:%d)", #call, ncclGetErrorString(lz_r_), \
                           __FILE__, __LINE__);                                                             \
    } while (0)

lz_status lz_nccl_id(void *id, size_t *len) {
    ncclUniqueId uid;
    LZ_NCCL_TRY(ncclGetUniqueId(&uid));
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
    LZ_NCCL_TRY(ncclCommInitRank(&cm, n_ranks, uid, rank));
    *comm = cm;
    return LZ_OK;
}

lz_status lz_nccl_send(lz_cuda_ctx *c, void *comm, const void *buf, size_t bytes, int peer) {
    LZ_NCCL_TRY(ncclSend(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, c->stream));
    return LZ_OK;
}

lz_status lz_nccl_recv(lz_cuda_ctx *c, void *comm, void *buf, size_t bytes, int peer) {
    LZ_NCCL_TRY(ncclRecv(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, c->stream));
    return LZ_OK;
}

void lz_nccl_free(void *comm) {
    if (comm)
        ncclCommDestroy((ncclComm_t)comm);
}
