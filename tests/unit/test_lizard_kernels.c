/* test_lizard_kernels.c - the Lizard kernels against direct double-precision
 * evaluations of docs/model-format.md's equations (explicit a_it with gate
 * products, explicit window sums), and the chunked GLA form against the
 * recurrent one: random shapes, T not a multiple of the chunk, T < w, gates
 * near 0 and near 1, state carried across steps. */
#include <math.h>   // exp, log, fabs, sqrt
#include <stdlib.h> // malloc, free, rand
#include <string.h> // memset

#include "cpu_kernels.h" // the kernels under test
#include "test_util.h"   // CHECK

static double urand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (double)(*s >> 8) / (double)(1u << 24);
}

static float *random_array(size_t n, double lo, double hi, unsigned *seed) {
    float *a = calloc(n ? n : 1, sizeof(float));
    for (size_t i = 0; i < n; i++)
        a[i] = (float)(lo + (hi - lo) * urand(seed));
    return a;
}

typedef struct {
    int T, Hq, Hkv, Hs, d, f, w, m;
    bool normalize;
    double gate_lo, gate_hi; /* range of the gate logits */
} shape;

/* Reference GLA output of query head h at row i (rows 0..T-1 are one
 * sequence starting at position 0): sum_t a_it v_t / sum_t a_it. */
static void gla_reference(double *out, const float *pq, const float *pk, const float *v, const float *lg, int i, int h,
                          const shape *s) {
    const int F = 2 * s->f, group = s->Hq / s->Hkv, st = s->Hs == s->Hq ? h : h / group, g = h / group;
    double den = 0;
    memset(out, 0, sizeof(double) * s->d);
    for (int t = 0; t <= i; t++) {
        double dotp = 0, decay = 1;
        for (int a = 0; a < F; a++)
            dotp += (double)pq[((size_t)i * s->Hq + h) * F + a] * pk[((size_t)t * s->Hs + st) * F + a];
        for (int l = t + 1; l <= i; l++)
            decay *= exp((double)lg[l]);
        double at = dotp * decay;
        den += at;
        for (int j = 0; j < s->d; j++)
            out[j] += at * v[((size_t)t * s->Hkv + g) * s->d + j];
    }
    if (s->normalize)
        for (int j = 0; j < s->d; j++)
            out[j] /= den;
}

static lz_attn_dims dims_of(const shape *s) {
    return (lz_attn_dims){.n_heads = s->Hq, .n_kv_heads = s->Hkv, .head_dim = s->d, .n_state_heads = s->Hs,
                          .feature_dim = s->f, .window = s->w, .n_meta = s->m, .gla_normalize = s->normalize};
}

