/* env_switch.c - see env_switch.h. */
#include <errno.h>  // errno
#include <stdlib.h> // getenv, strtol

#include "env_switch.h"

lz_status lz_env_int(const char *name, int lo, int hi, int def, int *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v)
        return LZ_OK;
    char *end = NULL;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return lz_fail(LZ_ERR_INPUT, "%s=%.64s: expected a whole number from %d to %d", name, v, lo, hi);
    *out = (int)x;
    return LZ_OK;
}
