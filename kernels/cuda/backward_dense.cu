// backward_dense.cu - the gradients of a decoder layer's dense ops and of the head: RMSNorm,
// SwiGLU, a frozen linear layer, RoPE, and the LM head's cross-entropy (kernels/backward_ops.h has
// what each computes; kernels/cpu/backward/ the equations). Activations and weights are in the
// backend's type, gradients fp32; all arithmetic is fp32 except the bf16 operands of the products.
#include <stdlib.h> // malloc, free

#include "backward_common.cuh" // lz_bw_gemm, lz_bw_scratch, lz_bw_grid
#include "backward_dense.h"    // lz_cuda_ce_set_slice_bytes
#include "rope_rotate.cuh"     // lz_rope_angle, lz_rope_turn

// Kernels ---------------------------------------------------------------------------------------

// A block per row: r = 1 / rms(x) recomputed as the inference kernel computes it (fp32 sum of squares,
// rsqrtf(mean + eps)); with a = dy w: dx += r a - x r^3 (a . x) / C.
template <typename T>
__global__ void rmsnorm_backward_kernel(float *dx, const float *dy, const T *x, const T *w, int C, float eps) {
    __shared__ float red[32];
    const size_t row = blockIdx.x;
    const T *xr = x + row * C;
    const float *gr = dy + row * C;
    float *dr = dx + row * C;
    float ss = 0.0f, ax = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float xv = lz_to_float(xr[c]);
        ss += xv * xv;
        ax += gr[c] * lz_to_float(w[c]) * xv;
    }
    ss = lz_block_sum(ss, red);
    ax = lz_block_sum(ax, red);
    const float r = rsqrtf(ss / (float)C + eps), k = r * r * r * ax / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dr[c] += r * gr[c] * lz_to_float(w[c]) - lz_to_float(xr[c]) * k;
}

// h = silu(g) u, s = sigmoid(g): dg = dh u s (1 + g (1 - s)), du = dh g s.
template <typename T>
__global__ void swiglu_backward_kernel(float *dg, float *du, const float *dh, const T *g, const T *u, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gv = lz_to_float(g[i]), uv = lz_to_float(u[i]), s = 1.0f / (1.0f + expf(-gv));
        dg[i] = dh[i] * uv * s * (1.0f + gv * (1.0f - s));
        du[i] = dh[i] * gv * s;
    }
}

// A block per token: its d / 2 angles into shared memory (cos, sin) exactly as rope.cu makes them,
// then every pair (a, b) = (x[j], x[j + d/2]) of the token's dq heads and dk heads (dk may be NULL)
// turned by minus the angle: the transpose of the forward's rotation, which is its inverse.
__global__ void rope_backward_kernel(float *dq, float *dk, const float *inv_freq, const int32_t *token_pos, int Hq,
                                     int Hkv, int d) {
    extern __shared__ float rope_bw_cs[];
    const int t = blockIdx.x, half = d / 2;
    float *cs = rope_bw_cs, *sn = rope_bw_cs + half;
    const float p = (float)token_pos[t];
    for (int j = threadIdx.x; j < half; j += blockDim.x)
        lz_rope_angle(p, inv_freq[j], &cs[j], &sn[j]);
    __syncthreads();
    const int heads = Hq + (dk ? Hkv : 0);
    for (int e = threadIdx.x; e < heads * half; e += blockDim.x) {
        const int h = e / half, j = e % half;
        float *x = h < Hq ? dq + ((size_t)t * Hq + h) * d : dk + ((size_t)t * Hkv + (h - Hq)) * d;
        const float a = x[j], b = x[j + half];
        lz_rope_turn(a, b, cs[j], -sn[j], &x[j], &x[j + half]);
    }
}

// A block per row of a slice of logits [n, V]: loss[i] = lse - z[target] (0 for an unscored row,
// target < 0); with `grad`, dlogits[i] = grad_scale (softmax(z) - onehot(target)) (zeros for an
// unscored row), in G (fp32: in place over the logits; bf16: rounded, into a buffer of its own).
template <typename G>
__global__ void cross_entropy_rows_kernel(double *loss, G *dlogits, const float *logits, const int32_t *targets,
                                          int V, float grad_scale, bool grad) {
    __shared__ float red[32];
    const size_t i = blockIdx.x;
    const float *z = logits + i * V;
    G *dz = grad ? dlogits + i * V : NULL;
    const int target = targets[i];
    if (target < 0) { // the whole block takes this branch
        if (threadIdx.x == 0)
            loss[i] = 0.0;
        if (grad)
            for (int v = threadIdx.x; v < V; v += blockDim.x)
                dz[v] = lz_from_float<G>(0.0f);
        return;
    }
    const float zt = z[target]; // read before the block's barriers: in place, dz[target] overwrites it
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        m = fmaxf(m, z[v]);
    m = lz_block_max(m, red);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        s += expf(z[v] - m);
    s = lz_block_sum(s, red);
    const float lse = m + logf(s);
    if (threadIdx.x == 0)
        loss[i] = (double)lse - (double)zt;
    if (grad)
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            dz[v] = lz_from_float<G>(grad_scale * (expf(z[v] - lse) - (v == target ? 1.0f : 0.0f)));
}

