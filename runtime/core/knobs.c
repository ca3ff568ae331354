/* knobs.c - see knobs.h. One table: the variable, its kind, its range, its default, its field. */
#include <errno.h>  // errno
#include <limits.h> // INT_MAX
#include <stdlib.h> // getenv, atoi, strtol, strtod, strtoull
#include <string.h> // strcmp

#include "knobs.h"

typedef enum { K_BOOL, K_INT, K_SECONDS, K_BYTES, K_BF16, K_PATH } kind;

typedef struct {
    const char *name;
    kind kind;
    long lo, hi, def; /* K_INT, K_BYTES (def 0: unset); K_BOOL: def */
    size_t offset;
} knob;

#define F(field) offsetof(lz_knobs, field)
static const knob KNOBS[] = {
    {"LIZARD_PROFILE", K_BOOL, 0, 1, 0, F(profile)},
    {"LIZARD_NO_GRAPHS", K_BOOL, 0, 1, 0, F(no_graphs)},
    {"LIZARD_STEP_TIMEOUT", K_SECONDS, 0, 10000000, 30, F(step_timeout)},
    {"LIZARD_STEP_TRACE", K_BOOL, 0, 1, 0, F(step_trace)},
    {"LIZARD_SESSION_CHUNK_BYTES", K_BYTES, 1, 256L << 20, 0, F(session_chunk_bytes)},
    {"LIZARD_WGMMA", K_BOOL, 0, 1, 1, F(wgmma)},
    {"LIZARD_GEMV_TOKENS", K_INT, 1, 8, 1, F(gemv_tokens)},
    {"LIZARD_FUSE_TOKENS", K_INT, 1, 8, 1, F(fuse_tokens)},
    {"LIZARD_STREAM_TOKENS", K_INT, 0, 64, 7, F(stream_tokens)},
    {"LIZARD_STREAM_SPLIT", K_INT, 0, 8, 0, F(stream_split)},
    {"LIZARD_JOIN_TOKENS", K_INT, 0, 1024, 256, F(join_tokens)},
    {"LIZARD_FORK_TOKENS", K_INT, 1, INT_MAX, 32, F(fork_tokens)},
    {"LIZARD_GLA_STREAM_MIN", K_INT, 0, INT_MAX, 8, F(gla_stream_min)},
    {"LIZARD_GLA_SPREAD", K_INT, 0, INT_MAX, 2, F(gla_spread)},
    {"LIZARD_GLA_RING_BLOCKS", K_INT, 0, INT_MAX, 0, F(gla_ring_blocks)},
    {"LIZARD_WINDOW_RING", K_INT, 0, INT_MAX, 8, F(window_ring)},
    {"LIZARD_WINDOW_RING_BLOCKS", K_INT, 0, INT_MAX, 0, F(window_ring_blocks)},
    {"LIZARD_WINDOW_SPLIT_MIN", K_INT, 1, INT_MAX, 16, F(window_split_min)},
    {"LIZARD_DECODE_ATTN", K_INT, 1, 64, -1, F(decode_attn)},
    {"LIZARD_TRAIN_GLA", K_BF16, 0, 1, 0, F(train_gla_bf16)},
    {"LIZARD_TRACE", K_PATH, 0, 0, 0, F(trace)},
    {"LIZARD_TRACE_US", K_INT, 1, INT_MAX, 10000, F(trace_us)},
};
#undef F
enum { N_KNOBS = sizeof KNOBS / sizeof KNOBS[0] };

static lz_knobs knobs;
static bool from_env[N_KNOBS]; /* the loaded value was set, not the default */
static bool loaded;
static lz_status load_status = LZ_OK;

static void set_default(lz_knobs *k, const knob *d) {
    void *p = (char *)k + d->offset;
    switch (d->kind) {
    case K_BOOL: case K_BF16: *(bool *)p = d->def != 0; break;
    case K_INT: *(int *)p = (int)d->def; break;
    case K_SECONDS: *(double *)p = (double)d->def; break;
    case K_BYTES: *(size_t *)p = (size_t)d->def; break;
    case K_PATH: *(const char **)p = NULL; break;
    }
}

