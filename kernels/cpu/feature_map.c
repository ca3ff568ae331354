/* feature_map.c - Hedgehog feature maps: phi(x) = [softmax(u) ++ softmax(-u)]
 * ("softmax") or [exp(u) ++ exp(-u)] ("exp"), u = x . W, per head. */
#include <math.h> // expf

#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for

// softmax of +u (sign = 1) or -u (sign = -1) into out[f]
static void signed_softmax(float *out, const float *u, int f, float sign) {
    float m = sign * u[0];
    for (int j = 1; j < f; j++)
        if (sign * u[j] > m)
            m = sign * u[j];
    float sum = 0.0f;
    for (int j = 0; j < f; j++) {
        out[j] = expf(sign * u[j] - m);
        sum += out[j];
    }
    for (int j = 0; j < f; j++)
        out[j] /= sum;
}

typedef struct {
    float *out;
    const float *x, *w;
    int n_w, Hx, Hout, d, f;
    bool exp_map;
} map_job;

static void map_rows(void *ctx, size_t begin, size_t end, int worker) {
    const map_job *j = ctx;
    const int rep = j->Hout / j->Hx, d = j->d, f = j->f;
    float u[1024]; // f <= 1024 is checked at load
    for (size_t t = begin; t < end; t++) {
        for (int o = 0; o < j->Hout; o++) {
            const float *xh = j->x + (t * j->Hx + (size_t)(o / rep)) * d;
            const float *wh = j->w + (size_t)(j->n_w == 1 ? 0 : o) * d * f;
            for (int jj = 0; jj < f; jj++)
                u[jj] = 0.0f;
            for (int i = 0; i < d; i++)
                for (int jj = 0; jj < f; jj++)
                    u[jj] += xh[i] * wh[(size_t)i * f + jj];
            float *po = j->out + (t * j->Hout + (size_t)o) * 2 * f;
            if (j->exp_map) {
                for (int jj = 0; jj < f; jj++) {
                    po[jj] = expf(u[jj]);
                    po[f + jj] = expf(-u[jj]);
                }
            } else {
                signed_softmax(po, u, f, 1.0f);
                signed_softmax(po + f, u, f, -1.0f);
            }
        }
    }
}

// out [T, Hout, 2f]; x [T, Hx, d]; w [n_w, d, f] (n_w = 1: shared by all heads).
// Output head o reads input head o / (Hout / Hx) and weight (n_w == 1 ? 0 : o).
void feature_map_forward(float *out, const float *x, const float *w, int n_w, int T, int Hx, int Hout, int d, int f,
                         bool exp_map) {
    map_job j = {out, x, w, n_w, Hx, Hout, d, f, exp_map};
    lz_cpu_parallel((size_t)T, lz_cpu_threads_for((size_t)T, (size_t)T * Hout * d * f, LZ_GRAIN_LOOP), map_rows, &j);
}