static double rel_err(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Chunked over the whole prompt, recurrent token by token, and a mix (prompt
 * in pieces of `piece` tokens), all against the double reference. */
static void check_gla(const shape *s, int piece, unsigned seed) {
    const int F = 2 * s->f, T = s->T;
    float *pq = random_array((size_t)T * s->Hq * F, 0.0, 1.0, &seed);
    float *pk = random_array((size_t)T * s->Hs * F, 0.0, 1.0, &seed);
    float *v = random_array((size_t)T * s->Hkv * s->d, -1, 1, &seed);
    float *logits = random_array((size_t)T, s->gate_lo, s->gate_hi, &seed), *lg = malloc(sizeof(float) * T);
    log_sigmoid_forward(lg, logits, T);
    const size_t out_n = (size_t)T * s->Hq * s->d;
    double *ref = malloc(sizeof(double) * out_n);
    for (int i = 0; i < T; i++)
        for (int h = 0; h < s->Hq; h++)
            gla_reference(ref + ((size_t)i * s->Hq + h) * s->d, pq, pk, v, lg, i, h, s);
    lz_attn_dims dims = dims_of(s);
    float *S = calloc((size_t)s->Hs * F * s->d, sizeof(float)), *z = calloc((size_t)s->Hs * F, sizeof(float));
    float *out = malloc(sizeof(float) * out_n);
    for (int mode = 0; mode < 3; mode++) { // 0: one chunked call, 1: recurrent, 2: chunked in pieces
        memset(S, 0, sizeof(float) * s->Hs * F * s->d);
        memset(z, 0, sizeof(float) * s->Hs * F);
        for (size_t i = 0; i < out_n; i++)
            out[i] = NAN; // poison: every element must be written
        lz_layer_state st = {.S = S, .z = z};
        int step = mode == 0 ? T : mode == 1 ? 1 : piece;
        for (int r0 = 0; r0 < T; r0 += step) {
            int len = T - r0 < step ? T - r0 : step, slot = 0, start = 0;
            lz_batch b = {1, len, &slot, &start, &len, &r0, NULL};
            const size_t qo = (size_t)r0 * s->Hq, ko = (size_t)r0 * s->Hs, vo = (size_t)r0 * s->Hkv;
            if (mode == 1)
                gla_recurrent_forward(out + qo * s->d, pq + qo * F, pk + ko * F, v + vo * s->d, lg + r0, &st, &b,
                                      &dims);
            else
                gla_chunked_forward(out + qo * s->d, pq + qo * F, pk + ko * F, v + vo * s->d, lg + r0, &st, &b,
                                    &dims);
        }
        double e = rel_err(out, ref, out_n);
        CHECK_MSG(e < 1e-5, "GLA mode %d T=%d Hq=%d Hkv=%d Hs=%d gates [%g, %g]: rel err %g", mode, T, s->Hq, s->Hkv,
                  s->Hs, s->gate_lo, s->gate_hi, e);
    }
    free(pq), free(pk), free(v), free(logits), free(lg), free(ref), free(S), free(z), free(out);
}

/* WIN_i for query head h at row i, rows are positions 0..T-1. */
static void window_reference(double *out, const float *q, const float *k, const float *v, const float *meta,
                             double alpha, int i, int h, const shape *s) {
    const int g = h / (s->Hq / s->Hkv), first = i - s->w + 1 > 0 ? i - s->w + 1 : 0;
    double den = 0, num[256] = {0};
    for (int j = 0; j < s->m; j++)
        den += exp((double)meta[j]);
    for (int t = first; t <= i; t++) {
        double sc = 0;
        for (int j = 0; j < s->d; j++)
            sc += (double)q[((size_t)i * s->Hq + h) * s->d + j] * k[((size_t)t * s->Hkv + g) * s->d + j];
        double e = exp(sc / sqrt((double)s->d));
        den += e;
        for (int j = 0; j < s->d; j++)
            num[j] += e * v[((size_t)t * s->Hkv + g) * s->d + j];
    }
    for (int j = 0; j < s->d; j++)
        out[j] = alpha * num[j] / den;
}

static void check_window(const shape *s, int piece, unsigned seed) {
    const int T = s->T, row = s->Hkv * s->d;
    float *q = random_array((size_t)T * s->Hq * s->d, -2, 2, &seed), *k = random_array((size_t)T * row, -2, 2, &seed);
    float *v = random_array((size_t)T * row, -1, 1, &seed), *meta = random_array((size_t)s->m + 1, -1, 2, &seed);
    const size_t out_n = (size_t)T * s->Hq * s->d;
    double *ref = malloc(sizeof(double) * out_n);
    for (int i = 0; i < T; i++)
        for (int h = 0; h < s->Hq; h++)
            window_reference(ref + ((size_t)i * s->Hq + h) * s->d, q, k, v, meta, 0.75, i, h, s);
    float *ring_k = malloc(sizeof(float) * (size_t)s->w * row), *ring_v = malloc(sizeof(float) * (size_t)s->w * row);
    float *out = calloc(out_n, sizeof(float));
    lz_attn_dims dims = dims_of(s);
    lz_layer_state st = {.ring_k = ring_k, .ring_v = ring_v};
    for (int r0 = 0; r0 < T; r0 += piece) {
        int len = T - r0 < piece ? T - r0 : piece, slot = 0, start = 0;
        lz_batch b = {1, len, &slot, &start, &len, &r0, NULL};
        window_attention_forward(out + (size_t)r0 * s->Hq * s->d, q + (size_t)r0 * s->Hq * s->d, k + (size_t)r0 * row,
                                 v + (size_t)r0 * row, meta, 0.75f, &st, &b, &dims);
    }
    double e = rel_err(out, ref, out_n);
    CHECK_MSG(e < 1e-5, "window T=%d w=%d m=%d piece=%d: rel err %g", T, s->w, s->m, piece, e);
    free(q), free(k), free(v), free(meta), free(ref), free(ring_k), free(ring_v), free(out);
}

int main(void) {
    const shape shapes[] = {
        // T    Hq Hkv Hs d   f  w   m  norm   gate logits
        {1, 4, 2, 2, 8, 4, 4, 2, true, -3, 3},
        {5, 4, 2, 2, 8, 4, 8, 3, true, -3, 3},     // T < w
        {63, 4, 2, 4, 16, 8, 5, 1, true, -3, 3},   // state per query head
        {64, 2, 2, 2, 8, 4, 64, 4, true, -3, 3},   // exactly one chunk
        {150, 4, 1, 1, 8, 4, 7, 2, true, -3, 3},   // several chunks, MQA, T not a multiple of 64
        {130, 4, 2, 2, 8, 4, 3, 0, false, -3, 3},  // no normaliser, no meta logits
        {200, 2, 1, 1, 8, 4, 16, 2, true, 8, 12},  // gates near 1: little decay over long spans
        {200, 2, 1, 1, 8, 4, 16, 2, true, -14, -9}, // gates near 0: the state is nearly forgotten each step
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_gla(&shapes[i], 7, 1234u + (unsigned)i);
        check_gla(&shapes[i], 65, 99u + (unsigned)i);
        check_window(&shapes[i], shapes[i].T, 4321u + (unsigned)i);
        check_window(&shapes[i], 1, 777u + (unsigned)i);
        check_window(&shapes[i], 3, 555u + (unsigned)i);
    }
    return lz_test_finish("test_lizard_kernels");
}
