/* mpi_world.h - the process's place in an `mpirun -np N lizard ...` job.
 *
 * MPI is started only when the process was launched by an MPI launcher (the
 * launcher's environment says so); a plain `lizard ...` runs without it.
 * Every MPI call is checked: a failure names the rank, the host and the call. */
#ifndef LZ_MPI_WORLD_H
#define LZ_MPI_WORLD_H

#include <stdbool.h> // bool

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

/* Wraps an MPI call: on failure records "rank R (host): CALL failed: reason". */
#define LZ_MPI_TRY(call)                                                            \
    do {                                                                            \
        int lz_mpi_rc_ = (call);                                                    \
        if (lz_mpi_rc_ != 0)                                                        \
            return lz_world_mpi_error(lz_mpi_rc_, #call, __FILE__, __LINE__);       \
    } while (0)
lz_status lz_world_mpi_error(int rc, const char *call, const char *file, int line);

#endif
