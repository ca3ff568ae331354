/* heartbeat.h - small MPI messages from every rank to every other that say
 * "still here", on a communicator of their own (so they never match a
 * pipeline message): each rank knows which one fell silent, also one it
 * never talks to in the pipeline. Used by the watchdog's thread (watchdog.h): the job runs at
 * MPI_THREAD_MULTIPLE for it. */
#ifndef LZ_HEARTBEAT_H
#define LZ_HEARTBEAT_H

#include "error.h" // lz_status

/* Collective: duplicates MPI_COMM_WORLD and gathers every rank's host name. */
lz_status lz_heartbeat_open(void);
/* Sends "alive" to the watched ranks (unless the last one is still on its
 * way) and takes every message that arrived; `now` in seconds. */
void lz_heartbeat_tick(double now);
/* The rank heard from longest ago, if that is more than `timeout` seconds
 * and it did not say goodbye; else -1. */
int lz_heartbeat_silent(double now, double timeout, double *silent_for);
/* The same, once per silence: a rank already returned is not returned again
 * until it has been heard from. */
int lz_heartbeat_newly_silent(double now, double after, double *silent_for);
/* The lowest rank below this one heard from within `within` seconds that did not say goodbye, or -1:
 * where several ranks notice the same silence, the lowest of them that lives reports it. */
int lz_heartbeat_lower_alive(double now, double within);
/* Counts every watched rank as heard from at `now` (after this process itself was paused). */
void lz_heartbeat_forgive(double now);
/* Tells the watched ranks that this rank's silence from now on is an orderly end. */
void lz_heartbeat_goodbye(void);
/* The host rank r runs on ("?" before lz_heartbeat_open). */
const char *lz_heartbeat_host(int r);

#endif
