/* test_cpu_batch_rows.c - a token's result on the CPU backend does not depend on the batch it came in:
 * softmax attention gives a sequence's rows the same bits prefilled at once, in chunks beside another
 * sequence's rows, or decoded a token at a time (full causal and with a sliding window), on 1 or 2
 * threads; the LM head's loss gives each row's gradient and the loss's sum the same bits as rows
 * taken one by one. Both against double. */
#include <math.h>    // exp, log, fabs, sqrt, NAN, isnan
#include <stdbool.h> // bool
#include <stdlib.h>  // malloc, calloc, free
#include <string.h>  // memcmp, memcpy

#include "cpu_kernels.h"   // softmax_attention_forward, lm_head_loss
#include "cpu_threads.h"   // lz_cpu_set_threads
#include "test_util.h"     // CHECK, CHECK_MSG
#include "train_kernels.h" // lm_head_cross_entropy_f64

enum { HQ = 4, HKV = 2, D = 32, L = 150, LB = 40, CAP = 160, SLOTS = 4 };

typedef struct {
    const float *q, *k, *v; /* the sequence's rows */
    int slot, done;         /* tokens already in its cache */
} seq;

/* One step: n_seq sequences taking take[s] tokens each, in that order in the activations; their outputs
 * copied to outs[s] at their positions. */
static void step(lz_layer_state *st, const lz_attn_dims *dims, seq **seqs, const int *take, int n_seq,
                 float **outs) {
    int32_t slot[2], start[2], len[2], pos[2], token_pos[L + LB];
    int T = 0;
    for (int s = 0; s < n_seq; s++)
        slot[s] = seqs[s]->slot, start[s] = T, len[s] = take[s], pos[s] = seqs[s]->done, T += take[s];
    float *q = lz_test_nan_array((size_t)T * HQ * D);
    float *k = lz_test_nan_array((size_t)T * HKV * D);
    float *v = lz_test_nan_array((size_t)T * HKV * D);
    float *out = lz_test_nan_array((size_t)T * HQ * D);
    for (int s = 0; s < n_seq; s++) {
        memcpy(q + (size_t)start[s] * HQ * D, seqs[s]->q + (size_t)pos[s] * HQ * D, sizeof(float) * take[s] * HQ * D);
        memcpy(k + (size_t)start[s] * HKV * D, seqs[s]->k + (size_t)pos[s] * HKV * D, sizeof(float) * take[s] * HKV * D);
        memcpy(v + (size_t)start[s] * HKV * D, seqs[s]->v + (size_t)pos[s] * HKV * D, sizeof(float) * take[s] * HKV * D);
        for (int i = 0; i < take[s]; i++)
            token_pos[start[s] + i] = pos[s] + i;
    }
    lz_batch b = {n_seq, T, slot, start, len, pos, token_pos};
    softmax_attention_forward(out, q, k, v, st, &b, dims);
    for (int s = 0; s < n_seq; s++) {
        memcpy(outs[s] + (size_t)pos[s] * HQ * D, out + (size_t)start[s] * HQ * D, sizeof(float) * take[s] * HQ * D);
        seqs[s]->done += take[s];
    }
    free(q), free(k), free(v), free(out);
}

// row i, head h of causal (windowed) attention in double
static double worst_vs_double(const float *out, const float *q, const float *k, const float *v, int window) {
    double worst = 0;
    for (int i = 0; i < L; i++)
        for (int h = 0; h < HQ; h++) {
            const int g = h / (HQ / HKV), first = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
            double s[L], m = -1e300, den = 0, num[D] = {0};
            for (int t = first; t <= i; t++) {
                double dot = 0;
                for (int j = 0; j < D; j++)
                    dot += (double)q[((size_t)i * HQ + h) * D + j] * k[((size_t)t * HKV + g) * D + j];
                s[t] = dot / sqrt((double)D);
                m = s[t] > m ? s[t] : m;
            }
            for (int t = first; t <= i; t++) {
                const double e = exp(s[t] - m);
                den += e;
                for (int j = 0; j < D; j++)
                    num[j] += e * v[((size_t)t * HKV + g) * D + j];
            }
            for (int j = 0; j < D; j++) {
                const double diff = fabs(num[j] / den - out[((size_t)i * HQ + h) * D + j]);
                worst = isnan(diff) || diff > worst ? (isnan(diff) ? 1e300 : diff) : worst;
            }
        }
    return worst;
}

