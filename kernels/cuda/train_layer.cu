// train_layer.cu - one Lizard layer's training step on the GPU
// (cpu/backward/layer_train.inc): y = GLA + alpha WIN against the teacher's
// attention output, SSE and the gradient of every trainable tensor, by the
// kernels of train_*.cu in the CPU's order. The loss comes back to the host
// (one small copy per call, which is also the call's synchronisation).
#include <stdlib.h> // calloc, free
#include <string.h> // memset

#include "train_common.cuh" // LZ_TB, lz_block_sum

enum { LOSS_BLOCKS = 1024 };

// ---- kernels -------------------------------------------------------------------------------------

// the sum over the block in double (blockDim.x a multiple of 32); thread 0 gets it
__device__ double block_sum_f64(double v, double *smem32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0)
        smem32[warp] = v;
    __syncthreads();
    v = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            v += smem32[w];
    return v;
}

// partial[blk] = (SSE, d alpha) of the block's elements; dy = 2 scale (y - target); dwin = alpha dy
__global__ void combine_kernel(double *partial, float *dy, float *dwin, const float *gla, const float *win,
                               const float *target, const float *alpha, float scale, size_t n, bool grad) {
    __shared__ double red[32];
    const float a = alpha[0];
    double sse = 0.0, da = 0.0, en = 0.0;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const float diff = gla[e] + a * win[e] - target[e];
        sse += (double)diff * diff;
        en += (double)target[e] * target[e];
        if (grad) {
            const float g = 2.0f * scale * diff;
            dy[e] = g;
            dwin[e] = a * g;
            da += (double)g * win[e];
        }
    }
    const double s_blk = block_sum_f64(sse, red), a_blk = block_sum_f64(da, red), e_blk = block_sum_f64(en, red);
    if (threadIdx.x == 0)
        partial[3 * blockIdx.x] = s_blk, partial[3 * blockIdx.x + 1] = a_blk, partial[3 * blockIdx.x + 2] = e_blk;
}

__global__ void bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, size_t n) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        dst[e] = __bfloat162float(src[e]);
}

// one thread: the block sums in order -> partial[0] = SSE, partial[1] = sum of target^2; d alpha into the gradient
__global__ void combine_finish_kernel(double *partial, float *dalpha, int blocks) {
    double sse = 0.0, da = 0.0, en = 0.0;
    for (int b = 0; b < blocks; b++)
        sse += partial[3 * b], da += partial[3 * b + 1], en += partial[3 * b + 2];
    partial[0] = sse, partial[1] = en;
    if (dalpha)
        dalpha[0] += (float)da;
}

extern "C" lz_status lz_cuda_bf16_to_f32(float *dst, const void *src, size_t n) {
    if (n == 0)
        return LZ_OK;
    const int blocks = lz_div_up((long)n, LZ_TB) < 4096 ? lz_div_up((long)n, LZ_TB) : 4096;
    bf16_to_f32_kernel<<<blocks, LZ_TB, 0, lz_train_stream()>>>(dst, (const __nv_bfloat16 *)src, n);
    LZ_LAUNCH_CHECK("bf16_to_f32");
    return LZ_OK;
}

// ---- the stream ----------------------------------------------------------------------------------

static cudaStream_t train_stream = NULL; // NULL: the legacy default stream

extern "C" void lz_cuda_train_set_stream(void *stream) { train_stream = (cudaStream_t)stream; }

cudaStream_t lz_train_stream(void) { return train_stream; }

// ---- scratch -------------------------------------------------------------------------------------

extern "C" lz_status lz_lizard_cuda_scratch_create(lz_lizard_cuda_scratch *s, const lz_lizard_geom *g, int n_seq, int T,
                                                   int C) {
    memset(s, 0, sizeof *s);
    s->n_seq = n_seq, s->T = T, s->C = C;
    const size_t N = (size_t)n_seq * T, F = 2 * (size_t)g->f, slots = (size_t)n_seq * lz_train_chunks(T) * g->Hs;
    const size_t qd = N * g->Hq * g->d;
    size_t work = lz_cuda_gla_backward_scratch(n_seq, T, g);
    const size_t more[] = {lz_cuda_feature_map_backward_scratch(g->n_wq, (int)N, g->Hq, g->d, g->f),
                           lz_cuda_feature_map_backward_scratch(g->n_wk, (int)N, g->Hs, g->d, g->f),
                           lz_cuda_gate_backward_scratch((int)N, C), lz_cuda_window_backward_scratch(n_seq, T, g)};
    for (int i = 0; i < 4; i++)
        work = more[i] > work ? more[i] : work;
    float **bufs[] = {&s->phi_q, &s->phi_k, &s->logit, &s->lg,     &s->gla,    &s->S0,  &s->z0,   &s->den,
                      &s->win,   &s->stats, &s->dy,    &s->dphi_q, &s->dphi_k, &s->dlg, &s->dwin, &s->work};
    const size_t sizes[] = {
        N * g->Hq * F, N * g->Hs * F, N, N,  qd,  slots * F * g->d, slots * F, N * g->Hq, qd, 2 * N * g->Hq, qd,
        N * g->Hq * F, N * g->Hs * F, N, qd, work};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cudaError_t e = cudaMalloc((void **)bufs[i], sizeof(float) * (sizes[i] ? sizes[i] : 1));
        if (e != cudaSuccess) {
            lz_lizard_cuda_scratch_free(s);
            return lz_fail(LZ_ERR_NOMEM, "training scratch for %d x %d tokens on the GPU: %s", n_seq, T,
                           cudaGetErrorString(e));
        }
    }
    s->h_partial = (double *)calloc(2, sizeof(double));
    cudaError_t e = cudaMalloc((void **)&s->partial, sizeof(double) * 3 * LOSS_BLOCKS);
    if (e != cudaSuccess || !s->h_partial) {
        lz_lizard_cuda_scratch_free(s);
        return lz_fail(LZ_ERR_NOMEM, "training loss buffers: out of memory");
    }
    return LZ_OK;
}

