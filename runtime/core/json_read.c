/* json_read.c - jansson with integers of any size (see json_read.h). */
#include "json_read.h"

#include <errno.h>  // errno, ERANGE
#include <float.h>  // DBL_MAX
#include <math.h>   // isinf
#include <stdbool.h> // bool
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, realloc, free, strtod, strtoll
#include <string.h> // memcpy

#include "text_file.h" // lz_read_text_file

typedef struct {
    char *p;
    size_t n, cap;
} out_buf;

static bool put(out_buf *b, const char *s, size_t k) {
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *grown = realloc(b->p, cap);
        if (!grown)
            return false;
        b->p = grown, b->cap = cap;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = '\0';
    return true;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* s[0..k) is a well-formed JSON integer (no fraction, no exponent) outside
 * json_int_t's range: *real is its value as a double, clamped to the finite range. */
static bool big_integer(const char *s, size_t k, double *real) {
    const size_t sign = s[0] == '-';
    if (k == sign || (s[sign] == '0' && k > sign + 1))
        return false; // "-" or a leading zero: jansson's error to report
    char *copy = malloc(k + 1);
    if (!copy)
        return false;
    memcpy(copy, s, k);
    copy[k] = '\0';
    errno = 0;
    (void)strtoll(copy, NULL, 10);
    const bool out_of_range = errno == ERANGE;
    *real = strtod(copy, NULL);
    free(copy);
    if (isinf(*real))
        *real = *real > 0 ? DBL_MAX : -DBL_MAX;
    return out_of_range;
}

/* The text with each integer literal outside json_int_t's range written as a
 * real; strings are copied as they are. NULL when out of memory. */
static char *reals_for_big_integers(const char *text, size_t len, size_t *out_len) {
    out_buf b = {0};
    size_t i = 0, copied = 0;
    bool ok = put(&b, "", 0);
    while (ok && i < len) {
        const char c = text[i];
        if (c == '"') { // skip the string, escapes included
            for (i++; i < len && text[i] != '"'; i++)
                if (text[i] == '\\')
                    i++;
            i++;
            continue;
        }
        if (c != '-' && !is_digit(c)) {
            i++;
            continue;
        }
        size_t end = i + 1;
        while (end < len && is_digit(text[end]))
            end++;
        const bool integer = end == len || (text[end] != '.' && text[end] != 'e' && text[end] != 'E');
        double real;
        if (integer && big_integer(text + i, end - i, &real)) {
            char num[40];
            const int k = snprintf(num, sizeof num, "%.17g", real); // out of int64's range: always "d.ddde+NN"
            ok = put(&b, text + copied, i - copied) && put(&b, num, (size_t)k);
            copied = end;
        }
        while (end < len && (is_digit(text[end]) || text[end] == '.' || text[end] == 'e' || text[end] == 'E' ||
                             text[end] == '+' || text[end] == '-'))
            end++; // the rest of a real
        i = end;
    }
    ok = ok && put(&b, text + copied, len - copied);
    if (!ok) {
        free(b.p);
        return NULL;
    }
    *out_len = b.n;
    return b.p;
}

json_t *lz_json_loadb(const char *text, size_t len, size_t flags, json_error_t *err) {
    json_t *root = json_loadb(text, len, flags, err);
    if (root || json_error_code(err) != json_error_numeric_overflow)
        return root;
    size_t n = 0;
    char *rewritten = reals_for_big_integers(text, len, &n);
    if (!rewritten)
        return NULL; // err still says why the text as it is failed
    json_error_t again;
    root = json_loadb(rewritten, n, flags, &again);
    free(rewritten);
    if (!root)
        *err = again; // a later fault (same lines: no line break was added or removed)
    return root;
}

json_t *lz_json_load_file(const char *path, size_t flags, json_error_t *err) {
    json_t *root = json_load_file(path, flags, err);
    if (root || json_error_code(err) != json_error_numeric_overflow)
        return root;
    char *text = NULL;
    size_t len = 0;
    if (lz_read_text_file("json", path, &text, &len) != LZ_OK) {
        lz_error_clear(); // err already says why jansson failed
        return NULL;
    }
    root = lz_json_loadb(text, len, flags, err);
    free(text);
    return root;
}