static void check_attention(int window, int threads, unsigned seed) {
    lz_cpu_set_threads(threads);
    const lz_attn_dims dims = {.n_heads = HQ, .n_kv_heads = HKV, .head_dim = D, .kv_capacity = CAP,
                               .sliding_window = window};
    const size_t cache = (size_t)SLOTS * CAP * HKV * D;
    lz_layer_state st = {.k_cache = lz_test_nan_array(cache), .v_cache = lz_test_nan_array(cache)};
    float *qa = lz_test_uniform_array((size_t)L * HQ * D, -2, 2, &seed);
    float *ka = lz_test_uniform_array((size_t)L * HKV * D, -2, 2, &seed);
    float *va = lz_test_uniform_array((size_t)L * HKV * D, -2, 2, &seed);
    float *qb = lz_test_uniform_array((size_t)LB * HQ * D, -2, 2, &seed);
    float *kb = lz_test_uniform_array((size_t)LB * HKV * D, -2, 2, &seed);
    float *vb = lz_test_uniform_array((size_t)LB * HKV * D, -2, 2, &seed);
    float *whole = lz_test_nan_array((size_t)L * HQ * D), *chunked = lz_test_nan_array((size_t)L * HQ * D);
    float *decoded = lz_test_nan_array((size_t)L * HQ * D), *other = lz_test_nan_array((size_t)LB * HQ * D);
    // at once
    seq a0 = {qa, ka, va, 0, 0};
    seq *one[1] = {&a0};
    step(&st, &dims, one, (int[]){L}, 1, &whole);
    // chunks of 7 after another sequence's chunks of 5 (while it lasts)
    seq a1 = {qa, ka, va, 1, 0}, b1 = {qb, kb, vb, 2, 0};
    while (a1.done < L) {
        const int ta = L - a1.done < 7 ? L - a1.done : 7, tb = LB - b1.done < 5 ? LB - b1.done : 5;
        if (tb > 0)
            step(&st, &dims, (seq *[]){&b1, &a1}, (int[]){tb, ta}, 2, (float *[]){other, chunked});
        else
            step(&st, &dims, (seq *[]){&a1}, (int[]){ta}, 1, (float *[]){chunked});
    }
    // a token at a time
    seq a2 = {qa, ka, va, 3, 0};
    seq *dec[1] = {&a2};
    while (a2.done < L)
        step(&st, &dims, dec, (int[]){1}, 1, &decoded);
    const size_t bytes = sizeof(float) * L * HQ * D;
    CHECK_MSG(memcmp(whole, chunked, bytes) == 0, "window %d, %d threads: rows in chunks beside another sequence differ",
              window, threads);
    CHECK_MSG(memcmp(whole, decoded, bytes) == 0, "window %d, %d threads: rows decoded one by one differ", window,
              threads);
    const double worst = worst_vs_double(whole, qa, ka, va, window);
    CHECK_MSG(worst < 1e-5, "window %d: off the double attention by %g", window, worst);
    free(st.k_cache), free(st.v_cache), free(qa), free(ka), free(va), free(qb), free(kb), free(vb);
    free(whole), free(chunked), free(decoded), free(other);
}

static void check_loss(int threads, unsigned seed) {
    lz_cpu_set_threads(threads);
    enum { N = 40, C = 48, V = 300 };
    float *h = lz_test_uniform_array((size_t)N * C, -2, 2, &seed);
    float *W = lz_test_uniform_array((size_t)V * C, -2, 2, &seed);
    int32_t targets[N];
    for (int t = 0; t < N; t++)
        targets[t] = t % 7 == 3 ? -1 : (int32_t)((t * 37 + 11) % V);
    float *dh = lz_test_nan_array((size_t)N * C), *row = lz_test_nan_array(C);
    double loss = 0, sum = 0;
    CHECK(lm_head_loss(&loss, dh, h, W, targets, N, C, V, 0.5f) == LZ_OK);
    bool same = true;
    for (int t = 0; t < N; t++) { // each row alone: its gradient and its loss, added in row order
        double one = 0;
        CHECK(lm_head_loss(&one, row, h + (size_t)t * C, W, targets + t, 1, C, V, 0.5f) == LZ_OK);
        same &= memcmp(row, dh + (size_t)t * C, sizeof(float) * C) == 0;
        sum += one;
    }
    CHECK_MSG(same && sum == loss, "%d threads: rows alone give other bits (loss %.17g vs %.17g)", threads, sum, loss);
    double *hd = malloc(sizeof(double) * N * C), *Wd = malloc(sizeof(double) * V * C);
    double *dhd = malloc(sizeof(double) * N * C);
    for (size_t i = 0; i < (size_t)N * C; i++)
        hd[i] = h[i];
    for (size_t i = 0; i < (size_t)V * C; i++)
        Wd[i] = W[i];
    const double want = lm_head_cross_entropy_f64(dhd, hd, Wd, targets, N, C, V, 0.5);
    double worst = 0;
    for (size_t i = 0; i < (size_t)N * C; i++)
        worst = fabs(dhd[i] - dh[i]) > worst || isnan(dh[i]) ? (isnan(dh[i]) ? 1e300 : fabs(dhd[i] - dh[i])) : worst;
    CHECK_MSG(fabs(loss - want) < 1e-4 * fabs(want) && worst < 1e-5, "loss %.9g vs %.9g, dh off by %g", loss, want,
              worst);
    free(h), free(W), free(dh), free(row), free(hd), free(Wd), free(dhd);
}

int main(void) {
    for (int threads = 1; threads <= 2; threads++) {
        check_attention(0, threads, 1);
        check_attention(37, threads, 2);
        check_loss(threads, 3);
    }
    return lz_test_finish("test_cpu_batch_rows");
}
