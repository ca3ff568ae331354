/* pipeline_messages.c - how rank 0 talks to the other ranks: step headers
 * sent without waiting (MPI_Isend), received by probe, and broadcasts of
 * plans and states. */
#include <limits.h> // INT_MAX
#include <mpi.h>    // MPI_Bcast, MPI_Isend, MPI_Probe
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free
#include <string.h> // memmove

#include "clock.h"     // lz_now_seconds
#include "knobs.h"     // lz_knobs_get
#include "mpi_world.h" // LZ_MPI_TRY
#include "pipeline_internal.h"

void lz_pipeline_trace(const lz_pipeline *p, const char *event, uint64_t step) {
    if (lz_knobs_get()->step_trace)
        fprintf(stderr, "trace rank %d %.6f %-14s step %llu\n", p->rank, lz_now_seconds(), event,
                (unsigned long long)step);
}

lz_status lz_pipeline_broadcast_bytes(uint8_t **buf, size_t *len, int rank) {
    if (lz_world_get()->size == 1)
        return LZ_OK; // rank 0 has the bytes already
    uint64_t n = *len;
    LZ_MPI_TRY(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    if (rank != 0) {
        if (n > ((uint64_t)1 << 31))
            return lz_fail(LZ_ERR_INTERNAL, "rank %d: a broadcast of %llu bytes is not plausible", rank,
                           (unsigned long long)n);
        *buf = malloc(n ? n : 1);
        if (!*buf)
            return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory for a %llu-byte message", rank, (unsigned long long)n);
        *len = n;
    }
    LZ_MPI_TRY(MPI_Bcast(*buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD));
    return LZ_OK;
}

/* Rank 0: waits for the oldest header sends (all of them when `all`) and frees them. */
lz_status lz_pipeline_retire_headers(lz_pipeline *p, bool all) {
    while (p->n_headers > 0 && (all || p->n_headers == LZ_MAX_INFLIGHT)) {
        int rc = MPI_Waitall(p->n_ranks - 1, p->headers[0].reqs, MPI_STATUSES_IGNORE);
        free(p->headers[0].buf);
        free(p->headers[0].reqs);
        p->n_headers--;
        memmove(&p->headers[0], &p->headers[1], sizeof p->headers[0] * (size_t)p->n_headers);
        if (rc != MPI_SUCCESS)
            return lz_world_mpi_error(rc, "MPI_Waitall(step header sends)", __FILE__, __LINE__);
    }
    return LZ_OK;
}

/* The header to every rank, sent without waiting for the receivers (a
 * broadcast may hold rank 0 until a stage still busy with the previous step
 * joins it, and then no two stages would ever work at once). A step's token
 * ids go only where they are embedded: when that is rank 0 they stay here. */
lz_status lz_pipeline_send_header(lz_pipeline *p, Lizard__StepHeader *h) {
    if (p->n_ranks == 1)
        return LZ_OK; // no one to tell: the step runs here from the same header
    const size_t n_ids = h->n_token_ids;
    if (p->plan.embed_rank == 0)
        h->n_token_ids = 0;
    const size_t len = lizard__step_header__get_packed_size(h);
    uint8_t *buf = malloc(len ? len : 1);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)(p->n_ranks > 1 ? p->n_ranks - 1 : 1));
    if (buf)
        lizard__step_header__pack(h, buf);
    h->n_token_ids = n_ids;
    if (!buf || !reqs || len > (size_t)INT_MAX) {
        free(buf), free(reqs);
        return lz_fail(LZ_ERR_NOMEM, "StepHeader: out of memory for %zu bytes", len);
    }
    LZ_TRY(lz_pipeline_retire_headers(p, false));
    for (int r = 1; r < p->n_ranks; r++) {
        int rc = MPI_Isend(buf, (int)len, MPI_BYTE, r, LZ_TAG_HEADER, MPI_COMM_WORLD, &reqs[r - 1]);
        if (rc != MPI_SUCCESS) {
            for (int q = 1; q < r; q++)
                MPI_Wait(&reqs[q - 1], MPI_STATUS_IGNORE);
            free(buf), free(reqs);
            return lz_world_mpi_error(rc, "MPI_Isend(step header)", __FILE__, __LINE__);
        }
    }
    p->headers[p->n_headers].buf = buf;
    p->headers[p->n_headers].reqs = reqs;
    p->n_headers++;
    return LZ_OK;
}

/* Other ranks: the next header's bytes from rank 0. */
lz_status lz_pipeline_receive_header(lz_pipeline *p, uint8_t **buf, size_t *len) {
    MPI_Status st;
    int n = 0;
    LZ_MPI_TRY(MPI_Probe(0, LZ_TAG_HEADER, MPI_COMM_WORLD, &st));
    LZ_MPI_TRY(MPI_Get_count(&st, MPI_BYTE, &n));
    if (n < 0)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: a step header of unknown size", p->rank);
    *buf = malloc(n ? (size_t)n : 1);
    if (!*buf)
        return lz_fail(LZ_ERR_NOMEM, "rank %d: out of memory for a %d-byte header", p->rank, n);
    *len = (size_t)n;
    LZ_MPI_TRY(MPI_Recv(*buf, n, MPI_BYTE, 0, LZ_TAG_HEADER, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return LZ_OK;
}
