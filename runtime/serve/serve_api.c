/* serve_api.c - request parsing and answer JSON (see serve_api.h). */
#include "serve_api.h"
#include "utf8_clean.h" // lz_utf8_clean

#include <jansson.h> // json_loadb, json_pack
#include <math.h>    // isfinite
#include <stdarg.h>  // va_list
#include <stdio.h>   // vsnprintf
#include <stdlib.h>  // malloc, calloc, free
#include <string.h>  // strcmp, strdup, memcpy

bool serve_set_error(serve_error *err, int http_status, const char *type, const char *param, const char *code,
                     const char *fmt, ...) {
    err->http_status = http_status;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

#define BAD(param, ...) serve_set_error(err, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define UNSUPPORTED(param, ...) \
    serve_set_error(err, 400, "invalid_request_error", param, "unsupported_value", __VA_ARGS__)

char *serve_error_json(const serve_error *err) {
    // both may end inside a UTF-8 character where they were cut to size
    char *message = lz_utf8_clean(err->message, strlen(err->message));
    char *param = lz_utf8_clean(err->param, strlen(err->param));
    json_t *root = message && param ? json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", message, "type",
                                                err->type, "param", param[0] ? param : NULL, "code", err->code)
                                    : NULL;
    char *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    free(message);
    free(param);
    return out;
}

/* ---- request fields ---------------------------------------------------- */

static bool get_string(json_t *v, const char *name, char **out, serve_error *err) {
    if (!json_is_string(v))
        return BAD(name, "%s: expected a string", name);
    *out = strdup(json_string_value(v));
    return *out ? true : serve_set_error(err, 500, "server_error", name, NULL, "%s: out of memory", name);
}

static bool get_int(json_t *v, const char *name, long min, long max, long *out, serve_error *err) {
    if (!json_is_integer(v))
        return BAD(name, "%s: expected an integer", name);
    const json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return BAD(name, "%s: %lld is out of range [%ld, %ld]", name, (long long)x, min, max);
    *out = (long)x;
    return true;
}

static bool get_number(json_t *v, const char *name, double min, double max, double *out, serve_error *err) {
    if (!json_is_number(v))
        return BAD(name, "%s: expected a number", name);
    const double x = json_number_value(v);
    if (!isfinite(x) || x < min || x > max)
        return BAD(name, "%s: %g is out of range [%g, %g]", name, x, min, max);
    *out = x;
    return true;
}

static bool get_bool(json_t *v, const char *name, bool *out, serve_error *err) {
    if (!json_is_boolean(v))
        return BAD(name, "%s: expected true or false", name);
    *out = json_is_true(v);
    return true;
}

/* A string prompt, a list of token ids, or a list of one string. */
static bool get_prompt(json_t *v, serve_request *r, serve_error *err) {
    if (json_is_string(v))
        return get_string(v, "prompt", &r->prompt_text, err);
    if (!json_is_array(v) || json_array_size(v) == 0)
        return BAD("prompt", "prompt: expected a string, a list of token ids or a list of one string");
    if (json_is_string(json_array_get(v, 0))) {
        if (json_array_size(v) != 1)
            return BAD("prompt", "prompt: one prompt per request (a list of %zu strings)", json_array_size(v));
        return get_string(json_array_get(v, 0), "prompt", &r->prompt_text, err);
    }
    const size_t n = json_array_size(v);
    if (n > 1u << 24)
        return BAD("prompt", "prompt: %zu token ids is too many", n);
    r->prompt_ids = malloc(sizeof(int32_t) * n);
    if (!r->prompt_ids)
        return serve_set_error(err, 500, "server_error", "prompt", NULL, "prompt: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return BAD("prompt", "prompt[%zu]: expected a token id (an integer >= 0)", i);
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)json_integer_value(x);
    }
    return true;
}

