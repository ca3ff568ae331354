/* test_serve_fields.c - which OpenAI request fields `lizard serve` takes: those
 * that change nothing here are accepted and ignored, logit_bias is parsed, and
 * those that would change the answer are refused with a 400 that names the
 * field (code "unsupported_value"), as vLLM answers; fields the API does not
 * define are ignored and named for the log, as vLLM does. */
#include <string.h> // strcmp, strlen

#include "serve_api.h" // serve_parse_request
#include "test_util.h" // CHECK

static const char *chat_msgs = "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]";

/* {chat_msgs, FIELDS} as a chat request: accepted? (*e filled when not) */
static bool chat(const char *fields, serve_request *r, serve_error *e) {
    char body[2048];
    snprintf(body, sizeof body, "{%s, %s}", chat_msgs, fields);
    return serve_parse_request(body, strlen(body), SERVE_CHAT, r, e);
}

static void accepted(const char *fields) {
    serve_request r;
    serve_error e;
    const bool ok = chat(fields, &r, &e);
    CHECK_MSG(ok, "%s: refused (%d, %s)", fields, e.http_status, e.message);
    if (ok)
        serve_request_free(&r);
}

/* FIELDS -> 400 naming param, with code (NULL: none) */
static void refused(const char *fields, const char *param, const char *code) {
    serve_request r;
    serve_error e;
    const bool ok = chat(fields, &r, &e);
    CHECK_MSG(!ok && e.http_status == 400 && strcmp(e.param, param) == 0 &&
                  (code ? e.code && strcmp(e.code, code) == 0 : e.code == NULL),
              "%s: ok %d, param '%s', code '%s' (want '%s', '%s')", fields, ok, ok ? "" : e.param,
              ok || !e.code ? "" : e.code, param, code ? code : "");
    if (ok)
        serve_request_free(&r);
}

static void ignored_fields(void) {
    accepted("\"user\": \"u-1\", \"metadata\": {\"team\": \"a\"}, \"store\": false, \"service_tier\": \"auto\"");
    accepted("\"parallel_tool_calls\": true, \"prompt_cache_key\": \"k\", \"safety_identifier\": \"s\"");
    accepted("\"stream\": true, \"stream_options\": {\"include_usage\": false, \"include_obfuscation\": true}");
    // at values that change nothing
    accepted("\"tools\": [], \"tool_choice\": \"none\", \"function_call\": \"auto\"");
    accepted("\"response_format\": {\"type\": \"text\"}, \"n\": 1, \"presence_penalty\": 0, \"top_logprobs\": 0");
    accepted("\"logprobs\": false, \"frequency_penalty\": 0.0, \"tools\": null, \"response_format\": null");
    // their types are still checked
    refused("\"metadata\": \"x\"", "metadata", NULL);
    refused("\"store\": 1", "store", NULL);
    refused("\"user\": 5", "user", NULL);
    refused("\"stream_options\": {\"include_usage\": 1}", "stream_options", NULL);
    refused("\"stream_options\": {\"continuous\": true}", "stream_options", NULL);
}

static void answer_changing_fields(void) {
    refused("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", "tools", "unsupported_value");
    refused("\"functions\": [{\"name\": \"f\"}]", "functions", "unsupported_value");
    refused("\"tool_choice\": \"required\"", "tool_choice", "unsupported_value");
    refused("\"tool_choice\": {\"type\": \"function\"}", "tool_choice", "unsupported_value");
    refused("\"response_format\": {\"type\": \"json_object\"}", "response_format", "unsupported_value");
    refused("\"response_format\": {\"type\": \"text\", \"x\": 1}", "response_format", "unsupported_value");
    refused("\"n\": 2", "n", "unsupported_value");
    refused("\"presence_penalty\": 0.5", "presence_penalty", "unsupported_value");
    refused("\"logprobs\": true", "logprobs", "unsupported_value");
    refused("\"top_logprobs\": 3", "top_logprobs", "unsupported_value");
    { // a field the API does not define: ignored, named (printable) for the server's log line
        serve_request r;
        serve_error e;
        const bool ok = chat("\"nonsense\": 1, \"x\\ny\": true, \"user\": \"u\"", &r, &e);
        CHECK_MSG(ok && strcmp(r.ignored, "nonsense, x?y") == 0, "unknown fields: ok %d, ignored '%s'", ok,
                  ok ? r.ignored : "");
        if (ok)
            serve_request_free(&r);
    }
    serve_request r;
    serve_error e;
    const char *suffix = "{\"prompt\": \"x\", \"suffix\": \"end\"}";
    CHECK(!serve_parse_request(suffix, strlen(suffix), SERVE_COMPLETION, &r, &e) && strcmp(e.param, "suffix") == 0);
}

static void logit_bias(void) {
    serve_request r;
    serve_error e;
    CHECK(chat("\"logit_bias\": {\"5\": -100, \"17\": 2.5, \"0\": 100}", &r, &e));
    CHECK(r.n_logit_bias == 3 && r.logit_bias[0].id == 5 && r.logit_bias[0].bias == -100);
    CHECK(r.logit_bias[1].id == 17 && r.logit_bias[1].bias == 2.5f && r.logit_bias[2].id == 0);
    serve_request_free(&r);
    CHECK(chat("\"logit_bias\": {}", &r, &e) && r.n_logit_bias == 0);
    serve_request_free(&r);
    refused("\"logit_bias\": {\"x\": 1}", "logit_bias", NULL);
    refused("\"logit_bias\": {\"-3\": 1}", "logit_bias", NULL);
    refused("\"logit_bias\": {\"12a\": 1}", "logit_bias", NULL);
    refused("\"logit_bias\": {\"3\": 101}", "logit_bias", NULL);
    refused("\"logit_bias\": {\"3\": \"high\"}", "logit_bias", NULL);
    refused("\"logit_bias\": [1]", "logit_bias", NULL);
}

int main(void) {
    ignored_fields();
    answer_changing_fields();
    logit_bias();
    return lz_test_finish("test_serve_fields");
}
