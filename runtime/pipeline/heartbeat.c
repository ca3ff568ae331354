/* heartbeat.c - see heartbeat.h. Every call but open and goodbye comes from
 * the watchdog's thread alone. */
#include <mpi.h>    // MPI_Comm_dup, MPI_Isend, MPI_Iprobe
#include <stdbool.h> // bool
#include <stdlib.h> // calloc
#include <string.h> // memcpy

#include "clock.h"     // lz_now_seconds
#include "heartbeat.h"
#include "mpi_world.h" // lz_world_get, LZ_MPI_TRY

enum { TAG_BEAT = 1, BEAT_ALIVE = 1, BEAT_GOODBYE = 2, HOST_LEN = 64 };

static MPI_Comm comm = MPI_COMM_NULL;
static int me, size;
static char (*hosts)[HOST_LEN];
static double *last_heard; /* per rank, seconds */
static bool *gone;         /* said goodbye */
static bool *warned;       /* reported by lz_heartbeat_newly_silent since last heard from */
static MPI_Request *sends; /* per rank: the last "alive" still on its way */
static const int alive = BEAT_ALIVE, goodbye = BEAT_GOODBYE;

static bool watched(int r) { return r != me; }

lz_status lz_heartbeat_open(void) {
    const lz_world *w = lz_world_get();
    me = w->rank, size = w->size;
    hosts = calloc((size_t)size, sizeof *hosts);
    last_heard = calloc((size_t)size, sizeof *last_heard);
    gone = calloc((size_t)size, sizeof *gone);
    sends = calloc((size_t)size, sizeof *sends);
    warned = calloc((size_t)size, sizeof *warned);
    if (!hosts || !last_heard || !gone || !sends || !warned)
        return lz_fail(LZ_ERR_NOMEM, "rank %d (%s): out of memory for the heartbeat", me, w->host);
    char mine[HOST_LEN] = {0};
    memcpy(mine, w->host, strnlen(w->host, HOST_LEN - 1));
    LZ_MPI_TRY(MPI_Allgather(mine, HOST_LEN, MPI_CHAR, hosts, HOST_LEN, MPI_CHAR, MPI_COMM_WORLD));
    LZ_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    LZ_MPI_TRY(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    const double now = lz_now_seconds();
    for (int r = 0; r < size; r++)
        last_heard[r] = now, sends[r] = MPI_REQUEST_NULL;
    return LZ_OK;
}

static void send_to_watched(const int *what) {
    for (int r = 0; r < size; r++) {
        if (!watched(r) || gone[r])
            continue;
        int done = 1;
        if (sends[r] != MPI_REQUEST_NULL && MPI_Test(&sends[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            done = 0;
        if (done)
            MPI_Isend(what, 1, MPI_INT, r, TAG_BEAT, comm, &sends[r]);
    }
}

void lz_heartbeat_tick(double now) {
    if (comm == MPI_COMM_NULL)
        return;
    send_to_watched(&alive);
    for (;;) {
        int flag = 0, kind = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_BEAT, comm, &flag, &st) != MPI_SUCCESS || !flag)
            break;
        if (MPI_Recv(&kind, 1, MPI_INT, st.MPI_SOURCE, TAG_BEAT, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        last_heard[st.MPI_SOURCE] = now;
        warned[st.MPI_SOURCE] = false;
        gone[st.MPI_SOURCE] |= kind == BEAT_GOODBYE;
    }
}

int lz_heartbeat_silent(double now, double timeout, double *silent_for) {
    int worst = -1;
    for (int r = 0; comm != MPI_COMM_NULL && r < size; r++)
        if (watched(r) && !gone[r] && now - last_heard[r] > timeout && (worst < 0 || last_heard[r] < last_heard[worst]))
            worst = r;
    if (worst >= 0)
        *silent_for = now - last_heard[worst];
    return worst;
}

int lz_heartbeat_newly_silent(double now, double after, double *silent_for) {
    const int r = lz_heartbeat_silent(now, after, silent_for);
    if (r < 0 || warned[r])
        return -1;
    warned[r] = true;
    return r;
}

int lz_heartbeat_lower_alive(double now, double within) {
    for (int r = 0; comm != MPI_COMM_NULL && r < me; r++)
        if (!gone[r] && now - last_heard[r] <= within)
            return r;
    return -1;
}

void lz_heartbeat_forgive(double now) {
    for (int r = 0; comm != MPI_COMM_NULL && r < size; r++)
        last_heard[r] = now;
}

void lz_heartbeat_goodbye(void) {
    if (comm == MPI_COMM_NULL)
        return;
    for (int r = 0; r < size; r++) // the last "alive" may never be taken: let it go
        if (sends[r] != MPI_REQUEST_NULL) {
            MPI_Cancel(&sends[r]);
            MPI_Request_free(&sends[r]);
        }
    MPI_Request done[size > 0 ? size : 1];
    int n = 0;
    for (int r = 0; r < size; r++)
        if (watched(r) && !gone[r])
            MPI_Isend(&goodbye, 1, MPI_INT, r, TAG_BEAT, comm, &done[n++]);
    MPI_Waitall(n, done, MPI_STATUSES_IGNORE);
}

const char *lz_heartbeat_host(int r) { return hosts && r >= 0 && r < size ? hosts[r] : "?"; }
