/* test_sample_rows.c - the sample_rows op (kernels/cpu/sample_rows.c) against
 * the rule of kernels/sample_rule.h written out with a full sort (the same id
 * for every row: ties, -inf, NaN, top-k, top-p, both), the special cases
 * (top-k 1, tiny top-p and temperature 0 = argmax; -inf never drawn), the
 * weights against exp, the frequencies against softmax over many seeds
 * (chi-square), and the counter-based uniform. */
#include <math.h>   // exp, INFINITY, NAN
#include <stdlib.h> // malloc, free, qsort

#include "cpu_kernels.h" // sample_rows_forward, sample_row, argmax_rows_forward
#include "sample_rule.h" // lz_sample_key, lz_sample_mass
#include "sampler.h"     // lz_sample_uniform, lz_sampler
#include "session.h"     // lz_session_sampler_save, lz_session_sampler_load
#include "test_util.h"   // CHECK

#define PINNED_U00 0.03121713052699171

/* The rule, literally: sort everything, take prefixes. */
static const float *g_row;
static int by_order(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    const uint32_t ki = lz_sample_key(g_row[i]), kj = lz_sample_key(g_row[j]);
    if (ki != kj)
        return ki > kj ? -1 : 1;
    return i - j;
}

static int32_t first_largest(const float *x, int C) {
    int32_t best = 0;
    for (int i = 1; i < C; i++)
        if (lz_sample_key(x[i]) > lz_sample_key(x[best]))
            best = i;
    return best;
}

static int32_t oracle(const float *x, int C, const lz_sample_row *p) {
    float m = -INFINITY;
    for (int i = 0; i < C; i++)
        m = x[i] > m ? x[i] : m;
    if (!(p->temperature > 0) || !(m > -INFINITY))
        return first_largest(x, C);
    const float c = lz_sample_scale(p->temperature);
    int *order = malloc(sizeof(int) * (size_t)C);
    char *kept = calloc((size_t)C, 1);
    for (int i = 0; i < C; i++)
        order[i] = i;
    g_row = x;
    qsort(order, (size_t)C, sizeof(int), by_order);
    int keep = p->top_k > 0 && p->top_k < C ? p->top_k : C;
    if (p->top_p < 1) {
        uint64_t z = 0, cum = 0;
        for (int j = 0; j < keep; j++)
            z += lz_sample_mass(x[order[j]], m, c);
        uint64_t need = lz_sample_frac53(z, lz_sample_to53(p->top_p));
        need = need > 0 ? need : 1;
        int n = 0;
        while (cum < need)
            cum += lz_sample_mass(x[order[n++]], m, c);
        keep = n;
    }
    uint64_t total = 0, cum = 0;
    for (int j = 0; j < keep; j++) {
        kept[order[j]] = 1;
        total += lz_sample_mass(x[order[j]], m, c);
    }
    uint64_t u53 = lz_sample_to53(p->u);
    u53 = u53 < (1ull << 53) ? u53 : (1ull << 53) - 1;
    const uint64_t target = lz_sample_frac53(total, u53);
    int32_t id = -1;
    for (int i = 0; i < C && id < 0; i++)
        if (kept[i] && (cum += lz_sample_mass(x[i], m, c)) > target)
            id = i;
    free(order), free(kept);
    return id;
}

static uint64_t rng_state = 12345;
static double rnd(void) { return lz_sample_uniform(777, rng_state++); }

/* Rows of several kinds: smooth, coarse (many ties), with -inf and NaN. */
static void fill_row(float *x, int C, int kind) {
    for (int i = 0; i < C; i++) {
        const double r = rnd();
        x[i] = kind == 0 ? (float)(8 * r - 4) : kind == 1 ? (float)(int)(6 * r) : (float)(20 * r - 10);
        if (kind == 2 && rnd() < 0.2)
            x[i] = -INFINITY;
        if (kind == 3 && rnd() < 0.05)
            x[i] = NAN;
        if (kind == 3 && rnd() < 0.05)
            x[i] = i % 2 ? 0.0f : -0.0f;
    }
}

