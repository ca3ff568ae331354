/* fuzz_tokenizer_load.c - libFuzzer target: lz_tokenizer_load_json on
 * arbitrary bytes (tokenizer.json, and after a NUL byte tokenizer_config.json). A failure must say why; a tokenizer that loads must encode
 * a few texts (invalid UTF-8 included) into ids it knows, and decode them
 * back, streamed and whole alike. */
#include <stdint.h> // uint8_t
#include <stdlib.h> // abort, free
#include <string.h> // memchr, memcmp, strlen

#include "tokenizer.h" // lz_tokenizer

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(lz_tokenizer *tok, const char *text, size_t n) {
    int32_t *ids;
    int k;
    lz_error_clear();
    if (lz_tokenizer_encode(tok, text, n, true, &ids, &k) != LZ_OK) {
        if (lz_error_message()[0] == '\0')
            abort(); /* a failure must say why (e.g. an unk_token missing from the vocabulary) */
        return;
    }
    for (int i = 0; i < k; i++)
        if (ids[i] < 0 || ids[i] >= lz_tokenizer_vocab_size(tok))
            abort();
    for (int skip = 0; skip < 2; skip++) {
        char *whole;
        size_t len;
        if (lz_tokenizer_decode(tok, ids, k, skip, &whole, &len) != LZ_OK)
            abort();
        lz_detok d;
        lz_detok_init(&d, tok, skip);
        size_t at = 0;
        for (int i = 0; i <= k; i++) {
            const char *s;
            size_t m;
            if ((i < k ? lz_detok_push(&d, ids[i], &s, &m) : lz_detok_flush(&d, &s, &m)) != LZ_OK)
                abort();
            if (at + m > len || memcmp(whole + at, s, m) != 0)
                abort();
            at += m;
        }
        if (at != len)
            abort();
        lz_detok_free(&d);
        free(whole);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lz_tokenizer *tok = NULL;
    lz_error_clear();
    // tokenizer.json, then optionally a NUL byte and tokenizer_config.json
    const uint8_t *nul = memchr(data, 0, size);
    const size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *config = nul ? (const char *)nul + 1 : NULL;
    if (lz_tokenizer_load_json((const char *)data, json_len, config, nul ? size - json_len - 1 : 0, &tok) != LZ_OK) {
        if (tok || lz_error_message()[0] == '\0')
            abort();
        return 0;
    }
    static const char *const texts[] = {
        "Hello, world! The lizard's tail is 12345 long.",
        "  spaces\tand\nnewlines\r\n\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\xa6\x8e",
        "bad \xff\xfe\xc0\x80 bytes \xe4\xb8",
        "<s>the</s> <|bos|>in <|eot|> Lizard lizard <|im_start|>x",
        "\xe2\x96\x81\xe2\x96\x81the-in 1-2 ",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        exercise(tok, texts[i], strlen(texts[i]));
    int32_t last = lz_tokenizer_vocab_size(tok) < 100000 ? lz_tokenizer_vocab_size(tok) : 100000;
    for (int32_t id = -1; id <= last; id++) {
        size_t len;
        const char *t = lz_tokenizer_id_to_token(tok, id, &len);
        if (t && lz_tokenizer_token_to_id(tok, t, len) < 0)
            abort(); /* every token string maps back to an id */
    }
    lz_tokenizer_free(tok);
    return 0;
}
