/* handoff.h - activations [rows, hidden] (or their gradients, or any fp32
 * array) from one rank to another: device to device where the backend's p2p
 * ops are connected (stream-ordered: the backend's later work follows), else
 * through host memory and MPI in fp32 (lossless for bf16). Every wait is
 * armed with the watchdog, naming the rank waited for and what for, and
 * what was armed before is armed again after; every MPI call is checked.
 * Tags are mpi_world.h's. */
#ifndef LZ_HANDOFF_H
#define LZ_HANDOFF_H

#include <mpi.h>    // MPI_Request
#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint64_t

#include "ops.h"  // lz_ops, lz_backend
#include "plan.h" // lz_plan_visit

/* Where this rank's activations live. A NULL lz_handoff: host fp32 arrays. */
typedef struct {
    const lz_ops *ops;
    lz_backend *be;
    bool f32;        /* the values are fp32 in the backend's memory (gradients), not activations */
    bool device_p2p; /* the backend's p2p ops are connected */
    float *staging;  /* otherwise host fp32 for the largest n moved */
    /* Or NULL. Sends through host memory go without waiting: a private copy
     * (*pending_buf, malloc'd; the caller frees it after lz_handoff_wait of
     * *pending), so that the sender goes on at once. */
    MPI_Request *pending;
    float **pending_buf;
    uint64_t *bytes_sent; /* or NULL: counts what lz_handoff_send moves */
} lz_handoff;

/* n values of x to rank `to` / from rank `from`; `step` names the wait. */
lz_status lz_handoff_send(const lz_handoff *h, const void *x, size_t n, int to, int tag, uint64_t step);
lz_status lz_handoff_recv(const lz_handoff *h, void *x, size_t n, int from, int tag, uint64_t step);

/* Host fp32 buf[n] to `to` without waiting: buf stays untouched until
 * lz_handoff_wait(req) (nothing to wait for when *req is MPI_REQUEST_NULL). */
lz_status lz_handoff_isend(const float *buf, size_t n, int to, int tag, MPI_Request *req);
lz_status lz_handoff_wait(MPI_Request *req, int to, int tag, uint64_t step);

/* This rank's visits of visits[n_visits] (the plan's order, lz_plan_visit_order)
 * in turn: x [n] received from the previous visit's rank first when that is
 * another rank, fn(ctx, visit), then x sent on when the next visit is another
 * rank's. */
typedef lz_status (*lz_visit_fn)(void *ctx, const lz_plan_visit *visit);
lz_status lz_handoff_walk(const lz_plan_visit *visits, int n_visits, int rank, const lz_handoff *h, void *x,
                          size_t n, uint64_t step, lz_visit_fn fn, void *ctx);

#endif
