/* peft_targets.c - see peft_targets.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>   // pcre2_compile, pcre2_match
#include <stdio.h>   // snprintf
#include <stdlib.h>  // calloc, free, strtol
#include <string.h>  // strcmp, strlen, strdup
#include <strings.h> // strcasecmp

#include "peft_targets.h"

/* Names (a list field) or one regular expression (a string field). */
typedef struct {
    pcre2_code *re;
    char **names;
    size_t n;
    bool given;
} module_set;

struct lz_peft_targets {
    module_set target, exclude;
    bool all_linear;
    bool by_layer;        /* layers_to_transform given (an int, or a list that is not empty) */
    long long *layers;    /* its indexes */
    size_t n_layers;
    pcre2_code **finders; /* what reads the layer index from a key: layers_pattern's, or the default */
    size_t n_finders;
    pcre2_match_context *limits;
    pcre2_match_data *md;
};

/* Python's re.fullmatch (both_ends) or re.match (start only), on PCRE2. */
static lz_status compile(const char *pattern, bool both_ends, const char *path, const char *field, pcre2_code **out) {
    int code = 0;
    PCRE2_SIZE at = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_ANCHORED | (both_ends ? PCRE2_ENDANCHORED : 0);
    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, options, &code, &at, NULL);
    if (*out)
        return LZ_OK;
    char why[160];
    pcre2_get_error_message(code, (PCRE2_UCHAR *)why, sizeof why);
    return lz_fail(LZ_ERR_INPUT, "%s: \"%s\": '%.80s' is not a regular expression PCRE2 takes (%s at offset %zu)", path,
                   field, pattern, why, (size_t)at);
}

/* A string (a regex) or a list of strings; null, absent: not given. */
static lz_status read_set(const json_t *config, const char *field, const char *path, module_set *set) {
    const json_t *v = json_object_get(config, field);
    *set = (module_set){0};
    if (!v || json_is_null(v))
        return LZ_OK;
    set->given = true;
    if (json_is_string(v))
        return compile(json_string_value(v), true, path, field, &set->re);
    if (!json_is_array(v))
        return lz_fail(LZ_ERR_INPUT, "%s: \"%s\" must be a list of module names or a regular expression", path, field);
    set->names = calloc(json_array_size(v) + 1, sizeof *set->names);
    if (!set->names)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *name = json_string_value(json_array_get(v, i));
        if (!name)
            return lz_fail(LZ_ERR_INPUT, "%s: \"%s\"[%zu] is not a string", path, field, i);
        if (!(set->names[set->n++] = strdup(name)))
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    }
    return LZ_OK;
}

static lz_status read_layers(const json_t *config, const char *path, lz_peft_targets *t) {
    const json_t *v = json_object_get(config, "layers_to_transform");
    if (!v || json_is_null(v))
        return LZ_OK;
    const bool one = json_is_integer(v);
    if (!one && !json_is_array(v))
        return lz_fail(LZ_ERR_INPUT, "%s: \"layers_to_transform\" must be a layer index or a list of them", path);
    const size_t n = one ? 1 : json_array_size(v);
    t->by_layer = n > 0;
    t->layers = calloc(n + 1, sizeof *t->layers);
    if (!t->layers)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        const json_t *x = one ? v : json_array_get(v, i);
        if (!json_is_integer(x))
            return lz_fail(LZ_ERR_INPUT, "%s: \"layers_to_transform\"[%zu] is not an integer", path, i);
        t->layers[t->n_layers++] = json_integer_value(x);
    }
    return LZ_OK;
}

/* ".*\.P\.(\d+)\." for each layers_pattern P (as PEFT builds it: P pasted in as it is), else the default. */
static lz_status read_finders(const json_t *config, const char *path, lz_peft_targets *t) {
    const json_t *v = json_object_get(config, "layers_pattern");
    const bool one = json_is_string(v);
    if (v && !json_is_null(v) && !one && !json_is_array(v))
        return lz_fail(LZ_ERR_INPUT, "%s: \"layers_pattern\" must be a string or a list of strings", path);
    size_t n = one ? (json_string_length(v) > 0) : json_array_size(v);
    t->finders = calloc(n + 1, sizeof *t->finders);
    if (!t->finders)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    if (n == 0) {
        t->n_finders = 1;
        return compile(".*\\.[^.]*\\.(\\d+)\\.", false, path, "layers_pattern", &t->finders[0]);
    }
    for (size_t i = 0; i < n; i++) {
        const char *p = one ? json_string_value(v) : json_string_value(json_array_get(v, i));
        if (!p)
            return lz_fail(LZ_ERR_INPUT, "%s: \"layers_pattern\"[%zu] is not a string", path, i);
        const size_t len = strlen(p) + 32;
        char *re = malloc(len);
        if (!re)
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
        snprintf(re, len, ".*\\.%s\\.(\\d+)\\.", p);
        lz_status s = compile(re, false, path, "layers_pattern", &t->finders[t->n_finders]);
        free(re);
        LZ_TRY(s);
        t->n_finders++;
    }
    return LZ_OK;
}

