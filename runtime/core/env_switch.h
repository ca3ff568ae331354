/* env_switch.h - the numeric LIZARD_* switches (test and comparison knobs of
 * the backends): unset or empty gives the default; anything but a whole number
 * in [lo, hi] is an input error that names the variable and its value. */
#ifndef LZ_ENV_SWITCH_H
#define LZ_ENV_SWITCH_H

#include "error.h" // lz_status

lz_status lz_env_int(const char *name, int lo, int hi, int def, int *out);
/* The same for a switch that takes only the n values of allowed. */
lz_status lz_env_int_in(const char *name, const int *allowed, int n, int def, int *out);

#endif
