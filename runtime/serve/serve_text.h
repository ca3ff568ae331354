/* serve_text.h - generated ids as the text an answer shows: decoded as they
 * come (a UTF-8 character split across tokens held until complete), cut at
 * the first stop string, and handed out only where no stop string can still
 * begin, so a stream never shows a stop string's first bytes. */
#ifndef LZ_SERVE_TEXT_H
#define LZ_SERVE_TEXT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "tokenizer.h" // lz_detok

typedef struct {
    lz_detok detok;
    char *text;            /* decoded so far, cut at a stop string */
    size_t n, cap, emitted;
    char *const *stops;
    int n_stops;
    size_t longest_stop;
    bool stopped;          /* a stop string was found: the answer ends there */
    int n_tokens;          /* ids consumed (the answer's completion tokens) */
} serve_text;

void serve_text_init(serve_text *t, const lz_tokenizer *tok, char *const *stops, int n_stops);
void serve_text_free(serve_text *t);
/* One more id (ignored once stopped). */
lz_status serve_text_push(serve_text *t, int32_t id);
/* The end of the ids: what the decoder held back. */
lz_status serve_text_flush(serve_text *t);
/* The bytes that can be shown now (all of them when final or stopped); moves on. */
void serve_text_take(serve_text *t, bool final, const char **p, size_t *n);

#endif
