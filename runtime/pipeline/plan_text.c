/* plan_text.c - the readable form of a plan (`--plan FILE`, `lizard plan --out`):
 *
 *   # lizard plan: 4 ranks
 *   rank 0: embed 0-15
 *   rank 1: 16-31 head
 *
 * one line per rank; items (A-B, A, embed, head) separated by commas and/or
 * spaces; '#' starts a comment. The writer emits what the parser reads. */
#include <ctype.h>  // isdigit, isspace
#include <errno.h>  // errno
#include <stdlib.h> // malloc, free, strtol
#include <string.h> // memset, strerror

#include "plan.h"

/* ---- writer --------------------------------------------------------------- */

lz_status lz_plan_write_text(const lz_plan *p, FILE *out) {
    fprintf(out, "# lizard plan: %d ranks, %d layers, placement %s, context %llu, batch %d\n", p->n_ranks,
            p->n_layers, p->placement, (unsigned long long)p->context, p->batch);
    for (int r = 0; r < p->n_ranks; r++) {
        fprintf(out, "rank %d:", r);
        const char *sep = " ";
        if (p->embed_rank == r)
            fprintf(out, " embed");
        for (int i = 0; i < p->n_layers;) {
            if (p->layer_rank[i] != r) {
                i++;
                continue;
            }
            int j = i;
            while (j + 1 < p->n_layers && p->layer_rank[j + 1] == r)
                j++;
            if (j > i)
                fprintf(out, "%s%d-%d", sep, i, j);
            else
                fprintf(out, "%s%d", sep, i);
            sep = ", ";
            i = j + 1;
        }
        if (p->head_rank == r)
            fprintf(out, " head");
        fprintf(out, "\n");
    }
    return ferror(out) ? lz_fail(LZ_ERR_IO, "plan: write failed") : LZ_OK;
}

/* ---- parser --------------------------------------------------------------- */

typedef struct {
    const char *path;
    int line;
    int n_layers;
    lz_plan *p;
    int layer_line[LZ_MAX_LAYERS]; /* line that placed each layer (0: none yet) */
    int rank_line[LZ_MAX_RANKS];
    int embed_line, head_line;
} parser;

