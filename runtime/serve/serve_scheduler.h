/* serve_scheduler.h - continuous batching on one engine. HTTP threads submit
 * jobs to a bounded queue; the engine thread loops: admit queued jobs into
 * free state slots (restoring a session or a cached prefix), then run a
 * round of the generation loop (prompts fed a chunk's worth of tokens
 * together, one decode step for the sequences generating), hand each new
 * token to its job, and free the slot of a job that is finished or
 * cancelled. Only the engine thread touches the engine (and so MPI). */
#ifndef LZ_SERVE_SCHEDULER_H
#define LZ_SERVE_SCHEDULER_H

#include <pthread.h> // pthread_mutex_t, pthread_cond_t
#include <signal.h>  // sig_atomic_t
#include <stdbool.h> // bool

#include "engine.h"            // lz_engine
#include "generation_config.h" // lz_generation_config
#include "generation_loop.h"   // lz_gen_loop
#include "lizard.pb-c.h"       // Lizard__SequenceState
#include "serve_job.h"         // serve_job
#include "serve_metrics.h"     // serve_metrics
#include "serve_prefix.h"      // serve_prefix
#include "serve_sessions.h"    // serve_sessions
#include "session.h"           // LZ_FINGERPRINT_BYTES

/* A job in its slot, beside the slot's sequence in the generation loop. */
typedef struct {
    serve_job *job; /* NULL: the slot is free */
    int32_t *feed;  /* tokens to prefill */
    int n_feed;
    int32_t *history; /* every token of the sequence (what a session keeps) */
    int n_history, cap_history;
    double t_last;
    uint8_t *session_backup; /* the session as taken from the store: put back if this job fails */
    size_t session_backup_len;
    bool cache_prompt; /* keep the prompt's state in the prefix cache once prefilled */
} serve_seq;

typedef struct {
    lz_engine *e;
    const char *model_dir;
    const lz_generation_config *gen;
    serve_metrics *metrics;
    serve_sessions sessions;
    serve_prefix prefix;
    int prefix_min_tokens;
    int max_batch;
    bool context_bounded; /* a softmax layer's KV cache limits positions to e->opt.max_context */
    uint8_t fingerprint[LZ_FINGERPRINT_BYTES];

    double drain_timeout;           /* seconds running sequences may go on after the first signal */

    pthread_mutex_t mu;
    pthread_cond_t wake;
    serve_job **queue;
    int q_len, q_cap;
    bool draining;
    double step_since;              /* when the engine step in progress began; 0 between steps */

    serve_seq *seqs;                /* [max_batch], slot i = seqs[i] */
    lz_gen_loop loop;               /* the slots' sequences: prefill, decode, sampling */
} serve_scheduler;

typedef struct {
    int max_batch, queue_size;
    size_t session_memory;
    const char *session_dir;
    int prefix_entries, prefix_min_tokens;
    double drain_timeout;
} serve_scheduler_options;

/* The engine is open on rank 0 with at least max_batch slots. */
lz_status serve_scheduler_init(serve_scheduler *s, lz_engine *e, const char *model_dir,
                               const lz_generation_config *gen, serve_metrics *metrics,
                               const serve_scheduler_options *opt);
void serve_scheduler_free(serve_scheduler *s);

/* HTTP side: 0 when queued (the scheduler holds a reference), else the HTTP
 * status to answer: 429 (queue full) or 503 (draining). */
int serve_scheduler_submit(serve_scheduler *s, serve_job *j);

/* Seconds the engine step in progress has run (0 between steps): what
 * /health compares with --health-step-timeout. Any thread. */
double serve_scheduler_step_seconds(serve_scheduler *s);

/* Engine thread: runs until *stop (a count of stop signals) is set and every
 * accepted job is answered; from *stop on, submissions get 503. Running and
 * queued jobs go on for drain_timeout seconds, or until *stop reaches 2; then
 * generating ones finish as they are (finish_reason "length", their sessions
 * saved), the others fail with 503. Sessions held in memory are then written
 * to --session-dir. */
lz_status serve_scheduler_run(serve_scheduler *s, volatile sig_atomic_t *stop);

#endif
