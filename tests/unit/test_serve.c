/* test_serve.c - the pieces of `lizard serve` without a socket: request
 * parsing (fields, defaults, each error naming its field), the chat formats
 * (exact prompt text), stop strings over decoded tokens (the answer ends
 * before the match and no taken piece shows a stop string's first bytes),
 * the session store's budget and spill (files replaced, never removed;
 * a failed write named by its own session; stale temp files), keyed names, and the prefix cache's longest match. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv, free, malloc
#include <string.h> // strcmp, strstr, strlen
#include <sys/stat.h> // mkdir
#include <sys/wait.h> // waitpid
#include <unistd.h>   // access, fork, getpid

#include "serve_api.h"      // serve_parse_request
#include "serve_chat.h"     // serve_chat_render
#include "serve_prefix.h"   // serve_prefix
#include "serve_sessions.h" // serve_sessions
#include "serve_text.h"     // serve_text
#include "session.h"        // lz_session_read_file
#include "test_util.h"      // CHECK

static bool parse(const char *body, serve_kind kind, serve_request *r, serve_error *e) {
    return serve_parse_request(body, strlen(body), kind, r, e);
}

static void parses_fields(void) {
    serve_request r;
    serve_error e;
    CHECK(parse("{\"prompt\": \"Hi\", \"max_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": -1, "
                "\"seed\": 3, \"stop\": [\"a\", \"bc\"], \"stream\": true, \"session\": \"s-1\", \"n\": 1, "
                "\"user\": \"u\", \"logprobs\": null, \"model\": \"tiny\"}",
                SERVE_COMPLETION, &r, &e));
    CHECK(strcmp(r.prompt_text, "Hi") == 0 && r.max_tokens == 7 && r.temperature == 0.5 && r.top_p == 0.9);
    CHECK(r.top_k == 0 && r.seed == 3 && r.n_stop == 2 && strcmp(r.stop[1], "bc") == 0 && r.stream);
    CHECK(strcmp(r.session, "s-1") == 0 && strcmp(r.model, "tiny") == 0);
    serve_request_free(&r);
    CHECK(parse("{\"prompt\": [1, 2, 3]}", SERVE_COMPLETION, &r, &e));
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.max_tokens == -1 && r.temperature < 0 && r.seed < 0);
    serve_request_free(&r);
    CHECK(parse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                "{\"type\": \"text\", \"text\": \"b\"}]}], \"max_completion_tokens\": 4}",
                SERVE_CHAT, &r, &e));
    CHECK(r.n_messages == 1 && strcmp(r.messages[0].content, "ab") == 0 && r.max_tokens == 4);
    serve_request_free(&r);
}

/* body -> 400 naming `param` ("" for none) */
static void refused(const char *body, serve_kind kind, const char *param) {
    serve_request r;
    serve_error e;
    const bool ok = parse(body, kind, &r, &e);
    CHECK_MSG(!ok && e.http_status == 400 && strcmp(e.param, param) == 0, "%s: status %d, param '%s' (want '%s')",
              body, ok ? 200 : e.http_status, ok ? "" : e.param, param);
    if (ok)
        serve_request_free(&r);
    char *json = ok ? NULL : serve_error_json(&e);
    CHECK(ok || (json && strstr(json, "\"error\":{\"message\":")));
    free(json);
}

static void refuses_bad_requests(void) {
    refused("{\"prompt\": \"x\"", SERVE_COMPLETION, "");
    refused("[]", SERVE_COMPLETION, "");
    refused("{\"prompt\": \"x\", \"max_tokens\": 1.5}", SERVE_COMPLETION, "max_tokens");
    refused("{\"prompt\": \"x\", \"temperature\": -1}", SERVE_COMPLETION, "temperature");
    refused("{\"prompt\": \"x\", \"top_p\": 0}", SERVE_COMPLETION, "top_p");
    refused("{\"prompt\": \"x\", \"n\": 3}", SERVE_COMPLETION, "n");
    refused("{\"prompt\": \"x\", \"stop\": [\"\"]}", SERVE_COMPLETION, "stop");
    refused("{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", SERVE_COMPLETION, "stop");
    refused("{\"prompt\": \"x\", \"session\": \".hidden\"}", SERVE_COMPLETION, "session");
    refused("{\"prompt\": \"x\", \"echo\": true}", SERVE_COMPLETION, "echo");
    refused("{\"prompt\": [1, -2]}", SERVE_COMPLETION, "prompt");
    refused("{\"prompt\": [\"a\", \"b\"]}", SERVE_COMPLETION, "prompt");
    refused("{\"prompt\": \"x\", \"prompt\": \"y\"}", SERVE_COMPLETION, "");
    refused("{\"prompt\": \"x\"}", SERVE_CHAT, "messages"); // "prompt" is ignored here: no messages
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"extra\": 1}]}", SERVE_CHAT, "messages");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", SERVE_CHAT,
            "messages");
}

