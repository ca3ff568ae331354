/* serve_text.c - decoded answers with stop strings (see serve_text.h). */
#include "serve_text.h"

#include <stdlib.h> // realloc, free
#include <string.h> // memcpy, memmem, strlen

void serve_text_init(serve_text *t, const lz_tokenizer *tok, char *const *stops, int n_stops) {
    *t = (serve_text){.stops = stops, .n_stops = n_stops};
    lz_detok_init(&t->detok, tok, true);
    for (int i = 0; i < n_stops; i++)
        t->longest_stop = strlen(stops[i]) > t->longest_stop ? strlen(stops[i]) : t->longest_stop;
}

void serve_text_free(serve_text *t) {
    lz_detok_free(&t->detok);
    free(t->text);
    *t = (serve_text){0};
}

/* Appends decoded bytes and cuts at the earliest stop string that ends in them. */
static lz_status append(serve_text *t, const char *p, size_t k) {
    if (t->n + k + 1 > t->cap) {
        const size_t cap = (t->n + k + 1) * 2;
        char *grown = realloc(t->text, cap);
        if (!grown)
            return lz_fail(LZ_ERR_NOMEM, "answer text: out of memory");
        t->text = grown, t->cap = cap;
    }
    memcpy(t->text + t->n, p, k);
    const size_t before = t->n;
    t->n += k;
    t->text[t->n] = '\0';
    const size_t from = before > t->longest_stop ? before - t->longest_stop : 0;
    size_t cut = t->n;
    for (int i = 0; i < t->n_stops; i++) {
        const char *hit = memmem(t->text + from, t->n - from, t->stops[i], strlen(t->stops[i]));
        if (hit && (size_t)(hit - t->text) < cut)
            cut = (size_t)(hit - t->text);
    }
    if (cut < t->n) {
        t->n = cut < t->emitted ? t->emitted : cut;
        t->text[t->n] = '\0';
        t->stopped = true;
    }
    return LZ_OK;
}

lz_status serve_text_push(serve_text *t, int32_t id) {
    if (t->stopped)
        return LZ_OK;
    t->n_tokens++;
    const char *p;
    size_t k;
    LZ_TRY(lz_detok_push(&t->detok, id, &p, &k));
    return append(t, p, k);
}

lz_status serve_text_flush(serve_text *t) {
    if (t->stopped)
        return LZ_OK;
    const char *p;
    size_t k;
    LZ_TRY(lz_detok_flush(&t->detok, &p, &k));
    return append(t, p, k);
}

void serve_text_take(serve_text *t, bool final, const char **p, size_t *n) {
    size_t safe = t->n;
    if (!final && !t->stopped && t->longest_stop > 0) {
        safe = t->n > t->longest_stop - 1 ? t->n - (t->longest_stop - 1) : 0;
        while (safe > t->emitted && safe < t->n && ((unsigned char)t->text[safe] & 0xC0) == 0x80)
            safe--; // not inside a UTF-8 character
    }
    if (safe < t->emitted)
        safe = t->emitted;
    *p = t->text ? t->text + t->emitted : "";
    *n = safe - t->emitted;
    t->emitted = safe;
}
