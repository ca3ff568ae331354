/* serve_http.c - routes, limits and answers over libmicrohttpd (see serve_http.h). */
#include "serve_http.h"

#include <arpa/inet.h>   // inet_pton, htons
#include <errno.h>       // errno
#include <jansson.h>     // json_pack (/v1/models)
#include <microhttpd.h>  // MHD_*
#include <netinet/in.h>  // sockaddr_in
#include <poll.h>        // poll, POLLRDHUP
#include <stdio.h>       // snprintf
#include <stdlib.h>      // malloc, free
#include <string.h>      // strcmp, strlen, strncmp
#include <sys/socket.h>  // recv, MSG_PEEK
#include <time.h>        // time, clock_gettime

#include "clock.h"      // lz_now_seconds
#include "serve_text.h" // serve_text

/* One HTTP request while its body arrives. */
typedef struct {
    char *body;
    size_t n, cap;
    bool too_big;
    serve_job *job; /* submitted: cancelled if the connection ends first */
} http_request;

/* ---- answers ------------------------------------------------------------ */

static enum MHD_Result send_body(serve_server *srv, struct MHD_Connection *c, int status, char *body,
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

static enum MHD_Result send_error(serve_server *srv, struct MHD_Connection *c, const serve_error *e) {
    return send_body(srv, c, e->http_status, serve_error_json(e), "application/json");
}

static enum MHD_Result send_error_text(serve_server *srv, struct MHD_Connection *c, int status, const char *type,
                                       const char *code, const char *message) {
    serve_error e;
    serve_set_error(&e, status, type, NULL, code, "%s", message);
    return send_body(srv, c, status, serve_error_json(&e), "application/json");
}

/* ---- the client's socket -------------------------------------------------- */

/* True once the peer has closed its end (a request waiting for tokens notices a
 * disconnect here rather than at its next write). */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info)
        return false;
    struct pollfd p = {.fd = info->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
        return true;
    char byte;
    const ssize_t k = recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
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

/* Until the job is admitted (or, with until_done, finished); false when the client left. */
static bool wait_job(serve_job *j, struct MHD_Connection *c, bool until_done) {
    pthread_mutex_lock(&j->mu);
    while (!(until_done ? j->done : j->admitted || j->done)) {
        pthread_mutex_unlock(&j->mu);
        if (client_gone(c))
            return false;
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
    return send_error(srv, c, &e);
}

/* ---- building a job ------------------------------------------------------- */

static bool encode(serve_server *srv, const char *text, size_t len, bool bos, int32_t **ids, int *n,
                   serve_error *err) {
    pthread_mutex_lock(&srv->tok_mu);
    lz_status s = lz_tokenizer_encode(srv->tok, text, len, bos, ids, n);
    pthread_mutex_unlock(&srv->tok_mu);
    if (s != LZ_OK) {
        serve_set_error(err, 500, "server_error", NULL, NULL, "tokenizer: %s", lz_error_message());
        lz_error_clear();
        return false;
    }
    return true;
}

static bool copy_ids(const int32_t *src, int n, int32_t **out, serve_error *err) {
    *out = malloc(sizeof(int32_t) * (n > 0 ? (size_t)n : 1));
    if (!*out)
        return serve_set_error(err, 500, "server_error", NULL, NULL, "prompt: out of memory");
    if (n > 0)
        memcpy(*out, src, sizeof(int32_t) * (size_t)n);
    return true;
}

/* The prompt's tokens: with BOS for a new sequence and, in a session, without
 * it for a continued one (the server learns which when the job is admitted). */
static bool job_prompt(serve_server *srv, const serve_request *r, serve_job *j, serve_error *err) {
    if (r->prompt_ids) {
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= srv->vocab)
                return serve_set_error(err, 400, "invalid_request_error", "prompt", NULL,
                                       "prompt[%d]: token id %d is out of range (vocabulary of %d)", i,
                                       r->prompt_ids[i], srv->vocab);
        j->n_prompt = r->n_prompt_ids;
        return copy_ids(r->prompt_ids, r->n_prompt_ids, &j->prompt, err);
    }
    char *rendered = NULL;
    size_t len = 0;
    const char *text = r->prompt_text;
    if (r->kind == SERVE_CHAT) {
        if (serve_chat_render(srv->chat, r->messages, r->n_messages, srv->eos_text, &rendered, &len) != LZ_OK) {
            lz_error_clear();
            return serve_set_error(err, 500, "server_error", "messages", NULL, "messages: out of memory");
        }
        text = rendered;
    } else {
        len = strlen(text);
    }
    bool ok = encode(srv, text, len, true, &j->prompt, &j->n_prompt, err);
    if (ok && r->session)
        ok = encode(srv, text, len, false, &j->prompt_cont, &j->n_prompt_cont, err);
    if (ok && r->session && r->kind == SERVE_CHAT) {
        const char *end = serve_chat_turn_end(srv->chat, srv->eos_text);
        ok = encode(srv, end, strlen(end), false, &j->turn_end, &j->n_turn_end, err);
    }
    free(rendered);
    return ok;
}

static serve_job *make_job(serve_server *srv, const serve_request *r, serve_error *err) {
    serve_job *j = serve_job_new();
    if (!j) {
        serve_set_error(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    bool ok = job_prompt(srv, r, j, err);
    if (ok && j->n_prompt > srv->max_prompt_tokens)
        ok = serve_set_error(err, 400, "invalid_request_error", "prompt", "context_length_exceeded",
                             "prompt: %d tokens, more than the %ld this server takes (--max-prompt-tokens)",
                             j->n_prompt, srv->max_prompt_tokens);
    if (ok && j->n_prompt == 0 && !r->session)
        ok = serve_set_error(err, 400, "invalid_request_error", "prompt", NULL, "prompt: the text has no tokens");
    if (ok && r->max_tokens > srv->max_tokens)
        ok = serve_set_error(err, 400, "invalid_request_error", "max_tokens", NULL,
                             "max_tokens: %ld is more than the %ld this server allows (--max-tokens)", r->max_tokens,
                             srv->max_tokens);
    if (ok && r->session && !(j->session = strdup(r->session)))
        ok = serve_set_error(err, 500, "server_error", NULL, NULL, "out of memory");
    if (!ok) {
        serve_job_release(j);
        return NULL;
    }
    j->max_tokens = (int)(r->max_tokens > 0 ? r->max_tokens : srv->max_tokens);
    j->ignore_eos = r->ignore_eos;
    lz_sampler_params p = srv->gen->defaults;
    p.temperature = r->temperature >= 0 ? r->temperature : p.temperature;
    p.top_p = r->top_p > 0 ? r->top_p : p.top_p;
    p.top_k = r->top_k >= 0 ? (int)r->top_k : p.top_k;
    // no seed: a different stream for every request, as OpenAI's API samples
    p.seed = r->seed >= 0 ? (uint64_t)r->seed
                          : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull + (uint64_t)atomic_fetch_add(&srv->next_id, 1);
    j->sampling = p;
    j->t_submit = lz_now_seconds();
    return j;
}

/* Waits for tokens past *consumed (or the job's end) and feeds them to t;
 * false when the client left or memory ran out. */
static bool follow(serve_job *j, struct MHD_Connection *c, serve_text *t, int *consumed, bool *done, bool *failed,
                   bool *at_eos) {
    pthread_mutex_lock(&j->mu);
    while (*consumed == j->n_tokens && !j->done) {
        pthread_mutex_unlock(&j->mu);
        if (client_gone(c))
            return false;
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

static void answer_meta(serve_server *srv, serve_kind kind, char *id, size_t cap, serve_answer_meta *m) {
    snprintf(id, cap, "%s-%ld", kind == SERVE_CHAT ? "chatcmpl" : "cmpl", atomic_fetch_add(&srv->next_id, 1));
    *m = (serve_answer_meta){.id = id, .model = srv->model_name, .created = (long)time(NULL)};
}

/* Follows the tokens as they come, so that a stop string ends the generation early. */
static enum MHD_Result answer_whole(serve_server *srv, struct MHD_Connection *c, const serve_request *r,
                                    serve_job *j) {
    serve_text t;
    serve_text_init(&t, srv->tok, r->stop, r->n_stop);
    int consumed = 0;
    bool done = false, failed = false, at_eos = false, ok = true;
    while (ok && !done && !t.stopped)
        ok = follow(j, c, &t, &consumed, &done, &failed, &at_eos);
    if (ok && t.stopped) { // the engine stops within a step; then the ids no longer change
        serve_job_cancel(j);
        ok = wait_job(j, c, true);
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
    answer_meta(srv, r->kind, id, sizeof id, &m);
    char *body = NULL;
    if (serve_text_flush(&t) == LZ_OK) {
        const char *p;
        size_t n;
        serve_text_take(&t, true, &p, &n);
        m.prompt_tokens = j->prompt_tokens;
        m.cached_tokens = j->cached_tokens;
        m.completion_tokens = t.n_tokens;
        body = serve_answer_json(r->kind, &m, p, n, finish_reason(&t, at_eos), j->tokens,
                                 r->return_token_ids ? t.n_tokens : -1);
    } else {
        lz_error_clear();
    }
    serve_text_free(&t);
    return send_body(srv, c, 200, body, "application/json");
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
    if (!follow(j, st->c, &st->text, &st->consumed, &done, &failed, &at_eos))
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

static enum MHD_Result answer_stream(serve_server *srv, struct MHD_Connection *c, const serve_request *r,
                                     serve_job *j) {
    if (!wait_job(j, c, false))
        return MHD_NO;
    pthread_mutex_lock(&j->mu);
    const bool failed = j->failed && !j->admitted;
    pthread_mutex_unlock(&j->mu);
    if (failed) // refused at admission: a plain error answer
        return send_job_error(srv, c, j);
    stream *st = calloc(1, sizeof *st);
    if (!st)
        return send_body(srv, c, 500, NULL, NULL);
    *st = (stream){.srv = srv, .c = c, .job = j, .kind = r->kind};
    pthread_mutex_lock(&j->mu);
    j->refs++; // the stream's own reference: the response outlives this call
    pthread_mutex_unlock(&j->mu);
    // the stop strings outlive the request: the stream keeps its own copies
    bool copied = true;
    for (int i = 0; i < r->n_stop && copied; i++)
        copied = (st->stops[st->n_stops++] = strdup(r->stop[i])) != NULL;
    answer_meta(srv, r->kind, st->id, sizeof st->id, &st->meta);
    serve_text_init(&st->text, srv->tok, st->stops, st->n_stops);
    struct MHD_Response *resp =
        copied ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free) : NULL;
    if (!resp) {
        stream_free(st);
        return send_body(srv, c, 500, NULL, NULL);
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

/* ---- routes ----------------------------------------------------------------- */

static enum MHD_Result generate(serve_server *srv, struct MHD_Connection *c, http_request *req, serve_kind kind) {
    serve_request r;
    serve_error err;
    if (!serve_parse_request(req->body ? req->body : "", req->n, kind, &r, &err))
        return send_error(srv, c, &err);
    if (r.model && strcmp(r.model, srv->model_name) != 0) {
        serve_set_error(&err, 404, "invalid_request_error", "model", "model_not_found",
                        "model: '%.100s' is not served here (this server has '%.100s')", r.model, srv->model_name);
        serve_request_free(&r);
        return send_error(srv, c, &err);
    }
    serve_job *j = make_job(srv, &r, &err);
    if (!j) {
        serve_request_free(&r);
        return send_error(srv, c, &err);
    }
    const int refused = serve_scheduler_submit(srv->sched, j);
    enum MHD_Result ok;
    if (refused) {
        ok = send_error_text(srv, c, refused, refused == 429 ? "rate_limit_error" : "server_error",
                             refused == 429 ? "queue_full" : "shutting_down",
                             refused == 429 ? "the request queue is full (--queue-size); try again later"
                                            : "the server is shutting down");
        serve_job_release(j);
    } else {
        req->job = j; // cancelled if the connection ends first
        ok = r.stream ? answer_stream(srv, c, &r, j) : answer_whole(srv, c, &r, j);
    }
    serve_request_free(&r);
    return ok;
}

static enum MHD_Result models(serve_server *srv, struct MHD_Connection *c) {
    json_t *root = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", srv->model_name,
                             "object", "model", "created", (json_int_t)0, "owned_by", "lizard");
    char *body = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return send_body(srv, c, 200, body, "application/json");
}

static bool authorized(const serve_server *srv, struct MHD_Connection *c) {
    if (!srv->api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && strncmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, srv->api_key) == 0;
}

typedef struct {
    const char *path, *method;
} route;

static const route routes[] = {{"/health", "GET"},          {"/metrics", "GET"},
                               {"/v1/models", "GET"},       {"/v1/completions", "POST"},
                               {"/v1/chat/completions", "POST"}};

static enum MHD_Result dispatch(serve_server *srv, struct MHD_Connection *c, const char *url, const char *method,
                                http_request *req) {
    const route *hit = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0)
            hit = &routes[i];
    if (!hit)
        return send_error_text(srv, c, 404, "invalid_request_error", "not_found", "no such path");
    if (strcmp(method, hit->method) != 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s takes %s", hit->path, hit->method);
        return send_error_text(srv, c, 405, "invalid_request_error", "method_not_allowed", msg);
    }
    if (strncmp(url, "/v1/", 4) == 0 && !authorized(srv, c))
        return send_error_text(srv, c, 401, "invalid_request_error", "invalid_api_key",
                               "missing or wrong API key (Authorization: Bearer KEY)");
    if (req->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body larger than %ld bytes", srv->max_body_bytes);
        return send_error_text(srv, c, 413, "invalid_request_error", "request_too_large", msg);
    }
    if (strcmp(url, "/health") == 0)
        return send_body(srv, c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (strcmp(url, "/metrics") == 0)
        return send_body(srv, c, 200, serve_metrics_text(srv->metrics), "text/plain; version=0.0.4");
    if (strcmp(url, "/v1/models") == 0)
        return models(srv, c);
    return generate(srv, c, req, strcmp(url, "/v1/completions") == 0 ? SERVE_COMPLETION : SERVE_CHAT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    serve_server *srv = cls;
    http_request *req = *con_cls;
    if (!req) { // headers only so far
        req = calloc(1, sizeof *req);
        if (!req)
            return MHD_NO;
        *con_cls = req;
        atomic_fetch_add(&srv->in_flight, 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        req->too_big = cl && strtoll(cl, NULL, 10) > srv->max_body_bytes;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!req->too_big && req->n + *upload_size > (size_t)srv->max_body_bytes)
            req->too_big = true;
        if (!req->too_big) {
            if (req->n + *upload_size + 1 > req->cap) {
                const size_t cap = (req->n + *upload_size + 1) * 2;
                char *grown = realloc(req->body, cap);
                if (!grown)
                    return MHD_NO;
                req->body = grown, req->cap = cap;
            }
            memcpy(req->body + req->n, upload, *upload_size);
            req->n += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(srv, c, url, method, req);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve_server *srv = cls;
    http_request *req = *con_cls;
    if (!req)
        return;
    atomic_fetch_sub(&srv->in_flight, 1);
    if (req->job) {
        serve_job_cancel(req->job); // a no-op once it is done
        serve_job_release(req->job);
    }
    free(req->body);
    free(req);
    *con_cls = NULL;
}

lz_status serve_http_start(serve_server *srv, const char *host, int port, int *bound_port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return lz_fail(LZ_ERR_INPUT, "lizard serve: --host: expected an IPv4 address, got '%s'", host);
    srv->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC,
                                   (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, &addr,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_LIMIT,
                                   (unsigned)1024, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_END);
    if (!srv->daemon)
        return lz_fail(LZ_ERR_IO, "lizard serve: cannot listen on %s:%d (in use, or not allowed)", host, port);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : port;
    return LZ_OK;
}

void serve_http_stop(serve_server *srv) {
    const double until = lz_now_seconds() + 30;
    while (srv->daemon && atomic_load(&srv->in_flight) > 0 && lz_now_seconds() < until) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
}
