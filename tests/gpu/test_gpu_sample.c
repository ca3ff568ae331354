/* test_gpu_sample.c - sample_rows on the CUDA backend against the CPU
 * reference: the same id for every row (the rule of kernels/sample_rule.h
 * uses integer weights, so the two agree exactly), on rows of several kinds
 * (smooth, coarse with many ties, -inf, NaN, +-0, all equal), vocabularies
 * from 1 to 128256, every mix of temperature (0 included), top-k and top-p,
 * in fp32 and bf16 (the CPU gets the bf16-rounded logits the GPU holds).
 * Prints the time of a 256 x 128256 batch. Exit 77 (skip) without a GPU. */
#include <math.h>   // INFINITY, NAN
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free
#include <time.h>   // clock_gettime

#include "ops.h"       // lz_ops, lz_sample_row
#include "test_util.h" // CHECK

typedef struct {
    const lz_ops *ops;
    lz_backend *be;
} backend;

static unsigned rng = 2024u;
static double urand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (double)(rng >> 8) / (double)(1u << 24);
}

/* Row r of kind r % 5: smooth, coarse grid (ties), with -inf, with NaN and
 * +-0, all equal. */
static void fill(float *x, int C, int r) {
    for (int i = 0; i < C; i++) {
        const double u = urand();
        switch (r % 5) {
        case 0: x[i] = (float)(16 * u - 8); break;
        case 1: x[i] = (float)(int)(40 * u) / 8.0f; break;
        case 2: x[i] = urand() < 0.3 ? -INFINITY : (float)(30 * u - 15); break;
        case 3: x[i] = urand() < 0.05 ? NAN : urand() < 0.1 ? (i % 2 ? 0.0f : -0.0f) : (float)(4 * u - 2); break;
        default: x[i] = 1.5f; break;
        }
    }
}

static lz_sample_row params(int r) {
    static const double temps[] = {1.0, 0.8, 0.0, 1.7, 0.05, 20.0};
    static const int ks[] = {0, 40, 1, 0, 2000, 7};
    static const double ps[] = {0.9, 1.0, 0.95, 0.5, 1e-6, 0.999};
    return (lz_sample_row){temps[r % 6], ks[(r / 6) % 6], ps[(r / 36) % 6], urand()};
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* n rows of C: the GPU's ids against the CPU's on the logits the GPU holds. */
static void compare(backend *cpu, backend *gpu, const char *dtype, int n, int C, bool timed) {
    const size_t N = (size_t)n * C;
    float *h = malloc(sizeof(float) * N), *held = malloc(sizeof(float) * N);
    lz_sample_row *p = malloc(sizeof(lz_sample_row) * (size_t)n);
    int32_t *cid = malloc(sizeof(int32_t) * (size_t)n), *gid = malloc(sizeof(int32_t) * (size_t)n);
    void *gx = NULL;
    for (int r = 0; r < n; r++) {
        fill(h + (size_t)r * C, C, r);
        p[r] = params(r + (int)(urand() * 216));
        gid[r] = -1;
    }
    CHECK(gpu->ops->alloc(gpu->be, N * gpu->ops->act_size, &gx) == LZ_OK);
    CHECK(gpu->ops->act_from_host(gpu->be, gx, h, N) == LZ_OK);
    CHECK(gpu->ops->act_to_host(gpu->be, held, gx, N) == LZ_OK); // bf16: the rounded values
    const double t0 = now();
    lz_error_clear();
    CHECK_MSG(gpu->ops->sample_rows(gpu->be, gid, gx, n, C, p) == LZ_OK, "%s", lz_error_message());
    const double t1 = now();
    CHECK(cpu->ops->sample_rows(cpu->be, cid, held, n, C, p) == LZ_OK);
    int differ = 0;
    for (int r = 0; r < n; r++)
        if (cid[r] != gid[r] && differ++ < 5)
            fprintf(stderr, "%s sample_rows C %d row %d (T %g k %d p %g u %.6f): cpu %d, gpu %d\n", dtype, C, r,
                    p[r].temperature, p[r].top_k, p[r].top_p, p[r].u, cid[r], gid[r]);
    CHECK_MSG(differ == 0, "%s, C %d: %d of %d rows differ", dtype, C, differ, n);
    if (timed)
        fprintf(stderr, "test_gpu_sample: %s sample_rows %d x %d: %.3f ms (with the parameter and id copies)\n", dtype,
                n, C, 1e3 * (t1 - t0));
    gpu->ops->free(gpu->be, gx);
    free(h), free(held), free(p), free(cid), free(gid);
}

int main(void) {
    backend cpu, gpu;
    CHECK(lz_cpu_backend_create(&cpu.be, &cpu.ops) == LZ_OK);
    const lz_dtype dtypes[2] = {LZ_DTYPE_F32, LZ_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        lz_error_clear();
        if (lz_cuda_backend_create(dtypes[di], &gpu.be, &gpu.ops) != LZ_OK) {
            fprintf(stderr, "test_gpu_sample: skipped: %s\n", lz_error_message());
            return 77;
        }
        const char *name = di == 0 ? "fp32" : "bf16";
        static const int vocabs[] = {1, 2, 31, 33, 1000, 4099, 32000};
        for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
            compare(&cpu, &gpu, name, 216, vocabs[v], false);
        compare(&cpu, &gpu, name, 64, 128256, false);
        compare(&cpu, &gpu, name, 256, 128256, true); // warm: the buffers exist
        gpu.ops->destroy(gpu.be);
    }
    cpu.ops->destroy(cpu.be);
    return lz_test_finish("test_gpu_sample");
}
