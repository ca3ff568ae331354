/* fuzz_tokenizer_encode.c - libFuzzer target: arbitrary bytes (invalid UTF-8
 * included) through two small tokenizers built here, a byte-level BPE in
 * LLaMA-3's layout and a SentencePiece-style BPE with byte fallback.
 * The first input byte picks the tokenizer and the flags, the rest is text.
 * Invariants: encoding never fails; ids are in the vocabulary; streamed
 * decode == whole decode; the byte-level layout gives back every byte, and the
 * SentencePiece one too where the text holds no added token and no "▁"; where
 * the text is plain (lz_tokenizer_encode_plain) no special token comes out. */
#include <stdint.h> // uint8_t
#include <stdio.h>  // snprintf
#include <stdlib.h> // abort, malloc, free
#include <string.h> // memcmp, memmem

#include "tokenizer.h" // lz_tokenizer

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";

static size_t put(char *buf, size_t at, size_t cap, const char *fmt, const char *a, int b) {
    int n = snprintf(buf + at, at < cap ? cap - at : 0, fmt, a, b);
    return at + (size_t)(n > 0 ? n : 0);
}

/* GPT-2's byte -> character, as a JSON string body (UTF-8). */
static const char *byte_char(int b, char out[8]) {
    int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    int cp = b;
    if (!self) {
        cp = 256;
        for (int x = 0; x < b; x++)
            cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    }
    if (cp == '"' || cp == '\\')
        snprintf(out, 8, "\\%c", cp);
    else if (cp < 0x80)
        snprintf(out, 8, "%c", cp);
    else
        snprintf(out, 8, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
    return out;
}

static lz_tokenizer *byte_level(void) {
    static char json[32768];
    size_t at = put(json, 0, sizeof json, "%s{\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {", "", 0);
    char c[8];
    for (int b = 0; b < 256; b++)
        at = put(json, at, sizeof json, "\"%s\": %d, ", byte_char(b, c), b);
    static const char *const merged[][3] = {{"\\u0120", "t", "\\u0120t"},     {"h", "e", "he"},
                                            {"\\u0120t", "he", "\\u0120the"}, {"i", "n", "in"},
                                            {"\\u0120", "a", "\\u0120a"},     {"e", "r", "er"},
                                            {"\\u0120", "l", "\\u0120l"},     {"\\u0120l", "i", "\\u0120li"}};
    for (int i = 0; i < 8; i++)
        at = put(json, at, sizeof json, "\"%s\": %d, ", merged[i][2], 256 + i);
    at -= 2;
    at = put(json, at, sizeof json, "%s}, \"merges\": [", "", 0);
    for (int i = 0; i < 8; i++) {
        at = put(json, at, sizeof json, "%s[\"", i ? ", " : "", 0);
        at = put(json, at, sizeof json, "%s\", \"", merged[i][0], 0);
        at = put(json, at, sizeof json, "%s\"]", merged[i][1], 0);
    }
    char model[32768];
    snprintf(model, sizeof model, "%.*s]}", (int)at, json);
    snprintf(
        json, sizeof json,
        "{\"added_tokens\": [{\"id\": 264, \"content\": \"<|bos|>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 265, \"content\": \"<|eot|>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 266, \"content\": \"lizard\", \"special\": false, \"normalized\": false, \"single_word\": true}],"
        " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\","
        " \"pattern\": {\"Regex\": \"%s\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\","
        " \"add_prefix_space\": false, \"use_regex\": false}]}, \"post_processor\": {\"type\": \"TemplateProcessing\","
        " \"single\": [{\"SpecialToken\": {\"id\": \"<|bos|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
        "\"type_id\": 0}}],"
        " \"special_tokens\": {\"<|bos|>\": {\"id\": \"<|bos|>\", \"ids\": [264], \"tokens\": [\"<|bos|>\"]}}},"
        " \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": %s}",
        llama3_regex, model);
    lz_tokenizer *tok = NULL;
    if (lz_tokenizer_load_json(json, strlen(json), NULL, 0, &tok) != LZ_OK)
        abort();
    return tok;
}

