/* train_ops_cpu.c - the training op table on the CPU (train_ops.h): host
 * memory, the f32 build of the reference kernels (train_kernels.h); the
 * sequences of a distillation step's layer on the threads at once. */
#include <stdlib.h> // malloc, free
#include <string.h> // memcpy, memset

#include "cpu_threads.h"   // lz_cpu_parallel, lz_cpu_threads
#include "dtype.h"         // lz_bf16_to_f32
#include "train_kernels.h" // lz_lizard_layer_sse_f32
#include "train_ops.h"

static lz_status cpu_open(int local_rank) {
    (void)local_rank;
    return LZ_OK;
}

static lz_status cpu_alloc(size_t bytes, void **out) {
    if (!(*out = malloc(bytes ? bytes : 1)))
        return lz_fail(LZ_ERR_NOMEM, "training buffers: out of memory (%zu bytes)", bytes);
    return LZ_OK;
}

static lz_status cpu_copy(void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return LZ_OK;
}

static lz_status cpu_zero(void *p, size_t bytes) {
    memset(p, 0, bytes);
    return LZ_OK;
}

static lz_status cpu_bf16_to_f32(float *dst, const void *src, size_t n) {
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = lz_bf16_to_f32(h[i]);
    return LZ_OK;
}

static lz_status cpu_set_gla_bf16(bool on) {
    if (on)
        return lz_fail(LZ_ERR_INPUT, "--gla-precision bf16: the CPU backend computes the GLA in fp32 only");
    return LZ_OK;
}

typedef struct {
    int n_seq, T, C;
    size_t per_seq;   /* floats of one sequence's gradients: wq, wk, wg, meta, alpha */
    float *seq_grads; /* [n_seq, per_seq] */
    double *seq_sse;  /* [n_seq] */
    int n;            /* threads: a scratch each */
    lz_lizard_scratch_f32 s[];
} cpu_lizard_scratch;

static void cpu_lizard_scratch_free(void *scratch) {
    cpu_lizard_scratch *s = scratch;
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        lz_lizard_scratch_free_f32(&s->s[i]);
    free(s->seq_grads);
    free(s->seq_sse);
    free(s);
}

static lz_status cpu_lizard_scratch_create(void **out, const lz_lizard_geom *g, int n_seq, int T, int C) {
    const int n = lz_cpu_threads();
    cpu_lizard_scratch *s = calloc(1, sizeof *s + sizeof(s->s[0]) * (size_t)n);
    *out = NULL;
    if (!s)
        return lz_fail(LZ_ERR_NOMEM, "Lizard layer scratch: out of memory");
    s->n_seq = n_seq, s->T = T, s->C = C;
    s->per_seq = lz_lizard_wq_numel(g) + lz_lizard_wk_numel(g) + (size_t)C + (size_t)g->m + 1;
    s->seq_grads = malloc(sizeof(float) * (size_t)(n_seq > 0 ? n_seq : 1) * s->per_seq);
    s->seq_sse = malloc(sizeof(double) * (size_t)(n_seq > 0 ? n_seq : 1));
    bool ok = s->seq_grads && s->seq_sse;
    for (; ok && s->n < n; s->n++)
        ok = lz_lizard_scratch_create_f32(&s->s[s->n], g, T, C) == 0;
    if (!ok) {
        cpu_lizard_scratch_free(s);
        return lz_fail(LZ_ERR_NOMEM, "Lizard layer scratch: out of memory");
    }
    *out = s;
    return LZ_OK;
}

