/* test_tokenizer_parts.c - the tokenizer's parts on small hand-written
 * tokenizer.json files, with the answers HF's rules give: Split's delimiter
 * behaviours, the decoders' Strip in a stream, unk/byte fallback, subword
 * prefixes, tokenizer_config.json's add_bos_token; errors for malformed and
 * unsupported files (naming the part); the tokenizer `lizard init` writes. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // free
#include <string.h> // strlen, memcmp

#include "bpe_builder.h" // lz_bpe_train, lz_bpe_tokenizer_json
#include "test_util.h"
#include "tokenizer.h"

/* A tokenizer.json around a BPE model; the other parts are JSON texts (or "null"). */
static char *make_json(const char *model, const char *normalizer, const char *pre, const char *post,
                       const char *decoder, const char *added) {
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": %s,"
             " \"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": %s, \"decoder\": %s, \"model\": %s}",
             added, normalizer, pre, post, decoder, model);
    return buf;
}

static const char *const split_model =
    "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"-\": 2, \"a-\": 3, \"-b\": 4, \"a-b\": 5, \"--\": 6},"
    " \"merges\": [\"a -\", \"- b\", \"a- b\", \"- -\"]}";

static lz_tokenizer *load(const char *json, const char *config) {
    lz_tokenizer *tok = NULL;
    lz_status st = lz_tokenizer_load_json(json, strlen(json), config, config ? strlen(config) : 0, &tok);
    CHECK_MSG(st == LZ_OK, "%s", lz_error_message());
    return st == LZ_OK ? tok : NULL;
}

static void expect_ids(lz_tokenizer *tok, const char *text, bool special, const int32_t *want, int n_want,
                       const char *what) {
    int32_t *ids;
    int n;
    lz_status st = lz_tokenizer_encode(tok, text, strlen(text), special, &ids, &n);
    CHECK_MSG(st == LZ_OK, "%s: %s", what, lz_error_message());
    if (st != LZ_OK)
        return;
    bool same = n == n_want;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    CHECK_MSG(same, "%s: '%s' gave %d ids (first %d)", what, text, n, n ? ids[0] : -1);
    free(ids);
}

static void expect_text(const lz_tokenizer *tok, const int32_t *ids, int n, bool skip, const char *want,
                        const char *what) {
    char *text;
    size_t len;
    lz_status st = lz_tokenizer_decode(tok, ids, n, skip, &text, &len);
    CHECK_MSG(st == LZ_OK && len == strlen(want) && memcmp(text, want, len) == 0, "%s: decoded '%s', want '%s'", what,
              st == LZ_OK ? text : lz_error_message(), want);
    if (st == LZ_OK)
        free(text);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

static void split_behaviors(void) {
    struct {
        const char *pre, *text;
        int32_t want[4];
        int n;
    } cases[] = {
        {"null", "a-b", {5}, 1},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Removed\", \"invert\": false}",
         "a-b",
         {0, 1},
         2},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Isolated\", \"invert\": false}",
         "a-b",
         {0, 2, 1},
         3},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"MergedWithPrevious\", \"invert\": "
         "false}",
         "a-b",
         {3, 1},
         2},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"MergedWithNext\", \"invert\": false}",
         "a-b",
         {0, 4},
         2},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Contiguous\", \"invert\": false}",
         "a--b",
         {0, 6, 1},
         3},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Isolated\", \"invert\": false}",
         "a--b",
         {0, 2, 2, 1},
         4},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Removed\", \"invert\": true}",
         "a-b",
         {2},
         1},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"-+\"}, \"behavior\": \"Isolated\", \"invert\": false}",
         "a--b",
         {0, 6, 1},
         3},
        {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"b\"}, "
         "\"behavior\": "
         "\"Removed\", \"invert\": false}, {\"type\": \"Digits\", \"individual_digits\": true}]}",
         "a-b",
         {3},
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lz_tokenizer *tok = load(make_json(split_model, "null", cases[i].pre, "null", "null", "[]"), NULL);
        if (!tok)
            continue;
        char what[64];
        snprintf(what, sizeof what, "split case %zu", i);
        expect_ids(tok, cases[i].text, true, cases[i].want, cases[i].n, what);
        lz_tokenizer_free(tok);
    }
}