/* content: a string or a list of {"type": "text", "text": ...} parts, joined. */
static bool get_content(json_t *v, size_t index, char **out, serve_error *err) {
    if (json_is_string(v))
        return get_string(v, "messages", out, err);
    if (!json_is_array(v))
        return BAD("messages", "messages[%zu].content: expected a string or a list of text parts", index);
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *part = json_array_get(v, i), *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text) || json_object_size(part) != 2)
            return BAD("messages", "messages[%zu].content[%zu]: expected {\"type\": \"text\", \"text\": \"...\"}",
                       index, i);
        total += json_string_length(text);
    }
    *out = malloc(total + 1);
    if (!*out)
        return serve_set_error(err, 500, "server_error", "messages", NULL, "messages: out of memory");
    size_t at = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *text = json_object_get(json_array_get(v, i), "text");
        memcpy(*out + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    (*out)[at] = '\0';
    return true;
}

static bool get_messages(json_t *v, serve_request *r, serve_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0)
        return BAD("messages", "messages: expected a non-empty list of messages");
    const size_t n = json_array_size(v);
    r->messages = calloc(n, sizeof(serve_message));
    if (!r->messages)
        return serve_set_error(err, 500, "server_error", "messages", NULL, "messages: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i), *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_object(m))
            return BAD("messages", "messages[%zu]: expected an object", i);
        const char *key;
        json_t *val;
        json_object_foreach(m, key, val) {
            if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0 && strcmp(key, "name") != 0)
                return BAD("messages", "messages[%zu]: unknown field '%s'", i, key);
            if (strcmp(key, "name") == 0 && !json_is_string(val))
                return BAD("messages", "messages[%zu].name: expected a string", i);
        }
        if (!json_is_string(role) || (strcmp(json_string_value(role), "system") != 0 &&
                                      strcmp(json_string_value(role), "user") != 0 &&
                                      strcmp(json_string_value(role), "assistant") != 0))
            return BAD("messages", "messages[%zu].role: expected \"system\", \"user\" or \"assistant\"", i);
        if (!content)
            return BAD("messages", "messages[%zu].content is required", i);
        r->n_messages++;
        if (!get_string(role, "messages", &r->messages[i].role, err) ||
            !get_content(content, i, &r->messages[i].content, err))
            return false;
    }
    return true;
}

static bool get_stop(json_t *v, serve_request *r, serve_error *err) {
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return BAD("stop", "stop: an empty string never matches");
        r->n_stop = 1;
        return get_string(v, "stop", &r->stop[0], err);
    }
    if (!json_is_array(v) || json_array_size(v) > SERVE_MAX_STOPS)
        return BAD("stop", "stop: expected a string or a list of at most %d strings", SERVE_MAX_STOPS);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return BAD("stop", "stop[%zu]: expected a non-empty string", i);
        r->n_stop++;
        if (!get_string(s, "stop", &r->stop[i], err))
            return false;
    }
    return true;
}

