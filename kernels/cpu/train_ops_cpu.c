/* train_ops_cpu.c - the training op table on the CPU (train_ops.h): host
 * memory, the f32 build of the reference kernels (train_kernels.h). */
#include <stdlib.h> // malloc, free
#include <string.h> // memcpy, memset

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
    lz_lizard_scratch_f32 s;
} cpu_lizard_scratch;

static lz_status cpu_lizard_scratch_create(void **out, const lz_lizard_geom *g, int n_seq, int T, int C) {
    cpu_lizard_scratch *s = calloc(1, sizeof *s);
    if (!s || lz_lizard_scratch_create_f32(&s->s, g, T, C)) {
        free(s);
        *out = NULL;
        return lz_fail(LZ_ERR_NOMEM, "Lizard layer scratch: out of memory");
    }
    s->n_seq = n_seq, s->T = T, s->C = C;
    *out = s;
    return LZ_OK;
}

static void cpu_lizard_scratch_free(void *scratch) {
    cpu_lizard_scratch *s = scratch;
    if (!s)
        return;
    lz_lizard_scratch_free_f32(&s->s);
    free(s);
}

// one sequence after the other; the sums in double in that order
static lz_status cpu_lizard_layer_sse(double *sse, double *energy, const lz_lizard_params_f32 *p,
                                      lz_lizard_params_f32 *grad, float grad_scale, const float *x, const float *q,
                                      const float *k, const float *v, const float *target, int n_seq, int T,
                                      const lz_lizard_geom *g, void *scratch) {
    cpu_lizard_scratch *s = scratch;
    if (n_seq > s->n_seq || T > s->T)
        return lz_fail(LZ_ERR_INTERNAL, "Lizard layer: %d x %d tokens past its scratch's %d x %d", n_seq, T, s->n_seq,
                       s->T);
    const size_t qrow = (size_t)T * g->Hq * g->d, krow = (size_t)T * g->Hkv * g->d;
    double sum = 0, e2 = 0;
    for (int b = 0; b < n_seq; b++) {
        const float *tg = target + b * qrow;
        sum += lz_lizard_layer_sse_f32(p, grad, grad_scale, x + (size_t)b * T * s->C, q + b * qrow, k + b * krow,
                                       v + b * krow, tg, T, g, &s->s);
        for (size_t e = 0; energy && e < qrow; e++)
            e2 += (double)tg[e] * tg[e];
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
