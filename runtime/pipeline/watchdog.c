/* watchdog.c - see watchdog.h. The armed wait is four atomics written by the
 * rank's own thread and read by the checking thread, which also beats the
 * heartbeat. On expiry the checking thread writes one line and calls
 * MPI_Abort (the job runs at MPI_THREAD_MULTIPLE); should that not return
 * within seconds (a launcher that is itself cut off), it exits anyway. */
#include <errno.h>     // errno
#include <pthread.h>   // pthread_create
#include <mpi.h>       // MPI_Abort
#include <stdatomic.h> // atomic_*
#include <stdbool.h>   // bool
#include <stdio.h>     // fprintf, snprintf
#include <stdlib.h>    // strtod
#include <time.h>      // nanosleep
#include <unistd.h>    // _exit

#include "clock.h"     // lz_now_seconds
#include "heartbeat.h" // lz_heartbeat_tick
#include "knobs.h"     // lz_knobs_get
#include "mpi_world.h" // lz_world_get
#include "watchdog.h"

enum { EXIT_STALLED = 3, DEFER_SECONDS = 5 };

static atomic_llong armed_at_ms; /* 0: disarmed */
static atomic_ullong armed_step;
static atomic_int armed_peer;
static _Atomic(const char *) armed_what;
static atomic_bool running, stopping;
static double timeout_s = 30.0;
static const char *timeout_from = "--rank-timeout", *timeout_sep = " "; /* or "LIZARD_STEP_TIMEOUT", "=" */
static bool timeout_set;
static pthread_t thread;
static double deferred_at; /* when this rank first left a silence for a lower rank to report (0: not) */

static long long now_ms(void) { return (long long)(lz_now_seconds() * 1000.0) + 1; /* never 0 */ }

static lz_status parse_timeout(const char *value, const char *from, const char *sep) {
    char *end = NULL;
    errno = 0;
    const double t = strtod(value, &end);
    if (errno || end == value || *end || !(t >= 0.0) || t > 1e7)
        return lz_fail(LZ_ERR_INPUT, "%s%s%s: expected seconds (0 turns the rank watchdog off)", from, sep, value);
    timeout_s = t, timeout_from = from, timeout_sep = sep;
    return LZ_OK;
}

lz_status lz_watchdog_set_timeout(const char *value, const char *flag) {
    timeout_set = true;
    return parse_timeout(value, flag, " ");
}

/* "rank 2 (hostC)" */
static void name_rank(char *out, size_t n, int r) { snprintf(out, n, "rank %d (%s)", r, lz_heartbeat_host(r)); }

/* What this rank was waiting for when it gave up, as a phrase. */
static void describe_wait(char *out, size_t n, const lz_world *w) {
    const int peer = atomic_load(&armed_peer);
    char who[96] = "";
    if (atomic_load(&armed_at_ms) == 0) {
        snprintf(out, n, w->rank == 0 ? "between steps" : "idle, waiting for the next step from rank 0");
        return;
    }
    if (peer >= 0) {
        name_rank(who, sizeof who, peer);
        snprintf(out, n, "waiting %s %s (step %llu)", atomic_load(&armed_what), who,
                 (unsigned long long)atomic_load(&armed_step));
    } else {
        snprintf(out, n, "in %s (step %llu)", atomic_load(&armed_what), (unsigned long long)atomic_load(&armed_step));
    }
}

static void *exit_later(void *unused) {
    (void)unused;
    const struct timespec wait = {10, 0};
    nanosleep(&wait, NULL);
    _exit(EXIT_STALLED);
    return NULL;
}

static void (*_Atomic last_words)(const char *line);

void lz_watchdog_on_end(void (*fn)(const char *line)) { atomic_store(&last_words, fn); }

static void end_job(const char *line) {
    const lz_world *w = lz_world_get();
    fprintf(stderr, "lizard: error: rank %d of %d (%s): %s; ending the job (%s%s%g)\n", w->rank, w->size, w->host,
            line, timeout_from, timeout_sep, timeout_s);
    fflush(stderr);
    pthread_t t;
    if (pthread_create(&t, NULL, exit_later, NULL) != 0)
        _exit(EXIT_STALLED);
    void (*fn)(const char *) = atomic_load(&last_words);
    if (fn) {
        char said[600];
        snprintf(said, sizeof said, "rank %d of %d (%s): %s", w->rank, w->size, w->host, line);
        fn(said);
        const struct timespec flush = {0, 500 * 1000 * 1000};
        nanosleep(&flush, NULL);
    }
    MPI_Abort(MPI_COMM_WORLD, EXIT_STALLED);
    _exit(EXIT_STALLED);
}

/* After this process was itself paused (SIGSTOP, a frozen VM), no one else is to blame for the gap. */
static void forgive_pause(void) {
    lz_heartbeat_forgive(lz_now_seconds());
    long long at = atomic_load(&armed_at_ms);
    if (at != 0)
        atomic_compare_exchange_strong(&armed_at_ms, &at, now_ms());
}

/* A first word at a quarter of the deadline: where mpirun ends the job itself for a lost host (its
 * keepalive), this is the line that names the rank. */
