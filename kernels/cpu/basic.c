/* basic.c - the small fp32 ops: embedding, RMSNorm, linear, residual add,
 * SwiGLU, row gather, log-sigmoid. Rows (or elements) are shared among the
 * threads; linear is a product of cpu_gemm.h. */
#include <math.h>   // sqrtf, expf, log1pf
#include <string.h> // memcpy

#include "cpu_gemm.h"    // lz_gemm
#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for

// out[T, C] = table[ids[t], :]   (ids validated by the caller)
void embedding_forward(float *out, const float *table, const int32_t *ids, int T, int C) {
    for (int t = 0; t < T; t++)
        memcpy(out + (size_t)t * C, table + (size_t)ids[t] * C, sizeof(float) * C);
}

typedef struct {
    float *out;
    const float *x, *w;
    int C;
    float eps;
} rmsnorm_job;

static void rmsnorm_rows(void *ctx, size_t begin, size_t end, int worker) {
    const rmsnorm_job *j = ctx;
    const int C = j->C;
    for (size_t t = begin; t < end; t++) {
        const float *xt = j->x + t * C;
        float *ot = j->out + t * C;
        const float inv = rmsnorm_inv_rms(xt, C, j->eps);
        for (int c = 0; c < C; c++)
            ot[c] = j->w[c] * (xt[c] * inv);
    }
}

// out[T, C] = x / sqrt(mean(x^2) + eps) * w   (HF LlamaRMSNorm, variance in fp32)
void rmsnorm_forward(float *out, const float *x, const float *w, int T, int C, float eps) {
    rmsnorm_job j = {out, x, w, C, eps};
    lz_cpu_parallel((size_t)T, lz_cpu_threads_for((size_t)T, (size_t)T * C, LZ_GRAIN_LIGHT), rmsnorm_rows, &j);
}

typedef struct {
    float *out;
    const float *bias;
    int n_out;
} bias_job;

static void bias_rows(void *ctx, size_t begin, size_t end, int worker) {
    const bias_job *j = ctx;
    for (size_t t = begin; t < end; t++)
        for (int o = 0; o < j->n_out; o++)
            j->out[t * j->n_out + o] += j->bias[o];
}

// out[T, n_out] = x[T, n_in] . w[n_out, n_in]^T (+ bias[n_out])
void linear_forward(float *out, const float *x, const float *w, const float *bias, int T, int n_in, int n_out) {
    lz_gemm(false, true, T, n_out, n_in, 1.0f, x, n_in, w, n_in, 0.0f, out, n_out);
    if (!bias)
        return;
    bias_job j = {out, bias, n_out};
    lz_cpu_parallel((size_t)T, lz_cpu_threads_for((size_t)T, (size_t)T * n_out, LZ_GRAIN_LIGHT), bias_rows, &j);
}

typedef struct {
    float *y;
    const float *x;
} add_job;

static void add_elements(void *ctx, size_t begin, size_t end, int worker) {
    const add_job *j = ctx;
    for (size_t i = begin; i < end; i++)
        j->y[i] += j->x[i];
}

void add_forward(float *y, const float *x, size_t n) {
    add_job j = {y, x};
    lz_cpu_parallel(n, lz_cpu_threads_for(n, n, LZ_GRAIN_LIGHT), add_elements, &j);
}

typedef struct {
    float *out;
    const float *gate, *up;
} swiglu_job;

static void swiglu_elements(void *ctx, size_t begin, size_t end, int worker) {
    const swiglu_job *j = ctx;
    for (size_t i = begin; i < end; i++) {
        float g = j->gate[i];
        j->out[i] = g / (1.0f + expf(-g)) * j->up[i];
    }
}

// out = silu(gate) * up, silu(g) = g * sigmoid(g)
void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    swiglu_job j = {out, gate, up};
    lz_cpu_parallel(n, lz_cpu_threads_for(n, n, LZ_GRAIN_EXP), swiglu_elements, &j);
}

typedef struct {
    int32_t *ids;
    const float *x;
    int C;
} argmax_job;

static void argmax_rows(void *ctx, size_t begin, size_t end, int worker) {
    const argmax_job *j = ctx;
    for (size_t r = begin; r < end; r++) {
        const float *row = j->x + r * j->C;
        int32_t best = 0;
        for (int c = 1; c < j->C; c++)
            if (row[c] > row[best])
                best = c;
        j->ids[r] = best;
    }
}

/* ids[r] = the first index of row r's largest value (greedy decoding: the
 * same choice as the sampler's argmax over the host logits). */
void argmax_rows_forward(int32_t *ids, const float *x, int n, int C) {
    argmax_job j = {ids, x, C};
    lz_cpu_parallel((size_t)n, lz_cpu_threads_for((size_t)n, (size_t)n * C, LZ_GRAIN_LIGHT), argmax_rows, &j);
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
