/* feature_map.c - Hedgehog feature maps: phi(x) = [softmax(u) ++ softmax(-u)]
 * ("softmax") or [exp(u) ++ exp(-u)] ("exp"), u = x . W, per head. */
#include <math.h> // expf

#include "cpu_kernels.h"
#include "cpu_threads.h" // LZ_PARALLEL_FOR, lz_cpu_threads_for

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

// out [T, Hout, 2f]; x [T, Hx, d]; w [n_w, d, f] (n_w = 1: shared by all heads).
// Output head o reads input head o / (Hout / Hx) and weight (n_w == 1 ? 0 : o).
void feature_map_forward(float *out, const float *x, const float *w, int n_w, int T, int Hx, int Hout, int d, int f,
                         bool exp_map) {
    const int rep = Hout / Hx;
    LZ_PARALLEL_FOR(lz_cpu_threads_for((size_t)T, (size_t)T * Hout * d * f, 1 << 15))
    for (int t = 0; t < T; t++) {
        float u[1024]; // f <= 1024 is checked at load
        for (int o = 0; o < Hout; o++) {
            const float *xh = x + ((size_t)t * Hx + o / rep) * d;
            const float *wh = w + (size_t)(n_w == 1 ? 0 : o) * d * f;
            for (int j = 0; j < f; j++)
                u[j] = 0.0f;
            for (int i = 0; i < d; i++)
                for (int j = 0; j < f; j++)
                    u[j] += xh[i] * wh[(size_t)i * f + j];
            float *po = out + ((size_t)t * Hout + o) * 2 * f;
            if (exp_map) {
                for (int j = 0; j < f; j++) {
                    po[j] = expf(u[j]);
                    po[f + j] = expf(-u[j]);
                }
            } else {
                signed_softmax(po, u, f, 1.0f);
                signed_softmax(po + f, u, f, -1.0f);
            }
        }
    }
}