static void warn_quiet(const lz_world *w, double now) {
    double silent_for = 0.0;
    const int quiet = lz_heartbeat_newly_silent(now, timeout_s / 4.0, &silent_for);
    if (quiet < 0 || lz_heartbeat_lower_alive(now, timeout_s / 4.0) >= 0) // a lower rank says it
        return;
    char who[96];
    name_rank(who, sizeof who, quiet);
    fprintf(stderr, "lizard: warning: rank %d of %d (%s): %s has sent nothing for %.0f s; the job ends if it stays "
            "silent for %g s\n", w->rank, w->size, w->host, who, silent_for, timeout_s);
    fflush(stderr);
}

/* Ends the job when a rank has been silent past the deadline or an armed wait has outlived it. */
static void check_deadlines(const lz_world *w, double now, double tick) {
    const long long at = atomic_load(&armed_at_ms);
    const bool overdue = at != 0 && (double)(now_ms() - at) >= timeout_s * 1000.0;
    double silent_for = 0.0;
    // a rank silent for a good part of the deadline is the likely cause of an overdue wait too (a wait
    // armed before that rank's last heartbeat expires before its silence does)
    const double quiet = 1.0 + 10.0 * tick < timeout_s / 4.0 ? 1.0 + 10.0 * tick : timeout_s / 4.0;
    const int silent = lz_heartbeat_silent(now, overdue ? quiet : timeout_s, &silent_for);
    if (silent < 0 && !overdue) {
        deferred_at = 0;
        return;
    }
    // a silent rank is seen by every other: the lowest that lives names it, the rest wait a little for
    // that rank to end the job (one line), then end it themselves should it not
    if (silent >= 0 && lz_heartbeat_lower_alive(now, quiet) >= 0) {
        if (deferred_at == 0)
            deferred_at = now;
        if (now - deferred_at < DEFER_SECONDS)
            return;
    }
    char wait[256], line[512], who[96];
    describe_wait(wait, sizeof wait, w);
    if (silent >= 0) {
        name_rank(who, sizeof who, silent);
        snprintf(line, sizeof line, "%s sent nothing for %.0f s (stopped, dead or cut off) while this rank was %s",
                 who, silent_for, wait);
    } else {
        snprintf(line, sizeof line, "still %s after %.0f s (%s)", wait, timeout_s,
                 atomic_load(&armed_peer) >= 0 ? "that rank lives but does not answer"
                                               : "this rank's device or another stage stalled");
    }
    end_job(line);
}

static void *check_loop(void *unused) {
    (void)unused;
    const lz_world *w = lz_world_get();
    double tick = timeout_s / 20.0; // heartbeats: many per deadline, a few per second at most
    tick = tick > 0.25 ? 0.25 : tick < 0.01 ? 0.01 : tick;
    const struct timespec nap = {0, (long)(tick * 1e9)};
    double before = lz_now_seconds();
    while (!atomic_load(&stopping)) {
        nanosleep(&nap, NULL);
        const double now = lz_now_seconds();
        if (now - before > 1.0 + 10.0 * tick)
            forgive_pause();
        before = now;
        lz_heartbeat_tick(now);
        warn_quiet(w, now);
        check_deadlines(w, now, tick);
    }
    return NULL;
}

lz_status lz_watchdog_start(void) {
    if (atomic_load(&running))
        return LZ_OK;
    if (!timeout_set && lz_knobs_given("LIZARD_STEP_TIMEOUT")) // checked with every knob at start
        timeout_s = lz_knobs_get()->step_timeout, timeout_from = "LIZARD_STEP_TIMEOUT", timeout_sep = "=";
    else if (!timeout_set)
        timeout_s = lz_knobs_get()->step_timeout;
    if (timeout_s == 0.0)
        return LZ_OK;
    int level = MPI_THREAD_SINGLE;
    if (MPI_Query_thread(&level) != MPI_SUCCESS || level < MPI_THREAD_MULTIPLE)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d (%s): the rank watchdog needs MPI_THREAD_MULTIPLE",
                       lz_world_get()->rank, lz_world_get()->host);
    LZ_TRY(lz_heartbeat_open());
    if (pthread_create(&thread, NULL, check_loop, NULL) != 0)
        return lz_fail(LZ_ERR_INTERNAL, "rank %d: cannot start the rank watchdog thread", lz_world_get()->rank);
    atomic_store(&running, true);
    return LZ_OK;
}

void lz_watchdog_stop(void) {
    if (!atomic_exchange(&running, false))
        return;
    atomic_store(&stopping, true);
    pthread_join(thread, NULL);
    lz_heartbeat_goodbye();
}

void lz_watchdog_arm(const char *what, uint64_t step_id, int peer) {
    atomic_store(&armed_what, what);
    atomic_store(&armed_step, step_id);
    atomic_store(&armed_peer, peer);
    atomic_store(&armed_at_ms, now_ms());
}

void lz_watchdog_disarm(void) { atomic_store(&armed_at_ms, 0); }

lz_watchdog_state lz_watchdog_save(void) {
    return (lz_watchdog_state){atomic_load(&armed_what), atomic_load(&armed_step), atomic_load(&armed_peer),
                               atomic_load(&armed_at_ms) != 0};
}

void lz_watchdog_resume(const lz_watchdog_state *s) {
    if (s->armed)
        lz_watchdog_arm(s->what, s->step_id, s->peer);
    else
        lz_watchdog_disarm();
}
