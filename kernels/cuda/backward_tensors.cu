// backward_tensors.cu - what training does to whole tensors: copies, conversions to fp32 and back,
// sums, the norm of the gradients (the same bits on every call), the AdamW update, and a weight's
// values set from fp32 (kernels/backward_ops.h).
#include <stdlib.h>
#include <string.h>

#include "backward_common.cuh" // lz_bw_grid, lz_bw_scratch

// Kernels ---------------------------------------------------------------------------------------

template <typename T> __global__ void from_f32_kernel(T *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = lz_from_float<T>(src[i]);
}

template <typename T> __global__ void to_f32_kernel(float *dst, const T *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = lz_to_float(src[i]);
}

__global__ void add_f32_kernel(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

// The sum of squares in two launches of fixed shape, so that every element always lands in the same
// partial sum and the partial sums are always added in the same order: SUMSQ_BLOCKS partial sums
// (thread i takes elements i, i + stride, ...; then a tree over the block), then one block adds them.
enum { SUMSQ_BLOCKS = 512, SUMSQ_THREADS = 256 };

// Tree sum of the block's SUMSQ_THREADS values in s; the result in s[0].
__device__ void block_tree_sum(double *s) {
    __syncthreads();
    for (int half = SUMSQ_THREADS / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half)
            s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
}

// Block (x, y): the partial sum x of tensor y (xs[y], ns[y] elements), into partial[y][x].
__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_partial_kernel(double *partial, const float *const *xs, const size_t *ns) {
    __shared__ double s[SUMSQ_THREADS];
    const float *x = xs[blockIdx.y];
    const size_t n = ns[blockIdx.y];
    double acc = 0.0;
    const size_t stride = (size_t)SUMSQ_BLOCKS * SUMSQ_THREADS;
    for (size_t i = blockIdx.x * (size_t)SUMSQ_THREADS + threadIdx.x; i < n; i += stride) {
        const double v = x[i];
        acc += v * v;
    }
    s[threadIdx.x] = acc;
    block_tree_sum(s);
    if (threadIdx.x == 0)
        partial[(size_t)blockIdx.y * SUMSQ_BLOCKS + blockIdx.x] = s[0];
}

// Block y: out[y] = the SUMSQ_BLOCKS partial sums of tensor y, added in one fixed order.
__global__ void __launch_bounds__(SUMSQ_THREADS) sum_partials_kernel(double *out, const double *partial) {
    __shared__ double s[SUMSQ_THREADS];
    partial += (size_t)blockIdx.x * SUMSQ_BLOCKS;
    double acc = 0.0;
    for (int i = threadIdx.x; i < SUMSQ_BLOCKS; i += SUMSQ_THREADS)
        acc += partial[i];
    s[threadIdx.x] = acc;
    block_tree_sum(s);
    if (threadIdx.x == 0)
        out[blockIdx.x] = s[0];
}

// The update's scalars, each converted to fp32 once on the host.
struct adamw_scalars {
    float grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bias1, bias2, eps, lr, weight_decay;
};

// backward_ops.h's formula in fp32, one rounding per operation in the formula's order (no fused
// multiply-adds), as a host loop in float computes it:
//   g' = g s;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g' g';
//   p = p - lr (wd p + (m / bias1) / (sqrt(v / bias2) + eps))
__global__ void adamw_kernel(float *p, float *m, float *v, const float *g, size_t n, adamw_scalars a) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gs = __fmul_rn(g[i], a.grad_scale);
        const float mi = __fadd_rn(__fmul_rn(a.beta1, m[i]), __fmul_rn(a.one_minus_beta1, gs));
        const float vi = __fadd_rn(__fmul_rn(a.beta2, v[i]), __fmul_rn(__fmul_rn(a.one_minus_beta2, gs), gs));
        const float update = __fdiv_rn(__fdiv_rn(mi, a.bias1), __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, a.bias2)), a.eps));
        const float pi = p[i];
        p[i] = __fsub_rn(pi, __fmul_rn(a.lr, __fadd_rn(__fmul_rn(a.weight_decay, pi), update)));
        m[i] = mi;
        v[i] = vi;
    }
}

// Launchers -------------------------------------------------------------------------------------

template <typename T> lz_status lz_bw_from_f32(lz_backend *be, T *dst, const float *src, size_t n) {
    if (n == 0)
        return LZ_OK;
    from_f32_kernel<T><<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>(dst, src, n);
    LZ_LAUNCH_CHECK("from_f32_kernel");
    return LZ_OK;
}
template lz_status lz_bw_from_f32<float>(lz_backend *, float *, const float *, size_t);
template lz_status lz_bw_from_f32<__nv_bfloat16>(lz_backend *, __nv_bfloat16 *, const float *, size_t);

lz_status lz_cuda_bw_copy(lz_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0)
        return LZ_OK;
    LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, be->ctx.stream));
    return LZ_OK;
}

