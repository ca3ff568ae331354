/* sample_rows.c - sampling a logit row by the rule of sample_rule.h, without
 * sorting the vocabulary: the top-k and top-p boundaries are found by radix
 * selection on the order keys (four passes of 8 bits, counting tokens for
 * top-k, summing weights for top-p), then one walk in index order picks.
 * The boundary is a key tau and a count r: the kept tokens are those with a
 * larger key and the first r (by index) with key tau. The CUDA kernel does
 * the same passes with one block per row; all weights are integers, so both
 * give the same id. Compiled with -ffp-contract=off (CMakeLists.txt). */
#include <math.h>    // INFINITY
#include <stdbool.h> // bool
#include <stdlib.h>  // malloc, free

#include "cpu_kernels.h"
#include "sample_rule.h" // lz_sample_key, lz_sample_mass, lz_sample_frac53

/* The first index of the largest key (greedy, and rows without a finite maximum). */
static int32_t first_largest(const float *x, int C) {
    int32_t best = 0;
    uint32_t bk = lz_sample_key(x[0]);
    for (int i = 1; i < C; i++) {
        const uint32_t k = lz_sample_key(x[i]);
        if (k > bk)
            bk = k, best = i;
    }
    return best;
}

/* The bin, scanning 255 down to 0, where the running total reaches *need;
 * *need becomes what is still needed inside it. None (cannot happen when the
 * bins hold at least *need): bin 0, *need unchanged. */
static uint32_t find_bin(const uint64_t hist[256], uint64_t *need) {
    uint64_t before = 0;
    for (int b = 255; b >= 0; b--) {
        if (before + hist[b] >= *need) {
            *need -= before;
            return (uint32_t)b;
        }
        before += hist[b];
    }
    return 0;
}

/* The tokens a radix pass looks at: every index, or (after a pass) only those
 * whose higher digits are the prefix chosen so far, listed once in `cand` so
 * that the later passes skip the rest of the vocabulary. */
typedef struct {
    int32_t *cand; /* [C], or NULL (no room for a list): every pass reads the whole row */
    int n;         /* listed indices, or C while nothing is listed */
    bool listed;
} pass_set;

/* Keeps the tokens of the set whose key matches prefix under mask (and is
 * above `above` when given). */
static void narrow(pass_set *set, const float *x, int C, uint32_t prefix, uint32_t mask, bool use_above,
                   uint32_t above) {
    if (!set->cand)
        return;
    int n = 0;
    for (int j = 0; j < set->n; j++) {
        const int32_t i = set->listed ? set->cand[j] : j;
        const uint32_t key = lz_sample_key(x[i]);
        if ((key & mask) == prefix && (!use_above || key > above))
            set->cand[n++] = i;
    }
    set->n = n;
    set->listed = true;
}

/* Top-k: the key of the k-th token in order, and how many tokens with that
 * key are among the first k. */
static void select_k(const float *x, int C, uint32_t k, int32_t *scratch, uint32_t *tau, uint64_t *r) {
    pass_set set = {scratch, C, false};
    uint32_t prefix = 0, mask = 0;
    uint64_t need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint64_t hist[256] = {0};
        for (int j = 0; j < set.n; j++) {
            const uint32_t key = lz_sample_key(x[set.listed ? set.cand[j] : j]);
            if ((key & mask) == prefix)
                hist[(key >> shift) & 255]++;
        }
        prefix |= find_bin(hist, &need) << shift;
        mask |= 255u << shift;
        if (shift > 0)
            narrow(&set, x, C, prefix, mask, false, 0);
    }
    *tau = prefix;
    *r = need;
}

/* Top-p within K = {key > tk} + the first rk tokens with key tk: the boundary
 * (key, count) of the shortest prefix whose weight reaches floor(Z * p53 / 2^53). */
