/* serve_reply.c - answers of `lizard serve`: JSON bodies and errors, a whole
 * completion once its tokens are in, or a stream of server-sent events as they
 * come (see serve_reply.h). */
#include "serve_reply.h"

#include <poll.h>       // poll, POLLHUP
#include <stdio.h>      // snprintf
#include <stdlib.h>     // malloc, calloc, realloc, free
#include <string.h>     // strlen, memcpy, memmove
#include <time.h>       // time, clock_gettime

#include "serve_text.h" // serve_text

/* ---- answers ------------------------------------------------------------ */

enum MHD_Result serve_reply_body(serve_server *srv, struct MHD_Connection *c, int status, char *body,
                                 const char *content_type) {
    if (!body) { // out of memory building the answer
        static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                            "\"code\":null}}";
        status = 500;
        struct MHD_Response *r = MHD_create_response_from_buffer(strlen(oom), oom, MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
        MHD_destroy_response(r);
        serve_metrics_request(srv->metrics, status);
        return ok;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, "Content-Type", content_type);
    if (ok == MHD_YES && status == 401)
        ok = MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    serve_metrics_request(srv->metrics, status);
    return ok;
}

enum MHD_Result serve_reply_error(serve_server *srv, struct MHD_Connection *c, const serve_error *e) {
    return serve_reply_body(srv, c, e->http_status, serve_error_json(e), "application/json");
}

enum MHD_Result serve_reply_error_text(serve_server *srv, struct MHD_Connection *c, int status, const char *type,
                                       const char *code, const char *message) {
    serve_error e;
    serve_set_error(&e, status, type, NULL, code, "%s", message);
    return serve_reply_body(srv, c, status, serve_error_json(&e), "application/json");
}

/* ---- the client's socket -------------------------------------------------- */

/* True once the client's socket is closed: reset by the peer (a write to a
 * client that has closed makes it so) or in error. A peer that has only shut
 * its sending side (`nc -N`, some proxies) still reads its answer: TCP cannot
 * tell it from a peer that has closed until a write, so a whole (unstreamed)
 * answer to a closed client is generated to the end. */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info)
        return false;
    struct pollfd p = {.fd = info->connect_fd, .events = 0}; // POLLHUP and POLLERR come unasked
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* Waits (job->mu held) up to 100 ms for the job to change. */
static void wait_a_little(serve_job *j) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&j->cond, &j->mu, &until);
}

/* When the process is about to end (a pipeline rank failed: serve_http.h's `ending`), the job fails with
 * the reason, so that its client hears why its answer ends instead of a cut connection. */
static void fail_if_ending(const serve_server *srv, serve_job *j) {
    const char *why = srv->ending ? atomic_load(srv->ending) : NULL;
    if (why)
        serve_job_fail(j, 503, "server_error", "pipeline_failed", "%s", why);
}

/* Until the job is admitted (or, with until_done, finished); false when the client left. */
static bool wait_job(const serve_server *srv, serve_job *j, struct MHD_Connection *c, bool until_done) {
    pthread_mutex_lock(&j->mu);
    while (!(until_done ? j->done : j->admitted || j->done)) {
        pthread_mutex_unlock(&j->mu);
        if (client_gone(c))
            return false;
        fail_if_ending(srv, j);
        pthread_mutex_lock(&j->mu);
        if (!(until_done ? j->done : j->admitted || j->done))
            wait_a_little(j);
    }
    pthread_mutex_unlock(&j->mu);
    return true;
}

static enum MHD_Result send_job_error(serve_server *srv, struct MHD_Connection *c, serve_job *j) {
    serve_error e;
    pthread_mutex_lock(&j->mu);
    serve_set_error(&e, j->http_status, j->error_type ? j->error_type : "server_error", NULL, j->error_code, "%s",
                    j->error);
    pthread_mutex_unlock(&j->mu);
    return serve_reply_error(srv, c, &e);
}