lz_status lz_cuda_bw_to_f32(lz_backend *be, float *dst, const void *src, size_t n) {
    if (n == 0)
        return LZ_OK;
    if (!lz_bw_bf16(be))
        return lz_cuda_bw_copy(be, dst, src, sizeof(float) * n);
    to_f32_kernel<__nv_bfloat16><<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>(dst, (const __nv_bfloat16 *)src,
                                                                                      n);
    LZ_LAUNCH_CHECK("to_f32_kernel");
    return LZ_OK;
}

lz_status lz_cuda_bw_add(lz_backend *be, float *y, const float *x, size_t n) {
    if (n == 0)
        return LZ_OK;
    add_f32_kernel<<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>(y, x, n);
    LZ_LAUNCH_CHECK("add_f32_kernel");
    return LZ_OK;
}

// All the tensors in two launches and one wait: a step's gradient norm waits once, not once a tensor.
lz_status lz_cuda_bw_sum_squares(lz_backend *be, double *out, const float *const *x, const size_t *n, int count) {
    enum { MAX_GRID_Y = 65535 };
    for (int first = 0; first < count; first += MAX_GRID_Y) {
        const int c = count - first < MAX_GRID_Y ? count - first : MAX_GRID_Y;
        const size_t bytes[3] = {sizeof(double) * SUMSQ_BLOCKS * (size_t)c, sizeof(double) * (size_t)c,
                                 (sizeof(float *) + sizeof(size_t)) * (size_t)c};
        void *piece[3];
        LZ_TRY(lz_bw_scratch(be, 3, bytes, piece));
        double *partial = (double *)piece[0], *total = (double *)piece[1];
        const float **d_x = (const float **)piece[2];
        size_t *d_n = (size_t *)(d_x + c);
        char *h = (char *)malloc(bytes[2]);
        if (!h)
            return lz_fail(LZ_ERR_NOMEM, "sum_squares: %d tensors' addresses on the host", c);
        memcpy(h, x + first, sizeof(float *) * (size_t)c);
        memcpy(h + sizeof(float *) * (size_t)c, n + first, sizeof(size_t) * (size_t)c);
        cudaError_t e = cudaMemcpyAsync(d_x, h, bytes[2], cudaMemcpyHostToDevice, be->ctx.stream);
        if (e == cudaSuccess) {
            sum_squares_partial_kernel<<<dim3(SUMSQ_BLOCKS, (unsigned)c), SUMSQ_THREADS, 0, be->ctx.stream>>>(
                partial, d_x, d_n);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess) {
            sum_partials_kernel<<<(unsigned)c, SUMSQ_THREADS, 0, be->ctx.stream>>>(total, partial);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(out + first, total, sizeof(double) * (size_t)c, cudaMemcpyDeviceToHost, be->ctx.stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(be->ctx.stream); // (also: h is done with before it is freed)
        free(h);
        LZ_CUDA_TRY(e);
    }
    return LZ_OK;
}

lz_status lz_cuda_bw_adamw(lz_backend *be, float *p, float *m, float *v, const float *g, size_t n,
                           const lz_adamw_update *u) {
    if (n == 0)
        return LZ_OK;
    const adamw_scalars a = {u->grad_scale,
                             (float)u->beta1,
                             (float)(1.0 - u->beta1),
                             (float)u->beta2,
                             (float)(1.0 - u->beta2),
                             (float)u->bias1,
                             (float)u->bias2,
                             (float)u->eps,
                             (float)u->lr,
                             (float)u->weight_decay};
    adamw_kernel<<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>(p, m, v, g, n, a);
    LZ_LAUNCH_CHECK("adamw_kernel");
    return LZ_OK;
}

// The CUDA backend's weights are device memory it allocated (upload_weight copies, never maps), so
// every weight already has memory of its own to write; one joined to others (join_weights: w->owned
// false) lies inside the first one's block, and exactly its rows * cols elements at w->data are written.
lz_status lz_cuda_bw_weight_set(lz_backend *be, lz_weight *w, const float *src) {
    if (!w || !w->data || w->rows < 0 || w->cols < 0)
        return lz_fail(LZ_ERR_INTERNAL, "weight_set: a weight without data or with a negative shape");
    const size_t n = (size_t)w->rows * (size_t)w->cols;
    if (w->dtype == LZ_DTYPE_F32)
        return lz_cuda_bw_copy(be, w->data, src, sizeof(float) * n);
    if (w->dtype == LZ_DTYPE_BF16)
        return lz_bw_from_f32<__nv_bfloat16>(be, (__nv_bfloat16 *)w->data, src, n);
    return lz_fail(LZ_ERR_INTERNAL, "weight_set: a weight of type %s (the CUDA backend holds F32 or BF16)",
                   lz_dtype_name(w->dtype));
}
