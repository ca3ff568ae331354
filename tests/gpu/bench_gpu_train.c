/* bench_gpu_train.c - distillation training speed on the GPU for one
 * LLaMA-3-8B-shaped Lizard layer (default shapes; flags change them), on
 * random activations (the teacher's forward is not timed):
 *   resident: lz_lizard_layer_sse_cuda, forward + backward with the batch
 *             already on the GPU (what a GPU teacher would hand over);
 *   forward:  the same without the gradient;
 *   distill:  what `lizard distill --device cuda` does per layer and batch
 *             today: activations and tensors up, forward + backward, gradients
 *             down, AdamW on the host (lz_distill_device_layer + lz_distill_layer_adamw).
 * Prints tokens/s per layer, and for a model of --model-layers such layers
 * (a step trains every layer on the batch, so model tokens/s = layer / layers).
 * LIZARD_TRAIN_GLA=bf16 times the bf16 GLA path. Exit 77 when no GPU is visible. */
#include <stdio.h>  // printf
#include <stdlib.h> // atoi, malloc
#include <string.h> // strcmp

#include <cuda_runtime_api.h> // cudaMalloc, cudaMemcpy

#include "clock.h"           // lz_now_seconds
#include "cuda/train_cuda.h" // lz_lizard_layer_sse_cuda
#include "distill_device.h"  // lz_distill_device_layer
#include "distill_params.h"  // lz_distill_layer_init, lz_distill_layer_adamw