static void select_p(const float *x, int C, float m, float c, uint32_t tk, uint64_t rk, uint64_t p53,
                     int32_t *scratch, uint32_t *tau, uint64_t *r) {
    const uint64_t wk = lz_sample_mass(lz_sample_key_value(tk), m, c);
    pass_set set = {scratch, C, false};
    uint32_t prefix = 0, mask = 0;
    uint64_t need = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint64_t hist[256] = {0};
        for (int j = 0; j < set.n; j++) {
            const int32_t i = set.listed ? set.cand[j] : j;
            const uint32_t key = lz_sample_key(x[i]);
            if (key > tk && (key & mask) == prefix)
                hist[(key >> shift) & 255] += lz_sample_mass(x[i], m, c);
        }
        if ((tk & mask) == prefix) // K's tokens with key tk: rk of them, of one weight
            hist[(tk >> shift) & 255] += rk * wk;
        if (shift == 24) { // the first pass holds all of K: its weight Z sets the target
            uint64_t z = 0;
            for (int b = 0; b < 256; b++)
                z += hist[b];
            need = lz_sample_frac53(z, p53);
            need = need > 0 ? need : 1;
        }
        prefix |= find_bin(hist, &need) << shift;
        mask |= 255u << shift;
        if (shift > 0)
            narrow(&set, x, C, prefix, mask, true, tk);
    }
    const uint64_t w = lz_sample_mass(lz_sample_key_value(prefix), m, c); // > 0: its bin held `need` > 0
    *tau = prefix;
    *r = w > 0 ? (need + w - 1) / w : 1;
}

int32_t sample_row(const float *x, int C, const lz_sample_row *p, int32_t *scratch) {
    float m = -INFINITY;
    for (int i = 0; i < C; i++)
        m = x[i] > m ? x[i] : m;
    if (!(p->temperature > 0) || !(m > -INFINITY))
        return first_largest(x, C);
    const float c = lz_sample_scale(p->temperature);
    uint32_t tau = 0; // keep all: every key >= 0, and every token with key 0
    uint64_t r = (uint64_t)C;
    if (p->top_k > 0 && p->top_k < C)
        select_k(x, C, (uint32_t)p->top_k, scratch, &tau, &r);
    if (p->top_p < 1)
        select_p(x, C, m, c, tau, r, lz_sample_to53(p->top_p), scratch, &tau, &r);
    // the kept tokens (listed in index order when there is room) and their weight, then the walk
    int32_t *kept = scratch;
    int n_kept = 0;
    uint64_t total = 0, ties = 0;
    for (int i = 0; i < C; i++) {
        const uint32_t key = lz_sample_key(x[i]);
        if (key > tau || (key == tau && ties++ < r)) {
            total += lz_sample_mass(x[i], m, c);
            if (kept)
                kept[n_kept++] = i;
        }
    }
    uint64_t u53 = lz_sample_to53(p->u);
    u53 = u53 < (1ull << 53) ? u53 : (1ull << 53) - 1;
    const uint64_t target = lz_sample_frac53(total, u53);
    uint64_t cum = 0;
    ties = 0;
    for (int j = 0; kept && j < n_kept; j++)
        if ((cum += lz_sample_mass(x[kept[j]], m, c)) > target)
            return kept[j];
    for (int i = 0; !kept && i < C; i++) {
        const uint32_t key = lz_sample_key(x[i]);
        if ((key > tau || (key == tau && ties++ < r)) && (cum += lz_sample_mass(x[i], m, c)) > target)
            return i;
    }
    return first_largest(x, C); // not reached: the largest logit weighs 2^40 and is kept
}

void sample_rows_forward(int32_t *ids, const float *x, int n, int C, const lz_sample_row *params) {
    int32_t *scratch = malloc(sizeof(int32_t) * (size_t)C); // without it, slower: whole-row passes
    for (int r = 0; r < n; r++)
        ids[r] = sample_row(x + (size_t)r * C, C, &params[r], scratch);
    free(scratch);
}
