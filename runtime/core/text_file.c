/* text_file.c - a whole file read into memory (text_file.h). */
#include <errno.h>  // errno
#include <stdint.h> // SIZE_MAX
#include <stdio.h>  // FILE, fopen, fread
#include <stdlib.h> // malloc, realloc, free
#include <string.h> // strerror

#include "text_file.h"

lz_status lz_read_text_file(const char *what, const char *path, char **text, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return lz_fail(LZ_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    lz_status s = buf ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "%s %s: out of memory", what, path);
    while (s == LZ_OK) {
        if (n + 1 >= cap) { // room for the NUL
            char *bigger = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!bigger) {
                s = lz_fail(LZ_ERR_NOMEM, "%s %s: out of memory", what, path);
                break;
            }
            buf = bigger, cap *= 2;
        }
        const size_t got = fread(buf + n, 1, cap - 1 - n, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp))
                s = lz_fail(LZ_ERR_IO, "%s %s: read error", what, path);
            break;
        }
    }
    fclose(fp);
    if (s != LZ_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *text = buf, *len = n;
    return LZ_OK;
}
