/* utf8_clean.h - text made safe for JSON (jansson refuses invalid UTF-8):
 * every byte that does not start a well-formed sequence (truncated,
 * overlong, a surrogate, beyond U+10FFFF, or NUL) becomes U+FFFD, as HF
 * tokenizers decode stray bytes. A random model can emit any bytes. */
#ifndef LZ_UTF8_CLEAN_H
#define LZ_UTF8_CLEAN_H

#include <stddef.h> // size_t

/* A malloc'd, NUL-terminated copy of s[0, n) (NULL when out of memory). */
char *lz_utf8_clean(const char *s, size_t n);

#endif
