/* basic.c - the small fp32 ops: embedding, RMSNorm, linear, residual add,
 * SwiGLU, row gather, log-sigmoid. Rows (or elements) are shared among the
 * threads; linear is a product of cpu_gemm.h. */
#include <math.h>   // sqrtf, expf, log1pf
#include <string.h> // memcpy

#include "cpu_gemm.h"    // lz_gemm
#include "cpu_kernels.h"
#include "cpu_threads.h" // LZ_PARALLEL_FOR, lz_cpu_threads_for

enum { ROW_GRAIN = 4, ELEMENT_GRAIN = 1 << 15 }; // rows, elements worth a thread

// out[T, C] = table[ids[t], :]   (ids validated by the caller)
void embedding_forward(float *out, const float *table, const int32_t *ids, int T, int C) {
    for (int t = 0; t < T; t++)
        memcpy(out + (size_t)t * C, table + (size_t)ids[t] * C, sizeof(float) * C);
}

// out[T, C] = x / sqrt(mean(x^2) + eps) * w   (HF LlamaRMSNorm, variance in fp32)
void rmsnorm_forward(float *out, const float *x, const float *w, int T, int C, float eps) {
    LZ_PARALLEL_FOR(lz_cpu_threads_for((size_t)T, (size_t)T * C, ELEMENT_GRAIN))
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * C;
        float *ot = out + (size_t)t * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++)
            ss += xt[c] * xt[c];
        float inv = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++)
            ot[c] = w[c] * (xt[c] * inv);
    }
}

// out[T, n_out] = x[T, n_in] . w[n_out, n_in]^T (+ bias[n_out])
void linear_forward(float *out, const float *x, const float *w, const float *bias, int T, int n_in, int n_out) {
    lz_gemm(false, true, T, n_out, n_in, 1.0f, x, n_in, w, n_in, 0.0f, out, n_out);
    if (!bias)
        return;
    LZ_PARALLEL_FOR(lz_cpu_threads_for((size_t)T, (size_t)T * n_out, ELEMENT_GRAIN))
    for (int t = 0; t < T; t++)
        for (int o = 0; o < n_out; o++)
            out[(size_t)t * n_out + o] += bias[o];
}

void add_forward(float *y, const float *x, size_t n) {
    LZ_PARALLEL_FOR(lz_cpu_threads_for(n, n, ELEMENT_GRAIN))
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

// out = silu(gate) * up, silu(g) = g * sigmoid(g)
void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    LZ_PARALLEL_FOR(lz_cpu_threads_for(n, n, ELEMENT_GRAIN / 8))
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* ids[r] = the first index of row r's largest value (greedy decoding: the
 * same choice as the sampler's argmax over the host logits). */
void argmax_rows_forward(int32_t *ids, const float *x, int n, int C) {
    LZ_PARALLEL_FOR(lz_cpu_threads_for((size_t)n, (size_t)n * C, ELEMENT_GRAIN))
    for (int r = 0; r < n; r++) {
        const float *row = x + (size_t)r * C;
        int32_t best = 0;
        for (int c = 1; c < C; c++)
            if (row[c] > row[best])
                best = c;
        ids[r] = best;
    }
}

void gather_rows_forward(float *out, const float *x, const int32_t *rows, int n, int C) {
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * C, x + (size_t)rows[i] * C, sizeof(float) * C);
}

// log(sigmoid(x)) = -softplus(-x), written so that neither branch overflows:
// for x >= 0: -log1p(exp(-x)); for x < 0: x - log1p(exp(x)).
void log_sigmoid_forward(float *out, const float *x, int T) {
    for (int t = 0; t < T; t++) {
        float v = x[t];
        out[t] = v >= 0.0f ? -log1pf(expf(-v)) : v - log1pf(expf(v));
    }
}
