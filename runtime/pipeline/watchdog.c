/* watchdog.c - see watchdog.h. The armed state is three atomics written by
 * the rank's own thread and read by the checker; on expiry the checker
 * writes one line and calls _exit (no MPI call from a second thread: the
 * library is initialised for one thread, and mpirun ends the job on a
 * non-zero exit anyway). */
#include <pthread.h>   // pthread_create
#include <stdatomic.h> // atomic_*
#include <stdbool.h>   // true
#include <stdio.h>     // fprintf
#include <time.h>      // clock_gettime, nanosleep
#include <unistd.h>    // _exit

#include "knobs.h"    // lz_knobs_get
#include "watchdog.h"

static atomic_llong armed_at_ms; /* 0: disarmed */
static atomic_ullong armed_step;
static _Atomic(const char *) armed_what;
static atomic_bool started;
static double timeout_s;
static int my_rank, world_size;

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000 + 1; /* never 0 */
}

static void *check_loop(void *unused) {
    (void)unused;
    const struct timespec half = {0, 500 * 1000 * 1000};
    for (;;) {
        nanosleep(&half, NULL);
        const long long at = atomic_load(&armed_at_ms);
        if (at == 0 || (double)(now_ms() - at) < timeout_s * 1000.0)
            continue;
        fprintf(stderr,
                "lizard: rank %d of %d: %s (step %llu) did not finish in %.0f s: another stage or this rank's device "
                "stalled; ending the job (LIZARD_STEP_TIMEOUT=%g)\n",
                my_rank, world_size, atomic_load(&armed_what), (unsigned long long)atomic_load(&armed_step), timeout_s,
                timeout_s);
        fflush(stderr);
        _exit(3);
    }
    return NULL;
}

lz_status lz_watchdog_start(int rank, int n_ranks) {
    if (atomic_load(&started))
        return LZ_OK;
    LZ_TRY(lz_knobs_status());
    timeout_s = lz_knobs_get()->step_timeout;
    my_rank = rank, world_size = n_ranks;
    atomic_store(&started, true);
    if (timeout_s == 0.0)
        return LZ_OK;
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: cannot start the step watchdog thread", rank);
    const bool ok = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                    pthread_create(&t, &attr, check_loop, NULL) == 0;
    pthread_attr_destroy(&attr);
    return ok ? LZ_OK : lz_fail(LZ_ERR_INTERNAL, "rank %d: cannot start the step watchdog thread", rank);
}

void lz_watchdog_arm(const char *what, uint64_t step_id) {
    atomic_store(&armed_what, what);
    atomic_store(&armed_step, step_id);
    atomic_store(&armed_at_ms, now_ms());
}

void lz_watchdog_disarm(void) { atomic_store(&armed_at_ms, 0); }
