/* id_list.c - comma-separated token ids. */
#include <errno.h>  // errno, ERANGE
#include <stdlib.h> // strtol, malloc, free

#include "id_list.h"

lz_status lz_parse_id_list(const char *flag, const char *text, int32_t **ids, int *n) {
    int cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!*ids)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", flag);
    *n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno == ERANGE || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0')) {
            free(*ids);
            *ids = NULL;
            return lz_fail(LZ_ERR_INPUT, "%s: '%s' is not a list of token ids (expected e.g. 1,2,3)", flag, text);
        }
        (*ids)[(*n)++] = (int32_t)v;
        if (*end == '\0')
            return LZ_OK;
        p = end + 1;
    }
}