/* Session names become file names: letters, digits, '-', '_', '.', not starting with '.'. */
static bool get_session(json_t *v, serve_request *r, serve_error *err) {
    if (!json_is_string(v))
        return BAD("session", "session: expected a string");
    const char *s = json_string_value(v);
    const size_t n = json_string_length(v);
    bool ok = n > 0 && n <= SERVE_MAX_SESSION_NAME && s[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
             s[i] == '-' || s[i] == '_' || s[i] == '.';
    if (!ok)
        return BAD("session", "session: expected 1-%d letters, digits, '-', '_' or '.' (not starting with '.')",
                   SERVE_MAX_SESSION_NAME);
    return get_string(v, "session", &r->session, err);
}

static bool is_string_of(json_t *v, const char *a, const char *b) {
    return json_is_string(v) && (strcmp(json_string_value(v), a) == 0 || (b && strcmp(json_string_value(v), b) == 0));
}

/* Whether v is the value of an answer-changing field that changes nothing. */
static bool neutral_value(const char *key, json_t *v) {
    if (strcmp(key, "n") == 0 || strcmp(key, "best_of") == 0)
        return json_is_integer(v) && json_integer_value(v) == 1;
    if (strcmp(key, "presence_penalty") == 0 || strcmp(key, "frequency_penalty") == 0)
        return json_is_number(v) && json_number_value(v) == 0;
    if (strcmp(key, "logprobs") == 0 || strcmp(key, "echo") == 0)
        return json_is_false(v);
    if (strcmp(key, "top_logprobs") == 0)
        return json_is_integer(v) && json_integer_value(v) == 0;
    if (strcmp(key, "tools") == 0 || strcmp(key, "functions") == 0)
        return json_is_array(v) && json_array_size(v) == 0;
    if (strcmp(key, "tool_choice") == 0 || strcmp(key, "function_call") == 0) // without tools "auto" is "none"
        return is_string_of(v, "none", "auto");
    if (strcmp(key, "response_format") == 0)
        return json_is_object(v) && json_object_size(v) == 1 && is_string_of(json_object_get(v, "type"), "text", NULL);
    return is_string_of(v, "", NULL); // suffix
}

/* Fields the API defines that would change the answer in a way this server
 * does not offer: accepted only at the value that changes nothing, as vLLM does. */
static const struct {
    const char *name, *accepted; /* the value that changes nothing, for the message */
} neutral_fields[] = {{"n", "1"},
                      {"best_of", "1"},
                      {"presence_penalty", "0"},
                      {"frequency_penalty", "0"},
                      {"logprobs", "false or null"},
                      {"echo", "false or null"},
                      {"top_logprobs", "0 or null"},
                      {"tools", "[] or null: no function calling"},
                      {"functions", "[] or null: no function calling"},
                      {"tool_choice", "\"none\", \"auto\" or null: no function calling"},
                      {"function_call", "\"none\", \"auto\" or null: no function calling"},
                      {"response_format", "{\"type\": \"text\"} or null: no JSON mode or schema"},
                      {"suffix", "\"\" or null"}};

/* A field the API defines but this server does not support: accepted at the value that changes
 * nothing, else refused by name. A field the API does not define is ignored and named in
 * r->ignored (the server logs it), as vLLM does, so that clients sending extensions still work. */
static bool check_default(const char *key, json_t *v, serve_request *r, serve_error *err) {
    for (size_t i = 0; i < sizeof neutral_fields / sizeof neutral_fields[0]; i++)
        if (strcmp(key, neutral_fields[i].name) == 0)
            return neutral_value(key, v) ? true
                                         : UNSUPPORTED(key, "%s: not supported by this server (only %s)", key,
                                                       neutral_fields[i].accepted);
    size_t used = strlen(r->ignored);
    if (used && used + 2 < sizeof r->ignored)
        used += (size_t)snprintf(r->ignored + used, sizeof r->ignored - used, ", ");
    for (const char *k = key; *k && used + 1 < sizeof r->ignored; k++) // printable: it goes to a log line
        r->ignored[used++] = *k >= 0x20 && *k < 0x7f ? *k : '?';
    r->ignored[used] = '\0';
    return true;
}

/* Fields the API defines that change nothing here: their type is checked, their value ignored. */
static const struct {
    const char *name;
    char type; /* 's' string, 'o' object, 'b' boolean */
} ignored_fields[] = {{"user", 's'},        {"metadata", 'o'},          {"store", 'b'},
                      {"service_tier", 's'}, {"parallel_tool_calls", 'b'}, {"prompt_cache_key", 's'},
                      {"safety_identifier", 's'}};

/* The type an ignored field must have ('s', 'o', 'b'), or 0 when the field is not one of them. */
static char ignored_type(const char *key) {
    for (size_t i = 0; i < sizeof ignored_fields / sizeof ignored_fields[0]; i++)
        if (strcmp(key, ignored_fields[i].name) == 0)
            return ignored_fields[i].type;
    return 0;
}

static bool check_ignored(const char *key, char type, json_t *v, serve_error *err) {
    if (type == 's' && !json_is_string(v))
        return BAD(key, "%s: expected a string", key);
    if (type == 'o' && !json_is_object(v))
        return BAD(key, "%s: expected an object", key);
    if (type == 'b' && !json_is_boolean(v))
        return BAD(key, "%s: expected true or false", key);
    return true;
}

/* Usage comes with every stream's last chunk anyway; obfuscation padding is not sent. */
static bool get_stream_options(json_t *v, serve_error *err) {
    if (!json_is_object(v))
        return BAD("stream_options", "stream_options: expected an object");
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        if (strcmp(key, "include_usage") != 0 && strcmp(key, "include_obfuscation") != 0)
            return BAD("stream_options", "stream_options: unknown field '%s' (include_usage, include_obfuscation)",
                       key);
        if (!json_is_boolean(x) && !json_is_null(x))
            return BAD("stream_options", "stream_options.%s: expected true or false", key);
    }
    return true;
}

