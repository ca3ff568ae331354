/* serve_chat.c - chat formats (see serve_chat.h). */
#include "serve_chat.h"
#include "json_read.h" // lz_json_load_file: integers of any size

#include <jansson.h> // json_t
#include <stdio.h>   // snprintf
#include <stdlib.h>  // malloc, realloc, free
#include <string.h>  // strcmp, strstr, strlen, memcpy
#include <unistd.h>  // access

const char *serve_chat_format_name(serve_chat_format f) { return f == SERVE_CHAT_MISTRAL ? "mistral" : "llama3"; }

lz_status serve_chat_detect(const char *model_dir, const char *flag, serve_chat_format *out, const char **why,
                            bool *assumed) {
    *assumed = false;
    if (flag) {
        *why = "--chat-template";
        if (strcmp(flag, "llama3") == 0)
            return *out = SERVE_CHAT_LLAMA3, LZ_OK;
        if (strcmp(flag, "mistral") == 0)
            return *out = SERVE_CHAT_MISTRAL, LZ_OK;
        return lz_fail(LZ_ERR_INPUT, "lizard serve: --chat-template: expected llama3 or mistral, got '%s'", flag);
    }
    *out = SERVE_CHAT_LLAMA3;
    *assumed = true;
    *why = "the default: the model has no tokenizer_config.json";
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    if (access(path, F_OK) != 0)
        return LZ_OK;
    json_error_t jerr;
    json_t *root = lz_json_load_file(path, 0, &jerr);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: line %d: %s", path, jerr.line, jerr.text);
    const char *tmpl = json_string_value(json_object_get(root, "chat_template"));
    *why = "the default: tokenizer_config.json has no chat_template";
    if (tmpl && strstr(tmpl, "<|start_header_id|>")) {
        *why = "tokenizer_config.json's chat_template has <|start_header_id|>", *assumed = false;
    } else if (tmpl && strstr(tmpl, "[INST]")) {
        *out = SERVE_CHAT_MISTRAL;
        *why = "tokenizer_config.json's chat_template has [INST]", *assumed = false;
    } else if (tmpl) {
        *why = "the default: tokenizer_config.json's chat_template has no marker lizard knows";
    }
    json_decref(root);
    return LZ_OK;
}

const char *serve_chat_turn_end(serve_chat_format f, const char *eos_text) {
    return f == SERVE_CHAT_LLAMA3 ? "<|eot_id|>" : eos_text;
}

typedef struct {
    char *p;
    size_t n, cap;
    lz_text_span *content; /* where messages' content lies in p */
    int n_content, cap_content;
} text_buf;

static lz_status put(text_buf *b, const char *s) {
    const size_t k = strlen(s);
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *grown = realloc(b->p, cap);
        if (!grown)
            return lz_fail(LZ_ERR_NOMEM, "chat template: out of memory");
        b->p = grown, b->cap = cap;
    }
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
    return LZ_OK;
}

/* A message's content: text that the client wrote, not the template. */
static lz_status put_content(text_buf *b, const char *s) {
    if (b->n_content == b->cap_content) {
        const int cap = b->cap_content ? b->cap_content * 2 : 8;
        lz_text_span *grown = realloc(b->content, sizeof *grown * (size_t)cap);
        if (!grown)
            return lz_fail(LZ_ERR_NOMEM, "chat template: out of memory");
        b->content = grown, b->cap_content = cap;
    }
    const size_t start = b->n;
    LZ_TRY(put(b, s));
    b->content[b->n_content++] = (lz_text_span){start, b->n};
    return LZ_OK;
}

/* HF's LLaMA-3 template trims each message's content. */
static lz_status put_trimmed(text_buf *b, const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
        s++;
    size_t k = strlen(s);
    while (k > 0 && (s[k - 1] == ' ' || s[k - 1] == '\n' || s[k - 1] == '\t' || s[k - 1] == '\r'))
        k--;
    char *copy = strndup(s, k);
    if (!copy)
        return lz_fail(LZ_ERR_NOMEM, "chat template: out of memory");
    lz_status st = put_content(b, copy);
    free(copy);
    return st;
}

static lz_status render_llama3(text_buf *b, const serve_message *m, int n) {
    for (int i = 0; i < n; i++) {
        LZ_TRY(put(b, "<|start_header_id|>"));
        LZ_TRY(put(b, m[i].role));
        LZ_TRY(put(b, "<|end_header_id|>\n\n"));
        LZ_TRY(put_trimmed(b, m[i].content));
        LZ_TRY(put(b, "<|eot_id|>"));
    }
    return put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* System text goes before the first user message, as Mistral's templates fold it. */
static lz_status render_mistral(text_buf *b, const serve_message *m, int n, const char *eos_text) {
    const char *system = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(m[i].role, "system") == 0) {
            system = m[i].content;
        } else if (strcmp(m[i].role, "user") == 0) {
            LZ_TRY(put(b, "[INST] "));
            if (system) {
                LZ_TRY(put_content(b, system));
                LZ_TRY(put(b, "\n\n"));
                system = NULL;
            }
            LZ_TRY(put_content(b, m[i].content));
            LZ_TRY(put(b, " [/INST]"));
        } else {
            LZ_TRY(put(b, " "));
            LZ_TRY(put_content(b, m[i].content));
            LZ_TRY(put(b, eos_text));
        }
    }
    return LZ_OK;
}

lz_status serve_chat_render_spans(serve_chat_format f, const serve_message *m, int n, const char *eos_text,
                                  char **out, size_t *len, lz_text_span **content, int *n_content) {
    text_buf b = {0};
    lz_status s = put(&b, ""); // an empty conversation is still a string
    if (s == LZ_OK)
        s = f == SERVE_CHAT_LLAMA3 ? render_llama3(&b, m, n) : render_mistral(&b, m, n, eos_text ? eos_text : "");
    if (s != LZ_OK) {
        free(b.p);
        free(b.content);
        return s;
    }
    *out = b.p;
    *len = b.n;
    *content = b.content;
    *n_content = b.n_content;
    return LZ_OK;
}

lz_status serve_chat_render(serve_chat_format f, const serve_message *m, int n, const char *eos_text, char **out,
                            size_t *len) {
    lz_text_span *content = NULL;
    int n_content = 0;
    lz_status s = serve_chat_render_spans(f, m, n, eos_text, out, len, &content, &n_content);
    free(content);
    return s;
}