static void test_against_rule(void) {
    static const double temps[] = {1.0, 0.7, 2.5, 0.05};
    static const int ks[] = {0, 1, 2, 5, 17, 1000};
    static const double ps[] = {1.0, 0.9, 0.5, 0.05, 1e-12};
    enum { C = 300 };
    float x[C];
    int mismatches = 0, cases = 0;
    for (int kind = 0; kind < 4; kind++)
        for (int rep = 0; rep < 8; rep++) {
            fill_row(x, C, kind);
            for (size_t t = 0; t < 4; t++)
                for (size_t k = 0; k < 6; k++)
                    for (size_t q = 0; q < 5; q++) {
                        const lz_sample_row p = {temps[t], ks[k], ps[q], rnd()};
                        int32_t scratch[C];
                        const int32_t got = sample_row(x, C, &p, q % 2 ? scratch : NULL), want = oracle(x, C, &p);
                        mismatches += got != want;
                        cases++;
                        if (got != want && mismatches < 5)
                            fprintf(stderr, "kind %d T %g k %d p %g: %d, rule %d\n", kind, p.temperature, p.top_k,
                                    p.top_p, got, want);
                    }
        }
    CHECK_MSG(mismatches == 0, "%d of %d rows differ from the rule", mismatches, cases);
}

static void test_argmax_cases(void) {
    enum { C = 1000, N = 20 };
    float *x = malloc(sizeof(float) * C * N);
    int32_t am[N], ids[N];
    lz_sample_row k1[N], p0[N], t0[N];
    for (int r = 0; r < N; r++) {
        fill_row(x + r * C, C, r % 3); // rows without NaN: argmax_rows' choice is defined the same way
        k1[r] = (lz_sample_row){0.8, 1, 1.0, rnd()};
        p0[r] = (lz_sample_row){1.3, 0, 1e-9, rnd()};
        t0[r] = (lz_sample_row){0.0, 40, 0.9, rnd()};
    }
    argmax_rows_forward(am, x, N, C);
    sample_rows_forward(ids, x, N, C, k1);
    for (int r = 0; r < N; r++)
        CHECK_MSG(ids[r] == am[r], "top-k 1, row %d: %d, argmax %d", r, ids[r], am[r]);
    sample_rows_forward(ids, x, N, C, p0);
    for (int r = 0; r < N; r++)
        CHECK_MSG(ids[r] == am[r], "top-p 1e-9, row %d: %d, argmax %d", r, ids[r], am[r]);
    sample_rows_forward(ids, x, N, C, t0);
    for (int r = 0; r < N; r++)
        CHECK_MSG(ids[r] == am[r], "temperature 0, row %d: %d, argmax %d", r, ids[r], am[r]);
    free(x);
}

/* Frequencies over n draws (uniforms of seeds 0..n-1 at count 0, as a batch's
 * first tokens are) against probabilities: chi-square under a 99.99% bound. */