/* Replace/ByteFallback/Fuse/Strip(" ", 1, 1): leading and trailing spaces of the whole text go, in a stream too. */
static void strip_stream(void) {
    const char *model = "{\"type\": \"BPE\", \"vocab\": {\"\xe2\x96\x81"
                        "a\": 0, \"\xe2\x96\x81\": 1, \"b\": 2, "
                        "\"<0xC3>\": 3, \"<0xA9>\": 4}, \"merges\": []}";
    const char *dec = "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
                      "\"\xe2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, "
                      "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 1}]}";
    lz_tokenizer *tok = load(make_json(model, "null", "null", "null", dec, "[]"), NULL);
    if (!tok)
        return;
    expect_text(tok, IDS(0, 1, 1, 2), true, "a  b", "strip");
    expect_text(tok, IDS(0, 1), true, "a", "strip end");
    expect_text(tok, IDS(1, 1, 2, 1, 1), true, " b ", "strip both");
    expect_text(tok, IDS(2, 3, 4), true, "b\xc3\xa9", "byte fallback");
    lz_detok d;
    lz_detok_init(&d, tok, true);
    const char *s;
    size_t n;
    CHECK(lz_detok_push(&d, 0, &s, &n) == LZ_OK && n == 1 && s[0] == 'a');
    CHECK(lz_detok_push(&d, 1, &s, &n) == LZ_OK && n == 0); /* a trailing space: maybe stripped */
    CHECK(lz_detok_push(&d, 3, &s, &n) == LZ_OK && n == 0); /* half of é */
    CHECK(lz_detok_push(&d, 4, &s, &n) == LZ_OK && n == 3 && memcmp(s, " \xc3\xa9", 3) == 0);
    CHECK(lz_detok_push(&d, 1, &s, &n) == LZ_OK && n == 0);
    CHECK(lz_detok_push(&d, 99, &s, &n) == LZ_OK && n == 0); /* unknown ids are skipped, as HF does */
    CHECK(lz_detok_push(&d, -5, &s, &n) == LZ_OK && n == 0);
    CHECK(lz_detok_flush(&d, &s, &n) == LZ_OK && n == 0);
    lz_detok_free(&d);
    lz_tokenizer_free(tok);
}

static void other_decoders(void) {
    const char *model = "{\"type\": \"BPE\", \"vocab\": {\"\xe2\x96\x81"
                        "a\": 0, \"\xe2\x96\x81\": 1, \"b\": 2}, "
                        "\"merges\": []}";
    lz_tokenizer *tok = load(make_json(model, "null", "null", "null", "null", "[]"), NULL);
    if (tok) /* no decoder: HF joins the tokens with spaces */
        expect_text(tok, IDS(0, 2, 2), true,
                    "\xe2\x96\x81"
                    "a b b",
                    "no decoder");
    lz_tokenizer_free(tok);
    tok = load(make_json(model, "null", "null", "null",
                         "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", "
                         "\"split\": true}",
                         "[]"),
               NULL);
    if (tok) { /* Metaspace drops the replacement in the first token, spaces elsewhere */
        expect_text(tok, IDS(0, 1, 2, 0), true, "a b a", "metaspace");
        expect_text(tok, IDS(1, 0), true, " a", "metaspace first");
    }
    lz_tokenizer_free(tok);
}

