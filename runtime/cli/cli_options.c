/* cli_options.c - table-driven flag parsing and usage text. */
#include "cli_options.h"

#include <errno.h>  // errno, ERANGE
#include <math.h>   // isfinite
#include <stdlib.h> // strtol, strtod
#include <string.h> // strcmp, strchr, strncmp, strerror
#include <sys/stat.h> // stat

static const lz_option *find_option(const lz_command_spec *spec, const char *name, size_t len) {
    for (int i = 0; i < spec->n_options; i++) {
        const char *n = spec->options[i].name;
        if (strlen(n) == len && strncmp(n, name, len) == 0)
            return &spec->options[i];
    }
    return NULL;
}

static lz_status set_value(const lz_command_spec *spec, const lz_option *o, const char *value) {
    bool ranged = !(o->min == 0 && o->max == 0);
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case LZ_OPT_STRING:
        *(const char **)o->target = value;
        return LZ_OK;
    case LZ_OPT_DIR: {
        struct stat st;
        if (stat(value, &st) != 0)
            return lz_fail(LZ_ERR_INPUT, "lizard %s: %s %s: no such folder", spec->name, o->name, value);
        if (!S_ISDIR(st.st_mode))
            return lz_fail(LZ_ERR_INPUT, "lizard %s: %s %s: not a folder", spec->name, o->name, value);
        *(const char **)o->target = value;
        return LZ_OK;
    }
    case LZ_OPT_INT: {
        long v = strtol(value, &end, 10);
        if (end == value || *end != '\0' || errno == ERANGE)
            return lz_fail(LZ_ERR_INPUT, "lizard %s: %s: expected an integer, got '%s'", spec->name, o->name, value);
        if (ranged && (v < o->min || v > o->max))
            return lz_fail(LZ_ERR_INPUT, "lizard %s: %s: %ld is out of range [%.0f, %.0f]", spec->name, o->name, v,
                           o->min, o->max);
        *(long *)o->target = v;
        return LZ_OK;
    }
    case LZ_OPT_FLOAT: {
        double v = strtod(value, &end);
        if (end == value || *end != '\0' || errno == ERANGE || !isfinite(v))
            return lz_fail(LZ_ERR_INPUT, "lizard %s: %s: expected a number, got '%s'", spec->name, o->name, value);
        if (ranged && (v < o->min || v > o->max))
            return lz_fail(LZ_ERR_INPUT, "lizard %s: %s: %g is out of range [%g, %g]", spec->name, o->name, v, o->min,
                           o->max);
        *(double *)o->target = v;
        return LZ_OK;
    }
    case LZ_OPT_FLAG:
        break;
    }
    return lz_fail(LZ_ERR_INTERNAL, "lizard %s: %s: bad option kind", spec->name, o->name);
}

lz_status lz_parse_options(const lz_command_spec *spec, int argc, char **argv, bool *help_requested) {
    bool seen[64] = {0};
    *help_requested = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            *help_requested = true;
            return LZ_OK;
        }
        if (strncmp(arg, "--", 2) != 0)
            return lz_fail(LZ_ERR_INPUT, "lizard %s: unexpected argument '%s' (flags start with --)", spec->name, arg);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const lz_option *o = find_option(spec, arg, len);
        if (!o)
            return lz_fail(LZ_ERR_INPUT, "lizard %s: unknown flag '%.*s' (see lizard %s --help)", spec->name, (int)len,
                           arg, spec->name);
        seen[o - spec->options] = true;
        if (o->kind == LZ_OPT_FLAG) {
            if (eq)
                return lz_fail(LZ_ERR_INPUT, "lizard %s: %s takes no value", spec->name, o->name);
            *(bool *)o->target = true;
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc)
                return lz_fail(LZ_ERR_INPUT, "lizard %s: %s needs a value (%s)", spec->name, o->name, o->metavar);
            value = argv[++i];
        }
        LZ_TRY(set_value(spec, o, value));
    }
    for (int i = 0; i < spec->n_options && i < 64; i++)
        if (spec->options[i].required && !seen[i])
            return lz_fail(LZ_ERR_INPUT, "lizard %s: %s %s is required", spec->name, spec->options[i].name,
                           spec->options[i].metavar);
    return LZ_OK;
}

void lz_print_usage(FILE *out, const lz_command_spec *spec) {
    fprintf(out, "usage: lizard %s [flags]\n  %s\n\nflags:\n", spec->name, spec->summary);
    for (int i = 0; i < spec->n_options; i++) {
        const lz_option *o = &spec->options[i];
        char left[64];
        if (o->kind == LZ_OPT_FLAG)
            snprintf(left, sizeof left, "%s", o->name);
        else
            snprintf(left, sizeof left, "%s %s", o->name, o->metavar);
        fprintf(out, "  %-28s %s%s\n", left, o->help, o->required ? " (required)" : "");
    }
}

lz_status lz_parse_command(const lz_command_spec *spec, int argc, char **argv, bool *done) {
    LZ_TRY(lz_parse_options(spec, argc, argv, done));
    if (*done)
        lz_print_usage(stdout, spec);
    return LZ_OK;
}