// Launchers -------------------------------------------------------------------------------------

template <typename T>
static lz_status rmsnorm_backward(lz_backend *be, float *dx, const float *dy, const T *x, const T *w, int N, int C,
                                  float eps) {
    rmsnorm_backward_kernel<T><<<N, LZ_BW_THREADS, 0, be->ctx.stream>>>(dx, dy, x, w, C, eps);
    LZ_LAUNCH_CHECK("rmsnorm_backward_kernel");
    return LZ_OK;
}

lz_status lz_cuda_bw_rmsnorm(lz_backend *be, float *dx, const float *dy, const void *x, const lz_weight *w, int N,
                             float eps) {
    LZ_TRY(lz_bw_check_weight(be, w, "rmsnorm backward"));
    if (w->cols < 1 || !lz_bw_fits_int(w->cols) || N < 0)
        return lz_fail(LZ_ERR_INTERNAL, "rmsnorm backward: %d rows of %lld columns", N, (long long)w->cols);
    if (N == 0)
        return LZ_OK;
    const int C = (int)w->cols;
    if (lz_bw_bf16(be))
        return rmsnorm_backward<__nv_bfloat16>(be, dx, dy, (const __nv_bfloat16 *)x,
                                               (const __nv_bfloat16 *)w->data, N, C, eps);
    return rmsnorm_backward<float>(be, dx, dy, (const float *)x, (const float *)w->data, N, C, eps);
}

lz_status lz_cuda_bw_swiglu(lz_backend *be, float *dg, float *du, const float *dh, const void *g, const void *u,
                            size_t n) {
    if (n == 0)
        return LZ_OK;
    if (lz_bw_bf16(be))
        swiglu_backward_kernel<__nv_bfloat16><<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>(
            dg, du, dh, (const __nv_bfloat16 *)g, (const __nv_bfloat16 *)u, n);
    else
        swiglu_backward_kernel<float><<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>(
            dg, du, dh, (const float *)g, (const float *)u, n);
    LZ_LAUNCH_CHECK("swiglu_backward_kernel");
    return LZ_OK;
}

// dx [N, cols] = dy [N, rows] W [rows, cols] (+ dx). bf16: dy rounded to bf16 in scratch, so that
// both operands run on the tensor cores with fp32 accumulation.
lz_status lz_cuda_bw_linear(lz_backend *be, float *dx, const float *dy, const lz_weight *w, int N, bool accumulate) {
    LZ_TRY(lz_bw_check_weight(be, w, "linear backward"));
    if (!lz_bw_fits_int(w->rows) || !lz_bw_fits_int(w->cols) || N < 0)
        return lz_fail(LZ_ERR_INTERNAL, "linear backward: %d rows through a weight [%lld, %lld]", N,
                       (long long)w->rows, (long long)w->cols);
    const int rows = (int)w->rows, cols = (int)w->cols;
    const float beta = accumulate ? 1.0f : 0.0f;
    if (!lz_bw_bf16(be))
        return lz_bw_gemm(be, false, false, N, cols, rows, 1.0f, dy, w->data, false, beta, dx);
    const size_t n = (size_t)N * (size_t)rows, bytes = n * sizeof(__nv_bfloat16);
    void *dy16 = NULL;
    LZ_TRY(lz_bw_scratch(be, 1, &bytes, &dy16));
    LZ_TRY(lz_bw_from_f32<__nv_bfloat16>(be, (__nv_bfloat16 *)dy16, dy, n));
    return lz_bw_gemm(be, false, false, N, cols, rows, 1.0f, dy16, w->data, true, beta, dx);
}

lz_status lz_cuda_bw_rope(lz_backend *be, float *dq, float *dk, const float *inv_freq, const lz_batch *b,
                          const lz_attn_dims *dims) {
    const int d = dims->head_dim, half = d / 2, n = b->n_tokens;
    const size_t smem = sizeof(float) * 2 * (size_t)half;
    if (d < 2 || d % 2 != 0 || smem > 48 * 1024 || dims->n_heads < 0 || dims->n_kv_heads < 0)
        return lz_fail(LZ_ERR_INTERNAL, "rope backward: head_dim %d (an even number up to 12288), heads %d, %d", d,
                       dims->n_heads, dims->n_kv_heads);
    if (n <= 0)
        return LZ_OK;
    rope_backward_kernel<<<n, 128, smem, be->ctx.stream>>>(dq, dk, inv_freq, be->batch.token_pos, dims->n_heads,
                                                           dims->n_kv_heads, d);
    LZ_LAUNCH_CHECK("rope_backward_kernel");
    return LZ_OK;
}

// Cross-entropy -----------------------------------------------------------------------------------

static size_t ce_slice_bytes = (size_t)LZ_CE_SLICE_BYTES;

