/* watchdog.h - a pipeline rank that waits too long in the middle of a step
 * ends itself, so that mpirun ends the job instead of leaving it hanging.
 *
 * A killed rank or one that returns an error already ends the job (mpirun
 * sees the exit); a stage that stalls without exiting — a hung kernel, a
 * stopped process, a lost link — would leave every other rank blocked in MPI
 * or NCCL forever. Around every step (and every wait for a started step's
 * result) the rank arms the watchdog; a thread checks it twice a second and,
 * past LIZARD_STEP_TIMEOUT seconds (default 600, as PyTorch's NCCL watchdog;
 * 0: off), prints one line naming the rank and the step and exits with
 * status 3. A rank waiting for its next step is idle, not armed. */
#ifndef LZ_WATCHDOG_H
#define LZ_WATCHDOG_H

#include <stdint.h> // uint64_t

#include "error.h" // lz_status

/* Starts the checking thread once per process (later calls do nothing);
 * reads LIZARD_STEP_TIMEOUT (seconds; a bad value is an input error). */
lz_status lz_watchdog_start(int rank, int n_ranks);

/* Marks the start of a wait that must end (what: a short phrase, static). */
void lz_watchdog_arm(const char *what, uint64_t step_id);
void lz_watchdog_disarm(void);

#endif