static bool follow(const serve_server *srv, serve_job *j, struct MHD_Connection *c, serve_text *t, int *consumed,
                   bool *done, bool *failed, bool *at_eos) {
    fail_if_ending(srv, j);
    pthread_mutex_lock(&j->mu);
    while (*consumed == j->n_tokens && !j->done) {
        pthread_mutex_unlock(&j->mu);
        if (client_gone(c))
            return false;
        fail_if_ending(srv, j);
        pthread_mutex_lock(&j->mu);
        if (*consumed == j->n_tokens && !j->done)
            wait_a_little(j);
    }
    // copied under the lock: the engine may move the array as it grows
    const int fresh = j->n_tokens - *consumed;
    int32_t *ids = fresh > 0 ? malloc(sizeof(int32_t) * (size_t)fresh) : NULL;
    if (ids)
        memcpy(ids, j->tokens + *consumed, sizeof(int32_t) * (size_t)fresh);
    *done = j->done, *failed = j->failed, *at_eos = j->stopped_at_eos;
    pthread_mutex_unlock(&j->mu);
    if (fresh > 0 && !ids)
        return false;
    lz_status s = LZ_OK;
    for (int i = 0; i < fresh && !t->stopped && s == LZ_OK; i++)
        s = serve_text_push(t, ids[i]);
    *consumed += fresh;
    free(ids);
    if (s != LZ_OK)
        lz_error_clear();
    return s == LZ_OK;
}

/* ---- a whole answer --------------------------------------------------------- */

static const char *finish_reason(const serve_text *t, bool at_eos) { return t->stopped || at_eos ? "stop" : "length"; }

static void answer_meta(serve_server *srv, serve_kind kind, const serve_job *j, char *id, size_t cap,
                        serve_answer_meta *m) {
    snprintf(id, cap, "%s-%ld", kind == SERVE_CHAT ? "chatcmpl" : "cmpl", j->number);
    *m = (serve_answer_meta){.id = id, .model = srv->model_name, .created = (long)time(NULL)};
}

/* Follows the tokens as they come, so that a stop string ends the generation early. */
enum MHD_Result serve_reply_whole(serve_server *srv, struct MHD_Connection *c, const serve_request *r,
                                    serve_job *j) {
    serve_text t;
    serve_text_init(&t, srv->tok, r->stop, r->n_stop);
    int consumed = 0;
    bool done = false, failed = false, at_eos = false, ok = true;
    while (ok && !done && !t.stopped)
        ok = follow(srv, j, c, &t, &consumed, &done, &failed, &at_eos);
    if (ok && t.stopped) { // the engine stops within a step; then the ids no longer change
        serve_job_cancel(j);
        ok = wait_job(srv, j, c, true);
    }
    if (!ok) {
        serve_text_free(&t);
        return MHD_NO; // the client left (or memory ran out): nobody to answer
    }
    if (failed) {
        serve_text_free(&t);
        return send_job_error(srv, c, j);
    }
    char id[64];
    serve_answer_meta m;
    answer_meta(srv, r->kind, j, id, sizeof id, &m);
    char *body = NULL;
    if (serve_text_flush(&t) == LZ_OK) {
        const char *p;
        size_t n;
        serve_text_take(&t, true, &p, &n);
        m.prompt_tokens = j->prompt_tokens;
        m.cached_tokens = j->cached_tokens;
        m.completion_tokens = t.n_tokens;
        j->answered_tokens = t.n_tokens;
        body = serve_answer_json(r->kind, &m, p, n, finish_reason(&t, at_eos), j->tokens,
                                 r->return_token_ids ? t.n_tokens : -1);
    } else {
        lz_error_clear();
    }
    serve_text_free(&t);
    return serve_reply_body(srv, c, 200, body, "application/json");
}

/* ---- a stream ------------------------------------------------------------- */

typedef struct {
    serve_server *srv;
    struct MHD_Connection *c;
    serve_job *job;
    serve_kind kind;
    serve_text text;
    char *stops[SERVE_MAX_STOPS];
    int n_stops;
    char id[64];
    serve_answer_meta meta;
    int consumed;       /* the job's tokens handed to text */
    bool first_sent, ended;
    char *out;          /* events not yet written */
    size_t out_n, out_at;
} stream;

static bool queue_event(stream *st, char *event) {
    if (!event)
        return false;
    const size_t k = strlen(event);
    char *grown = realloc(st->out, st->out_n - st->out_at + k + 1);
    if (!grown) {
        free(event);
        return false;
    }
    memmove(grown, grown + st->out_at, st->out_n - st->out_at);
    st->out_n -= st->out_at;
    st->out_at = 0;
    memcpy(grown + st->out_n, event, k + 1);
    st->out_n += k;
    st->out = grown;
    free(event);
    return true;
}

