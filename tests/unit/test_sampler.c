/* test_sampler.c - greedy picks the first maximum; the same seed gives the
 * same ids; top-k and top-p never pick outside their set; the empirical
 * distribution at temperature 1 matches softmax(logits); bad parameters fail. */
#include <math.h>   // exp, fabs
#include <stdlib.h> // qsort
#include <string.h> // memset

#include "sampler.h"   // lz_sampler
#include "test_util.h" // CHECK

enum { V = 8 };
static const float logits[V] = {1.0f, 3.0f, 0.5f, 3.0f, -1.0f, 2.0f, 0.0f, 2.5f};

static lz_sampler make(double t, int k, double p, uint64_t seed) {
    lz_sampler s;
    lz_sampler_params prm = {t, k, p, seed};
    CHECK(lz_sampler_init(&s, &prm, V) == LZ_OK);
    return s;
}

static void test_greedy(void) {
    lz_sampler s = make(0, 0, 1, 1);
    CHECK(lz_sampler_next(&s, logits) == 1); // ties: the lower id
}

static void test_reproducible(void) {
    lz_sampler a = make(1.0, 0, 1, 42), b = make(1.0, 0, 1, 42), c = make(1.0, 0, 1, 43);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 200; i++) {
        int x = lz_sampler_next(&a, logits), y = lz_sampler_next(&b, logits), z = lz_sampler_next(&c, logits);
        same_ab &= x == y;
        same_ac &= x == z;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
}

static void test_top_k_top_p(void) {
    lz_sampler k2 = make(5.0, 2, 1, 7), p = make(1.0, 0, 0.5, 7);
    // softmax(logits): ids 1 and 3 hold ~0.29 each, so top-p 0.5 keeps exactly {1, 3}
    for (int i = 0; i < 500; i++) {
        int x = lz_sampler_next(&k2, logits), y = lz_sampler_next(&p, logits);
        CHECK_MSG(x == 1 || x == 3, "top-k 2 picked %d", x);
        CHECK_MSG(y == 1 || y == 3, "top-p 0.5 picked %d", y);
    }
}

static void test_distribution(void) {
    lz_sampler s = make(1.0, 0, 1, 2024);
    int counts[V] = {0};
    const int n = 200000;
    for (int i = 0; i < n; i++)
        counts[lz_sampler_next(&s, logits)]++;
    double z = 0;
    for (int i = 0; i < V; i++)
        z += exp(logits[i]);
    for (int i = 0; i < V; i++)
        CHECK_NEAR((double)counts[i] / n, exp(logits[i]) / z, 0.005);
}

/* A large vocabulary with many equal logits, top-k then top-p: every draw is
 * in the set a full sort defines (computed here independently), and the
 * draws follow the renormalised softmax over that set. */
typedef struct {
    float logit;
    int32_t id;
} lz_candidate;

static int cmp_desc(const void *a, const void *b) {
    const lz_candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

static void test_large_vocab_selection(void) {
    enum { BIG = 5000, K = 300, DRAWS = 50000 };
    static float big[BIG];
    static lz_candidate sorted[BIG];
    static int counts[BIG];
    unsigned r = 99;
    for (int i = 0; i < BIG; i++) {
        r = r * 1103515245u + 12345u;
        big[i] = (float)((r >> 16) % 40) / 8.0f; // 40 levels: many ties
        sorted[i] = (lz_candidate){big[i], i};
    }
    qsort(sorted, BIG, sizeof sorted[0], cmp_desc);
    const double top_p = 0.6;
    double total = 0, cum = 0;
    for (int i = 0; i < K; i++)
        total += exp(sorted[i].logit - sorted[0].logit);
    int keep = 0;
    while (keep < K && cum < top_p * total)
        cum += exp(sorted[keep++].logit - sorted[0].logit);
    lz_sampler s;
    lz_sampler_params prm = {1.0, K, top_p, 5};
    CHECK(lz_sampler_init(&s, &prm, BIG) == LZ_OK);
    for (int i = 0; i < DRAWS; i++)
        counts[lz_sampler_next(&s, big)]++;
    int outside = 0;
    for (int i = keep; i < BIG; i++)
        outside += counts[sorted[i].id];
    CHECK_MSG(outside == 0, "%d draws outside the %d kept candidates", outside, keep);
    double worst = 0;
    for (int i = 0; i < keep; i++) {
        const double want = exp(sorted[i].logit - sorted[0].logit) / cum, got = (double)counts[sorted[i].id] / DRAWS;
        worst = fabs(got - want) > worst ? fabs(got - want) : worst;
    }
    CHECK_MSG(worst < 0.004, "kept %d: frequencies off by %.4f", keep, worst);
}

static void test_bad_params(void) {
    lz_sampler s;
    lz_sampler_params bad_t = {-1, 0, 1, 0}, bad_p = {1, 0, 0, 0}, bad_k = {1, -3, 1, 0};
    CHECK_FAILS_WITH(lz_sampler_init(&s, &bad_t, V), LZ_ERR_INPUT, "--temperature");
    CHECK_FAILS_WITH(lz_sampler_init(&s, &bad_p, V), LZ_ERR_INPUT, "--top-p");
    CHECK_FAILS_WITH(lz_sampler_init(&s, &bad_k, V), LZ_ERR_INPUT, "--top-k");
}

int main(void) {
    test_greedy();
    test_reproducible();
    test_top_k_top_p();
    test_large_vocab_selection();
    test_distribution();
    test_bad_params();
    return lz_test_finish("test_sampler");
}