extern "C" void lz_cuda_ce_set_slice_bytes(size_t bytes) { ce_slice_bytes = bytes ? bytes : (size_t)LZ_CE_SLICE_BYTES; }

// The per-row losses of the N rows (device, [N] doubles) summed on the host in row order, so that a
// step's loss has the same bits on every run.
static lz_status sum_row_losses(lz_backend *be, double *loss, const double *d_rows, const int32_t *targets, int N) {
    double *h = (double *)malloc(sizeof(double) * (size_t)N);
    if (!h)
        return lz_fail(LZ_ERR_NOMEM, "cross_entropy: %d row losses on the host", N);
    cudaError_t e = cudaMemcpyAsync(h, d_rows, sizeof(double) * (size_t)N, cudaMemcpyDeviceToHost, be->ctx.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(be->ctx.stream);
    if (e != cudaSuccess) {
        free(h);
        LZ_CUDA_TRY(e);
    }
    double sum = 0.0;
    for (int t = 0; t < N; t++)
        if (targets[t] >= 0)
            sum += h[t];
    free(h);
    *loss = sum;
    return LZ_OK;
}

// A slice of rows at a time (as many as keep its fp32 logits within ce_slice_bytes): logits =
// h W^T (GEMM, fp32 out), a kernel per row for the loss and the logits' gradient, then
// dh = dlogits W (GEMM; bf16: dlogits rounded to bf16 first).
lz_status lz_cuda_bw_cross_entropy(lz_backend *be, double *loss, float *dh, const void *h, const lz_weight *w,
                                   const int32_t *targets, int N, float grad_scale) {
    LZ_TRY(lz_bw_check_weight(be, w, "cross_entropy"));
    if (w->rows < 1 || w->cols < 1 || !lz_bw_fits_int(w->rows) || !lz_bw_fits_int(w->cols) || N < 0)
        return lz_fail(LZ_ERR_INTERNAL, "cross_entropy: %d rows through an LM head [%lld, %lld]", N,
                       (long long)w->rows, (long long)w->cols);
    const int V = (int)w->rows, C = (int)w->cols;
    *loss = 0.0;
    if (N == 0)
        return LZ_OK;
    for (int t = 0; t < N; t++)
        if (targets[t] >= V)
            return lz_fail(LZ_ERR_INPUT, "cross_entropy: row %d has target %d, outside the vocabulary of %d tokens", t,
                           (int)targets[t], V);
    const bool bf16 = lz_bw_bf16(be), grad = dh != NULL;
    const size_t row_bytes = sizeof(float) * (size_t)V;
    size_t slice = ce_slice_bytes / row_bytes;
    slice = slice < 1 ? 1 : slice > (size_t)N ? (size_t)N : slice;
    const size_t bytes[4] = {sizeof(int32_t) * (size_t)N, sizeof(double) * (size_t)N, slice * row_bytes,
                             bf16 && grad ? slice * (size_t)V * sizeof(__nv_bfloat16) : 0};
    void *piece[4];
    LZ_TRY(lz_bw_scratch(be, 4, bytes, piece));
    int32_t *d_targets = (int32_t *)piece[0];
    double *d_loss = (double *)piece[1];
    float *logits = (float *)piece[2];
    __nv_bfloat16 *dlogits16 = (__nv_bfloat16 *)piece[3];
    // complete before returning: the caller's targets may change as soon as this op returns
    LZ_CUDA_TRY(cudaMemcpyAsync(d_targets, targets, bytes[0], cudaMemcpyHostToDevice, be->ctx.stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    const size_t es = lz_bw_act_size(be);
    const unsigned threads = V >= 16384 ? 1024 : LZ_BW_THREADS;
    for (int r0 = 0; r0 < N; r0 += (int)slice) {
        const int n = N - r0 < (int)slice ? N - r0 : (int)slice;
        const void *h_slice = (const char *)h + (size_t)r0 * (size_t)C * es;
        LZ_TRY(lz_bw_gemm(be, false, true, n, V, C, 1.0f, h_slice, w->data, bf16, 0.0f, logits));
        if (bf16 && grad)
            cross_entropy_rows_kernel<__nv_bfloat16><<<n, threads, 0, be->ctx.stream>>>(
                d_loss + r0, dlogits16, logits, d_targets + r0, V, grad_scale, true);
        else
            cross_entropy_rows_kernel<float><<<n, threads, 0, be->ctx.stream>>>(d_loss + r0, logits, logits,
                                                                               d_targets + r0, V, grad_scale, grad);
        LZ_LAUNCH_CHECK("cross_entropy_rows_kernel");
        if (grad)
            LZ_TRY(lz_bw_gemm(be, false, false, n, C, V, 1.0f, bf16 ? (const void *)dlogits16 : (const void *)logits,
                              w->data, bf16, 0.0f, dh + (size_t)r0 * (size_t)C));
    }
    return sum_row_losses(be, loss, d_loss, targets, N);
}
