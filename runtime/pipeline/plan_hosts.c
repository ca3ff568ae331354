/* plan_hosts.c - see plan_hosts.h. */
#include <ctype.h>  // isspace
#include <stdio.h>  // fopen, fgets
#include <stdlib.h> // strtol
#include <string.h> // strcmp, strncmp

#include "plan_hosts.h"

/* "node1 slots=4  # comment" -> name, slots (1 without slots=) */
static lz_status parse_line(char *line, const char *path, int no, char *name, int *slots) {
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *tok = strtok(line, " \t\r\n");
    *name = '\0', *slots = 1;
    if (!tok)
        return LZ_OK;
    if (strlen(tok) >= LZ_HOST_NAME)
        return lz_fail(LZ_ERR_INPUT, "%s:%d: host name longer than %d characters", path, no, LZ_HOST_NAME - 1);
    strcpy(name, tok);
    while ((tok = strtok(NULL, " \t\r\n"))) {
        char *end = NULL;
        if (strncmp(tok, "slots=", 6) == 0 || strncmp(tok, "max_slots=", 10) == 0) {
            const bool max = tok[0] == 'm';
            const long v = strtol(tok + (max ? 10 : 6), &end, 10);
            if (*end || v < 1 || v > LZ_MAX_RANKS)
                return lz_fail(LZ_ERR_INPUT, "%s:%d: '%s': slots must be 1..%d", path, no, tok, LZ_MAX_RANKS);
            if (!max)
                *slots = (int)v;
        } else {
            return lz_fail(LZ_ERR_INPUT, "%s:%d: '%s': expected HOST [slots=N]", path, no, tok);
        }
    }
    return LZ_OK;
}

lz_status lz_hostmap_load(const char *path, int n_ranks, lz_hostmap *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return lz_fail(LZ_ERR_IO, "%s: cannot open the hostfile", path);
    char line[512], name[LZ_HOST_NAME];
    int no = 0, total = 0, slots;
    lz_status s = LZ_OK;
    while (s == LZ_OK && fgets(line, sizeof line, f)) {
        no++;
        s = parse_line(line, path, no, name, &slots);
        if (s != LZ_OK || !*name)
            continue;
        for (int i = 0; i < out->n_hosts && s == LZ_OK; i++)
            if (strcmp(out->name[i], name) == 0)
                s = lz_fail(LZ_ERR_INPUT, "%s:%d: host %s named twice", path, no, name);
        if (s == LZ_OK && out->n_hosts == LZ_MAX_RANKS)
            s = lz_fail(LZ_ERR_INPUT, "%s:%d: more than %d hosts", path, no, LZ_MAX_RANKS);
        if (s != LZ_OK)
            break;
        strcpy(out->name[out->n_hosts], name);
        out->slots[out->n_hosts++] = slots;
        total += slots;
    }
    fclose(f);
    LZ_TRY(s);
    if (out->n_hosts == 0)
        return lz_fail(LZ_ERR_INPUT, "%s: no hosts", path);
    if (n_ranks > total)
        return lz_fail(LZ_ERR_INPUT, "%s: %d ranks asked but its %d hosts provide %d slots", path, n_ranks,
                       out->n_hosts, total);
    out->n_ranks = n_ranks ? n_ranks : (total < LZ_MAX_RANKS ? total : LZ_MAX_RANKS);
    for (int h = 0, r = 0; h < out->n_hosts && r < out->n_ranks; h++)
        for (int k = 0; k < out->slots[h] && r < out->n_ranks; k++)
            out->host_of[r++] = h;
    return LZ_OK;
}

static void add_link(lz_host_link *links, int cap, int *n, int a, int b, double bytes) {
    if (a > b) {
        const int t = a;
        a = b, b = t;
    }
    for (int i = 0; i < *n && i < cap; i++)
        if (links[i].a == a && links[i].b == b) {
            links[i].bytes += bytes;
            return;
        }
    if (*n < cap)
        links[*n] = (lz_host_link){a, b, bytes};
    (*n)++;
}