lz_status lz_peft_targets_read(const json_t *config, const char *path, lz_peft_targets **out) {
    lz_peft_targets *t = *out = calloc(1, sizeof *t);
    if (!t)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    t->limits = pcre2_match_context_create(NULL);
    t->md = pcre2_match_data_create(4, NULL);
    if (!t->limits || !t->md)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    pcre2_set_match_limit(t->limits, 1000000); // a pattern that backtracks without end is refused, not waited on
    pcre2_set_depth_limit(t->limits, 10000);
    const json_t *target = json_object_get(config, "target_modules");
    if (!target || json_is_null(target))
        return lz_fail(LZ_ERR_INPUT, "%s: \"target_modules\" is missing: the modules the adapter changes must be named",
                       path);
    if (json_is_string(target) && strcasecmp(json_string_value(target), "all-linear") == 0)
        t->all_linear = t->target.given = true;
    else
        LZ_TRY(read_set(config, "target_modules", path, &t->target));
    LZ_TRY(read_set(config, "exclude_modules", path, &t->exclude));
    LZ_TRY(read_layers(config, path, t));
    return read_finders(config, path, t);
}

static void free_set(module_set *s) {
    pcre2_code_free(s->re);
    for (size_t i = 0; i < s->n; i++)
        free(s->names[i]);
    free(s->names);
}

void lz_peft_targets_free(lz_peft_targets *t) {
    if (!t)
        return;
    free_set(&t->target), free_set(&t->exclude);
    free(t->layers);
    for (size_t i = 0; i < t->n_finders; i++)
        pcre2_code_free(t->finders[i]);
    free(t->finders);
    pcre2_match_context_free(t->limits);
    pcre2_match_data_free(t->md);
    free(t);
}

/* Whether `re` matches key (as compiled: full or from the start); group 1 into *group when asked. */
static lz_status run(const lz_peft_targets *t, pcre2_code *re, const char *key, bool *hit, long long *group) {
    const int rc = pcre2_match(re, (PCRE2_SPTR)key, strlen(key), 0, 0, t->md, t->limits);
    *hit = rc > 0;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        char why[160];
        pcre2_get_error_message(rc, (PCRE2_UCHAR *)why, sizeof why);
        return lz_fail(LZ_ERR_INPUT, "a regular expression of the adapter's config on '%s': %s", key, why);
    }
    if (*hit && group) {
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        *hit = rc > 1 && ov[2] != PCRE2_UNSET && ov[3] - ov[2] < 18;
        char digits[20] = "";
        if (*hit)
            snprintf(digits, sizeof digits, "%.*s", (int)(ov[3] - ov[2]), key + ov[2]);
        char *end = NULL;
        *group = strtoll(digits, &end, 10);
        *hit = *hit && end != digits && *end == '\0';
    }
    return LZ_OK;
}

static bool ends_with_item(const char *key, const char *item) {
    const size_t k = strlen(key), n = strlen(item);
    return k > n && key[k - n - 1] == '.' && strcmp(key + k - n, item) == 0;
}

/* Equal to a name, or (*suffix) ending in "." + a name. */
static bool in_list(const module_set *s, const char *key, bool *suffix) {
    *suffix = false;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(key, s->names[i]) == 0)
            return true;
    for (size_t i = 0; i < s->n; i++)
        if (ends_with_item(key, s->names[i]))
            return *suffix = true;
    return false;
}

lz_status lz_peft_targets_match(const lz_peft_targets *t, const char *key, bool *hit, const char **why) {
    bool suffix = false;
    *hit = false;
    if (t->exclude.re) {
        bool excluded;
        LZ_TRY(run(t, t->exclude.re, key, &excluded, NULL));
        if (excluded)
            return *why = "exclude_modules excludes it", LZ_OK;
    } else if (t->exclude.given && in_list(&t->exclude, key, &suffix)) {
        return *why = "exclude_modules excludes it", LZ_OK;
    }
    *why = "target_modules does not name it";
    if (t->target.re)
        return run(t, t->target.re, key, hit, NULL); // a regex: layers_to_transform is not consulted
    if (!t->all_linear && !in_list(&t->target, key, &suffix))
        return LZ_OK;
    if (!t->all_linear && !suffix) // named in full
        return *hit = true, LZ_OK;
    if (!t->by_layer)
        return *hit = true, LZ_OK;
    long long layer = -1;
    bool found = false;
    for (size_t i = 0; i < t->n_finders && !found; i++)
        LZ_TRY(run(t, t->finders[i], key, &found, &layer));
    *why = found ? "layers_to_transform does not hold its layer" : "layers_pattern finds no layer index in its name";
    for (size_t i = 0; found && i < t->n_layers; i++)
        if (t->layers[i] == layer)
            return *hit = true, LZ_OK;
    return LZ_OK;
}
