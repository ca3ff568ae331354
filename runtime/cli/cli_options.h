/* cli_options.h - one option table per command: the parser and the usage text
 * both read it, so the help can never drift from what is accepted. */
#ifndef LZ_CLI_OPTIONS_H
#define LZ_CLI_OPTIONS_H

#include <stdbool.h> // bool
#include <stdio.h>   // FILE

#include "error.h"   // lz_status

typedef enum {
    LZ_OPT_STRING, /* target: const char ** */
    LZ_OPT_DIR,    /* target: const char ** (an existing folder: a missing one is named as such) */
    LZ_OPT_INT,    /* target: long *  (range checked against min/max) */
    LZ_OPT_FLOAT,  /* target: double * (range checked against min/max) */
    LZ_OPT_FLAG,   /* target: bool *   (no value) */
} lz_opt_kind;

typedef struct {
    const char *name;    /* "--model" */
    lz_opt_kind kind;
    const char *metavar; /* "DIR" (ignored for flags) */
    const char *help;
    void *target;
    bool required;
    double min, max;     /* for INT/FLOAT; min == max == 0 means unchecked */
} lz_option;

typedef struct {
    const char *name;    /* "generate" */
    const char *summary; /* one line */
    const lz_option *options;
    int n_options;
} lz_command_spec;

/* Parses argv (argv[0] is the command name). Accepts "--name value" and
 * "--name=value". Errors name the flag; "--help" sets *help_requested. */
lz_status lz_parse_options(const lz_command_spec *spec, int argc, char **argv, bool *help_requested);
void lz_print_usage(FILE *out, const lz_command_spec *spec);
/* lz_parse_options, and on --help the usage on stdout: *done = true means the
 * command has nothing more to do. */
lz_status lz_parse_command(const lz_command_spec *spec, int argc, char **argv, bool *done);

#endif