/* A non-negative decimal number of at most 9 digits in [s, e); -1 if not one. */
static long number(const char *s, const char *e) {
    if (s == e || e - s > 9)
        return -1;
    long v = 0;
    for (const char *c = s; c < e; c++) {
        if (!isdigit((unsigned char)*c))
            return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

static lz_status place_layer(parser *ps, int rank, long layer) {
    if (layer >= ps->n_layers)
        return lz_fail(LZ_ERR_INPUT, "%s:%d: layer %ld out of range (model has %d layers)", ps->path, ps->line, layer,
                       ps->n_layers);
    if (ps->layer_line[layer])
        return lz_fail(LZ_ERR_INPUT, "%s:%d: layer %ld is already on rank %d (line %d)", ps->path, ps->line, layer,
                       ps->p->layer_rank[layer], ps->layer_line[layer]);
    ps->layer_line[layer] = ps->line;
    ps->p->layer_rank[layer] = rank;
    return LZ_OK;
}

static lz_status place_marker(parser *ps, int rank, const char *name, int *where, int *line) {
    if (*line)
        return lz_fail(LZ_ERR_INPUT, "%s:%d: %s is already on rank %d (line %d)", ps->path, ps->line, name, *where,
                       *line);
    *where = rank;
    *line = ps->line;
    return LZ_OK;
}

/* One item [s, e): embed, head, A or A-B. */
static lz_status item(parser *ps, int rank, const char *s, const char *e) {
    const size_t n = (size_t)(e - s);
    if (n == 5 && strncmp(s, "embed", 5) == 0)
        return place_marker(ps, rank, "embed", &ps->p->embed_rank, &ps->embed_line);
    if (n == 4 && strncmp(s, "head", 4) == 0)
        return place_marker(ps, rank, "head", &ps->p->head_rank, &ps->head_line);
    const char *dash = memchr(s, '-', n);
    const long a = number(s, dash ? dash : e), b = dash ? number(dash + 1, e) : a;
    if (a < 0 || b < 0)
        return lz_fail(LZ_ERR_INPUT, "%s:%d: bad item '%.*s' (expected A-B, A, embed or head)", ps->path, ps->line,
                       (int)n, s);
    if (b < a)
        return lz_fail(LZ_ERR_INPUT, "%s:%d: range %ld-%ld runs backwards", ps->path, ps->line, a, b);
    for (long i = a; i <= b; i++)
        LZ_TRY(place_layer(ps, rank, i));
    return LZ_OK;
}

/* One line [s, e), comment already cut off, not blank. */
static lz_status rank_line(parser *ps, const char *s, const char *e) {
    while (s < e && isspace((unsigned char)*s))
        s++;
    const char *colon = memchr(s, ':', (size_t)(e - s));
    if (!colon || colon - s < 5 || strncmp(s, "rank", 4) != 0 || !isspace((unsigned char)s[4])) {
        int len = (int)(e - s);
        while (len > 0 && isspace((unsigned char)s[len - 1]))
            len--;
        return lz_fail(LZ_ERR_INPUT, "%s:%d: expected 'rank N: items', got '%.*s'", ps->path, ps->line,
                       len > 60 ? 60 : len, s);
    }
    const char *num = s + 4, *num_end = colon;
    while (num < colon && isspace((unsigned char)*num))
        num++;
    while (num_end > num && isspace((unsigned char)num_end[-1]))
        num_end--;
    const long rank = number(num, num_end);
    if (rank < 0)
        return lz_fail(LZ_ERR_INPUT, "%s:%d: bad rank '%.*s'", ps->path, ps->line, (int)(num_end - num), num);
    if (rank >= LZ_MAX_RANKS)
        return lz_fail(LZ_ERR_INPUT, "%s:%d: rank %ld out of range (at most %d ranks)", ps->path, ps->line, rank,
                       LZ_MAX_RANKS);
    if (ps->rank_line[rank])
        return lz_fail(LZ_ERR_INPUT, "%s:%d: rank %ld already has a line (line %d)", ps->path, ps->line, rank,
                       ps->rank_line[rank]);
    ps->rank_line[rank] = ps->line;
    if (rank + 1 > ps->p->n_ranks)
        ps->p->n_ranks = (int)rank + 1;
    for (const char *t = colon + 1; t < e;) {
        while (t < e && (isspace((unsigned char)*t) || *t == ','))
            t++;
        const char *u = t;
        while (u < e && !isspace((unsigned char)*u) && *u != ',')
            u++;
        if (u > t)
            LZ_TRY(item(ps, (int)rank, t, u));
        t = u;
    }
    return LZ_OK;
}

lz_status lz_plan_parse_text(const char *text, size_t len, const char *path, int n_layers, lz_plan *out) {
    if (n_layers < 1 || n_layers > LZ_MAX_LAYERS)
        return lz_fail(LZ_ERR_INPUT, "%s: model has %d layers (1..%d supported)", path, n_layers, LZ_MAX_LAYERS);
    parser *ps = calloc(1, sizeof *ps);
    if (!ps)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    memset(out, 0, sizeof *out);
    out->n_layers = n_layers;
    for (int i = 0; i < LZ_MAX_LAYERS; i++)
        out->layer_rank[i] = -1;
    out->embed_rank = out->head_rank = -1;
    out->batch = 1;
    snprintf(out->placement, sizeof out->placement, "file");
    ps->path = path;
    ps->n_layers = n_layers;
    ps->p = out;
    lz_status s = LZ_OK;
    const char *end = text + len;
    for (const char *line = text; s == LZ_OK && line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *e = nl ? nl : end;
        ps->line++;
        const char *hash = memchr(line, '#', (size_t)(e - line));
        const char *stop = hash ? hash : e;
        if (memchr(line, '\0', (size_t)(e - line)))
            s = lz_fail(LZ_ERR_INPUT, "%s:%d: NUL byte in a text plan", path, ps->line);
        const char *t = line;
        while (t < stop && isspace((unsigned char)*t))
            t++;
        if (s == LZ_OK && t < stop)
            s = rank_line(ps, t, stop);
        line = nl ? nl + 1 : end;
    }
    if (s == LZ_OK && out->n_ranks == 0)
        s = lz_fail(LZ_ERR_INPUT, "%s: no 'rank N:' lines", path);
    for (int r = 0; s == LZ_OK && r < out->n_ranks; r++)
        if (!ps->rank_line[r])
            s = lz_fail(LZ_ERR_INPUT, "%s: rank %d has no line (ranks 0..%d expected, one line each)", path, r,
                        out->n_ranks - 1);
    free(ps);
    return s;
}

lz_status lz_plan_load_text(const char *path, int n_layers, lz_plan *out) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return lz_fail(LZ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    enum { CAP = 1 << 20 }; // a plan is a few lines; a megabyte is not a plan
    char *buf = malloc(CAP);
    if (!buf) {
        fclose(f);
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    }
    const size_t n = fread(buf, 1, CAP, f);
    lz_status s = LZ_OK;
    if (ferror(f))
        s = lz_fail(LZ_ERR_IO, "%s: read failed", path);
    else if (n == CAP)
        s = lz_fail(LZ_ERR_INPUT, "%s: larger than %d bytes: not a plan", path, CAP);
    fclose(f);
    if (s == LZ_OK)
        s = lz_plan_parse_text(buf, n, path, n_layers, out);
    free(buf);
    return s;
}
