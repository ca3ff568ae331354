/* mpi_world.h - the process's place in an `mpirun -np N lizard ...` job.
 *
 * MPI is started only when the process was launched by an MPI launcher (the
 * launcher's environment says so); a plain `lizard ...` runs without it.
 * Every MPI call is checked: a failure names the rank, the host and the call. */
#ifndef LZ_MPI_WORLD_H
#define LZ_MPI_WORLD_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint64_t

#include "error.h" // lz_status

typedef struct {
    bool active;     /* MPI_Init was called */
    int rank, size;  /* 0 and 1 without MPI */
    int local_rank;  /* rank among the processes of this host (picks the GPU) */
    char host[64];
} lz_world;

/* Starts MPI when launched by mpirun/srun; otherwise a world of one. */
lz_status lz_world_init(int *argc, char ***argv);
const lz_world *lz_world_get(void);
/* Ends the job: MPI_Finalize on success; on failure MPI_Abort, so that every
 * rank stops within seconds instead of waiting for this one. */
void lz_world_finish(int exit_code);
/* What must run before MPI_Finalize on an orderly end (the watchdog says
 * goodbye to the other ranks and joins its thread); one, set by whoever
 * started it. NULL: nothing. */
void lz_world_before_finalize(void (*fn)(void));

/* The tag of every point-to-point message between ranks on MPI_COMM_WORLD
 * (the heartbeat has a communicator of its own). */
enum { LZ_TAG_ACTIVATIONS = 11, LZ_TAG_LOGITS, LZ_TAG_IDS, LZ_TAG_HEADER, LZ_TAG_STATE, LZ_TAG_GRADIENTS,
       LZ_TAG_TENSORS };

/* Collectives over every rank, checked; nothing to do in a world of one.
 * lz_world_sum: v[n] summed element-wise, the sums on every rank.
 * lz_world_gather_u64: every rank's mine[n], rank by rank, in all[n * size]
 * on every rank (a world of one copies mine). */
lz_status lz_world_sum(double *v, int n);
lz_status lz_world_broadcast(void *buf, size_t bytes, int root);
lz_status lz_world_gather_u64(const uint64_t *mine, int n, uint64_t *all);

/* Wraps an MPI call: on failure records "rank R (host): CALL failed: reason". */
#define LZ_MPI_TRY(call)                                                            \
    do {                                                                            \
        int lz_mpi_rc_ = (call);                                                    \
        if (lz_mpi_rc_ != 0)                                                        \
            return lz_world_mpi_error(lz_mpi_rc_, #call, __FILE__, __LINE__);       \
    } while (0)
lz_status lz_world_mpi_error(int rc, const char *call, const char *file, int line);

#endif
