/* serve_http.c - routes, limits and jobs over libmicrohttpd (see serve_http.h). */
#include "serve_http.h"

#include <arpa/inet.h>  // inet_ntop
#include <jansson.h>    // json_pack (/v1/models)
#include <microhttpd.h> // MHD_*
#include <netdb.h>      // getaddrinfo
#include <netinet/in.h> // sockaddr_in, sockaddr_in6
#include <stdio.h>      // snprintf, fprintf
#include <stdlib.h>     // malloc, calloc, realloc, free, strtoll
#include <string.h>     // strcmp, strlen, strncmp, strdup
#include <strings.h>    // strncasecmp
#include <time.h>       // time, nanosleep

#include "clock.h"       // lz_now_seconds
#include "serve_reply.h" // serve_reply_*

/* One HTTP request while its body arrives. */
typedef struct {
    char *body;
    size_t n, cap;
    bool too_big;
    serve_job *job; /* submitted: cancelled if the connection ends first */
    long number;    /* in the access log, and the answer's id */
    const char *id_prefix; /* "cmpl", "chatcmpl", else "req" */
    double t_start;
    char method[16], path[128]; /* for the access log: cut to size, printable ASCII */
} http_request;

/* A client's text into a log line: cut to cap - 1 bytes, anything but printable ASCII as '?'. */
static void log_copy(char *out, size_t cap, const char *in) {
    size_t i = 0;
    for (; in && in[i] && i + 1 < cap; i++)
        out[i] = in[i] > ' ' && in[i] < 127 ? in[i] : '?';
    out[i] = '\0';
}

/* ---- building a job ------------------------------------------------------- */

/* plain: the n_plain ranges of text where special-token text is the client's, tokenized as plain text. */
static bool encode(serve_server *srv, const char *text, size_t len, bool bos, const lz_text_span *plain, int n_plain,
                   int32_t **ids, int *n, serve_error *err) {
    pthread_mutex_lock(&srv->tok_mu);
    lz_status s = lz_tokenizer_encode_plain(srv->tok, text, len, bos, plain, n_plain, ids, n);
    pthread_mutex_unlock(&srv->tok_mu);
    if (s != LZ_OK) {
        serve_set_error(err, 500, "server_error", NULL, NULL, "tokenizer: %s", lz_error_message());
        lz_error_clear();
        return false;
    }
    return true;
}

/* Text can become ids the model lacks when tokenizer.json has more ids than config.json's vocab_size. */
static bool in_vocab(const serve_server *srv, const int32_t *ids, int n, const char *param, serve_error *err) {
    if (lz_tokenizer_check_ids(srv->tok, ids, n, srv->vocab, param) == LZ_OK)
        return true;
    serve_set_error(err, 400, "invalid_request_error", param, NULL, "%s", lz_error_message());
    lz_error_clear();
    return false;
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
    lz_text_span *content = NULL, whole;
    int n_content = 0;
    if (r->kind == SERVE_CHAT) {
        if (serve_chat_render_spans(srv->chat, r->messages, r->n_messages, srv->eos_text, &rendered, &len, &content,
                                    &n_content) != LZ_OK) {
            lz_error_clear();
            return serve_set_error(err, 500, "server_error", "messages", NULL, "messages: out of memory");
        }
        text = rendered;
    } else {
        len = strlen(text);
        whole = (lz_text_span){0, len};
        content = &whole;
        n_content = 1;
    }
    const int n_plain = r->split_special_tokens ? n_content : 0; // the template's markers stay special
    const char *param = r->kind == SERVE_CHAT ? "messages" : "prompt";
    bool ok = encode(srv, text, len, true, content, n_plain, &j->prompt, &j->n_prompt, err) &&
              in_vocab(srv, j->prompt, j->n_prompt, param, err);
    if (ok && r->session)
        ok = encode(srv, text, len, false, content, n_plain, &j->prompt_cont, &j->n_prompt_cont, err);
    if (ok && r->session && r->kind == SERVE_CHAT) {
        const char *end = serve_chat_turn_end(srv->chat, srv->eos_text);
        ok = encode(srv, end, strlen(end), false, NULL, 0, &j->turn_end, &j->n_turn_end, err) &&
             in_vocab(srv, j->turn_end, j->n_turn_end, param, err);
    }
    if (content != &whole)
        free(content);
    free(rendered);
    return ok;
}

