/* env_switch.c - see env_switch.h. */
#include <errno.h>  // errno
#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv, strtol

#include "env_switch.h"

/* The switch as a whole number: 1 if set (into *x), 0 if unset or empty, -1 if not a number. */
static int env_number(const char *v, long *x) {
    if (!v || !*v)
        return 0;
    char *end = NULL;
    errno = 0;
    *x = strtol(v, &end, 10);
    return errno || *end ? -1 : 1;
}

lz_status lz_env_int(const char *name, int lo, int hi, int def, int *out) {
    const char *v = getenv(name);
    long x = 0;
    const int got = env_number(v, &x);
    *out = def;
    if (got == 0)
        return LZ_OK;
    if (got < 0 || x < lo || x > hi)
        return lz_fail(LZ_ERR_INPUT, "%s=%.64s: expected a whole number from %d to %d", name, v, lo, hi);
    *out = (int)x;
    return LZ_OK;
}

lz_status lz_env_int_in(const char *name, const int *allowed, int n, int def, int *out) {
    const char *v = getenv(name);
    long x = 0;
    const int got = env_number(v, &x);
    *out = def;
    if (got == 0)
        return LZ_OK;
    for (int i = 0; got > 0 && i < n; i++)
        if (x == allowed[i]) {
            *out = allowed[i];
            return LZ_OK;
        }
    char list[96] = "";
    for (int i = 0, len = 0; i < n && len < (int)sizeof list; i++)
        len += snprintf(list + len, sizeof list - (size_t)len, "%s%d", i ? ", " : "", allowed[i]);
    return lz_fail(LZ_ERR_INPUT, "%s=%.64s: expected one of %s", name, v, list);
}
