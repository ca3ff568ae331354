/* lm_head_loss.c - the LM head's cross-entropy for training on the CPU backend
 * (the backward table's cross_entropy; the equations of the reference,
 * kernels/cpu/backward/linear_backward.inc):
 *   loss_t = lse(h_t W^T) - h_t . W_{y_t},  dh_t = grad_scale sum_v (p_v - [v = y_t]) W_v
 * for the rows with a target y_t >= 0. The logits of a block of rows come
 * from one product (cpu_gemm.h), their row's gradients go back through
 * another: a row's figures do not depend on the rows beside it. */
#include <math.h>   // expf, logf, INFINITY
#include <stdlib.h> // malloc, free
#include <string.h> // memset

#include "cpu_gemm.h"    // lz_gemm, LZ_GEMM_ROWS
#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for

enum { BLOCK_FLOATS = 1 << 21 }; /* the logits held at once: 8 MB */

// row z [V] of logits: its loss (target y), and with grad, z overwritten by the row's gradient of the logits
static double row_loss(float *z, int V, int y, float grad_scale, bool grad) {
    float m = -INFINITY, l = 0.0f;
    for (int v = 0; v < V; v++)
        m = z[v] > m ? z[v] : m;
    for (int v = 0; v < V; v++)
        l += expf(z[v] - m);
    const float lse = m + logf(l), zy = z[y];
    for (int v = 0; grad && v < V; v++)
        z[v] = grad_scale * (expf(z[v] - lse) - (v == y));
    return (double)(lse - zy);
}

typedef struct {
    float *z;
    double *row_losses;
    const int32_t *targets;
    int V;
    float grad_scale;
    bool grad;
} loss_job;

static void loss_rows(void *ctx, size_t begin, size_t end, int worker) {
    const loss_job *j = ctx;
    for (size_t r = begin; r < end; r++) {
        float *zr = j->z + r * j->V;
        const int y = j->targets[r];
        j->row_losses[r] = y >= 0 ? row_loss(zr, j->V, y, j->grad_scale, j->grad) : 0.0;
        if (y < 0)
            memset(zr, 0, sizeof(float) * (size_t)j->V); // no target: no gradient
    }
}

lz_status lm_head_loss(double *loss, float *dh, const float *h, const float *W, const int32_t *targets, int N, int C,
                       int V, float grad_scale) {
    int rows = BLOCK_FLOATS / (V > 0 ? V : 1) / LZ_GEMM_ROWS * LZ_GEMM_ROWS;
    rows = rows < LZ_GEMM_ROWS ? LZ_GEMM_ROWS : rows;
    float *z = malloc(sizeof(float) * (size_t)rows * (size_t)V);
    double *row_losses = malloc(sizeof(double) * (size_t)(N > 0 ? N : 1));
    if (!z || !row_losses) {
        free(z);
        free(row_losses);
        return lz_fail(LZ_ERR_NOMEM, "cross_entropy: out of memory for %d rows of %d logits", rows, V);
    }
    for (int r0 = 0; r0 < N; r0 += rows) {
        const int n = N - r0 < rows ? N - r0 : rows;
        lz_gemm(false, true, n, V, C, 1.0f, h + (size_t)r0 * C, C, W, C, 0.0f, z, V);
        loss_job j = {z, row_losses + r0, targets + r0, V, grad_scale, dh != NULL};
        lz_cpu_parallel((size_t)n, lz_cpu_threads_for((size_t)n, (size_t)n * V, LZ_GRAIN_EXP), loss_rows, &j);
        if (dh)
            lz_gemm(false, false, n, C, V, 1.0f, z, V, W, C, 0.0f, dh + (size_t)r0 * C, C);
    }
    double sum = 0; // in row order, whatever the threads
    for (int t = 0; t < N; t++)
        sum += row_losses[t];
    *loss = sum;
    free(z);
    free(row_losses);
    return LZ_OK;
}
