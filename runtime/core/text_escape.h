/* text_escape.h - generated text made safe for a terminal. A model can emit any bytes: control
 * characters that move the cursor, ring the bell or start escape sequences, and bytes that are not
 * UTF-8. Each byte of a control character (C0 but \n and \t, DEL, C1 U+0080..U+009F) and each byte
 * that starts no well-formed UTF-8 character (truncated, overlong, a surrogate, beyond U+10FFFF)
 * becomes the four characters \xNN; everything else passes unchanged. The escapes are for reading:
 * a backslash of the text itself is not escaped, so the exact bytes are `lizard tokenize --ids`'s.
 *
 * Text arrives in pieces (a token at a time) and a character may be split between them: the start
 * of a character that may still complete is held until it completes or proves invalid. */
#ifndef LZ_TEXT_ESCAPE_H
#define LZ_TEXT_ESCAPE_H

#include <stddef.h> // size_t

typedef struct {
    unsigned char held[4]; /* the start of a character whose rest has not arrived */
    size_t n_held;
} lz_text_escape;

/* Room that escaping n new bytes (with up to 3 held) needs: 4 output bytes an input byte at most. */
#define LZ_TEXT_ESCAPE_BOUND(n) (4 * ((size_t)(n) + 3))

/* The escaped form of what e holds followed by s[0, n), but for a character still incomplete at the
 * end (held in e), into out (LZ_TEXT_ESCAPE_BOUND(n) bytes); returns the bytes written. */
size_t lz_text_escape_push(lz_text_escape *e, const char *s, size_t n, char *out);
/* The end of the text: what e holds, escaped (a character that never completed), into out
 * (LZ_TEXT_ESCAPE_BOUND(0) bytes); returns the bytes written and leaves e empty. */
size_t lz_text_escape_finish(lz_text_escape *e, char *out);

#endif
