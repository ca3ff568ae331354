/* knobs.c - see knobs.h. A table reader (the variable, its kind, its range, its default, its field)
 * and the process's table. */
#include <errno.h>  // errno
#include <limits.h> // INT_MAX
#include <stdlib.h> // getenv, atoi, strtol, strtod, strtoull, malloc, free
#include <string.h> // strcmp, strncmp, strlen, strcspn, memcpy

#include "knobs.h"

#define F(field) offsetof(lz_knobs, field)
static const lz_knob PROCESS_ROWS[] = {
    {"LIZARD_PROFILE", LZ_KNOB_BOOL, 0, 1, 0, F(profile)},
    {"LIZARD_NO_GRAPHS", LZ_KNOB_BOOL, 0, 1, 0, F(no_graphs)},
    {"LIZARD_STEP_TIMEOUT", LZ_KNOB_SECONDS, 0, 10000000, 30, F(step_timeout)},
    {"LIZARD_STEP_TRACE", LZ_KNOB_BOOL, 0, 1, 0, F(step_trace)},
    {"LIZARD_SESSION_CHUNK_BYTES", LZ_KNOB_BYTES, 1, 256L << 20, 0, F(session_chunk_bytes)},
    {"LIZARD_TRAIN_GLA", LZ_KNOB_BF16, 0, 1, 0, F(train_gla_bf16)},
    {"LIZARD_CHECKPOINT_KILL", LZ_KNOB_INT, 0, INT_MAX, 0, F(checkpoint_kill)},
};
#undef F
enum { N_PROCESS = sizeof PROCESS_ROWS / sizeof PROCESS_ROWS[0] };
static const lz_knob_table PROCESS = {PROCESS_ROWS, N_PROCESS, sizeof(lz_knobs)};

static lz_knobs knobs;
static bool from_env[N_PROCESS]; /* the loaded value was set, not the default */
static bool loaded;
static lz_status load_status = LZ_OK;

static void set_default(void *fields, const lz_knob *d) {
    void *p = (char *)fields + d->offset;
    switch (d->kind) {
    case LZ_KNOB_BOOL: case LZ_KNOB_BF16: *(bool *)p = d->def != 0; break;
    case LZ_KNOB_INT: *(int *)p = (int)d->def; break;
    case LZ_KNOB_SECONDS: *(double *)p = (double)d->def; break;
    case LZ_KNOB_BYTES: *(size_t *)p = (size_t)d->def; break;
    case LZ_KNOB_PATH: *(const char **)p = NULL; break;
    }
}

/* A set value into the field; false if the variable does not take it. */
static bool parse(void *fields, const lz_knob *d, const char *v) {
    void *p = (char *)fields + d->offset;
    char *end = NULL;
    errno = 0;
    switch (d->kind) {
    case LZ_KNOB_BOOL:
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return false;
        *(bool *)p = v[0] == '1';
        return true;
    case LZ_KNOB_BF16:
        if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0)
            return false;
        *(bool *)p = strcmp(v, "bf16") == 0;
        return true;
    case LZ_KNOB_INT: {
        const long x = strtol(v, &end, 10);
        if (errno || *end || x < d->lo || x > d->hi)
            return false;
        *(int *)p = (int)x;
        return true;
    }
    case LZ_KNOB_SECONDS: {
        const double x = strtod(v, &end);
        if (errno || *end || !(x >= (double)d->lo) || x > (double)d->hi)
            return false;
        *(double *)p = x;
        return true;
    }
    case LZ_KNOB_BYTES: {
        if (v[0] == '-')
            return false;
        const unsigned long long x = strtoull(v, &end, 10);
        if (errno || *end || x < (unsigned long long)d->lo || x > (unsigned long long)d->hi)
            return false;
        *(size_t *)p = (size_t)x;
        return true;
    }
    case LZ_KNOB_PATH:
        *(const char **)p = v;
        return true;
    }
    return false;
}

static const char *expected(const lz_knob *d, char *buf, size_t n) {
    switch (d->kind) {
    case LZ_KNOB_BOOL: return "0 or 1";
    case LZ_KNOB_BF16: return "fp32 or bf16";
    case LZ_KNOB_SECONDS: return "seconds, 0 or more (0: off)";
    case LZ_KNOB_INT: case LZ_KNOB_BYTES: snprintf(buf, n, "a whole number from %ld to %ld", d->lo, d->hi); return buf;
    case LZ_KNOB_PATH: return "a file";
    }
    return "";
}

lz_status lz_knob_table_read(const lz_knob_table *t, void *fields, bool *given) {
    char *read = malloc(t->size ? t->size : 1); // the struct as read: `fields` only changes when all are good
    if (!read)
        return lz_fail(LZ_ERR_NOMEM, "knobs: out of memory");
    memcpy(read, fields, t->size);
    for (int i = 0; i < t->n; i++) {
        const lz_knob *d = &t->rows[i];
        set_default(read, d);
        const char *v = getenv(d->name);
        if (v && *v && !parse(read, d, v)) {
            char buf[64];
            free(read);
            return lz_fail(LZ_ERR_INPUT, "%s=%.64s: expected %s", d->name, v, expected(d, buf, sizeof buf));
        }
    }
    memcpy(fields, read, t->size);
    free(read);
    for (int i = 0; given && i < t->n; i++) {
        const char *v = getenv(t->rows[i].name);
        given[i] = v && *v;
    }
    return LZ_OK;
}

