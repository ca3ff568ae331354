/* cmd_tokenize.c - `lizard tokenize`: text -> ids with the model folder's
 * tokenizer.json (--text or --file), or ids -> text (--ids). The text of --ids
 * is the decoded bytes exactly, escaping nothing (unlike generate's): this is
 * the tool that shows what a model wrote; --format json escapes for JSON. */
#include <jansson.h> // json_stringn: the json format's escaping
#include <stdio.h>   // printf, fwrite, fopen
#include <stdlib.h>  // malloc, free
#include <string.h>  // strcmp, strlen

#include "cli_options.h" // lz_parse_options
#include "commands.h"    // lz_cmd_tokenize
#include "id_list.h"     // lz_parse_id_list
#include "text_file.h"   // lz_read_text_file
#include "tokenizer.h"   // lz_tokenizer

/* A JSON string of bytes that may not be UTF-8: invalid bytes become U+FFFD. */
static char *json_text(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (!j) { /* not UTF-8: replace what is not */
        char *fixed = malloc(3 * n + 1);
        size_t o = 0;
        for (size_t i = 0; fixed && i < n;) {
            unsigned char c = (unsigned char)s[i];
            size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
            json_t *one = len && i + len <= n ? json_stringn(s + i, len) : NULL;
            if (one) {
                memcpy(fixed + o, s + i, len);
                o += len;
                i += len;
                json_decref(one);
            } else {
                memcpy(fixed + o, "\xEF\xBF\xBD", 3);
                o += 3;
                i++;
            }
        }
        j = fixed ? json_stringn(fixed, o) : NULL;
        free(fixed);
    }
    char *out = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    return out;
}

static lz_status print_ids(const lz_tokenizer *tok, const int32_t *ids, int n, bool json) {
    if (!json) {
        for (int i = 0; i < n; i++)
            printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
        return LZ_OK;
    }
    printf("{\"ids\": [");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("], \"tokens\": [");
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *t = lz_tokenizer_id_to_token(tok, ids[i], &len);
        char *q = json_text(t ? t : "", t ? len : 0);
        if (!q)
            return lz_fail(LZ_ERR_NOMEM, "tokenize: out of memory");
        printf("%s%s", i ? ", " : "", q);
        free(q);
    }
    printf("]}\n");
    return LZ_OK;
}

lz_status lz_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *ids_text = NULL, *format = "text";
    bool no_special = false, keep_special = false;
    const lz_option options[] = {
        {"--model", LZ_OPT_DIR, "DIR", "model folder (tokenizer.json, tokenizer_config.json)", &model, true, 0, 0},
        {"--text", LZ_OPT_STRING, "TEXT", "text to encode: prints its ids", &text, false, 0, 0},
        {"--file", LZ_OPT_STRING, "PATH", "encode this file's bytes", &file, false, 0, 0},
        {"--ids", LZ_OPT_STRING, "1,2,3", "ids to decode: prints the text's exact bytes (control characters and "
         "bytes that are not UTF-8 as they are)", &ids_text, false, 0, 0},
        {"--no-special", LZ_OPT_FLAG, NULL, "encode without BOS/EOS (HF add_special_tokens=False)", &no_special, false,
         0, 0},
        {"--keep-special", LZ_OPT_FLAG, NULL, "decode special tokens too (default: skipped, as HF tokenizers does)",
         &keep_special, false, 0, 0},
        {"--format", LZ_OPT_STRING, "text|json", "output: ids comma-separated / text (default), or JSON", &format,
         false, 0, 0},
    };
    const lz_command_spec spec = {"tokenize", "encode text to token ids, or decode ids to text", options,
                                  (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    if ((text != NULL) + (file != NULL) + (ids_text != NULL) != 1)
        return lz_fail(LZ_ERR_INPUT, "tokenize: give exactly one of --text, --file, --ids");
    if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)
        return lz_fail(LZ_ERR_INPUT, "--format: '%s' is not text or json", format);
    const bool json = strcmp(format, "json") == 0;
    lz_tokenizer *tok;
    LZ_TRY(lz_tokenizer_load(model, &tok));
    lz_status st = LZ_OK;
    if (ids_text) {
        int32_t *ids = NULL;
        int n = 0;
        st = lz_parse_id_list("--ids", ids_text, &ids, &n);
        for (int i = 0; st == LZ_OK && i < n; i++)
            if (!lz_tokenizer_id_to_token(tok, ids[i], NULL))
                st = lz_fail(LZ_ERR_INPUT, "--ids: %d is not a token id of %s (vocabulary size %d)", ids[i], model,
                             lz_tokenizer_vocab_size(tok));
        char *out = NULL;
        size_t len = 0;
        if (st == LZ_OK)
            st = lz_tokenizer_decode(tok, ids, n, !keep_special, &out, &len);
        if (st == LZ_OK && json) {
            char *q = json_text(out, len);
            st = q ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "tokenize: out of memory");
            if (q)
                printf("{\"text\": %s}\n", q);
            free(q);
        } else if (st == LZ_OK) {
            fwrite(out, 1, len, stdout);
            printf("\n");
        }
        free(out);
        free(ids);
    } else {
        char *buf = NULL;
        size_t len = text ? strlen(text) : 0;
        if (file)
            st = lz_read_text_file("--file", file, &buf, &len);
        int32_t *ids = NULL;
        int n = 0;
        if (st == LZ_OK)
            st = lz_tokenizer_encode(tok, file ? buf : text, len, !no_special, &ids, &n);
        if (st == LZ_OK)
            st = print_ids(tok, ids, n, json);
        free(ids);
        free(buf);
    }
    lz_tokenizer_free(tok);
    return st;
}