static void chat_formats(void) {
    const serve_message m[] = {{"system", "Be brief."}, {"user", " Hi \n"}, {"assistant", "Yo"}, {"user", "More"}};
    char *text;
    size_t len;
    CHECK(serve_chat_render(SERVE_CHAT_LLAMA3, m, 4, "</s>", &text, &len) == LZ_OK);
    CHECK_MSG(strcmp(text, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nMore<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n") == 0 &&
                  len == strlen(text),
              "%s", text);
    free(text);
    CHECK(serve_chat_render(SERVE_CHAT_MISTRAL, m, 4, "</s>", &text, &len) == LZ_OK);
    CHECK_MSG(strcmp(text, "[INST] Be brief.\n\n Hi \n [/INST] Yo</s>[INST] More [/INST]") == 0, "%s", text);
    free(text);
    CHECK(strcmp(serve_chat_turn_end(SERVE_CHAT_LLAMA3, "</s>"), "<|eot_id|>") == 0);
    serve_chat_format f;
    const char *why;
    bool assumed;
    CHECK_FAILS_WITH(serve_chat_detect("/nonexistent", "chatml", &f, &why, &assumed), LZ_ERR_INPUT, "--chat-template");
    // no template: LLaMA-3 assumed (serve warns at start), said without parentheses of its own (the startup
    // line puts it in parentheses)
    CHECK(serve_chat_detect("/nonexistent", NULL, &f, &why, &assumed) == LZ_OK && f == SERVE_CHAT_LLAMA3 && assumed);
    CHECK_MSG(!strpbrk(why, "()"), "%s", why);
    // the format from tokenizer_config.json's chat_template markers
    char dir[] = "/tmp/lz_test_chat_XXXXXX", path[200];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *templates[] = {"{\"chat_template\": \"{{ bos_token }}[INST] {{ m }} [/INST]\"}",
                               "{\"chat_template\": \"<|start_header_id|>{{ role }}\"}",
                               "{\"chat_template\": \"<|im_start|>{{ role }}\"}", "{\"bos_token\": \"<s>\"}"};
    for (int i = 0; i < 4; i++) {
        FILE *out = fopen(path, "w");
        CHECK(out && fputs(templates[i], out) >= 0 && fclose(out) == 0);
        CHECK(serve_chat_detect(dir, NULL, &f, &why, &assumed) == LZ_OK &&
              f == (i == 0 ? SERVE_CHAT_MISTRAL : SERVE_CHAT_LLAMA3));
        CHECK_MSG(assumed == (i >= 2) && !strpbrk(why, "()"), "template %d: assumed %d, '%s'", i, assumed, why);
        CHECK(serve_chat_detect(dir, "mistral", &f, &why, &assumed) == LZ_OK && f == SERVE_CHAT_MISTRAL &&
              !assumed); // the flag wins
    }
    unlink(path);
    rmdir(dir);
}

static void stop_strings(const char *fixtures) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tokenizers/bytelevel", fixtures);
    lz_tokenizer *tok = NULL;
    CHECK(lz_tokenizer_load(dir, &tok) == LZ_OK);
    if (!tok)
        return;
    const char *text = "The lizard basks on the warm rock at noon";
    int32_t *ids;
    int n;
    CHECK(lz_tokenizer_encode(tok, text, strlen(text), false, &ids, &n) == LZ_OK);
    char *stops[] = {"warm", "zebra"};
    serve_text t;
    serve_text_init(&t, tok, stops, 2);
    char shown[256] = "";
    for (int i = 0; i < n && !t.stopped; i++) {
        CHECK(serve_text_push(&t, ids[i]) == LZ_OK);
        const char *p;
        size_t k;
        serve_text_take(&t, false, &p, &k);
        strncat(shown, p, k);
        CHECK_MSG(!strstr(shown, "wa") || strstr(shown, "warm") == NULL, "a stop string's start was shown: '%s'",
                  shown);
    }
    const char *p;
    size_t k;
    CHECK(serve_text_flush(&t) == LZ_OK);
    serve_text_take(&t, true, &p, &k);
    strncat(shown, p, k);
    CHECK_MSG(t.stopped && strcmp(shown, "The lizard basks on the ") == 0, "'%s'", shown);
    CHECK(t.n_tokens < n); // the tokens after the stop were not consumed
    serve_text_free(&t);
    free(ids);
    lz_tokenizer_free(tok);
}

