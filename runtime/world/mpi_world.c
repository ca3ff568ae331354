/* mpi_world.c - MPI start, checked calls, and the way a job ends. */
#include <limits.h> // INT_MAX
#include <mpi.h>    // MPI_Init_thread, MPI_Abort, MPI_Error_string, MPI_Allreduce, MPI_Bcast, MPI_Allgather
#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv
#include <string.h> // memcpy
#include <unistd.h> // gethostname

#include "mpi_world.h"

static lz_world world = {false, 0, 1, 0, "localhost"};
static void (*before_finalize)(void);

static bool launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"};
    for (int i = 0; i < 4; i++)
        if (getenv(vars[i]))
            return true;
    return false;
}

lz_status lz_world_mpi_error(int rc, const char *call, const char *file, int line) {
    char reason[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, reason, &len) != MPI_SUCCESS)
        snprintf(reason, sizeof reason, "MPI error %d", rc);
    return lz_fail_at(LZ_ERR_INTERNAL, file, line, "%s failed: %s", call, reason);
}

lz_status lz_world_init(int *argc, char ***argv) {
    gethostname(world.host, sizeof world.host - 1);
    if (!launched_by_mpi())
        return LZ_OK;
    // MULTIPLE: the rank watchdog's thread beats the heartbeat and may call MPI_Abort while the main
    // thread waits inside MPI (watchdog.h)
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return lz_fail(LZ_ERR_INTERNAL, "MPI_Init_thread failed on %s", world.host);
    world.active = true;
    if (provided < MPI_THREAD_MULTIPLE)
        return lz_fail(LZ_ERR_INTERNAL, "the MPI library on %s gives thread level %d, lizard needs MPI_THREAD_MULTIPLE",
                       world.host, provided);
    // errors come back as codes (checked by LZ_MPI_TRY) instead of aborting inside MPI
    LZ_MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    LZ_MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &world.rank));
    LZ_MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &world.size));
    MPI_Comm node;
    LZ_MPI_TRY(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node));
    LZ_MPI_TRY(MPI_Comm_rank(node, &world.local_rank));
    LZ_MPI_TRY(MPI_Comm_free(&node));
    lz_error_set_rank(world.rank, world.size, world.host);
    return LZ_OK;
}

const lz_world *lz_world_get(void) { return &world; }

lz_status lz_world_sum(double *v, int n) {
    if (world.size > 1)
        LZ_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return LZ_OK;
}

lz_status lz_world_broadcast(void *buf, size_t bytes, int root) {
    if (bytes > INT_MAX)
        return lz_fail(LZ_ERR_INTERNAL, "a broadcast of %zu bytes: more than one MPI message holds", bytes);
    if (world.size > 1)
        LZ_MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD));
    return LZ_OK;
}

lz_status lz_world_gather_u64(const uint64_t *mine, int n, uint64_t *all) {
    if (world.size > 1)
        LZ_MPI_TRY(MPI_Allgather(mine, n, MPI_UINT64_T, all, n, MPI_UINT64_T, MPI_COMM_WORLD));
    else
        memcpy(all, mine, sizeof(uint64_t) * (size_t)n);
    return LZ_OK;
}

void lz_world_before_finalize(void (*fn)(void)) { before_finalize = fn; }

void lz_world_finish(int exit_code) {
    if (!world.active)
        return;
    if (exit_code != 0 && world.size > 1)
        MPI_Abort(MPI_COMM_WORLD, exit_code); // the other ranks may be blocked waiting for this one
    if (before_finalize)
        before_finalize(); // the watchdog: this rank's silence from now on is an orderly end
    MPI_Finalize();
}
