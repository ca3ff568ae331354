/* text_file.h - a whole file read into memory (prompts, corpora, eval text). */
#ifndef LZ_TEXT_FILE_H
#define LZ_TEXT_FILE_H

#include <stddef.h> // size_t

#include "error.h" // lz_status

/* The bytes of `path` in *text (malloc'd, NUL-terminated, *len without the
 * NUL). Errors name `what` (the flag that gave the path) and the path. Reads
 * pipes and other unseekable files too. */
lz_status lz_read_text_file(const char *what, const char *path, char **text, size_t *len);

#endif