/* Removes dir and what is in it (files, and the folders block_write made). */
static void remove_tree(const char *dir) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static uint8_t *bytes(size_t n, uint8_t v) {
    uint8_t *b = malloc(n);
    memset(b, v, n);
    return b;
}

static void session_store(void) {
    char dir[] = "/tmp/lz_test_sessions_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    serve_sessions s;
    CHECK(serve_sessions_init(&s, 100, dir) == LZ_OK);
    CHECK(serve_sessions_put(&s, "a", bytes(60, 1), 60) == LZ_OK);
    CHECK(serve_sessions_put(&s, "b", bytes(60, 2), 60) == LZ_OK); // over budget: "a" (older) spills
    char path[200];
    snprintf(path, sizeof path, "%s/a.lzs", dir);
    CHECK(access(path, F_OK) == 0 && s.n == 1 && s.bytes == 60 && s.on_disk == 1);
    uint8_t *buf;
    size_t len;
    CHECK(serve_sessions_take(&s, "a", &buf, &len) == LZ_OK); // back from the folder
    CHECK(buf && len == 60 && buf[59] == 1 && s.on_disk == 1);
    CHECK(access(path, F_OK) == 0); // and still there until its successor is written
    CHECK(serve_sessions_put(&s, "a", bytes(70, 3), 70) == LZ_OK); // its successor: "b" spills
    CHECK(s.n == 1 && s.on_disk == 2);
    free(buf);
    CHECK(serve_sessions_take(&s, "c", &buf, &len) == LZ_OK && buf == NULL);
    CHECK(serve_sessions_flush(&s) == LZ_OK && s.n == 0 && s.on_disk == 2); // "a" replaced, not counted twice
    CHECK(lz_session_read_file(path, &buf, &len) == LZ_OK && len == 70 && buf[0] == 3);
    free(buf);
    serve_sessions_free(&s);
    remove_tree(dir);
}

/* A directory where a session's temp file goes makes its write fail. */
static void block_write(const char *dir, const char *name) {
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/%s.lzs.tmp.%ld", dir, name, (long)getpid());
    CHECK(mkdir(tmp, 0700) == 0);
}

/* A failed write: the error names only the session being saved, no path; the
 * other sessions stay where they were; the counts say what is in memory and
 * on disk; at shutdown the others are still written. */
static void session_store_failed_write(void) {
    char dir[] = "/tmp/lz_test_sessions_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    serve_sessions s;
    CHECK(serve_sessions_init(&s, 100, dir) == LZ_OK);
    block_write(dir, "alice");
    CHECK(serve_sessions_put(&s, "alice", bytes(60, 1), 60) == LZ_OK);
    lz_error_clear();
    CHECK(serve_sessions_put(&s, "bob", bytes(60, 2), 60) == LZ_ERR_IO); // "alice" must spill, and cannot
    const char *msg = lz_error_message();
    CHECK_MSG(strstr(msg, "bob") && !strstr(msg, "alice") && !strstr(msg, dir) && !strchr(msg, '/'), "%s", msg);
    CHECK(s.n == 1 && s.bytes == 60 && s.on_disk == 0 && strcmp(s.entries[0].name, "alice") == 0);
    lz_error_clear();
    CHECK(serve_sessions_put(&s, "alice", bytes(200, 3), 200) == LZ_ERR_IO); // alone beyond the budget
    msg = lz_error_message();
    CHECK_MSG(strstr(msg, "alice") && !strchr(msg, '/'), "%s", msg);
    CHECK(s.n == 0 && s.bytes == 0 && s.on_disk == 0); // this save is refused: the request fails ...
    serve_sessions_put_back(&s, "alice", bytes(60, 1), 60); // ... and puts back what it took
    CHECK(serve_sessions_put(&s, "carol", bytes(30, 4), 30) == LZ_OK);
    CHECK(s.n == 2 && s.bytes == 90);
    lz_error_clear();
    CHECK(serve_sessions_flush(&s) == LZ_ERR_IO); // "carol" is written all the same
    CHECK(s.n == 1 && s.on_disk == 1 && strcmp(s.entries[0].name, "alice") == 0);
    char path[300];
    snprintf(path, sizeof path, "%s/carol.lzs", dir);
    CHECK(access(path, F_OK) == 0);
    serve_sessions_free(&s);
    remove_tree(dir);
}