static void chi_square(const float *x, int C, double T, int k, double p, const double *prob, double bound,
                       const char *what) {
    enum { DRAWS = 40000 };
    int counts[16] = {0};
    for (int s = 0; s < DRAWS; s++) {
        const lz_sample_draw d = {{T, k, p, (uint64_t)s}, 0};
        const lz_sample_row row = lz_sample_row_of(&d);
        counts[sample_row(x, C, &row, NULL)]++;
    }
    double chi = 0;
    for (int i = 0; i < C; i++) {
        if (prob[i] == 0) {
            CHECK_MSG(counts[i] == 0, "%s: id %d (probability 0) drawn %d times", what, i, counts[i]);
            continue;
        }
        const double e = prob[i] * DRAWS;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    CHECK_MSG(chi < bound, "%s: chi-square %.1f (bound %.1f)", what, chi, bound);
}

static void test_frequencies(void) {
    enum { C = 8 };
    const float x[C] = {1.0f, 3.0f, 0.5f, 3.0f, -INFINITY, 2.0f, 0.0f, 2.5f};
    double prob[C], z = 0;
    // temperature 0.7, no truncation: softmax(x / 0.7); 7 nonzero classes, df 6: 99.99% at 27.9
    for (int i = 0; i < C; i++)
        z += prob[i] = exp(x[i] / 0.7);
    for (int i = 0; i < C; i++)
        prob[i] /= z;
    chi_square(x, C, 0.7, 0, 1.0, prob, 27.9, "softmax(x / 0.7)");
    // top-k 3: {1, 3, 7} renormalised at temperature 1 (df 2: 18.4)
    z = 0;
    for (int i = 0; i < C; i++)
        z += prob[i] = i == 1 || i == 3 || i == 7 ? exp(x[i]) : 0;
    for (int i = 0; i < C; i++)
        prob[i] /= z;
    chi_square(x, C, 1.0, 3, 1.0, prob, 18.4, "top-k 3");
    // top-p 0.5: ids 1 and 3 hold ~0.29 each at temperature 1, so exactly {1, 3} (df 1: 15.1)
    for (int i = 0; i < C; i++)
        prob[i] = i == 1 || i == 3 ? 0.5 : 0;
    chi_square(x, C, 1.0, 0, 0.5, prob, 15.1, "top-p 0.5");
    // all equal: uniform (df 7: 29.9); all equal with top-k 3: the three lowest ids
    const float flat[C] = {0};
    for (int i = 0; i < C; i++)
        prob[i] = 1.0 / C;
    chi_square(flat, C, 1.0, 0, 1.0, prob, 29.9, "all equal");
    for (int i = 0; i < C; i++)
        prob[i] = i < 3 ? 1.0 / 3 : 0;
    chi_square(flat, C, 1.0, 3, 1.0, prob, 18.4, "all equal, top-k 3");
    // temperature: near 0 only the two maxima are drawn, half and half; very high, near uniform
    for (int i = 0; i < C; i++)
        prob[i] = i == 1 || i == 3 ? 0.5 : 0;
    chi_square(x, C, 0.01, 0, 1.0, prob, 15.1, "temperature 0.01");
    z = 0;
    for (int i = 0; i < C; i++)
        z += prob[i] = i == 4 ? 0 : exp(x[i] / 1000.0);
    for (int i = 0; i < C; i++)
        prob[i] /= z;
    chi_square(x, C, 1000.0, 0, 1.0, prob, 27.9, "temperature 1000");
}

static void test_special_rows(void) {
    enum { C = 5 };
    const float all_inf[C] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    const float nan_and_inf[C] = {NAN, -INFINITY, NAN, -INFINITY, -INFINITY};
    const float plus_inf[C] = {1.0f, INFINITY, 2.0f, INFINITY, 0.0f};
    const float one_finite[C] = {-INFINITY, NAN, 4.0f, -INFINITY, -INFINITY};
    for (int s = 0; s < 200; s++) {
        const lz_sample_row p = {1.0, 0, 1.0, lz_sample_uniform(s, 3)};
        CHECK(sample_row(all_inf, C, &p, NULL) == 0);
        CHECK(sample_row(nan_and_inf, C, &p, NULL) == 1); // the first largest key: NaN sorts below -inf
        const int32_t id = sample_row(plus_inf, C, &p, NULL);
        CHECK_MSG(id == 1 || id == 3, "+inf row: %d", id);
        CHECK(sample_row(one_finite, C, &p, NULL) == 2);
    }
    const lz_sample_row edge = {1.0, 0, 1.0, 1.0}; // u = 1 (outside [0, 1)): the last kept token, not past it
    CHECK(sample_row(plus_inf, C, &edge, NULL) == 3);
}

static void test_mass_accuracy(void) {
    double worst = 0;
    for (int i = 0; i < 20000; i++) {
        const float x = (float)(-40.0 * i / 20000.0);
        const uint64_t w = lz_sample_mass(x, 0.0f, (float)1.4426950408889634);
        const double want = exp((double)x) * 1099511627776.0, err = (fabs((double)w - want) - 1) / want; // 1: the floor
        worst = err > worst ? err : worst;
    }
    CHECK_MSG(worst < 1e-6, "weights off exp by %.2e (relative)", worst);
    CHECK(lz_sample_mass(0.0f, 0.0f, 1.0f) == (1ull << 40));
    CHECK(lz_sample_mass(-INFINITY, 0.0f, 1.0f) == 0);
    CHECK(lz_sample_mass(NAN, 0.0f, 1.0f) == 0);
}

static void test_uniform(void) {
    double sum = 0;
    int same = 0;
    for (uint64_t n = 0; n < 100000; n++) {
        const double u = lz_sample_uniform(5, n);
        CHECK(u >= 0 && u < 1);
        sum += u;
        same += u == lz_sample_uniform(6, n) || u == lz_sample_uniform(5, n + 1);
    }
    CHECK_NEAR(sum / 100000, 0.5, 0.005);
    CHECK(same == 0);
    // pinned: ids of `lizard generate --seed S` must not change between versions
    CHECK_MSG(lz_sample_uniform(0, 0) == PINNED_U00, "uniform(0, 0) = %.17g", lz_sample_uniform(0, 0));
    // a sampler counts its draws: its n-th id uses uniform(seed, n)
    lz_sampler s;
    const lz_sampler_params prm = {1.0, 0, 1.0, 9};
    CHECK(lz_sampler_init(&s, &prm, 8) == LZ_OK);
    for (uint64_t n = 0; n < 5; n++) {
        const lz_sample_draw d = lz_sampler_draw(&s);
        CHECK(d.n == n && d.p.seed == 9);
    }
}

/* A session keeps the parameters, seed and count (a SamplerState message);
 * files written before it hold a record: of the counter sampler (40 bytes,
 * parameters, seed, count) or of the xoshiro one (64 bytes: temperature,
 * top_p, top_k, seed, state), which loads with its parameters and seed from count 0. */
static void test_session_record(void) {
    lz_sampler a;
    const lz_sampler_params pa = {0.8, 40, 0.9, 1234};
    CHECK(lz_sampler_init(&a, &pa, 8) == LZ_OK);
    for (int i = 0; i < 5; i++)
        lz_sampler_draw(&a);
    Lizard__SequenceState msg = LIZARD__SEQUENCE_STATE__INIT;
    Lizard__SamplerState keep;
    lz_session_sampler_save(&msg, &keep, &a);
    lz_sampler_params p;
    uint64_t draws = 0;
    CHECK(lz_session_sampler_load(&msg, "s", &p, &draws) == LZ_OK);
    CHECK(p.temperature == 0.8 && p.top_k == 40 && p.top_p == 0.9 && p.seed == 1234 && draws == 5);
    Lizard__SequenceState old_msg = LIZARD__SEQUENCE_STATE__INIT;
    const struct {
        double temperature, top_p;
        int64_t top_k;
        uint64_t seed, n;
    } counter = {0.6, 0.5, 3, 99, 17};
    old_msg.sampler = (ProtobufCBinaryData){sizeof counter, (uint8_t *)&counter};
    CHECK(lz_session_sampler_load(&old_msg, "s", &p, &draws) == LZ_OK);
    CHECK(p.temperature == 0.6 && p.top_k == 3 && p.top_p == 0.5 && p.seed == 99 && draws == 17);
    const struct {
        double temperature, top_p;
        int64_t top_k;
        uint64_t seed, rng[4];
    } xoshiro = {0.7, 0.95, 0, 77, {1, 2, 3, 4}};
    CHECK(sizeof xoshiro == 64);
    old_msg.sampler = (ProtobufCBinaryData){sizeof xoshiro, (uint8_t *)&xoshiro};
    CHECK(lz_session_sampler_load(&old_msg, "s", &p, &draws) == LZ_OK);
    CHECK(p.temperature == 0.7 && p.top_p == 0.95 && p.seed == 77 && draws == 0);
    old_msg.sampler.len = 17;
    CHECK_FAILS_WITH(lz_session_sampler_load(&old_msg, "old.lzs", &p, &draws), LZ_ERR_INPUT,
                     "old.lzs: sampler state of 17 bytes");
    // values out of range are the session's fault, named as it holds them (lz_sampler_init names flags,
    // which a continued session need not have been given)
    keep.top_p = 2;
    CHECK_FAILS_WITH(lz_session_sampler_load(&msg, "s.lzs", &p, &draws), LZ_ERR_INPUT,
                     "s.lzs: the saved sampler's top_p is 2 (expected in (0, 1])");
    keep.top_p = 0.9, keep.temperature = NAN;
    CHECK_FAILS_WITH(lz_session_sampler_load(&msg, "s.lzs", &p, &draws), LZ_ERR_INPUT,
                     "s.lzs: the saved sampler's temperature is nan");
    keep.temperature = 0.8, keep.top_k = -3;
    CHECK_FAILS_WITH(lz_session_sampler_load(&msg, "s.lzs", &p, &draws), LZ_ERR_INPUT,
                     "s.lzs: the saved sampler's top_k is -3");
    const struct {
        double temperature, top_p;
        int64_t top_k;
        uint64_t seed, n;
    } zero_p = {0.6, 0.0, 3, 99, 17};
    old_msg.sampler = (ProtobufCBinaryData){sizeof zero_p, (uint8_t *)&zero_p};
    CHECK_FAILS_WITH(lz_session_sampler_load(&old_msg, "old.lzs", &p, &draws), LZ_ERR_INPUT,
                     "old.lzs: the saved sampler's top_p is 0");
}

int main(void) {
    test_against_rule();
    test_session_record();
    test_argmax_cases();
    test_frequencies();
    test_special_rows();
    test_mass_accuracy();
    test_uniform();
    return lz_test_finish("test_sample_rows");
}
