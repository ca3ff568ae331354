/* serve_metrics.h - what /metrics reports, in Prometheus text format:
 * requests by status, tokens in and out, queue depth, running sequences,
 * time to first token, inter-token latency and request latency histograms,
 * state bytes in use, sessions kept and prefix cache hits. Thread-safe. */
#ifndef LZ_SERVE_METRICS_H
#define LZ_SERVE_METRICS_H

#include <pthread.h> // pthread_mutex_t
#include <stddef.h>  // size_t

enum { SERVE_HIST_BUCKETS = 14, SERVE_STATUS_KINDS = 10 };

typedef struct {
    double sum;
    long count;
    long buckets[SERVE_HIST_BUCKETS]; /* cumulative at report time; per bucket here */
} serve_histogram;

typedef struct {
    pthread_mutex_t mu;
    long requests[SERVE_STATUS_KINDS]; /* by HTTP status (see serve_metrics.c) */
    long prompt_tokens, generated_tokens;
    long queue_depth, running;
    size_t state_bytes, session_bytes;
    long sessions_memory, sessions_disk;
    long prefix_hits, prefix_misses;
    serve_histogram ttft, itl, latency;
} serve_metrics;

int serve_metrics_init(serve_metrics *m); /* 0 or an errno */
void serve_metrics_free(serve_metrics *m);

void serve_metrics_request(serve_metrics *m, int http_status);
void serve_metrics_tokens(serve_metrics *m, long prompt, long generated);
void serve_metrics_observe(serve_metrics *m, serve_histogram *h, double seconds);
/* Gauges the engine thread refreshes every iteration. */
void serve_metrics_gauges(serve_metrics *m, long queue_depth, long running, size_t state_bytes);
void serve_metrics_sessions(serve_metrics *m, long in_memory, long on_disk, size_t bytes);
void serve_metrics_prefix(serve_metrics *m, int hit);

/* The text exposition; malloc'd (NULL when out of memory). */
char *serve_metrics_text(serve_metrics *m);

#endif
