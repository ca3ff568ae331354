/* watchdog.h - a pipeline rank that is stopped, killed or cut off, or that
 * waits too long for another, ends the whole job instead of leaving it hung.
 *
 * Two checks, one deadline (the rank timeout: `lizard --rank-timeout S`, else
 * LIZARD_STEP_TIMEOUT, default 30 s; 0 turns both off):
 * - a heartbeat: rank 0 and every other rank exchange a small MPI message
 *   several times a second from a thread of their own (heartbeat.h), so a
 *   rank that falls silent (SIGSTOP, a dead host, a cut link) is noticed
 *   even while every rank is idle;
 * - an armed wait: around every step, every wait for another rank's
 *   activations or result, and every session transfer, the rank arms the
 *   watchdog; a wait longer than the deadline (a hung kernel, a stage that
 *   lives but never answers) ends the job too.
 * Either way the rank prints one line naming itself, its host, the silent
 * rank and its host where known, and what it was waiting for, then calls
 * MPI_Abort so that mpirun ends every rank and exits non-zero (status 3). */
#ifndef LZ_WATCHDOG_H
#define LZ_WATCHDOG_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint64_t

#include "error.h" // lz_status

/* The deadline from the command line (seconds; before lz_watchdog_start).
 * `flag` names where it came from in messages. */
lz_status lz_watchdog_set_timeout(const char *value, const char *flag);

/* Collective over MPI_COMM_WORLD, once per process (later calls do nothing):
 * reads LIZARD_STEP_TIMEOUT unless the timeout was set, learns every rank's
 * host, and starts the heartbeat thread. */
lz_status lz_watchdog_start(void);
/* Says goodbye to the watched ranks (this rank's silence from now on is an
 * orderly end) and joins the thread; before MPI_Finalize. */
void lz_watchdog_stop(void);

/* Called by the watchdog's thread with its line just before it ends the job, then given half a second
 * (`lizard serve` tells the clients it is answering why their answers end). NULL: none. */
void lz_watchdog_on_end(void (*last_words)(const char *line));

/* Marks the start of a wait that must end: `what` (static; with a peer, a
 * phrase that the peer's name ends: "for the result from"), the step, and
 * the rank it waits for (-1: its own work). */
void lz_watchdog_arm(const char *what, uint64_t step_id, int peer);
void lz_watchdog_disarm(void);

/* What was armed, so that a wait nested in another (a hand-off inside a
 * step) can give the outer one back when it ends: re-armed from now, or
 * disarmed if nothing was armed. */
typedef struct {
    const char *what;
    uint64_t step_id;
    int peer;
    bool armed;
} lz_watchdog_state;
lz_watchdog_state lz_watchdog_save(void);
void lz_watchdog_resume(const lz_watchdog_state *s);

#endif
