/* serve_metrics.c - counters, gauges and histograms for /metrics. */
#include "serve_metrics.h"

#include <stdarg.h> // va_list
#include <stdio.h>  // vsnprintf
#include <stdlib.h> // realloc, free
#include <string.h> // memset

static const int status_kinds[SERVE_STATUS_KINDS] = {200, 400, 401, 404, 405, 409, 413, 429, 500, 503};
/* Upper bounds in seconds; the last bucket is +Inf. */
static const double bucket_le[SERVE_HIST_BUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                         0.25,  0.5,    1,     2.5,  5,     10};

int serve_metrics_init(serve_metrics *m) {
    memset(m, 0, sizeof *m);
    return pthread_mutex_init(&m->mu, NULL);
}

void serve_metrics_free(serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void serve_metrics_request(serve_metrics *m, int http_status) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SERVE_STATUS_KINDS; i++)
        if (status_kinds[i] == http_status)
            m->requests[i]++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_tokens(serve_metrics *m, long prompt, long generated) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt;
    m->generated_tokens += generated;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_observe(serve_metrics *m, serve_histogram *h, double seconds) {
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < SERVE_HIST_BUCKETS - 1 && seconds > bucket_le[b])
        b++;
    h->buckets[b]++;
    h->sum += seconds;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_gauges(serve_metrics *m, long queue_depth, long running, size_t state_bytes) {
    pthread_mutex_lock(&m->mu);
    m->queue_depth = queue_depth;
    m->running = running;
    m->state_bytes = state_bytes;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_sessions(serve_metrics *m, long in_memory, long on_disk, size_t bytes) {
    pthread_mutex_lock(&m->mu);
    m->sessions_memory = in_memory;
    m->sessions_disk = on_disk;
    m->session_bytes = bytes;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_prefix(serve_metrics *m, int hit) {
    pthread_mutex_lock(&m->mu);
    if (hit)
        m->prefix_hits++;
    else
        m->prefix_misses++;
    pthread_mutex_unlock(&m->mu);
}

typedef struct {
    char *p;
    size_t n, cap;
    int failed;
} out_buf;

static void emit(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(out_buf *o, const char *fmt, ...) {
    for (int attempt = 0; attempt < 2 && !o->failed; attempt++) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(o->p ? o->p + o->n : NULL, o->p ? o->cap - o->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->failed = 1;
        } else if (o->p && o->n + (size_t)k < o->cap) {
            o->n += (size_t)k;
            return;
        } else {
            const size_t cap = (o->cap + (size_t)k + 1) * 2;
            char *grown = realloc(o->p, cap);
            if (!grown)
                o->failed = 1;
            else
                o->p = grown, o->cap = cap;
        }
    }
}

static void histogram(out_buf *o, const char *name, const char *help, const serve_histogram *h) {
    emit(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long cumulative = 0;
    for (int b = 0; b < SERVE_HIST_BUCKETS; b++) {
        cumulative += h->buckets[b];
        if (b < SERVE_HIST_BUCKETS - 1)
            emit(o, "%s_bucket{le=\"%g\"} %ld\n", name, bucket_le[b], cumulative);
        else
            emit(o, "%s_bucket{le=\"+Inf\"} %ld\n", name, cumulative);
    }
    emit(o, "%s_sum %.6f\n%s_count %ld\n", name, h->sum, name, h->count);
}

static void scalar(out_buf *o, const char *type, const char *name, const char *help, double v) {
    emit(o, "# HELP %s %s\n# TYPE %s %s\n%s %.0f\n", name, help, name, type, name, v);
}

char *serve_metrics_text(serve_metrics *m) {
    out_buf o = {0};
    pthread_mutex_lock(&m->mu);
    emit(&o, "# HELP lizard_requests_total HTTP requests answered, by status\n# TYPE lizard_requests_total counter\n");
    for (int i = 0; i < SERVE_STATUS_KINDS; i++)
        emit(&o, "lizard_requests_total{status=\"%d\"} %ld\n", status_kinds[i], m->requests[i]);
    scalar(&o, "counter", "lizard_prompt_tokens_total", "prompt tokens received", (double)m->prompt_tokens);
    scalar(&o, "counter", "lizard_generation_tokens_total", "tokens generated", (double)m->generated_tokens);
    scalar(&o, "gauge", "lizard_queue_depth", "requests waiting for a state slot", (double)m->queue_depth);
    scalar(&o, "gauge", "lizard_running_sequences", "sequences holding a state slot", (double)m->running);
    scalar(&o, "gauge", "lizard_state_bytes_in_use",
           "state bytes the running sequences hold (rank 0's layers under mpirun)", (double)m->state_bytes);
    scalar(&o, "gauge", "lizard_session_bytes", "bytes of saved sessions held in memory", (double)m->session_bytes);
    scalar(&o, "gauge", "lizard_sessions_in_memory", "saved sessions held in memory", (double)m->sessions_memory);
    scalar(&o, "gauge", "lizard_sessions_on_disk", "saved sessions spilled to --session-dir", (double)m->sessions_disk);
    scalar(&o, "counter", "lizard_prefix_cache_hits_total", "prompts that continued a cached prefix",
           (double)m->prefix_hits);
    scalar(&o, "counter", "lizard_prefix_cache_misses_total", "prompts that found no cached prefix",
           (double)m->prefix_misses);
    const long looked = m->prefix_hits + m->prefix_misses;
    emit(&o, "# HELP lizard_prefix_cache_hit_rate hits / lookups\n# TYPE lizard_prefix_cache_hit_rate gauge\n"
             "lizard_prefix_cache_hit_rate %.4f\n", looked ? (double)m->prefix_hits / (double)looked : 0.0);
    histogram(&o, "lizard_time_to_first_token_seconds", "submission to first generated token", &m->ttft);
    histogram(&o, "lizard_inter_token_latency_seconds", "time between two tokens of a sequence", &m->itl);
    histogram(&o, "lizard_request_latency_seconds", "submission to last token", &m->latency);
    pthread_mutex_unlock(&m->mu);
    if (o.failed) {
        free(o.p);
        return NULL;
    }
    return o.p;
}