static void add_into(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

typedef struct {
    cpu_lizard_scratch *s;
    const lz_lizard_params_f32 *p;
    bool grad;
    float grad_scale;
    const float *x, *q, *k, *v, *target;
    int T;
    const lz_lizard_geom *g;
} sse_job;

static void sse_sequences(void *ctx, size_t begin, size_t end, int worker) {
    const sse_job *j = ctx;
    cpu_lizard_scratch *s = j->s;
    const lz_lizard_geom *g = j->g;
    const size_t qrow = (size_t)j->T * g->Hq * g->d, krow = (size_t)j->T * g->Hkv * g->d;
    const size_t nq = lz_lizard_wq_numel(g), nk = lz_lizard_wk_numel(g), C = (size_t)s->C, m = (size_t)g->m;
    for (size_t b = begin; b < end; b++) {
        float *gb = s->seq_grads + b * s->per_seq;
        lz_lizard_params_f32 mine = {gb, gb + nq, gb + nq + nk, gb + nq + nk + C, gb + nq + nk + C + m};
        s->seq_sse[b] = lz_lizard_layer_sse_f32(j->p, j->grad ? &mine : NULL, j->grad_scale, j->x + b * j->T * C,
                                                j->q + b * qrow, j->k + b * krow, j->v + b * krow,
                                                j->target + b * qrow, j->T, g, &s->s[worker]);
    }
}

/* The sequences on the threads, each its sse and its gradients from zero; then, in the sequences'
 * order, the sums in double and the gradients added to grad: the same bits on any number of threads. */
static lz_status cpu_lizard_layer_sse(double *sse, double *energy, const lz_lizard_params_f32 *p,
                                      lz_lizard_params_f32 *grad, float grad_scale, const float *x, const float *q,
                                      const float *k, const float *v, const float *target, int n_seq, int T,
                                      const lz_lizard_geom *g, void *scratch) {
    cpu_lizard_scratch *s = scratch;
    if (n_seq > s->n_seq || T > s->T)
        return lz_fail(LZ_ERR_INTERNAL, "Lizard layer: %d x %d tokens past its scratch's %d x %d", n_seq, T, s->n_seq,
                       s->T);
    const size_t qrow = (size_t)T * g->Hq * g->d;
    const size_t nq = lz_lizard_wq_numel(g), nk = lz_lizard_wk_numel(g), C = (size_t)s->C, m = (size_t)g->m;
    if (grad)
        memset(s->seq_grads, 0, sizeof(float) * (size_t)n_seq * s->per_seq);
    const int threads = lz_cpu_threads_for((size_t)n_seq, (size_t)8 * n_seq * qrow * 2 * g->f, LZ_GRAIN_LOOP);
    sse_job j = {s, p, grad != NULL, grad_scale, x, q, k, v, target, T, g};
    lz_cpu_parallel((size_t)n_seq, threads < s->n ? threads : s->n, sse_sequences, &j);
    double sum = 0, e2 = 0;
    for (int b = 0; b < n_seq; b++) {
        const float *tg = target + b * qrow, *gb = s->seq_grads + (size_t)b * s->per_seq;
        sum += s->seq_sse[b];
        for (size_t e = 0; energy && e < qrow; e++)
            e2 += (double)tg[e] * tg[e];
        if (!grad)
            continue;
        add_into(grad->wq, gb, nq);
        add_into(grad->wk, gb + nq, nk);
        add_into(grad->wg, gb + nq + nk, C);
        add_into(grad->meta, gb + nq + nk + C, m);
        add_into(grad->alpha, gb + nq + nk + C + m, 1);
    }
    *sse = sum;
    if (energy)
        *energy = e2;
    return LZ_OK;
}

static const lz_train_ops cpu_train_ops = {
    .name = "cpu",
    .host_memory = true,
    .open = cpu_open,
    .alloc = cpu_alloc,
    .free = free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .bf16_to_f32 = cpu_bf16_to_f32,
    .set_gla_bf16 = cpu_set_gla_bf16,
    .lizard_scratch_create = cpu_lizard_scratch_create,
    .lizard_scratch_free = cpu_lizard_scratch_free,
    .lizard_layer_sse = cpu_lizard_layer_sse,
};

const lz_train_ops *lz_train_ops_cpu(void) { return &cpu_train_ops; }
