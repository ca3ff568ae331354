/* bench_linear.c - `lizard bench --linear-shapes` (bench_linear.h). */
#include "bench_linear.h"

#include <stdio.h> // printf

#include "clock.h"  // lz_now_seconds
#include "median.h" // lz_median

/* Median seconds of 5 timed calls of the linear op (after one warm-up). */
static lz_status time_linear(const lz_model *m, void *out, const void *x, const lz_weight *w, int n, double *secs) {
    double t[5];
    LZ_TRY(m->ops->linear(m->be, out, x, w, NULL, n));
    for (int r = 0; r < 5; r++) {
        LZ_TRY(m->ops->sync(m->be));
        const double t0 = lz_now_seconds();
        LZ_TRY(m->ops->linear(m->be, out, x, w, NULL, n));
        LZ_TRY(m->ops->sync(m->be));
        t[r] = lz_now_seconds() - t0;
    }
    *secs = lz_median(t, 5);
    return LZ_OK;
}

lz_status lz_bench_linear_shapes(const lz_model *m) {
    const lz_ops *ops = m->ops;
    const lz_layer *ly = &m->layers[0], *lizard = ly;
    for (int i = 0; i < m->cfg.num_hidden_layers && lizard->run_softmax; i++)
        lizard = &m->layers[i];
    const lz_weight *shapes[] = {&ly->wq, &ly->wk, &ly->wo, &ly->w_up, &ly->w_down, &lizard->gate, &m->lm_head};
    const char *names[] = {"q_proj", "k_proj", "o_proj", "up_proj", "down_proj", "lizard gate", "lm_head"};
    const int tokens[] = {1, 4, 8, 16, 64, 256, 2048};
    void *x = NULL, *out = NULL;
    const size_t cap = 2048 * (size_t)m->cfg.vocab_size;
    const size_t x_bytes = 2048 * (size_t)m->cfg.intermediate_size * ops->act_size;
    lz_status s = ops->alloc(m->be, cap * ops->act_size, &out);
    if (s == LZ_OK)
        s = ops->alloc(m->be, x_bytes, &x);
    if (s == LZ_OK)
        s = ops->zero(m->be, x, x_bytes);
    for (size_t i = 0; s == LZ_OK && i < sizeof shapes / sizeof shapes[0]; i++) {
        const lz_weight *w = shapes[i];
        if (!w->data)
            continue;
        for (size_t j = 0; s == LZ_OK && j < sizeof tokens / sizeof tokens[0]; j++) {
            if ((size_t)tokens[j] * w->rows > cap)
                continue;
            double secs = 0;
            s = time_linear(m, out, x, w, tokens[j], &secs);
            const double bytes = w->dtype == LZ_DTYPE_F8_E4M3 ? (double)w->rows * (w->cols + sizeof(float))
                                                              : (double)w->rows * w->cols * ops->act_size;
            if (s == LZ_OK)
                printf("linear  %-12s [%6lld x %5lld]  tokens %5d  %9.1f us  %7.0f GB/s  %6.1f TFLOP/s\n", names[i],
                       (long long)w->rows, (long long)w->cols, tokens[j], secs * 1e6, bytes / secs / 1e9,
                       2.0 * tokens[j] * w->rows * w->cols / secs / 1e12);
        }
    }
    if (x)
        ops->free(m->be, x);
    if (out)
        ops->free(m->be, out);
    return s;
}