/* The request's logit_bias, its ids checked against the model's vocabulary. */
static bool job_bias(const serve_server *srv, const serve_request *r, serve_job *j, serve_error *err) {
    for (int i = 0; i < r->n_logit_bias; i++)
        if (r->logit_bias[i].id >= srv->vocab)
            return serve_set_error(err, 400, "invalid_request_error", "logit_bias", NULL,
                                   "logit_bias: token id %d is out of range (vocabulary of %d)", r->logit_bias[i].id,
                                   srv->vocab);
    if (r->n_logit_bias == 0)
        return true;
    j->logit_bias = malloc(sizeof(serve_logit_bias) * (size_t)r->n_logit_bias);
    if (!j->logit_bias)
        return serve_set_error(err, 500, "server_error", NULL, NULL, "out of memory");
    memcpy(j->logit_bias, r->logit_bias, sizeof(serve_logit_bias) * (size_t)r->n_logit_bias);
    j->n_logit_bias = r->n_logit_bias;
    return true;
}

static serve_job *make_job(serve_server *srv, const serve_request *r, long number, serve_error *err) {
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
    if (ok)
        ok = job_bias(srv, r, j, err);
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
    p.seed = r->seed >= 0 ? (uint64_t)r->seed : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull + (uint64_t)number;
    j->sampling = p;
    j->t_submit = lz_now_seconds();
    j->number = number;
    return j;
}

/* ---- routes ----------------------------------------------------------------- */

/* "Authorization: Bearer KEY": the scheme in any case (RFC 7235), then spaces;
 * *key (NUL-terminated) and *n: the rest of the value, all of it. (libmicrohttpd
 * 0.9.x ends a header value at a NUL byte: bytes after a NUL never get here.) */
static bool bearer_token(struct MHD_Connection *c, const char **key, size_t *n) {
    static const char name[] = MHD_HTTP_HEADER_AUTHORIZATION;
    const char *h = NULL;
    size_t len = 0;
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, name, sizeof name - 1, &h, &len) != MHD_YES || !h ||
        len < 7 || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    size_t at = 7;
    while (at < len && h[at] == ' ')
        at++;
    *key = h + at;
    *n = len - at;
    return true;
}

/* The whole of given[0..n) against the key ("KEYx" and "KEY junk" are not it), in a
 * time that depends on the key's length only, not on where they first differ. */
static bool same_key(const char *given, size_t n, const char *key) {
    const size_t k = strlen(key);
    unsigned char diff = n != k;
    for (size_t i = 0; i < k; i++)
        diff |= (unsigned char)(key[i] ^ (i < n ? given[i] : 0));
    return diff == 0;
}

/* --session-per-key: the job's session is stored under a hash of the
 * request's bearer token, so that only holders of that key continue it. */
