/* error.c - the last error message (one per thread) and status -> exit code. */
#include "error.h"

#include <stdarg.h> // va_list
#include <stdio.h>  // vsnprintf
#include <string.h> // memmove, strlen

enum { LZ_ERROR_CAP = 1024 };
static _Thread_local char error_text[LZ_ERROR_CAP];
static _Thread_local int error_set;

lz_status lz_fail(lz_status status, const char *fmt, ...) {
    if (!error_set) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(error_text, sizeof error_text, fmt, ap);
        va_end(ap);
        error_set = 1;
    }
    return status;
}

void lz_error_prefix(const char *fmt, ...) {
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    size_t plen = strlen(prefix), tlen = strlen(error_text);
    if (plen + tlen + 1 > sizeof error_text)
        tlen = sizeof error_text - plen - 1;
    memmove(error_text + plen, error_text, tlen);
    memcpy(error_text, prefix, plen);
    error_text[plen + tlen] = '\0';
}

static int my_rank, n_ranks = 1;
static char my_host[64];

void lz_error_set_rank(int rank, int size, const char *host) {
    my_rank = rank, n_ranks = size;
    snprintf(my_host, sizeof my_host, "%s", host);
}

static int rank_prefix(char *buf, size_t cap) {
    return n_ranks > 1 ? snprintf(buf, cap, "rank %d of %d (%s): ", my_rank, n_ranks, my_host) : 0;
}

lz_status lz_fail_at(lz_status status, const char *file, int line, const char *fmt, ...) {
    if (!error_set) {
        int n = rank_prefix(error_text, sizeof error_text);
        n = n > 0 && n < (int)sizeof error_text ? n : 0;
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(error_text + n, sizeof error_text - (size_t)n, fmt, ap);
        va_end(ap);
        n += m > 0 ? m : 0;
        if (n < (int)sizeof error_text)
            snprintf(error_text + n, sizeof error_text - (size_t)n, " (%s:%d)", file, line);
        error_set = 1;
    }
    return status;
}

const char *lz_error_rank_prefix(void) {
    static _Thread_local char prefix[96];
    prefix[0] = '\0';
    rank_prefix(prefix, sizeof prefix);
    return prefix;
}

const char *lz_error_message(void) { return error_set ? error_text : "unknown error"; }

void lz_error_clear(void) {
    error_set = 0;
    error_text[0] = '\0';
}

int lz_status_exit_code(lz_status status) {
    switch (status) {
    case LZ_OK: return 0;
    case LZ_ERR_INPUT:
    case LZ_ERR_IO: return 2;
    default: return 1;
    }
}
