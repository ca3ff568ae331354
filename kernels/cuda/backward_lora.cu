// backward_lora.cu - LoRA on a frozen linear layer, forward and backward (kernels/backward_ops.h;
// equations in kernels/cpu/backward/linear_backward.inc):
//   x' = x with dropout (dropout_rule.h),  u = x' A^T,  y += s u B^T;
//   du = s dy B,  dB += s dy^T u,  dA += du^T x',  dx += (du A) * mask.
// bf16 backend: the products with x' take bf16 operands (x' in bf16, A's bf16 copy made by
// lora_sync, du rounded to bf16) and accumulate in fp32; those with dy, u and B stay fp32 (B is
// only ever read in fp32, so it has no bf16 copy). fp32 backend: every product in fp32 from l->A, l->B.
#include <stdlib.h> // calloc, free

#include "backward_common.cuh" // lz_bw_gemm, lz_bw_scratch, lz_bw_from_f32
#include "dropout_rule.h"      // lz_dropout_drops

// Where the dropout of a step's rows comes from: row t of sequence s = token_seq[t] draws element
// (t - start[s]) * in + c of streams[s]; kept elements are scaled by keep = 1 / (1 - p).
struct lora_dropout {
    const uint64_t *streams; // [n_seqs] device
    const int32_t *token_seq, *start;
    double p;
    float keep;
    int in;
};

__device__ __forceinline__ bool lora_dropped(const lora_dropout &d, size_t e) {
    const int t = (int)(e / (size_t)d.in), c = (int)(e % (size_t)d.in), s = d.token_seq[t];
    return lz_dropout_drops(d.streams[s], (uint64_t)(t - d.start[s]) * (uint64_t)d.in + (uint64_t)c, d.p);
}

// Kernels ---------------------------------------------------------------------------------------

// xd [N, in] = x with dropout applied (in the activation type)
template <typename T> __global__ void lora_dropout_kernel(T *xd, const T *x, size_t n, lora_dropout d) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        xd[e] = lora_dropped(d, e) ? lz_from_float<T>(0.0f) : lz_from_float<T>(lz_to_float(x[e]) * d.keep);
}

// dx [N, in] += g [N, in] * mask (dropped elements add nothing)
__global__ void lora_masked_add_kernel(float *dx, const float *g, size_t n, lora_dropout d) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        if (!lora_dropped(d, e))
            dx[e] += g[e] * d.keep;
}

// y [N, out] += scale (u [N, r] . B [out, r]^T), in fp32 (r <= a few hundred: a thread per output)
template <typename T>
__global__ void lora_up_kernel(T *y, const float *u, const float *B, float scale, size_t n, int out, int r) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const float *ut = u + e / (size_t)out * (size_t)r, *bo = B + e % (size_t)out * (size_t)r;
        float acc = 0.0f;
        for (int a = 0; a < r; a++)
            acc += ut[a] * bo[a];
        y[e] = lz_from_float<T>(lz_to_float(y[e]) + scale * acc);
    }
}

// Host side -------------------------------------------------------------------------------------

static lz_status check_lora(const lz_lora *l, const char *op) {
    if (!l || l->r < 1 || l->in < 1 || l->out < 1 || !l->A || !l->B)
        return lz_fail(LZ_ERR_INTERNAL, "%s: a LoRA adapter without factors or of rank %d [%d -> %d]", op,
                       l ? l->r : 0, l ? l->in : 0, l ? l->out : 0);
    return LZ_OK;
}

static bool dropping(const lz_dropout *drop) { return drop && drop->p > 0.0; }

// The dropout's inputs checked on the host: p < 1, and every row of the step in exactly one sequence
// (the kernels find a row's sequence through token_seq, which begin_step fills only for such rows).
static lz_status check_dropout(const lz_dropout *drop, const lz_batch *b, const char *op) {
    if (!(drop->p < 1.0) || !drop->streams)
        return lz_fail(LZ_ERR_INTERNAL, "%s: dropout %g without streams or not below 1", op, drop->p);
    const int N = b->n_tokens;
    unsigned char *seen = (unsigned char *)calloc((size_t)N, 1);
    if (!seen)
        return lz_fail(LZ_ERR_NOMEM, "%s: %d rows", op, N);
    lz_status s = LZ_OK;
    for (int q = 0; q < b->n_seqs && s == LZ_OK; q++) {
        if (b->start[q] < 0 || b->len[q] < 0 || b->start[q] > N - b->len[q]) {
            s = lz_fail(LZ_ERR_INTERNAL, "%s: sequence %d (rows %d + %d) outside the step's %d rows", op, q,
                        b->start[q], b->len[q], N);
            break;
        }
        for (int t = b->start[q]; t < b->start[q] + b->len[q]; t++)
            seen[t]++;
    }
    for (int t = 0; t < N && s == LZ_OK; t++)
        if (seen[t] != 1)
            s = lz_fail(LZ_ERR_INTERNAL, "%s: row %d lies in %d of the step's sequences (dropout needs one)", op, t,
                        seen[t]);
    free(seen);
    return s;
}