/* A set value into the field; false if the variable does not take it. */
static bool parse(lz_knobs *k, const knob *d, const char *v) {
    void *p = (char *)k + d->offset;
    char *end = NULL;
    errno = 0;
    switch (d->kind) {
    case K_BOOL:
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return false;
        *(bool *)p = v[0] == '1';
        return true;
    case K_BF16:
        if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0)
            return false;
        *(bool *)p = strcmp(v, "bf16") == 0;
        return true;
    case K_INT: {
        const long x = strtol(v, &end, 10);
        if (errno || *end || x < d->lo || x > d->hi)
            return false;
        *(int *)p = (int)x;
        return true;
    }
    case K_SECONDS: {
        const double x = strtod(v, &end);
        if (errno || *end || !(x >= (double)d->lo) || x > (double)d->hi)
            return false;
        *(double *)p = x;
        return true;
    }
    case K_BYTES: {
        if (v[0] == '-')
            return false;
        const unsigned long long x = strtoull(v, &end, 10);
        if (errno || *end || x < (unsigned long long)d->lo || x > (unsigned long long)d->hi)
            return false;
        *(size_t *)p = (size_t)x;
        return true;
    }
    case K_PATH:
        *(const char **)p = v;
        return true;
    }
    return false;
}

static const char *expected(const knob *d, char *buf, size_t n) {
    switch (d->kind) {
    case K_BOOL: return "0 or 1";
    case K_BF16: return "fp32 or bf16";
    case K_SECONDS: return "seconds, 0 or more (0: off)";
    case K_INT: case K_BYTES: snprintf(buf, n, "a whole number from %ld to %ld", d->lo, d->hi); return buf;
    case K_PATH: return "a file";
    }
    return "";
}

/* A LIZARD_* variable that is not a knob (a typo, or a knob retired): refused, so that it is not
 * silently ignored. */
static lz_status check_unknown(void) {
    extern char **environ;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "LIZARD_", 7) != 0)
            continue;
        const size_t len = strcspn(*e, "=");
        bool known = false;
        for (int i = 0; i < N_KNOBS && !known; i++)
            known = strlen(KNOBS[i].name) == len && strncmp(KNOBS[i].name, *e, len) == 0;
        if (!known)
            return lz_fail(LZ_ERR_INPUT, "%.*s: not a variable lizard reads (docs/knobs.md lists them)", (int)(len < 64 ? len : 64), *e);
    }
    return LZ_OK;
}

lz_status lz_knobs_load(void) {
    LZ_TRY(check_unknown());
    lz_knobs k;
    bool set[N_KNOBS];
    for (int i = 0; i < N_KNOBS; i++) {
        set_default(&k, &KNOBS[i]);
        const char *v = getenv(KNOBS[i].name);
        char buf[64];
        set[i] = v && *v;
        if (set[i] && !parse(&k, &KNOBS[i], v))
            return lz_fail(LZ_ERR_INPUT, "%s=%.64s: expected %s", KNOBS[i].name, v, expected(&KNOBS[i], buf, sizeof buf));
    }
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

bool lz_knobs_given(const char *name) {
    lz_knobs_get();
    for (int i = 0; i < N_KNOBS; i++)
        if (strcmp(KNOBS[i].name, name) == 0)
            return from_env[i];
    return false;
}

const lz_knobs *lz_knobs_get(void) {
    if (!loaded) {
        load_status = lz_knobs_load();
        if (load_status != LZ_OK) {
            for (int i = 0; i < N_KNOBS; i++)
                set_default(&knobs, &KNOBS[i]);
            loaded = true;
        }
    }
    return &knobs;
}

lz_status lz_knobs_status(void) {
    lz_knobs_get();
    return load_status == LZ_OK ? LZ_OK : lz_knobs_load();
}

void lz_knobs_print(FILE *out) {
    const lz_knobs *k = lz_knobs_get();
    for (int i = 0; i < N_KNOBS; i++) {
        const knob *d = &KNOBS[i];
        const void *p = (const char *)k + d->offset;
        fprintf(out, "knob %-27s ", d->name);
        switch (d->kind) {
        case K_BOOL: fprintf(out, "%d", *(const bool *)p); break;
        case K_BF16: fprintf(out, "%s", *(const bool *)p ? "bf16" : "fp32"); break;
        case K_INT: fprintf(out, "%d", *(const int *)p); break;
        case K_SECONDS: fprintf(out, "%g", *(const double *)p); break;
        case K_BYTES: fprintf(out, "%zu", *(const size_t *)p); break;
        case K_PATH: fprintf(out, "%s", *(const char *const *)p ? *(const char *const *)p : "-"); break;
        }
        fprintf(out, "%s\n", from_env[i] ? "" : " (default)");
    }
}
