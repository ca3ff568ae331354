/* serve_api.h - the OpenAI-style HTTP API as data: a request body parsed and
 * checked into a serve_request (every field typed; fields that change nothing
 * here accepted and ignored, those that would change the answer and fields the
 * API does not define refused),
 * errors as {"error": {message, type, param, code}} with their HTTP status,
 * and the JSON of answers and stream chunks. No I/O, no engine: the fuzzer
 * and the HTTP layer both drive it. */
#ifndef LZ_SERVE_API_H
#define LZ_SERVE_API_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t

typedef enum { SERVE_COMPLETION, SERVE_CHAT } serve_kind;

typedef struct {
    char *role;    /* "system" | "user" | "assistant" */
    char *content; /* text (content parts joined) */
} serve_message;

enum { SERVE_MAX_STOPS = 4, SERVE_MAX_SESSION_NAME = 128, SERVE_MAX_LOGIT_BIAS = 1024 };

/* logit_bias: added to a token's logit before sampling (-100 bans it, +100 all but forces it). */
typedef struct {
    int32_t id;
    float bias;
} serve_logit_bias;

typedef struct {
    serve_kind kind;
    char *model;                  /* NULL when absent */
    char *prompt_text;            /* completions: text prompt, or NULL */
    int32_t *prompt_ids;          /* completions: token id prompt, or NULL */
    int n_prompt_ids;
    serve_message *messages;      /* chat */
    int n_messages;
    long max_tokens;              /* -1: the server's default */
    double temperature, top_p;    /* < 0: the model's default */
    long top_k;                   /* < 0: the model's default */
    long long seed;               /* < 0: a fresh seed per request */
    char *stop[SERVE_MAX_STOPS];
    int n_stop;
    bool stream;
    char *session;                /* keep the sequence's state under this name */
    bool return_token_ids;        /* choices[0].token_ids (as vLLM) */
    bool ignore_eos;              /* keep going past eos ids (as vLLM) */
    bool split_special_tokens;    /* special-token text in the client's text is plain text (HF's name);
                                     default: true for chat messages, false for a completion prompt */
    char ignored[128];            /* fields the API does not define, ignored: "a, b" (cut when long) */
    serve_logit_bias *logit_bias; /* NULL when absent; ids not yet checked against the vocabulary */
    int n_logit_bias;
} serve_request;

typedef struct {
    int http_status;   /* 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type;  /* "invalid_request_error", ... */
    char param[64];    /* the field at fault, or "" */
    const char *code;  /* a short machine-readable code, or NULL */
    char message[256];
} serve_error;

/* Parses a request body. On failure returns false and fills *err (400);
 * *out then holds nothing to free. */
bool serve_parse_request(const char *body, size_t len, serve_kind kind, serve_request *out, serve_error *err);
void serve_request_free(serve_request *r);

/* Fills *err (printf-style message) and returns false. */
bool serve_set_error(serve_error *err, int http_status, const char *type, const char *param, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {...}} as a malloc'd string (NULL when out of memory). */
char *serve_error_json(const serve_error *err);

typedef struct {
    const char *id;         /* "cmpl-..." / "chatcmpl-..." */
    const char *model;
    long created;           /* unix seconds */
    long prompt_tokens, completion_tokens, cached_tokens;
} serve_answer_meta;

/* A whole answer: text (any bytes), finish_reason "stop"|"length"; token_ids
 * printed when given (n_ids >= 0). malloc'd JSON. */
char *serve_answer_json(serve_kind kind, const serve_answer_meta *meta, const char *text, size_t len,
                        const char *finish_reason, const int32_t *ids, int n_ids);
/* One server-sent event "data: {...}\n\n" of a stream: a piece of text, and
 * on the last chunk the finish_reason and usage. first: the chat chunk that
 * carries the role. malloc'd. */
char *serve_chunk_event(serve_kind kind, const serve_answer_meta *meta, const char *text, size_t len, bool first,
                        const char *finish_reason, bool with_usage);

#endif
