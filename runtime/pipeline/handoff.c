/* handoff.c - see handoff.h. */
#include "handoff.h"

#include <limits.h> // INT_MAX
#include <stdlib.h> // malloc

#include "mpi_world.h" // LZ_MPI_TRY, LZ_TAG_*
#include "watchdog.h"  // lz_watchdog_arm

/* The watchdog's phrase for a wait, ended by the peer's name. */
static const char *wait_for(int tag, bool sending) {
    if (tag == LZ_TAG_GRADIENTS)
        return sending ? "to hand the gradients to" : "for the gradients from";
    if (tag == LZ_TAG_TENSORS)
        return sending ? "to hand the layer tensors to" : "for the layer tensors from";
    return sending ? "to hand the activations to" : "for the activations from";
}

static lz_status mpi_move(float *buf, size_t n, int peer, int tag, bool sending) {
    if (n > INT_MAX)
        return lz_fail(LZ_ERR_INTERNAL, "%zu values in one message: more than MPI counts", n);
    if (sending)
        LZ_MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, peer, tag, MPI_COMM_WORLD));
    else
        LZ_MPI_TRY(MPI_Recv(buf, (int)n, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return LZ_OK;
}

/* n values of backend memory to the host and back, as fp32: activations converted, fp32 values copied. */
static lz_status to_host(const lz_handoff *h, float *dst, const void *src, size_t n) {
    return h->f32 ? h->ops->copy_to_host(h->be, dst, src, n * sizeof(float)) : h->ops->act_to_host(h->be, dst, src, n);
}
static lz_status from_host(const lz_handoff *h, void *dst, const float *src, size_t n) {
    return h->f32 ? h->ops->copy_from_host(h->be, dst, src, n * sizeof(float))
                  : h->ops->act_from_host(h->be, dst, src, n);
}

/* A private host copy of x sent without waiting (h->pending). */
static lz_status send_copy(const lz_handoff *h, const void *x, size_t n, int to, int tag) {
    float *copy = malloc(sizeof(float) * (n ? n : 1));
    if (!copy)
        return lz_fail(LZ_ERR_NOMEM, "out of memory for %zu activations to rank %d", n, to);
    *h->pending_buf = copy;
    LZ_TRY(to_host(h, copy, x, n));
    return lz_handoff_isend(copy, n, to, tag, h->pending);
}

static lz_status move(const lz_handoff *h, void *x, size_t n, int peer, int tag, uint64_t step, bool sending) {
    const bool p2p = h && h->device_p2p, staged = h && !p2p;
    const size_t elem = h && !h->f32 ? h->ops->act_size : sizeof(float); // bytes of a value in backend memory
    if (sending && h && h->bytes_sent)
        *h->bytes_sent += n * (p2p ? elem : sizeof(float));
    if (sending && staged && h->pending)
        return send_copy(h, x, n, peer, tag);
    float *host = staged ? h->staging : x;
    lz_status s = staged && sending ? to_host(h, host, x, n) : LZ_OK;
    const lz_watchdog_state outer = lz_watchdog_save();
    lz_watchdog_arm(wait_for(tag, sending), step, peer);
    if (s == LZ_OK && p2p)
        s = sending ? h->ops->p2p_send(h->be, x, n * elem, peer) : h->ops->p2p_recv(h->be, x, n * elem, peer);
    else if (s == LZ_OK)
        s = mpi_move(host, n, peer, tag, sending);
    lz_watchdog_resume(&outer);
    return s == LZ_OK && staged && !sending ? from_host(h, x, host, n) : s;
}

lz_status lz_handoff_send(const lz_handoff *h, const void *x, size_t n, int to, int tag, uint64_t step) {
    return move(h, (void *)x, n, to, tag, step, true); // only read
}

lz_status lz_handoff_recv(const lz_handoff *h, void *x, size_t n, int from, int tag, uint64_t step) {
    return move(h, x, n, from, tag, step, false);
}

lz_status lz_handoff_isend(const float *buf, size_t n, int to, int tag, MPI_Request *req) {
    if (n > INT_MAX)
        return lz_fail(LZ_ERR_INTERNAL, "%zu values in one message: more than MPI counts", n);
    LZ_MPI_TRY(MPI_Isend(buf, (int)n, MPI_FLOAT, to, tag, MPI_COMM_WORLD, req));
    return LZ_OK;
}

static lz_status wait_checked(MPI_Request *req) {
    LZ_MPI_TRY(MPI_Wait(req, MPI_STATUS_IGNORE));
    return LZ_OK;
}

lz_status lz_handoff_wait(MPI_Request *req, int to, int tag, uint64_t step) {
    if (*req == MPI_REQUEST_NULL)
        return LZ_OK;
    const lz_watchdog_state outer = lz_watchdog_save();
    lz_watchdog_arm(wait_for(tag, true), step, to);
    const lz_status s = wait_checked(req);
    lz_watchdog_resume(&outer);
    return s;
}

lz_status lz_handoff_walk(const lz_plan_visit *visits, int n_visits, int rank, const lz_handoff *h, void *x,
                          size_t n, uint64_t step, lz_visit_fn fn, void *ctx) {
    for (int v = 0; v < n_visits; v++) {
        if (visits[v].rank != rank)
            continue;
        if (v > 0 && visits[v - 1].rank != rank)
            LZ_TRY(lz_handoff_recv(h, x, n, visits[v - 1].rank, LZ_TAG_ACTIVATIONS, step));
        LZ_TRY(fn(ctx, &visits[v]));
        if (v + 1 < n_visits && visits[v + 1].rank != rank)
            LZ_TRY(lz_handoff_send(h, x, n, visits[v + 1].rank, LZ_TAG_ACTIVATIONS, step));
    }
    return LZ_OK;
}
