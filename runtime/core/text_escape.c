/* text_escape.c - generated text made safe for a terminal (see text_escape.h). */
#include <stdbool.h> // bool
#include <string.h>  // memcpy

#include "text_escape.h"

/* The well-formed UTF-8 character at s[0, n): its length, 0 when s[0] starts none, -1 when the
 * n bytes there begin one that needs more (the ranges of the Unicode standard's table 3-7). */
static int utf8_char(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xBF; // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80; // not overlong
        hi = c == 0xED ? 0x9F : 0xBF; // not a surrogate
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80; // not overlong
        hi = c == 0xF4 ? 0x8F : 0xBF; // not beyond U+10FFFF
    } else {
        return 0;
    }
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n)
            return -1;
        if (s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xBF))
            return 0;
    }
    return len;
}

static size_t put_hex(unsigned char c, char *out) {
    static const char digits[] = "0123456789ABCDEF";
    out[0] = '\\', out[1] = 'x', out[2] = digits[c >> 4], out[3] = digits[c & 15];
    return 4;
}

/* Escapes s[0, n) into out + *o, stopping before a character still incomplete at the end unless
 * `final` (then its bytes are escaped); returns the bytes of s consumed. */
static size_t escape_run(const unsigned char *s, size_t n, bool final, char *out, size_t *o) {
    size_t i = 0;
    while (i < n) {
        const unsigned char c = s[i];
        if (c < 0x80) {
            const bool control = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F;
            if (control)
                *o += put_hex(c, out + *o);
            else
                out[(*o)++] = (char)c;
            i++;
            continue;
        }
        const int len = utf8_char(s + i, n - i);
        if (len < 0 && !final)
            break;
        if (len <= 0) {
            *o += put_hex(c, out + *o);
            i++;
        } else if (len == 2 && c == 0xC2 && s[i + 1] < 0xA0) { // C1 controls (U+0080..U+009F)
            *o += put_hex(c, out + *o);
            *o += put_hex(s[i + 1], out + *o);
            i += 2;
        } else {
            memcpy(out + *o, s + i, (size_t)len);
            *o += (size_t)len;
            i += (size_t)len;
        }
    }
    return i;
}

size_t lz_text_escape_push(lz_text_escape *e, const char *text, size_t n, char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0;
    if (e->n_held > 0) {
        // the held start and as much of s as decides it (a character has 4 bytes at most)
        unsigned char joined[4];
        const size_t take = n < 4 - e->n_held ? n : 4 - e->n_held, n_joined = e->n_held + take;
        memcpy(joined, e->held, e->n_held);
        memcpy(joined + e->n_held, s, take);
        const size_t used = escape_run(joined, n_joined, false, out, &o);
        if (used < e->n_held) { // still undecided: then all of s was taken
            memmove(e->held, joined + used, n_joined - used);
            e->n_held = n_joined - used;
            return o;
        }
        s += used - e->n_held;
        n -= used - e->n_held;
        e->n_held = 0;
    }
    const size_t used = escape_run(s, n, false, out, &o);
    memcpy(e->held, s + used, n - used);
    e->n_held = n - used;
    return o;
}

size_t lz_text_escape_finish(lz_text_escape *e, char *out) {
    size_t o = 0;
    escape_run(e->held, e->n_held, true, out, &o);
    e->n_held = 0;
    return o;
}