static lz_tokenizer *sentencepiece(void) {
    static char json[32768];
    size_t at = put(json, 0, sizeof json, "%s{\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2", "", 0);
    for (int b = 0; b < 256; b++) {
        char name[16];
        snprintf(name, sizeof name, "<0x%02X>", b);
        at = put(json, at, sizeof json, ", \"%s\": %d", name, 3 + b);
    }
    static const char *const pieces[] = {"\xe2\x96\x81",
                                         "t",
                                         "h",
                                         "e",
                                         "a",
                                         "i",
                                         "n",
                                         "r",
                                         "\xe2\x96\x81t",
                                         "he",
                                         "\xe2\x96\x81the",
                                         ("\xe2\x96\x81"
                                          "a"),
                                         "in",
                                         "er",
                                         "\xe2\x96\x81in"};
    for (int i = 0; i < 15; i++)
        at = put(json, at, sizeof json, ", \"%s\": %d", pieces[i], 259 + i);
    char vocab[16384];
    snprintf(vocab, sizeof vocab, "%.*s}", (int)at, json);
    snprintf(
        json, sizeof json,
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 2, \"content\": \"</s>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 274, \"content\": \"<|im_start|>\", \"special\": true, \"normalized\": false, \"rstrip\": true},"
        " {\"id\": 275, \"content\": \"Lizard\", \"special\": false, \"normalized\": true}],"
        " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "
        "\"\xe2\x96\x81\"},"
        " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]},"
        " \"pre_tokenizer\": null, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
        "[{\"SpecialToken\":"
        " {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\":"
        " {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}},"
        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
        "\"\xe2\x96\x81\"},"
        " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": "
        "\" \","
        " \"start\": 1, \"stop\": 0}]},"
        " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true, "
        "\"vocab\": %s,"
        " \"merges\": [\"\xe2\x96\x81 t\", \"h e\", \"\xe2\x96\x81t he\", \"\xe2\x96\x81 a\", \"i n\", \"e r\", "
        "\"\xe2\x96\x81 in\"]}}",
        vocab);
    lz_tokenizer *tok = NULL;
    if (lz_tokenizer_load_json(json, strlen(json), NULL, 0, &tok) != LZ_OK)
        abort();
    return tok;
}

/* decode == concatenated stream; returns the decoded bytes (malloc'd). */
static char *decode_checked(const lz_tokenizer *tok, const int32_t *ids, int n, bool skip, size_t *len) {
    char *whole;
    if (lz_tokenizer_decode(tok, ids, n, skip, &whole, len) != LZ_OK)
        abort();
    lz_detok d;
    lz_detok_init(&d, tok, skip);
    size_t at = 0;
    for (int i = 0; i <= n; i++) {
        const char *s;
        size_t k;
        if ((i < n ? lz_detok_push(&d, ids[i], &s, &k) : lz_detok_flush(&d, &s, &k)) != LZ_OK)
            abort();
        if (at + k > *len || memcmp(whole + at, s, k) != 0)
            abort();
        at += k;
    }
    if (at != *len)
        abort();
    lz_detok_free(&d);
    return whole;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lz_tokenizer *toks[2];
    if (!toks[0]) {
        toks[0] = byte_level();
        toks[1] = sentencepiece();
    }
    if (size == 0)
        return 0;
    const int which = data[0] & 1;
    const bool special = data[0] & 2, skip = data[0] & 4;
    const char *text = (const char *)data + 1;
    const size_t n = size - 1;
    lz_tokenizer *tok = toks[which];
    int32_t *ids;
    int k;
    if (lz_tokenizer_encode(tok, text, n, special, &ids, &k) != LZ_OK)
        abort(); /* any bytes encode */
    for (int i = 0; i < k; i++)
        if (ids[i] < 0 || ids[i] >= lz_tokenizer_vocab_size(tok) || !lz_tokenizer_id_to_token(tok, ids[i], NULL))
            abort();
    size_t len;
    free(decode_checked(tok, ids, k, skip, &len));
    free(ids);
    /* round trip without the post-processor's tokens, special tokens kept */
    if (lz_tokenizer_encode(tok, text, n, false, &ids, &k) != LZ_OK)
        abort();
    char *back = decode_checked(tok, ids, k, false, &len);
    bool exact =
        which == 0 || (!memchr(text, '<', n) && !memmem(text, n, "Lizard", 6) && !memmem(text, n, "\xe2\x96\x81", 3));
    if (exact && (len != n || memcmp(back, text, n) != 0))
        abort();
    free(back);
    free(ids);
    /* special tokens as plain text (a chat message's content): in the first half, then everywhere */
    const lz_text_span first_half = {0, n / 2}, all = {0, n};
    if (lz_tokenizer_encode_plain(tok, text, n, false, &first_half, 1, &ids, &k) != LZ_OK)
        abort();
    back = decode_checked(tok, ids, k, false, &len);
    if (which == 0 && (len != n || memcmp(back, text, n) != 0))
        abort(); /* byte-level: every byte comes back, plain or not */
    free(back);
    free(ids);
    if (lz_tokenizer_encode_plain(tok, text, n, false, &all, 1, &ids, &k) != LZ_OK)
        abort();
    for (int i = 0; i < k; i++)
        if (lz_tokenizer_is_special(tok, ids[i]))
            abort(); /* no special token where all of the text is plain */
    free(ids);
    return 0;
}