static bool in_table(const lz_knob_table *t, const char *name, size_t len) {
    for (int i = 0; i < t->n; i++)
        if (strlen(t->rows[i].name) == len && strncmp(t->rows[i].name, name, len) == 0)
            return true;
    return false;
}

/* A LIZARD_* variable that no table reads: refused, so that a typo or a knob retired is not silently
 * ignored. */
static lz_status refuse_unknown(const lz_knob_table *const *others, int n_others) {
    extern char **environ;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "LIZARD_", 7) != 0)
            continue;
        const size_t len = strcspn(*e, "=");
        bool known = in_table(&PROCESS, *e, len);
        for (int t = 0; t < n_others && !known; t++)
            known = in_table(others[t], *e, len);
        if (!known)
            return lz_fail(LZ_ERR_INPUT, "%.*s: not a variable lizard reads (docs/knobs.md lists them)",
                           (int)(len < 64 ? len : 64), *e);
    }
    return LZ_OK;
}

lz_status lz_knobs_load(void) {
    lz_knobs k = knobs;
    bool set[N_PROCESS];
    LZ_TRY(lz_knob_table_read(&PROCESS, &k, set));
    memcpy(from_env, set, sizeof set);
    k.local_rank = 0; // (the launcher's: the CUDA backend takes GPU local_rank modulo the visible ones)
    static const char *const local[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (int i = 2; i >= 0; i--) {
        const char *v = getenv(local[i]);
        if (v && *v)
            k.local_rank = atoi(v) > 0 ? atoi(v) : 0;
    }
    k.local_size = 1; // (the processes of this host: the CPU backend shares the cores among them)
    static const char *const sizes[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"};
    for (int i = 2; i >= 0; i--) {
        const char *v = getenv(sizes[i]);
        if (v && *v)
            k.local_size = atoi(v) > 1 ? atoi(v) : 1;
    }
    knobs = k, loaded = true;
    return LZ_OK;
}

lz_status lz_knobs_check(const lz_knob_table *const *others, int n_others) {
    LZ_TRY(refuse_unknown(others, n_others));
    LZ_TRY(lz_knobs_load());
    for (int t = 0; t < n_others; t++) {
        void *fields = calloc(1, others[t]->size ? others[t]->size : 1);
        if (!fields)
            return lz_fail(LZ_ERR_NOMEM, "knobs: out of memory");
        const lz_status s = lz_knob_table_read(others[t], fields, NULL);
        free(fields);
        LZ_TRY(s);
    }
    return LZ_OK;
}

bool lz_knobs_given(const char *name) {
    lz_knobs_get();
    for (int i = 0; i < N_PROCESS; i++)
        if (strcmp(PROCESS_ROWS[i].name, name) == 0)
            return from_env[i];
    return false;
}

const lz_knobs *lz_knobs_get(void) {
    if (!loaded) {
        load_status = lz_knobs_load();
        if (load_status != LZ_OK) {
            for (int i = 0; i < N_PROCESS; i++)
                set_default(&knobs, &PROCESS_ROWS[i]);
            loaded = true;
        }
    }
    return &knobs;
}

lz_status lz_knobs_status(void) {
    lz_knobs_get();
    return load_status == LZ_OK ? LZ_OK : lz_knobs_load();
}

static void print_table(FILE *out, const lz_knob_table *t, const void *fields, const bool *given) {
    for (int i = 0; i < t->n; i++) {
        const lz_knob *d = &t->rows[i];
        const void *p = (const char *)fields + d->offset;
        fprintf(out, "knob %-27s ", d->name);
        switch (d->kind) {
        case LZ_KNOB_BOOL: fprintf(out, "%d", *(const bool *)p); break;
        case LZ_KNOB_BF16: fprintf(out, "%s", *(const bool *)p ? "bf16" : "fp32"); break;
        case LZ_KNOB_INT: fprintf(out, "%d", *(const int *)p); break;
        case LZ_KNOB_SECONDS: fprintf(out, "%g", *(const double *)p); break;
        case LZ_KNOB_BYTES: fprintf(out, "%zu", *(const size_t *)p); break;
        case LZ_KNOB_PATH: fprintf(out, "%s", *(const char *const *)p ? *(const char *const *)p : "-"); break;
        }
        fprintf(out, "%s\n", given[i] ? "" : " (default)");
    }
}

void lz_knobs_print(FILE *out, const lz_knob_table *const *others, int n_others) {
    print_table(out, &PROCESS, lz_knobs_get(), from_env);
    for (int t = 0; t < n_others; t++) {
        void *fields = calloc(1, others[t]->size ? others[t]->size : 1);
        bool *given = calloc((size_t)others[t]->n + 1, sizeof *given);
        if (fields && given && lz_knob_table_read(others[t], fields, given) == LZ_OK)
            print_table(out, others[t], fields, given);
        free(fields), free(given);
    }
}