// The dropout's description for the kernels, its streams copied into `d_streams` (device, n_seqs)
// and complete on return: the caller's host array may be reused as soon as the op returns.
static lz_status dropout_on_device(lz_backend *be, lora_dropout *d, uint64_t *d_streams, const lz_dropout *drop,
                                   const lz_batch *b, int in) {
    LZ_CUDA_TRY(cudaMemcpyAsync(d_streams, drop->streams, sizeof(uint64_t) * (size_t)b->n_seqs,
                                cudaMemcpyHostToDevice, be->ctx.stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    *d = {d_streams, be->batch.token_seq, be->batch.start, drop->p, (float)(1.0 / (1.0 - drop->p)), in};
    return LZ_OK;
}

template <typename T>
static lz_status apply_dropout(lz_backend *be, T *xd, const T *x, size_t n, const lora_dropout &d) {
    lora_dropout_kernel<T><<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>(xd, x, n, d);
    LZ_LAUNCH_CHECK("lora_dropout_kernel");
    return LZ_OK;
}

// x' of the step: x itself without dropout, else xd filled (and *d set for the dx mask).
static lz_status dropped_input(lz_backend *be, const void **xin, void *xd, uint64_t *d_streams, lora_dropout *d,
                               const void *x, const lz_lora *l, const lz_dropout *drop, const lz_batch *b) {
    *xin = x;
    if (!dropping(drop))
        return LZ_OK;
    LZ_TRY(dropout_on_device(be, d, d_streams, drop, b, l->in));
    const size_t n = (size_t)b->n_tokens * (size_t)l->in;
    *xin = xd;
    if (lz_bw_bf16(be))
        return apply_dropout<__nv_bfloat16>(be, (__nv_bfloat16 *)xd, (const __nv_bfloat16 *)x, n, *d);
    return apply_dropout<float>(be, (float *)xd, (const float *)x, n, *d);
}

// Entries ---------------------------------------------------------------------------------------

// bf16: l->shadow is A [r, in] in bf16 (allocated on the first call, refreshed on every call).
// fp32: the products read l->A and l->B themselves; shadow stays NULL.
lz_status lz_cuda_bw_lora_sync(lz_backend *be, lz_lora *l) {
    LZ_TRY(check_lora(l, "lora_sync"));
    if (!lz_bw_bf16(be))
        return LZ_OK;
    const size_t n = (size_t)l->r * (size_t)l->in;
    if (!l->shadow) {
        void *p = NULL;
        LZ_CUDA_TRY(cudaMalloc(&p, sizeof(__nv_bfloat16) * n));
        l->shadow = p;
    }
    return lz_bw_from_f32<__nv_bfloat16>(be, (__nv_bfloat16 *)l->shadow, l->A, n);
}

void lz_cuda_bw_lora_release(lz_backend *be, lz_lora *l) {
    if (!l || !l->shadow)
        return;
    cudaStreamSynchronize(be->ctx.stream); // (no status to return: a failure shows at the next checked call)
    cudaFree(l->shadow);
    l->shadow = NULL;
}

// The A operand of the products: its bf16 copy or its fp32 values.
static lz_status a_operand(const lz_backend *be, const lz_lora *l, const void **A, const char *op) {
    if (!lz_bw_bf16(be)) {
        *A = l->A;
        return LZ_OK;
    }
    if (!l->shadow)
        return lz_fail(LZ_ERR_INTERNAL, "%s: the adapter has no bf16 copy of A (lora_sync makes it)", op);
    *A = l->shadow;
    return LZ_OK;
}

lz_status lz_cuda_bw_lora_forward(lz_backend *be, void *y, float *u, const void *x, const lz_lora *l,
                                  const lz_dropout *drop, const lz_batch *b) {
    LZ_TRY(check_lora(l, "lora_forward"));
    const void *A = NULL;
    LZ_TRY(a_operand(be, l, &A, "lora_forward"));
    const int N = b->n_tokens, r = l->r, in = l->in, out = l->out;
    if (N <= 0)
        return LZ_OK;
    const bool bf16 = lz_bw_bf16(be), drops = dropping(drop);
    if (drops)
        LZ_TRY(check_dropout(drop, b, "lora_forward"));
    const size_t bytes[2] = {drops ? (size_t)N * (size_t)in * lz_bw_act_size(be) : 0,
                             drops ? sizeof(uint64_t) * (size_t)b->n_seqs : 0};
    void *piece[2];
    LZ_TRY(lz_bw_scratch(be, 2, bytes, piece));
    lora_dropout d = {};
    const void *xin = NULL;
    LZ_TRY(dropped_input(be, &xin, piece[0], (uint64_t *)piece[1], &d, x, l, drop, b));
    LZ_TRY(lz_bw_gemm(be, false, true, N, r, in, 1.0f, xin, A, bf16, 0.0f, u)); // u = x' A^T
    const size_t n = (size_t)N * (size_t)out;
    if (bf16)
        lora_up_kernel<__nv_bfloat16><<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>((__nv_bfloat16 *)y, u, l->B,
                                                                                           l->scale, n, out, r);
    else
        lora_up_kernel<float><<<lz_bw_grid(n), LZ_BW_THREADS, 0, be->ctx.stream>>>((float *)y, u, l->B, l->scale, n,
                                                                                   out, r);
    LZ_LAUNCH_CHECK("lora_up_kernel");
    return LZ_OK;
}

lz_status lz_cuda_bw_lora_backward(lz_backend *be, lz_lora *l, float *dx, const float *dy, const void *x,
                                   const float *u, const lz_dropout *drop, const lz_batch *b) {
    LZ_TRY(check_lora(l, "lora_backward"));
    if (!l->dA || !l->dB)
        return lz_fail(LZ_ERR_INTERNAL, "lora_backward: an adapter without gradients");
    const void *A = NULL;
    LZ_TRY(a_operand(be, l, &A, "lora_backward"));
    const int N = b->n_tokens, r = l->r, in = l->in, out = l->out;
    if (N <= 0)
        return LZ_OK;
    const bool bf16 = lz_bw_bf16(be), drops = dropping(drop);
    if (drops)
        LZ_TRY(check_dropout(drop, b, "lora_backward"));
    const size_t nx = (size_t)N * (size_t)in, nu = (size_t)N * (size_t)r;
    const size_t bytes[5] = {sizeof(float) * nu, bf16 ? sizeof(__nv_bfloat16) * nu : 0,
                             drops ? nx * lz_bw_act_size(be) : 0, drops ? sizeof(uint64_t) * (size_t)b->n_seqs : 0,
                             drops && dx ? sizeof(float) * nx : 0};
    void *piece[5];
    LZ_TRY(lz_bw_scratch(be, 5, bytes, piece));
    float *du = (float *)piece[0], *dx_unmasked = (float *)piece[4];
    LZ_TRY(lz_bw_gemm(be, false, false, N, r, out, l->scale, dy, l->B, false, 0.0f, du));  // du = s dy B
    LZ_TRY(lz_bw_gemm(be, true, false, out, r, N, l->scale, dy, u, false, 1.0f, l->dB)); // dB += s dy^T u
    lora_dropout d = {};
    const void *xin = NULL;
    LZ_TRY(dropped_input(be, &xin, piece[2], (uint64_t *)piece[3], &d, x, l, drop, b));
    const void *du_op = du;
    if (bf16) {
        LZ_TRY(lz_bw_from_f32<__nv_bfloat16>(be, (__nv_bfloat16 *)piece[1], du, nu));
        du_op = piece[1];
    }
    LZ_TRY(lz_bw_gemm(be, true, false, r, in, N, 1.0f, du_op, xin, bf16, 1.0f, l->dA)); // dA += du^T x'
    if (!dx)
        return LZ_OK;
    if (!drops)
        return lz_bw_gemm(be, false, false, N, in, r, 1.0f, du_op, A, bf16, 1.0f, dx); // dx += du A
    LZ_TRY(lz_bw_gemm(be, false, false, N, in, r, 1.0f, du_op, A, bf16, 0.0f, dx_unmasked));
    lora_masked_add_kernel<<<lz_bw_grid(nx), LZ_BW_THREADS, 0, be->ctx.stream>>>(dx, dx_unmasked, nx, d);
    LZ_LAUNCH_CHECK("lora_masked_add_kernel");
    return LZ_OK;
}