static bool key_session(struct MHD_Connection *c, serve_job *j, serve_error *err) {
    const char *key;
    size_t n;
    if (!bearer_token(c, &key, &n) || n == 0)
        return serve_set_error(err, 401, "invalid_request_error", "session", "invalid_api_key",
                               "session: this server keeps sessions per API key (--session-per-key): send "
                               "Authorization: Bearer KEY");
    char *keyed;
    if (serve_session_keyed_name(key, j->session, &keyed) != LZ_OK) {
        lz_error_clear();
        return serve_set_error(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    free(j->session);
    j->session = keyed;
    return true;
}

static enum MHD_Result refuse(serve_server *srv, struct MHD_Connection *c, int status) {
    return serve_reply_error_text(srv, c, status, status == 429 ? "rate_limit_error" : "server_error",
                                  status == 429 ? "queue_full" : "shutting_down",
                                  status == 429 ? "the request queue is full (--queue-size); try again later"
                                                : "the server is shutting down");
}

static enum MHD_Result generate(serve_server *srv, struct MHD_Connection *c, http_request *req, serve_kind kind) {
    req->id_prefix = kind == SERVE_CHAT ? "chatcmpl" : "cmpl";
    if (*srv->stop)
        return refuse(srv, c, 503);
    serve_request r;
    serve_error err;
    if (!serve_parse_request(req->body ? req->body : "", req->n, kind, &r, &err))
        return serve_reply_error(srv, c, &err);
    if (r.ignored[0])
        fprintf(stderr, "lizard serve: %s-%ld: ignored fields the API does not define: %s\n", req->id_prefix,
                req->number, r.ignored);
    if (r.model && strcmp(r.model, srv->model_name) != 0) {
        serve_set_error(&err, 404, "invalid_request_error", "model", "model_not_found",
                        "model: '%.100s' is not served here (this server has '%.100s')", r.model, srv->model_name);
        serve_request_free(&r);
        return serve_reply_error(srv, c, &err);
    }
    serve_job *j = make_job(srv, &r, req->number, &err);
    if (j && srv->session_per_key && j->session && !key_session(c, j, &err)) {
        serve_job_release(j);
        j = NULL;
    }
    if (!j) {
        serve_request_free(&r);
        return serve_reply_error(srv, c, &err);
    }
    const int refused = serve_scheduler_submit(srv->sched, j);
    enum MHD_Result ok;
    if (refused) {
        ok = refuse(srv, c, refused);
        serve_job_release(j);
    } else {
        req->job = j; // cancelled if the connection ends first
        ok = r.stream ? serve_reply_stream(srv, c, &r, j) : serve_reply_whole(srv, c, &r, j);
    }
    serve_request_free(&r);
    return ok;
}

static enum MHD_Result models(serve_server *srv, struct MHD_Connection *c) {
    json_t *root = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", srv->model_name,
                             "object", "model", "created", (json_int_t)0, "owned_by", "lizard");
    char *body = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return serve_reply_body(srv, c, 200, body, "application/json");
}

/* 503 while draining or while an engine step has run past --health-step-timeout
 * (a stuck device or a stopped pipeline rank), as load balancers expect. */
static enum MHD_Result health(serve_server *srv, struct MHD_Connection *c) {
    char body[96];
    const double step = serve_scheduler_step_seconds(srv->sched);
    int status = 200;
    if (*srv->stop)
        status = 503, snprintf(body, sizeof body, "{\"status\":\"draining\"}");
    else if (step > srv->health_step_timeout)
        status = 503, snprintf(body, sizeof body, "{\"status\":\"stalled\",\"step_seconds\":%.1f}", step);
    else
        snprintf(body, sizeof body, "{\"status\":\"ok\"}");
    return serve_reply_body(srv, c, status, strdup(body), "application/json");
}

static bool authorized(const serve_server *srv, struct MHD_Connection *c) {
    if (!srv->api_key)
        return true;
    const char *key;
    size_t n;
    return bearer_token(c, &key, &n) && n > 0 && same_key(key, n, srv->api_key); // an empty token is no key
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
        return serve_reply_error_text(srv, c, 404, "invalid_request_error", "not_found", "no such path");
    if (strcmp(method, hit->method) != 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s takes %s", hit->path, hit->method);
        return serve_reply_error_text(srv, c, 405, "invalid_request_error", "method_not_allowed", msg);
    }
    if (strncmp(url, "/v1/", 4) == 0 && !authorized(srv, c))
        return serve_reply_error_text(srv, c, 401, "invalid_request_error", "invalid_api_key",
                               "missing or wrong API key (Authorization: Bearer KEY)");
    if (req->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body larger than %ld bytes", srv->max_body_bytes);
        return serve_reply_error_text(srv, c, 413, "invalid_request_error", "request_too_large", msg);
    }
    if (strcmp(url, "/health") == 0)
        return health(srv, c);
    if (strcmp(url, "/metrics") == 0)
        return serve_reply_body(srv, c, 200, serve_metrics_text(srv->metrics), "text/plain; version=0.0.4");
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
        req->number = atomic_fetch_add(&srv->next_id, 1);
        req->id_prefix = "req";
        req->t_start = lz_now_seconds();
        log_copy(req->method, sizeof req->method, method);
        log_copy(req->path, sizeof req->path, url);
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

static const char *ended_early(enum MHD_RequestTerminationCode toe) {
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return "";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return " (ended early: connection timeout)";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return " (ended early: server stopped)";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
    case MHD_REQUEST_TERMINATED_READ_ERROR:
        return " (ended early: client gone)";
    default:
        return " (ended early: error)";
    }
}

/* One line per request on stderr: client, method, path, status ("-": none
 * sent), id, tokens, seconds since its headers came. */
static void access_log(const serve_server *srv, struct MHD_Connection *c, const http_request *req,
                       enum MHD_RequestTerminationCode toe) {
    const union MHD_ConnectionInfo *who = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char addr[INET6_ADDRSTRLEN] = "-";
    if (who && who->client_addr && who->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)who->client_addr)->sin_addr, addr, sizeof addr);
    else if (who && who->client_addr && who->client_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)who->client_addr)->sin6_addr, addr, sizeof addr);
    const union MHD_ConnectionInfo *sent = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    char status[12] = "-";
    if (sent && sent->http_status)
        snprintf(status, sizeof status, "%u", sent->http_status);
    int prompt = 0, completion = 0;
    if (req->job) {
        pthread_mutex_lock(&req->job->mu);
        prompt = req->job->prompt_tokens;
        completion = req->job->answered_tokens;
        pthread_mutex_unlock(&req->job->mu);
    }
    fprintf(stderr, "lizard serve: %s %s %s %s %s-%ld prompt_tokens=%d completion_tokens=%d %.3fs%s\n", addr,
            req->method, req->path, status, req->id_prefix, req->number, prompt, completion,
            lz_now_seconds() - req->t_start, ended_early(toe));
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve_server *srv = cls;
    http_request *req = *con_cls;
    if (!req)
        return;
    atomic_fetch_sub(&srv->in_flight, 1);
    if (srv->access_log)
        access_log(srv, c, req, toe);
    if (req->job) {
        serve_job_cancel(req->job); // a no-op once it is done
        serve_job_release(req->job);
    }
    free(req->body);
    free(req);
    *con_cls = NULL;
}

