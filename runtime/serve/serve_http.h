/* serve_http.h - the HTTP side of `lizard serve` (libmicrohttpd, one thread
 * per connection): routes, API key, body limits, prompts tokenized and jobs
 * submitted to the scheduler; answers as JSON or as server-sent events. */
#ifndef LZ_SERVE_HTTP_H
#define LZ_SERVE_HTTP_H

#include <pthread.h>    // pthread_mutex_t
#include <signal.h>     // sig_atomic_t
#include <stdatomic.h>  // atomic_long, atomic_int
#include <stdbool.h>    // bool

#include "generation_config.h" // lz_generation_config
#include "serve_chat.h"        // serve_chat_format
#include "serve_metrics.h"     // serve_metrics
#include "serve_scheduler.h"   // serve_scheduler
#include "tokenizer.h"         // lz_tokenizer

struct MHD_Daemon;

typedef struct {
    serve_scheduler *sched;
    serve_metrics *metrics;
    lz_tokenizer *tok;     /* encoding under tok_mu (it keeps caches); decoders only read it */
    pthread_mutex_t tok_mu;
    const lz_generation_config *gen;
    serve_chat_format chat;
    const char *eos_text;  /* the tokenizer's eos token string ("" without one) */
    const char *model_name;
    const char *api_key;   /* NULL: open */
    bool session_per_key;  /* sessions stored under a hash of the request's key (serve_sessions.h) */
    long max_prompt_tokens, max_tokens, max_body_bytes;
    int vocab;
    volatile sig_atomic_t *stop;  /* stop signals received: from the first on, /health and new requests get 503 */
    _Atomic(const char *) *ending; /* set when the process ends within a second (a pipeline rank failed): every
                                      answer in progress ends with this error (NULL: never) */
    double health_step_timeout;   /* /health answers 503 while an engine step has run longer */
    bool access_log;              /* one line per request on stderr */
    atomic_long next_id;
    atomic_int in_flight; /* requests begun and not yet completed */
    struct MHD_Daemon *daemon;
} serve_server;

/* Listens on host:port, host an address or a name (the first of its
 * addresses that can be bound); port 0: any free port, *bound_port says which. */
lz_status serve_http_start(serve_server *srv, const char *host, int port, int *bound_port);
/* Whether host resolves (before the model loads: a wrong --host is told at once). */
lz_status serve_http_check_host(const char *host);
/* After the scheduler has ended every job: lets the answers in flight be
 * written (up to 2 s, less if another stop signal comes), then stops
 * listening and waits for the connection threads. */
void serve_http_stop(serve_server *srv);

#endif