static bool queue_text(stream *st, bool final) {
    const char *p;
    size_t n;
    serve_text_take(&st->text, final, &p, &n);
    if (n == 0 && (st->first_sent || st->kind != SERVE_CHAT))
        return true;
    const bool first = !st->first_sent;
    st->first_sent = true;
    return queue_event(st, serve_chunk_event(st->kind, &st->meta, p, n, first, NULL, false));
}

/* The last events: the finish_reason with usage, or the error; then [DONE]. */
static bool queue_end(stream *st, bool failed, bool at_eos) {
    if (failed) {
        serve_error e;
        pthread_mutex_lock(&st->job->mu);
        serve_set_error(&e, st->job->http_status, st->job->error_type ? st->job->error_type : "server_error", NULL,
                        st->job->error_code, "%s", st->job->error);
        pthread_mutex_unlock(&st->job->mu);
        char *json = serve_error_json(&e), *event = json ? malloc(strlen(json) + 9) : NULL;
        if (event)
            snprintf(event, strlen(json) + 9, "data: %s\n\n", json);
        free(json);
        if (!queue_event(st, event))
            return false;
    } else {
        st->meta.prompt_tokens = st->job->prompt_tokens;
        st->meta.cached_tokens = st->job->cached_tokens;
        st->meta.completion_tokens = st->text.n_tokens;
        st->job->answered_tokens = st->text.n_tokens;
        if (!queue_text(st, true) ||
            !queue_event(st, serve_chunk_event(st->kind, &st->meta, "", 0, false, finish_reason(&st->text, at_eos),
                                               true)))
            return false;
    }
    st->ended = true;
    return queue_event(st, strdup("data: [DONE]\n\n"));
}

/* New tokens into text and events; false when the client left or memory ran out. */
static bool advance(stream *st) {
    serve_job *j = st->job;
    bool done, failed, at_eos;
    if (!follow(st->srv, j, st->c, &st->text, &st->consumed, &done, &failed, &at_eos))
        return false;
    if (st->text.stopped) {
        serve_job_cancel(j); // the answer is complete: the engine frees the slot
        return queue_end(st, false, false);
    }
    if (done && !failed && serve_text_flush(&st->text) != LZ_OK) {
        lz_error_clear();
        return false;
    }
    if (done)
        return queue_end(st, failed, at_eos);
    return queue_text(st, false);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *st = cls;
    while (st->out_at == st->out_n) {
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!advance(st))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    const size_t k = st->out_n - st->out_at < max ? st->out_n - st->out_at : max;
    memcpy(buf, st->out + st->out_at, k);
    st->out_at += k;
    return (ssize_t)k;
}

static void stream_free(void *cls) {
    stream *st = cls;
    serve_job_cancel(st->job); // a no-op once it is done
    serve_job_release(st->job);
    serve_text_free(&st->text);
    for (int i = 0; i < st->n_stops; i++)
        free(st->stops[i]);
    free(st->out);
    free(st);
}

enum MHD_Result serve_reply_stream(serve_server *srv, struct MHD_Connection *c, const serve_request *r,
                                     serve_job *j) {
    if (!wait_job(srv, j, c, false))
        return MHD_NO;
    pthread_mutex_lock(&j->mu);
    const bool failed = j->failed && !j->admitted;
    pthread_mutex_unlock(&j->mu);
    if (failed) // refused at admission: a plain error answer
        return send_job_error(srv, c, j);
    stream *st = calloc(1, sizeof *st);
    if (!st)
        return serve_reply_body(srv, c, 500, NULL, NULL);
    *st = (stream){.srv = srv, .c = c, .job = j, .kind = r->kind};
    pthread_mutex_lock(&j->mu);
    j->refs++; // the stream's own reference: the response outlives this call
    pthread_mutex_unlock(&j->mu);
    // the stop strings outlive the request: the stream keeps its own copies
    bool copied = true;
    for (int i = 0; i < r->n_stop && copied; i++)
        copied = (st->stops[st->n_stops++] = strdup(r->stop[i])) != NULL;
    answer_meta(srv, r->kind, j, st->id, sizeof st->id, &st->meta);
    serve_text_init(&st->text, srv->tok, st->stops, st->n_stops);
    struct MHD_Response *resp =
        copied ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free) : NULL;
    if (!resp) {
        stream_free(st);
        return serve_reply_body(srv, c, 500, NULL, NULL);
    }
    enum MHD_Result ok = MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    if (ok == MHD_YES)
        ok = MHD_add_response_header(resp, "Cache-Control", "no-cache");
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    serve_metrics_request(srv->metrics, 200);
    return ok;
}