static void unk_and_fallback(void) {
    /* fuse_unk: runs of unknown characters become one <unk> */
    const char *model = "{\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": %s, \"byte_fallback\": false, "
                        "\"vocab\": {\"<unk>\": 0, \"a\": 1}, \"merges\": []}";
    char m[512];
    snprintf(m, sizeof m, model, "true");
    lz_tokenizer *tok = load(make_json(m, "null", "null", "null", "null", "[]"), NULL);
    if (tok)
        expect_ids(tok, "axyza\xff", false, IDS(1, 0, 1, 0), "fuse_unk");
    lz_tokenizer_free(tok);
    snprintf(m, sizeof m, model, "false");
    tok = load(make_json(m, "null", "null", "null", "null", "[]"), NULL);
    if (tok)
        expect_ids(tok, "axya", false, IDS(1, 0, 0, 1), "no fuse_unk");
    lz_tokenizer_free(tok);
    /* no unk token: unknown characters vanish, as in HF */
    tok = load(
        make_json("{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}", "null", "null", "null", "null", "[]"),
        NULL);
    if (tok)
        expect_ids(tok, "xax", false, IDS(0), "no unk");
    lz_tokenizer_free(tok);
    /* an unk_token missing from the vocabulary fails only when it is needed */
    tok = load(make_json("{\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {\"a\": 0}, \"merges\": []}", "null",
                         "null", "null", "null", "[]"),
               NULL);
    if (tok) {
        expect_ids(tok, "aa", false, IDS(0, 0), "unk unused");
        int32_t *ids;
        int n;
        CHECK_FAILS_WITH(lz_tokenizer_encode(tok, "ax", 2, false, &ids, &n), LZ_ERR_INPUT, "unk_token");
    }
    lz_tokenizer_free(tok);
    /* continuing_subword_prefix: "a ##b" makes "ab" */
    tok = load(make_json("{\"type\": \"BPE\", \"continuing_subword_prefix\": \"##\", \"vocab\": {\"a\": 0, \"##b\": 1, "
                         "\"ab\": 2, \"##a\": 3}, \"merges\": [\"a ##b\"]}",
                         "null", "null", "null", "null", "[]"),
               NULL);
    if (tok) {
        expect_ids(tok, "ab", false, IDS(2), "subword prefix");
        expect_ids(tok, "aa", false, IDS(0, 3), "subword prefix 2");
    }
    lz_tokenizer_free(tok);
}

static void added_tokens_and_config(void) {
    const char *added =
        "[{\"id\": 7, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": true}, {\"id\": 8, \"content\": \"</s>\", \"single_word\": "
        "false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}]";
    const char *post = "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
                       "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], "
                       "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [7], \"tokens\": [\"<s>\"]}}}";
    const char *json = make_json(split_model, "null", "null", post, "null", added);
    lz_tokenizer *tok = load(json, NULL);
    if (tok) { /* ids of added tokens follow the model's vocabulary: 7, 8 */
        expect_ids(tok, "a<s>b</s>", true, IDS(7, 0, 7, 1, 8), "template");
        expect_ids(tok, "a<s>b", false, IDS(0, 7, 1), "no special");
        CHECK(lz_tokenizer_bos_id(tok) == 7);
        CHECK(lz_tokenizer_is_special(tok, 8) && !lz_tokenizer_is_special(tok, 0));
        expect_text(tok, IDS(7, 0, 8), true, "a", "skip special");
        expect_text(tok, IDS(7, 0, 8), false, "<s> a </s>", "keep special (no decoder: joined by spaces)");
    }
    lz_tokenizer_free(tok);
    /* tokenizer_config.json's add_bos_token / add_eos_token replace what the template adds */
    tok = load(json, "{\"add_bos_token\": false, \"add_eos_token\": true, \"bos_token\": \"<s>\", "
                     "\"eos_token\": {\"content\": \"</s>\", \"__type\": \"AddedToken\"}}");
    if (tok) {
        expect_ids(tok, "a", true, IDS(0, 8), "add_eos_token");
        CHECK(lz_tokenizer_eos_id(tok) == 8);
    }
    lz_tokenizer_free(tok);
    lz_tokenizer *bad = NULL;
    const char *bad_config = "{\"add_bos_token\": true, \"bos_token\": \"<x>\"}";
    CHECK_FAILS_WITH(lz_tokenizer_load_json(json, strlen(json), bad_config, strlen(bad_config), &bad), LZ_ERR_INPUT,
                     "add_bos_token");
    CHECK_FAILS_WITH(lz_tokenizer_load_json(json, strlen(json), "{oops", 5, &bad), LZ_ERR_INPUT,
                     "tokenizer_config.json");
}

