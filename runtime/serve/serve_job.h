/* serve_job.h - one request between its HTTP thread and the engine thread.
 * The HTTP side fills the input, submits the job and waits on `cond`; the
 * engine side admits it into a state slot, appends each generated id and
 * finally marks it done (or failed, with an HTTP status). Either side may let
 * go first: the job is freed by the last of the two references. */
#ifndef LZ_SERVE_JOB_H
#define LZ_SERVE_JOB_H

#include <pthread.h> // pthread_mutex_t, pthread_cond_t
#include <stdbool.h> // bool
#include <stdint.h>  // int32_t

#include "sampler.h"   // lz_sampler_params
#include "serve_api.h" // serve_logit_bias

typedef struct serve_job {
    /* input: set before submission, then read-only */
    int32_t *prompt;       /* tokens with BOS: a new sequence */
    int n_prompt;
    int32_t *prompt_cont;  /* the same without BOS: continuing a session (NULL: as prompt) */
    int n_prompt_cont;
    int32_t *turn_end;     /* chat: what closes the previous answer if it did not end at eos */
    int n_turn_end;
    int max_tokens;
    lz_sampler_params sampling;
    bool ignore_eos;
    serve_logit_bias *logit_bias; /* ids within the vocabulary; NULL: none */
    int n_logit_bias;
    char *session;         /* NULL: forget the state after the answer */
    double t_submit;       /* lz_now_seconds() */
    long number;           /* the request's number: its answer is cmpl-NUMBER / chatcmpl-NUMBER */
    int answered_tokens;   /* HTTP side only: usage.completion_tokens as answered (the access log) */

    pthread_mutex_t mu;
    pthread_cond_t cond;   /* signalled on every change below */
    int refs;
    /* output (under mu) */
    bool admitted, done, failed;
    bool cancel;           /* the HTTP side wants no more tokens (disconnect, stop string) */
    int http_status;       /* when failed */
    const char *error_type, *error_code;
    char error[256];
    int32_t *tokens;       /* generated ids */
    int n_tokens, cap_tokens;
    bool stopped_at_eos;
    int prompt_tokens, cached_tokens; /* for usage */
} serve_job;

serve_job *serve_job_new(void);
/* Drops one reference; the last frees the job. */
void serve_job_release(serve_job *j);

/* Engine side (each locks mu and signals cond). */
void serve_job_admitted(serve_job *j, int prompt_tokens, int cached_tokens);
bool serve_job_push(serve_job *j, int32_t id); /* false: out of memory (the job failed) */
void serve_job_finish(serve_job *j, bool stopped_at_eos);
void serve_job_fail(serve_job *j, int http_status, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
bool serve_job_cancelled(serve_job *j);
/* Adds the job's logit_bias to one row of logits [vocab]. */
void serve_job_bias_logits(const serve_job *j, float *logits);

/* HTTP side: sets cancel. */
void serve_job_cancel(serve_job *j);

#endif