static float *rand_host(size_t n, float lo, float hi, unsigned seed) {
    float *a = malloc(sizeof(float) * n);
    if (!a)
        abort();
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = lo + (hi - lo) * (float)(seed >> 8) / (float)(1u << 24);
    }
    return a;
}
static float *to_dev(const float *h, size_t n) {
    float *d;
    if (cudaMalloc((void **)&d, sizeof(float) * n) != cudaSuccess ||
        cudaMemcpy(d, h, sizeof(float) * n, cudaMemcpyHostToDevice) != cudaSuccess)
        abort();
    return d;
}
#define OK(call)                                                                                                       \
    do {                                                                                                               \
        if ((call) != LZ_OK) {                                                                                         \
            fprintf(stderr, "bench_gpu_train: %s: %s\n", #call, lz_error_message());                                   \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* Time of each op of one layer step (events around each call), the order of lz_lizard_layer_sse_cuda. */
static void profile(const lz_lizard_params_f32 *p, lz_lizard_params_f32 *gr, const float *x, const float *q,
                    const float *k, const float *v, int B, int L, int C, const lz_lizard_geom *g,
                    lz_lizard_cuda_scratch *s) {
    const int N = B * L, d = g->d, f = g->f;
    cudaEvent_t ev[12];
    for (int i = 0; i < 12; i++)
        cudaEventCreate(&ev[i]);
    const char *names[11] = {"gate fwd",   "phi_q fwd", "phi_k fwd", "GLA fwd",   "window fwd", "(loss)",
                             "window bwd", "GLA bwd",   "phi_q bwd", "phi_k bwd", "gate bwd"};
    int e = 0;
    cudaEventRecord(ev[e++], 0);
    lz_cuda_gate_train_forward(s->logit, s->lg, x, p->wg, N, C), cudaEventRecord(ev[e++], 0);
    lz_cuda_feature_map_train_forward(s->phi_q, q, p->wq, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_feature_map_train_forward(s->phi_k, k, p->wk, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_gla_train_forward(s->gla, s->S0, s->z0, s->den, s->phi_q, s->phi_k, v, s->lg, B, L, g);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_window_train_forward(s->win, s->stats, q, k, v, p->meta, B, L, g), cudaEventRecord(ev[e++], 0);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_window_backward(gr->meta, s->dwin, s->win, s->stats, p->meta, B, L, g, s->work);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_gla_backward(s->dphi_q, s->dphi_k, s->dlg, s->dy, s->gla, s->S0, s->z0, s->den, s->phi_q, s->phi_k, v,
                         s->lg, B, L, g, s->work);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_feature_map_backward(gr->wq, s->dphi_q, s->phi_q, q, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map, s->work);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_feature_map_backward(gr->wk, s->dphi_k, s->phi_k, k, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map, s->work);
    cudaEventRecord(ev[e++], 0);
    lz_cuda_gate_backward(gr->wg, s->dlg, s->logit, x, N, C, s->work), cudaEventRecord(ev[e++], 0);
    cudaDeviceSynchronize();
    printf("  profile:");
    for (int i = 0; i < 11; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
        if (i != 5)
            printf(" %s %.2f ms%s", names[i], ms, i == 10 ? "\n" : ",");
    }
    for (int i = 0; i < 12; i++)
        cudaEventDestroy(ev[i]);
}

int main(int argc, char **argv) {
    int B = 4, L = 2048, hidden = 4096, Hq = 32, Hkv = 8, d = 128, f = 128, w = 64, m = 4, steps = 3, layers = 32;
    const char *label = "fp32";
    for (int i = 1; i + 1 < argc; i += 2) {
        int *dst = !strcmp(argv[i], "--batch")          ? &B
                   : !strcmp(argv[i], "--seq-len")      ? &L
                   : !strcmp(argv[i], "--hidden")       ? &hidden
                   : !strcmp(argv[i], "--heads")        ? &Hq
                   : !strcmp(argv[i], "--kv-heads")     ? &Hkv
                   : !strcmp(argv[i], "--head-dim")     ? &d
                   : !strcmp(argv[i], "--feature-dim")  ? &f
                   : !strcmp(argv[i], "--window")       ? &w
                   : !strcmp(argv[i], "--meta-tokens")  ? &m
                   : !strcmp(argv[i], "--steps")        ? &steps
                   : !strcmp(argv[i], "--model-layers") ? &layers
                                                        : NULL;
        if (!strcmp(argv[i], "--label"))
            label = argv[i + 1];
        else if (!dst) {
            fprintf(stderr, "bench_gpu_train: unknown flag %s\n", argv[i]);
            return 2;
        } else
            *dst = atoi(argv[i + 1]);
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "bench_gpu_train: skipped: no CUDA device\n");
        return 77;
    }
    const lz_lizard_geom g = {Hq, Hkv, Hkv, Hq, Hkv, d, f, w, m, true, false};
    const size_t N = (size_t)B * L, qd = N * Hq * d, kd = N * Hkv * d;
    float *x = rand_host(N * hidden, -1, 1, 1), *q = rand_host(qd, -1, 1, 2), *k = rand_host(kd, -1, 1, 3);
    float *v = rand_host(kd, -1, 1, 4), *tg = rand_host(qd, -0.1f, 0.1f, 5);
    const lz_teacher_acts acts = {0, x, q, k, v, tg, false, false};
    lz_distill_layer layer;
    if (lz_distill_layer_init(&layer, 0, &g, hidden, 1)) {
        fprintf(stderr, "bench_gpu_train: out of memory\n");
        return 1;
    }
    const lz_adamw_config opt = {1e-3, 1e-4, 0.01, 0.9, 0.999, 1e-8, 1, 1000};
    lz_distill_device *gpu;
    OK(lz_distill_device_open(&gpu, "cuda", &g, B, L, hidden, lz_cuda_train_gla_precision() == LZ_GLA_BF16));
    // resident: the batch and tensors on the device once
    float *dx = to_dev(x, N * hidden), *dq = to_dev(q, qd), *dk = to_dev(k, kd), *dv = to_dev(v, kd),
          *dt = to_dev(tg, qd);
    float *dp[LZ_DT_COUNT], *dg[LZ_DT_COUNT];
    for (int i = 0; i < LZ_DT_COUNT; i++)
        dp[i] = to_dev(layer.param[i], layer.numel[i]), dg[i] = to_dev(layer.grad[i], layer.numel[i]);
    const lz_lizard_params_f32 p = {dp[0], dp[1], dp[2], dp[3], dp[4]};
    lz_lizard_params_f32 gr = {dg[0], dg[1], dg[2], dg[3], dg[4]};
    lz_lizard_cuda_scratch s;
    OK(lz_lizard_cuda_scratch_create(&s, &g, B, L, hidden));
    const float scale = (float)(1.0 / (double)qd);
    double sse = 0, t_res = 1e30, t_fwd = 1e30, t_dis = 1e30;
    for (int it = 0; it <= steps; it++) { // iteration 0 warms up; the best of the rest is kept
        double t0 = lz_now_seconds();
        OK(lz_lizard_layer_sse_cuda(&sse, NULL, &p, &gr, scale, dx, dq, dk, dv, dt, B, L, &g, &s));
        double t1 = lz_now_seconds();
        OK(lz_lizard_layer_sse_cuda(&sse, NULL, &p, NULL, scale, dx, dq, dk, dv, dt, B, L, &g, &s));
        double t2 = lz_now_seconds();
        OK(lz_distill_device_layer(gpu, &layer, &acts, true, scale, &sse, NULL));
        lz_distill_layer_adamw(&layer, &opt, it);
        double t3 = lz_now_seconds();
        if (it > 0) {
            t_res = t1 - t0 < t_res ? t1 - t0 : t_res;
            t_fwd = t2 - t1 < t_fwd ? t2 - t1 : t_fwd;
            t_dis = t3 - t2 < t_dis ? t3 - t2 : t_dis;
        }
    }
    printf("bench_gpu_train %s: B=%d L=%d hidden=%d Hq=%d Hkv=%d d=%d f=%d w=%d m=%d (mse %.4g)\n", label, B, L, hidden,
           Hq, Hkv, d, f, w, m, sse / (double)qd);
    const char *names[3] = {"resident fwd+bwd", "resident fwd", "distill step"};
    const double ts[3] = {t_res, t_fwd, t_dis};
    for (int i = 0; i < 3; i++)
        printf("  %-17s %8.2f ms/layer  %10.0f tok/s per layer  %9.0f tok/s for %d layers\n", names[i], ts[i] * 1e3,
               (double)N / ts[i], (double)N / ts[i] / layers, layers);
    profile(&p, &gr, dx, dq, dk, dv, B, L, hidden, &g, &s);
    lz_lizard_cuda_scratch_free(&s);
    lz_distill_device_close(gpu);
    return 0;
}
