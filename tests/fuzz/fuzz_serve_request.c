/* fuzz_serve_request.c - the HTTP API's request parser (runtime/serve/serve_api.c)
 * and chat formats (runtime/serve/serve_chat.c) on any bytes: a body is accepted or
 * refused without crashing; a refusal is a valid JSON error object; what is
 * accepted renders in both chat formats and answers as valid JSON. */
#include <jansson.h> // json_loads
#include <stdint.h>  // uint8_t
#include <stdlib.h>  // abort, free
#include <string.h>  // strlen

#include "serve_api.h"  // serve_parse_request
#include "serve_chat.h" // serve_chat_render

static void must_be_json(char *text) {
    if (!text)
        abort();
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    if (!v)
        abort(); // everything the server sends must parse
    json_decref(v);
    free(text);
}

static void accepted(const serve_request *r) {
    for (int f = 0; f < 2; f++) {
        char *text = NULL;
        size_t len = 0;
        if (r->kind == SERVE_CHAT && serve_chat_render((serve_chat_format)f, r->messages, r->n_messages, "</s>", &text,
                                                       &len) != LZ_OK)
            abort();
        if (text && strlen(text) != len)
            abort();
        const char *body = text ? text : r->prompt_text ? r->prompt_text : "";
        const serve_answer_meta meta = {"cmpl-1", "m", 1, 2, 3, 0};
        must_be_json(serve_answer_json(r->kind, &meta, body, strlen(body), "stop", r->prompt_ids, r->n_prompt_ids));
        char *event = serve_chunk_event(r->kind, &meta, body, strlen(body), f == 0, f ? "length" : NULL, f == 1);
        if (!event || strncmp(event, "data: ", 6) != 0)
            abort();
        event[strlen(event) - 2] = '\0'; // the "\n\n" that ends an event
        json_t *v = json_loads(event + 6, 0, NULL);
        if (!v)
            abort();
        json_decref(v);
        free(event);
        free(text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int kind = 0; kind < 2; kind++) {
        serve_request r;
        serve_error err;
        lz_error_clear();
        if (serve_parse_request((const char *)data, size, (serve_kind)kind, &r, &err)) {
            accepted(&r);
            serve_request_free(&r);
        } else {
            if (err.http_status < 400 || err.http_status > 599)
                abort();
            must_be_json(serve_error_json(&err));
        }
    }
    return 0;
}