extern "C" void lz_lizard_cuda_scratch_free(lz_lizard_cuda_scratch *s) {
    float *bufs[] = {s->phi_q, s->phi_k, s->logit, s->lg,     s->gla,    s->S0,  s->z0,   s->den,
                     s->win,   s->stats, s->dy,    s->dphi_q, s->dphi_k, s->dlg, s->dwin, s->work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            cudaFree(bufs[i]); // a free's error would be a prior fault, reported where it happened
    if (s->partial)
        cudaFree(s->partial);
    free(s->h_partial);
    memset(s, 0, sizeof *s);
}

// ---- the layer -----------------------------------------------------------------------------------

extern "C" lz_status lz_lizard_layer_sse_cuda(double *sse, double *energy, const lz_lizard_params_f32 *p,
                                              lz_lizard_params_f32 *grad, float grad_scale, const float *x,
                                              const float *q, const float *k, const float *v, const float *target,
                                              int n_seq, int T, const lz_lizard_geom *g, lz_lizard_cuda_scratch *s) {
    if (n_seq > s->n_seq || T != s->T)
        return lz_fail(LZ_ERR_INTERNAL, "training scratch for %d x %d tokens, called with %d x %d", s->n_seq, s->T,
                       n_seq, T);
    const int N = n_seq * T, d = g->d, f = g->f;
    const size_t n_out = (size_t)N * g->Hq * d;
    LZ_TRY(lz_cuda_gate_train_forward(s->logit, s->lg, x, p->wg, N, s->C));
    LZ_TRY(lz_cuda_feature_map_train_forward(s->phi_q, q, p->wq, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map));
    LZ_TRY(lz_cuda_feature_map_train_forward(s->phi_k, k, p->wk, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map));
    LZ_TRY(lz_cuda_gla_train_forward(s->gla, s->S0, s->z0, s->den, s->phi_q, s->phi_k, v, s->lg, n_seq, T, g));
    LZ_TRY(lz_cuda_window_train_forward(s->win, s->stats, q, k, v, p->meta, n_seq, T, g));
    combine_kernel<<<LOSS_BLOCKS, LZ_TB, 0, lz_train_stream()>>>(s->partial, s->dy, s->dwin, s->gla, s->win, target,
                                                                 p->alpha, grad_scale, n_out, grad != NULL);
    LZ_LAUNCH_CHECK("combine");
    combine_finish_kernel<<<1, 1, 0, lz_train_stream()>>>(s->partial, grad ? grad->alpha : NULL, LOSS_BLOCKS);
    LZ_LAUNCH_CHECK("combine_finish");
    if (grad) {
        LZ_TRY(lz_cuda_window_backward(grad->meta, s->dwin, s->win, s->stats, p->meta, n_seq, T, g, s->work));
        LZ_TRY(lz_cuda_gla_backward(s->dphi_q, s->dphi_k, s->dlg, s->dy, s->gla, s->S0, s->z0, s->den, s->phi_q,
                                    s->phi_k, v, s->lg, n_seq, T, g, s->work));
        LZ_TRY(lz_cuda_feature_map_backward(grad->wq, s->dphi_q, s->phi_q, q, g->n_wq, N, g->Hq, g->Hq, d, f,
                                            g->exp_map, s->work));
        LZ_TRY(lz_cuda_feature_map_backward(grad->wk, s->dphi_k, s->phi_k, k, g->n_wk, N, g->Hkv, g->Hs, d, f,
                                            g->exp_map, s->work));
        LZ_TRY(lz_cuda_gate_backward(grad->wg, s->dlg, s->logit, x, N, s->C, s->work));
    }
    LZ_CUDA_TRY(cudaMemcpyAsync(s->h_partial, s->partial, 2 * sizeof(double), cudaMemcpyDeviceToHost,
                                lz_train_stream()));
    LZ_CUDA_TRY(cudaStreamSynchronize(lz_train_stream()));
    *sse = s->h_partial[0];
    if (energy)
        *energy = s->h_partial[1];
    return LZ_OK;
}