double lz_plan_host_links(const lz_plan *p, const lz_hostmap *h, double act_bytes, lz_host_link *links, int cap,
                          int *n) {
    static lz_plan_visit visits[LZ_MAX_LAYERS + 2];
    int n_visits = 0;
    lz_plan_visit_order(p, visits, LZ_MAX_LAYERS + 2, &n_visits);
    double total = 0.0;
    *n = 0;
    for (int v = 0; v + 1 < n_visits; v++) {
        const int a = h->host_of[visits[v].rank], b = h->host_of[visits[v + 1].rank];
        if (a != b)
            add_link(links, cap, n, a, b, act_bytes), total += act_bytes;
    }
    const int head = h->host_of[p->head_rank], front = h->host_of[0];
    if (head != front)
        add_link(links, cap, n, head, front, 4.0), total += 4.0;
    return total;
}

/* The plan with role r given to rank perm[r]. */
static void relabel(const lz_plan *in, const int *perm, lz_plan *out) {
    *out = *in;
    for (int i = 0; i < in->n_layers; i++)
        out->layer_rank[i] = perm[in->layer_rank[i]];
    out->embed_rank = perm[in->embed_rank];
    out->head_rank = perm[in->head_rank];
}

typedef struct {
    const lz_plan *base;
    const lz_plan_costs *c;
    const lz_hostmap *h;
    const uint64_t *free_bytes;
    double act_bytes, best;
    int best_perm[LZ_MAX_RANKS];
    lz_plan trial;
} search;

/* The cost of perm, or a negative number when some rank's need does not fit. */
static double cost_of(search *s, const int *perm) {
    relabel(s->base, perm, &s->trial);
    lz_plan_account(&s->trial, s->c, s->free_bytes);
    for (int r = 0; r < s->trial.n_ranks; r++)
        if (lz_plan_rank_total(&s->trial, r) > s->free_bytes[r])
            return -1.0;
    lz_host_link links[1];
    int n;
    return lz_plan_host_links(&s->trial, s->h, s->act_bytes, links, 0, &n);
}

static void consider(search *s, const int *perm) {
    const double c = cost_of(s, perm);
    if (c >= 0.0 && c < s->best) {
        s->best = c;
        memcpy(s->best_perm, perm, sizeof(int) * (size_t)s->base->n_ranks);
    }
}

/* Every permutation of perm[k..n-1] (n <= 8). */
static void all_perms(search *s, int *perm, int k, int n) {
    if (k == n) {
        consider(s, perm);
        return;
    }
    for (int i = k; i < n; i++) {
        int t = perm[k];
        perm[k] = perm[i], perm[i] = t;
        all_perms(s, perm, k + 1, n);
        t = perm[k], perm[k] = perm[i], perm[i] = t;
    }
}

lz_status lz_plan_place_on_hosts(lz_plan *p, const lz_plan_costs *c, const lz_hostmap *h, double act_bytes,
                                 const uint64_t *free_bytes) {
    if (h->n_ranks != p->n_ranks)
        return lz_fail(LZ_ERR_INPUT, "the hostfile places %d ranks, the plan has %d", h->n_ranks, p->n_ranks);
    static search s;
    s = (search){.base = p, .c = c, .h = h, .free_bytes = free_bytes, .act_bytes = act_bytes, .best = 1e300};
    int perm[LZ_MAX_RANKS] = {0};
    const int n = p->n_ranks;
    for (int r = 0; r < n; r++)
        perm[r] = r;
    consider(&s, perm); // the plan as it is, when it fits
    if (n <= 8) {
        all_perms(&s, perm, 0, n);
    } else {
        bool better = true;
        memcpy(perm, s.best_perm, sizeof(int) * (size_t)n);
        while (better && s.best < 1e300) {
            better = false;
            for (int a = 0; a < n; a++)
                for (int b = a + 1; b < n; b++) {
                    const double before = s.best;
                    int t = perm[a];
                    perm[a] = perm[b], perm[b] = t;
                    consider(&s, perm);
                    if (s.best < before)
                        better = true, memcpy(perm, s.best_perm, sizeof(int) * (size_t)n);
                    else
                        t = perm[a], perm[a] = perm[b], perm[b] = t;
                }
        }
    }
    if (s.best >= 1e300)
        return lz_fail(LZ_ERR_INPUT, "no assignment of the plan's stages to these ranks fits their memory");
    lz_plan placed;
    relabel(p, s.best_perm, &placed);
    lz_plan_account(&placed, c, free_bytes);
    LZ_TRY(lz_plan_validate(&placed));
    *p = placed;
    return LZ_OK;
}