static struct MHD_Daemon *listen_at(serve_server *srv, const struct addrinfo *at) {
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC;
    if (at->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    const uint16_t port = ntohs(at->ai_family == AF_INET6 ? ((const struct sockaddr_in6 *)at->ai_addr)->sin6_port
                                                          : ((const struct sockaddr_in *)at->ai_addr)->sin_port);
    return MHD_start_daemon(flags, port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, at->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)1024, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_END);
}

static lz_status resolve(const char *host, int port, struct addrinfo **found) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    const struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                   .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG};
    const int rc = getaddrinfo(host, service, &hints, found);
    if (rc != 0)
        return lz_fail(LZ_ERR_INPUT, "lizard serve: --host %s: %s", host, gai_strerror(rc));
    return LZ_OK;
}

lz_status serve_http_check_host(const char *host) {
    struct addrinfo *found = NULL;
    LZ_TRY(resolve(host, 0, &found));
    freeaddrinfo(found);
    return LZ_OK;
}

lz_status serve_http_start(serve_server *srv, const char *host, int port, int *bound_port) {
    struct addrinfo *found = NULL;
    LZ_TRY(resolve(host, port, &found));
    srv->daemon = NULL;
    for (const struct addrinfo *at = found; at && !srv->daemon; at = at->ai_next)
        if (at->ai_family == AF_INET || at->ai_family == AF_INET6)
            srv->daemon = listen_at(srv, at);
    freeaddrinfo(found);
    if (!srv->daemon)
        return lz_fail(LZ_ERR_IO, "lizard serve: cannot listen on %s:%d (in use, or not allowed)", host, port);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : port;
    return LZ_OK;
}

void serve_http_stop(serve_server *srv) {
    const sig_atomic_t signals = *srv->stop;
    const double until = lz_now_seconds() + 2;
    while (srv->daemon && atomic_load(&srv->in_flight) > 0 && lz_now_seconds() < until && *srv->stop == signals) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
}