/* {"TOKEN_ID": BIAS, ...}, the bias in [-100, 100] as OpenAI defines it. */
static bool get_logit_bias(json_t *v, serve_request *r, serve_error *err) {
    if (!json_is_object(v))
        return BAD("logit_bias", "logit_bias: expected an object of token id -> bias");
    if (json_object_size(v) > SERVE_MAX_LOGIT_BIAS)
        return BAD("logit_bias", "logit_bias: %zu entries, more than %d", json_object_size(v), SERVE_MAX_LOGIT_BIAS);
    r->logit_bias = malloc(sizeof(serve_logit_bias) * (json_object_size(v) ? json_object_size(v) : 1));
    if (!r->logit_bias)
        return serve_set_error(err, 500, "server_error", "logit_bias", NULL, "logit_bias: out of memory");
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        char *end = NULL;
        const long id = key[0] >= '0' && key[0] <= '9' ? strtol(key, &end, 10) : -1;
        if (id < 0 || id > INT32_MAX || !end || *end)
            return BAD("logit_bias", "logit_bias: key '%.40s' is not a token id", key);
        if (!json_is_number(x) || json_number_value(x) < -100 || json_number_value(x) > 100)
            return BAD("logit_bias", "logit_bias[%ld]: expected a number in [-100, 100]", id);
        r->logit_bias[r->n_logit_bias++] = (serve_logit_bias){(int32_t)id, (float)json_number_value(x)};
    }
    return true;
}

static bool parse_field(const char *key, json_t *v, serve_request *r, serve_error *err) {
    const bool chat = r->kind == SERVE_CHAT;
    if (json_is_null(v)) // OpenAI clients send null for an unset optional field
        return true;
    if (strcmp(key, "model") == 0)
        return get_string(v, key, &r->model, err);
    if (!chat && strcmp(key, "prompt") == 0)
        return get_prompt(v, r, err);
    if (chat && strcmp(key, "messages") == 0)
        return get_messages(v, r, err);
    if (strcmp(key, "max_tokens") == 0 || (chat && strcmp(key, "max_completion_tokens") == 0))
        return get_int(v, key, 1, 1 << 24, &r->max_tokens, err);
    if (strcmp(key, "temperature") == 0)
        return get_number(v, key, 0, 2, &r->temperature, err);
    if (strcmp(key, "top_p") == 0) {
        if (!get_number(v, key, 0, 1, &r->top_p, err))
            return false;
        return r->top_p > 0 ? true : BAD(key, "top_p: must be > 0");
    }
    if (strcmp(key, "top_k") == 0) {
        if (!get_int(v, key, -1, 1 << 30, &r->top_k, err))
            return false;
        r->top_k = r->top_k < 0 ? 0 : r->top_k; // -1 = off, as vLLM
        return true;
    }
    if (strcmp(key, "seed") == 0) {
        long s = 0;
        if (!get_int(v, key, 0, (long)(((long long)1 << 53)), &s, err))
            return false;
        r->seed = s;
        return true;
    }
    if (strcmp(key, "stop") == 0)
        return get_stop(v, r, err);
    if (strcmp(key, "stream") == 0)
        return get_bool(v, key, &r->stream, err);
    if (strcmp(key, "stream_options") == 0)
        return get_stream_options(v, err);
    if (strcmp(key, "logit_bias") == 0)
        return get_logit_bias(v, r, err);
    if (strcmp(key, "session") == 0)
        return get_session(v, r, err);
    if (strcmp(key, "return_token_ids") == 0)
        return get_bool(v, key, &r->return_token_ids, err);
    if (strcmp(key, "ignore_eos") == 0)
        return get_bool(v, key, &r->ignore_eos, err);
    if (strcmp(key, "split_special_tokens") == 0)
        return get_bool(v, key, &r->split_special_tokens, err);
    const char type = ignored_type(key);
    return type ? check_ignored(key, type, v, err) : check_default(key, v, r, err);
}

