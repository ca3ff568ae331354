/* sampler.c - greedy / temperature / top-k / top-p sampling with xoshiro256**
 * seeded through splitmix64. Candidates are ordered by logit (ties: lower id
 * first), so the result does not depend on the sort's stability. */
#include <math.h>   // expf
#include <stdbool.h> // bool
#include <stdlib.h> // malloc, free, qsort

#include "sampler.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t *s) {
    const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lz_sampler_uniform(lz_sampler *s) { return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53; }

lz_status lz_sampler_init(lz_sampler *s, const lz_sampler_params *p, int vocab) {
    if (p->temperature < 0)
        return lz_fail(LZ_ERR_INPUT, "--temperature must be >= 0, got %g", p->temperature);
    if (p->top_k < 0)
        return lz_fail(LZ_ERR_INPUT, "--top-k must be >= 0, got %d", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return lz_fail(LZ_ERR_INPUT, "--top-p must be in (0, 1], got %g", p->top_p);
    s->p = *p;
    s->vocab = vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    s->order = malloc(sizeof(lz_candidate) * (size_t)vocab);
    s->probs = malloc(sizeof(float) * (size_t)vocab);
    if (!s->order || !s->probs) {
        lz_sampler_free(s);
        return lz_fail(LZ_ERR_NOMEM, "sampler: out of memory for %d logits", vocab);
    }
    return LZ_OK;
}

void lz_sampler_free(lz_sampler *s) {
    free(s->order);
    free(s->probs);
    s->order = NULL;
    s->probs = NULL;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int by_logit_desc(const void *a, const void *b) {
    const lz_candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static bool first(const lz_candidate *a, const lz_candidate *b) { return by_logit_desc(a, b) < 0; }

static void swap(lz_candidate *a, lz_candidate *b) {
    const lz_candidate t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k first candidates of c[0, n) (highest logit, then lowest id)
 * to c[0, k), in no particular order: quickselect, O(n) on average, where a
 * full sort of a 128K vocabulary per row per step would cost milliseconds. */
static void select_first(lz_candidate *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi && k > lo && k <= hi) {
        const int mid = lo + (hi - lo) / 2; // median of three: sorted or reversed input stays linear
        if (first(&c[mid], &c[lo]))
            swap(&c[mid], &c[lo]);
        if (first(&c[hi], &c[lo]))
            swap(&c[hi], &c[lo]);
        if (first(&c[hi], &c[mid]))
            swap(&c[hi], &c[mid]);
        const lz_candidate pivot = c[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (first(&c[i], &pivot))
                i++;
            while (first(&pivot, &c[j]))
                j--;
            if (i <= j)
                swap(&c[i++], &c[j--]);
        }
        if (k <= j + 1) // c[lo, j] all come before c[i, hi]
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return; // c[j + 1, i) equal the pivot: the first k are in place
    }
}

/* Candidates kept, each with its weight exp((logit - top) / T):
 *   top-k: the k first (by logit, then id);
 *   top-p: of those, the shortest prefix in that order whose weight
 *          reaches top_p of their total (found by widening a selection,
 *          so only the prefix is sorted);
 * the draw walks the kept candidates in the order they are stored. */
int32_t lz_sampler_next(lz_sampler *s, const float *logits) {
    if (s->p.temperature == 0)
        return argmax(logits, s->vocab);
    lz_candidate *c = s->order;
    float top = logits[0];
    for (int i = 0; i < s->vocab; i++) {
        c[i] = (lz_candidate){logits[i], i};
        top = logits[i] > top ? logits[i] : top;
    }
    int n = s->p.top_k > 0 && s->p.top_k < s->vocab ? s->p.top_k : s->vocab;
    if (n < s->vocab)
        select_first(c, s->vocab, n);
    const float inv_t = (float)(1.0 / s->p.temperature);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += s->probs[i] = expf((c[i].logit - top) * inv_t);
    if (s->p.top_p < 1) { // the shortest prefix (in order) whose weight reaches top_p of the total
        const double target = s->p.top_p * sum;
        for (int m = n < 64 ? n : 64;; m = m * 4 < n ? m * 4 : n) {
            select_first(c, n, m);
            qsort(c, (size_t)m, sizeof(lz_candidate), by_logit_desc);
            double cum = 0;
            int keep = 0;
            while (keep < m && cum < target)
                cum += expf((c[keep++].logit - top) * inv_t);
            if (cum >= target || m == n) {
                n = keep;
                break;
            }
        }
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += s->probs[i] = expf((c[i].logit - top) * inv_t);
    }
    const double u = lz_sampler_uniform(s) * sum;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->probs[i];
        if (u < acc)
            return c[i].id;
    }
    return c[n - 1].id;
}