/* Temp files of saves that were killed go at start; a live writer's stay. */
static void session_store_stale_temps(void) {
    char dir[] = "/tmp/lz_test_sessions_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    CHECK(waitpid(dead, NULL, 0) == dead);
    char stale[300], live[300], other[300];
    snprintf(stale, sizeof stale, "%s/s.lzs.tmp.%ld", dir, (long)dead);
    snprintf(live, sizeof live, "%s/s.lzs.tmp.%ld", dir, (long)getppid());
    snprintf(other, sizeof other, "%s/notes.txt.tmp.%ld", dir, (long)dead); // not a session's
    const char *files[] = {stale, live, other};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(files[i], "wb");
        CHECK(f && fputs("partial", f) >= 0 && fclose(f) == 0);
    }
    serve_sessions s;
    CHECK(serve_sessions_init(&s, 100, dir) == LZ_OK);
    CHECK(access(stale, F_OK) != 0 && access(live, F_OK) == 0 && access(other, F_OK) == 0 && s.on_disk == 0);
    serve_sessions_free(&s);
    remove_tree(dir);
}

/* --session-per-key: the name on disk holds a hash of the key, never the key. */
static void session_keyed_names(void) {
    char *a = NULL, *b = NULL, *c = NULL;
    CHECK(serve_session_keyed_name("sk-secret-1", "chat", &a) == LZ_OK);
    CHECK(serve_session_keyed_name("sk-secret-2", "chat", &b) == LZ_OK);
    CHECK(serve_session_keyed_name("sk-secret-1", "chat", &c) == LZ_OK);
    CHECK(a && b && c && strcmp(a, b) != 0 && strcmp(a, c) == 0 && !strstr(a, "secret"));
    CHECK(a && strlen(a) == 32 + 1 + 4 && strcmp(serve_session_shown(a), "chat") == 0);
    CHECK(strcmp(serve_session_shown("plain"), "plain") == 0);
    free(a), free(b), free(c);
}

static void prefix_cache(void) {
    serve_prefix p;
    CHECK(serve_prefix_init(&p, 2) == LZ_OK);
    const int32_t a[] = {1, 2, 3, 4, 5, 6};
    CHECK(serve_prefix_put(&p, a, 2, bytes(4, 0), 4) == LZ_OK);
    CHECK(serve_prefix_put(&p, a, 4, bytes(4, 0), 4) == LZ_OK);
    const serve_prefix_entry *hit = serve_prefix_find(&p, a, 6);
    CHECK(hit && hit->n == 4);                    // the longest
    CHECK(serve_prefix_find(&p, a, 4)->n == 2);   // a proper prefix only: one token is left to feed
    CHECK(serve_prefix_find(&p, a + 1, 5) == NULL);
    CHECK(serve_prefix_put(&p, a, 5, bytes(4, 0), 4) == LZ_OK); // replaces the least recently used (n = 4)
    CHECK(serve_prefix_has(&p, a, 5) && serve_prefix_has(&p, a, 2) && !serve_prefix_has(&p, a, 4));
    serve_prefix_free(&p);
}

int main(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    parses_fields();
    refuses_bad_requests();
    chat_formats();
    stop_strings(fixtures ? fixtures : "tests/fixtures");
    session_store();
    session_store_failed_write();
    session_store_stale_temps();
    session_keyed_names();
    prefix_cache();
    return lz_test_finish("test_serve");
}