bool serve_parse_request(const char *body, size_t len, serve_kind kind, serve_request *out, serve_error *err) {
    *out = (serve_request){.kind = kind, .max_tokens = -1, .temperature = -1, .top_p = -1, .top_k = -1, .seed = -1,
                           .split_special_tokens = kind == SERVE_CHAT};
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char *clean = lz_utf8_clean(jerr.text, strlen(jerr.text));
        serve_set_error(err, 400, "invalid_request_error", NULL, "invalid_json", "request body: %s (line %d)",
                        clean ? clean : "malformed JSON", jerr.line);
        free(clean);
        return false;
    }
    bool ok = json_is_object(root) ? true : BAD(NULL, "request body: expected a JSON object");
    const char *key;
    json_t *v;
    if (ok)
        json_object_foreach(root, key, v) {
            if (!(ok = parse_field(key, v, out, err)))
                break;
        }
    if (ok && kind == SERVE_COMPLETION && !out->prompt_text && !out->prompt_ids)
        ok = BAD("prompt", "prompt is required");
    if (ok && kind == SERVE_CHAT && !out->messages)
        ok = BAD("messages", "messages is required");
    json_decref(root);
    if (!ok)
        serve_request_free(out);
    return ok;
}

void serve_request_free(serve_request *r) {
    free(r->model);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->session);
    free(r->logit_bias);
    *r = (serve_request){0};
}

/* ---- answers ------------------------------------------------------------- */

static json_t *usage_json(const serve_answer_meta *m) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)m->prompt_tokens, "completion_tokens",
                     (json_int_t)m->completion_tokens, "total_tokens",
                     (json_int_t)(m->prompt_tokens + m->completion_tokens), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)m->cached_tokens);
}

static char *dump(json_t *root) {
    char *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return out;
}

char *serve_answer_json(serve_kind kind, const serve_answer_meta *meta, const char *text, size_t len,
                        const char *finish_reason, const int32_t *ids, int n_ids) {
    char *clean = lz_utf8_clean(text, len);
    if (!clean)
        return NULL;
    json_t *choice = kind == SERVE_CHAT
                         ? json_pack("{s:i, s:{s:s, s:s}, s:n, s:s}", "index", 0, "message", "role", "assistant",
                                     "content", clean, "logprobs", "finish_reason", finish_reason)
                         : json_pack("{s:i, s:s, s:n, s:s}", "index", 0, "text", clean, "logprobs", "finish_reason",
                                     finish_reason);
    free(clean);
    if (choice && n_ids >= 0) {
        json_t *arr = json_array();
        for (int i = 0; arr && i < n_ids; i++)
            json_array_append_new(arr, json_integer(ids[i]));
        json_object_set_new(choice, "token_ids", arr ? arr : json_null());
    }
    json_t *root = choice ? json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", meta->id, "object",
                                      kind == SERVE_CHAT ? "chat.completion" : "text_completion", "created",
                                      (json_int_t)meta->created, "model", meta->model, "choices", choice, "usage",
                                      usage_json(meta))
                          : NULL;
    return dump(root);
}

char *serve_chunk_event(serve_kind kind, const serve_answer_meta *meta, const char *text, size_t len, bool first,
                        const char *finish_reason, bool with_usage) {
    char *clean = lz_utf8_clean(text, len);
    if (!clean)
        return NULL;
    json_t *choice;
    if (kind == SERVE_CHAT) {
        json_t *delta = first ? json_pack("{s:s, s:s}", "role", "assistant", "content", clean)
                              : (len || !finish_reason ? json_pack("{s:s}", "content", clean) : json_object());
        choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "delta", delta, "logprobs", "finish_reason",
                           finish_reason);
    } else {
        choice = json_pack("{s:i, s:s, s:n, s:s?}", "index", 0, "text", clean, "logprobs", "finish_reason",
                           finish_reason);
    }
    free(clean);
    json_t *root = choice ? json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", meta->id, "object",
                                      kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                      (json_int_t)meta->created, "model", meta->model, "choices", choice)
                          : NULL;
    if (root && with_usage)
        json_object_set_new(root, "usage", usage_json(meta));
    char *body = dump(root);
    if (!body)
        return NULL;
    const size_t n = strlen(body);
    char *event = malloc(n + 9);
    if (event) {
        memcpy(event, "data: ", 6);
        memcpy(event + 6, body, n);
        memcpy(event + 6 + n, "\n\n", 3);
    }
    free(body);
    return event;
}