static void errors(void) {
    static const struct {
        const char *model, *normalizer, *pre, *post, *decoder, *needle;
    } cases[] = {
        {"{\"type\": \"Unigram\", \"vocab\": []}", "null", "null", "null", "null", "unsupported model type 'Unigram'"},
        {NULL, "null", "{\"type\": \"Whitespace\"}", "null", "null", "unsupported pre_tokenizer type 'Whitespace'"},
        {NULL, "{\"type\": \"NFC\"}", "null", "null", "null", "unsupported normalizer type 'NFC'"},
        {NULL, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Lowercase\"}]}", "null", "null", "null",
         "unsupported normalizer type 'Lowercase'"},
        {NULL, "null", "null", "{\"type\": \"Foo\"}", "null", "unsupported post_processor type 'Foo'"},
        {NULL, "null", "null", "null", "{\"type\": \"WordPiece\"}", "unsupported decoder type 'WordPiece'"},
        {NULL, "null", "null", "null",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteLevel\"}, {\"type\": "
         "\"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"b\"}]}",
         "'Replace' after 'ByteLevel'"},
        {"{\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}, \"merges\": []}", "null", "null", "null", "null",
         "dropout"},
        {"{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}", "null", "null", "null", "null",
         "'b' is not in the vocabulary"},
        {"{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a a a\"]}", "null", "null", "null", "null",
         "not two tokens"},
        {"{\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}", "null", "null", "null", "null",
         "must be an id"},
        {NULL, "null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}", "null",
         "null", "does not compile"},
        {NULL, "null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}", "null",
         "null", "behavior"},
        {"[]", "null", "null", "null", "null", "\"model\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *json = make_json(cases[i].model ? cases[i].model : split_model, cases[i].normalizer, cases[i].pre,
                                     cases[i].post, cases[i].decoder, "[]");
        lz_tokenizer *tok = NULL;
        CHECK_FAILS_WITH(lz_tokenizer_load_json(json, strlen(json), NULL, 0, &tok), LZ_ERR_INPUT, cases[i].needle);
        CHECK(tok == NULL);
    }
    static const char *const malformed[] = {
        "",
        "{",
        "[]",
        "{\"model\": }",
        "{\"model\": {\"type\": \"BPE\",}}",
        "{\"a\": \"\\ud800\"}",
        "{\"a\": \"\xff\"}",
        "{\"a\": 01}",
        "{\"a\": \"tab\there\"}",
        "{\"a\": 1} x",
        "{\"a\": tru}",
        "{\"a\": \"\\x\"}",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        lz_tokenizer *tok = NULL;
        CHECK_FAILS_WITH(lz_tokenizer_load_json(malformed[i], strlen(malformed[i]), NULL, 0, &tok), LZ_ERR_INPUT,
                         "tokenizer.json");
    }
    char deep[3000];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    lz_tokenizer *tok = NULL;
    CHECK_FAILS_WITH(lz_tokenizer_load_json(deep, strlen(deep), NULL, 0, &tok), LZ_ERR_INPUT, "nesting");
    CHECK_FAILS_WITH(lz_tokenizer_load("/nonexistent/lizard-model", &tok), LZ_ERR_IO, "tokenizer.json");
}

/* The byte-level BPE `lizard init` writes (runtime/tokenizer/bpe_builder.c) loads and round-trips. */
static void init_tokenizer(void) {
    const char *text = lz_bpe_corpus();
    lz_bpe bpe;
    if (lz_bpe_train(text, strlen(text), 400, &bpe) != LZ_OK) {
        CHECK_MSG(false, "lz_bpe_train: %s", lz_error_message());
        return;
    }
    char *json = NULL;
    CHECK(lz_bpe_tokenizer_json(&bpe, &json) == LZ_OK);
    lz_tokenizer *tok = json ? load(json, NULL) : NULL;
    if (tok) {
        CHECK(lz_tokenizer_vocab_size(tok) == 402);
        static const char *const texts[] = {"The model keeps every key.", "  spaces\tand\nlines\r\n",
                                            "\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\xa6\x8e", "bad \xff\xfe bytes",
                                            "<|end_of_text|> and <|begin_of_text|>"};
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            int32_t *ids;
            int n;
            CHECK(lz_tokenizer_encode(tok, texts[i], strlen(texts[i]), true, &ids, &n) == LZ_OK);
            CHECK(n > 0 && ids[0] == 400); /* <|begin_of_text|> */
            char want[256];
            snprintf(want, sizeof want, "<|begin_of_text|>%s", texts[i]);
            expect_text(tok, ids, n, false, want, "init keep");
            expect_text(tok, ids, n, true, i == 4 ? " and " : texts[i], "init skip");
            free(ids);
        }
    }
    lz_tokenizer_free(tok);
    free(json);
    lz_bpe_free(&bpe);
}

int main(void) {
    split_behaviors();
    strip_stream();
    other_decoders();
    unk_and_fallback();
    added_tokens_and_config();
    errors();
    init_tokenizer();
    return lz_test_finish("test_tokenizer_parts");
}
