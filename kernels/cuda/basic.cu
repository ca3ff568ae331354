// basic.cu - the small ops: embedding, RMSNorm, residual add, SwiGLU, row
// gather, log-sigmoid, and linear layers through cuBLAS (fp32 accumulation).
// Every kernel is launched through lz_launch (a programmatic dependent) and waits for the previous kernel before it touches activations;
// only weights (and the step's index arrays, which the host copies before the
// step's first kernel) may be read before the wait.
#include <stdint.h> // uintptr_t

#include "cuda_kernels.cuh"
#include "linear_stream.cuh" // linear_stream_takes, linear_stream_forward
#include "pdl.cuh" // lz_launch, lz_pdl_wait
#include "ptx.cuh" // lz_log_sigmoid

// Kernels ---------------------------------------------------------------------

// out row r = src row idx[r], one block per row; vec: rows of whole 16-byte vectors (aligned), each
// thread's first COPY_VECS loads issued at once. TABLE: src is a weight (the embedding), so its row
// is read before the wait (idx is the step's ids, copied by the host), and only the stores wait.
enum { COPY_VECS = 4 };
template <typename T, bool TABLE>
__global__ void copy_rows_kernel(T *out, const T *src, const int32_t *idx, int C, bool vec) {
    if (!TABLE)
        lz_pdl_wait();
    const T *in = src + (size_t)idx[blockIdx.x] * C;
    T *o = out + (size_t)blockIdx.x * C;
    if (!vec) {
        if (TABLE)
            lz_pdl_wait();
        lz_pdl_launch_dependents();
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            o[c] = in[c];
        return;
    }
    const int n_vec = C / (16 / (int)sizeof(T)), step = blockDim.x;
    uint4 r[COPY_VECS];
    auto load = [&](int c0) {
#pragma unroll
        for (int u = 0; u < COPY_VECS; u++)
            if (c0 + u * step < n_vec)
                r[u] = ((const uint4 *)in)[c0 + u * step];
    };
    load(threadIdx.x);
    if (TABLE)
        lz_pdl_wait();
    lz_pdl_launch_dependents();
    for (int c0 = threadIdx.x; c0 < n_vec; c0 += COPY_VECS * step) {
        if (c0 != (int)threadIdx.x)
            load(c0);
#pragma unroll
        for (int u = 0; u < COPY_VECS; u++)
            if (c0 + u * step < n_vec)
                ((uint4 *)o)[c0 + u * step] = r[u];
    }
}

// One block per row; the variance in fp32 as HF does.
template <typename T>
__global__ void rmsnorm_kernel(T *out, const T *x, const T *w, int C, float eps) {
    __shared__ float red[32];
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const T *xr = x + (size_t)blockIdx.x * C;
    T *orow = out + (size_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = lz_to_float(xr[c]);
        ss += v * v;
    }
    const float inv = rsqrtf(lz_block_sum(ss, red) / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        orow[c] = lz_from_float<T>(lz_to_float(w[c]) * (lz_to_float(xr[c]) * inv));
}

// The same for rows of 16-byte vectors (C % V == 0, rows aligned): a row of
// 4096 bf16 is 512 vectors, one a thread, held in registers between the sum and
// the scaling (at most RMS_VECS per thread), so x is read once; the norm's
// weights are loaded before the wait.
enum { RMS_VECS = 2 }; // (rows up to 2048 vectors; wider ones take rmsnorm_kernel)
template <typename T>
__global__ void __launch_bounds__(1024) rmsnorm_vec_kernel(T *out, const T *x, const T *w, int C, float eps) {
    __shared__ float red[32];
    constexpr int V = vec16<T>::N;
    const int n_vec = C / V;
    const T *xr = x + (size_t)blockIdx.x * C;
    T *orow = out + (size_t)blockIdx.x * C;
    uint4 wraw[RMS_VECS]; // w and x raw until used (4 registers a vector), so 1024 threads fit
#pragma unroll
    for (int k = 0; k < RMS_VECS; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < n_vec)
            wraw[k] = *(const uint4 *)(w + (size_t)c * V);
    }
    uint4 xraw[RMS_VECS];
    lz_pdl_wait();
    lz_pdl_launch_dependents();
#pragma unroll
    for (int k = 0; k < RMS_VECS; k++) { // all loads first
        const int c = threadIdx.x + k * blockDim.x;
        if (c < n_vec)
            xraw[k] = *(const uint4 *)(xr + (size_t)c * V);
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < RMS_VECS; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < n_vec) {
            float xv[V];
            vec16<T>::load(xv, (const T *)&xraw[k]);
#pragma unroll
            for (int i = 0; i < V; i++)
                ss += xv[i] * xv[i];
        }
    }
    const float inv = rsqrtf(lz_block_sum(ss, red) / (float)C + eps);
#pragma unroll
    for (int k = 0; k < RMS_VECS; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < n_vec) {
            float xv[V], wv[V], o[V];
            vec16<T>::load(xv, (const T *)&xraw[k]);
            vec16<T>::load(wv, (const T *)&wraw[k]);
#pragma unroll
            for (int i = 0; i < V; i++)
                o[i] = wv[i] * (xv[i] * inv);
            store16(orow + (size_t)c * V, o);
        }
    }
}

template <typename T> __global__ void add_kernel(T *y, const T *x, size_t n) {
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = lz_from_float<T>(lz_to_float(y[i]) + lz_to_float(x[i]));
}

template <typename T> __global__ void swiglu_kernel(T *out, const T *gate, const T *up, size_t n) {
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        out[i] = lz_from_float<T>(lz_swiglu(lz_to_float(gate[i]), lz_to_float(up[i])));
    }
}

// The elementwise ops over 16-byte vectors (n_vec of them; pointers aligned),
// each thread's EW_UNROLL vectors loaded before any is used so that several
// loads are in flight; the caller does the n % V tail with the scalar kernels.
enum { EW_UNROLL = 2 };
template <typename T> __global__ void add_vec_kernel(T *y, const T *x, size_t n_vec) {
    constexpr int V = vec16<T>::N;
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i0 < n_vec; i0 += stride * EW_UNROLL) {
        float a[EW_UNROLL][V], b[EW_UNROLL][V];
#pragma unroll
        for (int u = 0; u < EW_UNROLL; u++) {
            const size_t i = i0 + u * stride;
            if (i < n_vec) {
                vec16<T>::load(a[u], y + i * V);
                vec16<T>::load(b[u], x + i * V);
            }
        }
#pragma unroll
        for (int u = 0; u < EW_UNROLL; u++) {
            const size_t i = i0 + u * stride;
            if (i < n_vec) {
#pragma unroll
                for (int e = 0; e < V; e++)
                    a[u][e] += b[u][e];
                store16(y + i * V, a[u]);
            }
        }
    }
}

// ROWS: out is [n_vec / row_vecs][row_vecs] vectors, gate and up rows ld_vecs vectors apart (both halves
// of a joined gate/up product, linear_joined.cu); else all three are flat.
template <typename T, bool ROWS>
__global__ void swiglu_vec_kernel(T *out, const T *gate, const T *up, size_t n_vec, size_t row_vecs, size_t ld_vecs) {
    constexpr int V = vec16<T>::N;
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i0 < n_vec; i0 += stride * EW_UNROLL) {
        float g[EW_UNROLL][V], u_[EW_UNROLL][V];
#pragma unroll
        for (int u = 0; u < EW_UNROLL; u++) {
            const size_t i = i0 + u * stride;
            if (i < n_vec) {
                const size_t at = ROWS ? i / row_vecs * ld_vecs + i % row_vecs : i;
                vec16<T>::load(g[u], gate + at * V);
                vec16<T>::load(u_[u], up + at * V);
            }
        }
#pragma unroll
        for (int u = 0; u < EW_UNROLL; u++) {
            const size_t i = i0 + u * stride;
            if (i < n_vec) {
#pragma unroll
                for (int e = 0; e < V; e++)
                    g[u][e] = lz_swiglu(g[u][e], u_[u][e]);
                store16(out + i * V, g[u]);
            }
        }
    }
}

// The better of two (value, index) candidates: the larger value, the lower
// index on ties (the host sampler's left-to-right scan); index C = "none yet".
__device__ __forceinline__ void argmax_merge(float &bv, int32_t &bi, float ov, int32_t oi, int C) {
    if (oi < C && (bi == C || ov > bv || (ov == bv && oi < bi))) {
        bv = ov;
        bi = oi;
    }
}

// One block of 1024 threads per row: 16-byte loads (one vocabulary row of
// 128256 bf16 is 16 loads per thread, issued ARGMAX_LOADS at a time), each
// thread keeps its first best, then warp shuffles and one shared-memory round
// pick the row's.
enum { ARGMAX_LOADS = 8 };
template <typename T> __global__ void __launch_bounds__(1024) argmax_rows_kernel(int32_t *ids, const T *x, int C) {
    __shared__ float warp_v[32];
    __shared__ int32_t warp_i[32];
    constexpr int V = vec16<T>::N;
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const T *row = x + (size_t)blockIdx.x * C;
    float bv = -INFINITY;
    int32_t bi = C;
    if (C % V == 0) { // rows stay 16-byte aligned; ARGMAX_LOADS loads in flight, then compared in order
        const int stride = blockDim.x * V;
        for (int c0 = threadIdx.x * V; c0 < C; c0 += ARGMAX_LOADS * stride) {
            uint4 raw[ARGMAX_LOADS]; // (raw: 4 registers a load, so 1024 threads fit)
#pragma unroll
            for (int u = 0; u < ARGMAX_LOADS; u++)
                if (c0 + u * stride < C)
                    raw[u] = *(const uint4 *)(row + c0 + u * stride);
#pragma unroll
            for (int u = 0; u < ARGMAX_LOADS; u++)
                if (c0 + u * stride < C) {
                    float vals[V];
                    vec16<T>::load(vals, (const T *)&raw[u]);
#pragma unroll
                    for (int i = 0; i < V; i++)
                        if (vals[i] > bv || bi == C) {
                            bv = vals[i];
                            bi = c0 + u * stride + i;
                        }
                }
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            const float v = lz_to_float(row[c]);
            if (v > bv || bi == C) {
                bv = v;
                bi = c;
            }
        }
    }
    for (int off = 16; off > 0; off /= 2)
        argmax_merge(bv, bi, __shfl_down_sync(0xffffffffu, bv, off), __shfl_down_sync(0xffffffffu, bi, off), C);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        warp_v[warp] = bv;
        warp_i[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        bv = lane < (int)(blockDim.x >> 5) ? warp_v[lane] : -INFINITY;
        bi = lane < (int)(blockDim.x >> 5) ? warp_i[lane] : C;
        for (int off = 16; off > 0; off /= 2)
            argmax_merge(bv, bi, __shfl_down_sync(0xffffffffu, bv, off), __shfl_down_sync(0xffffffffu, bi, off), C);
        if (lane == 0)
            ids[blockIdx.x] = bi < C ? bi : 0;
    }
}

template <typename T> __global__ void log_sigmoid_kernel(T *out, const T *x, int n) {
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = lz_from_float<T>(lz_log_sigmoid(lz_to_float(x[i])));
    }
}

// out[t, o] += bias[o]
template <typename T> __global__ void bias_kernel(T *out, const T *bias, int n_out, size_t total) {
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] = lz_from_float<T>(lz_to_float(out[i]) + lz_to_float(bias[i % n_out]));
}

// Launchers -------------------------------------------------------------------

static int grid_for(size_t n, int block) {
    size_t g = (n + block - 1) / block;
    return (int)(g < 65535 * 8 ? (g > 0 ? g : 1) : 65535 * 8);
}


// n rows of C elements gathered by idx: one thread per 16-byte vector of a row (up to 1024), so that a
// batch-1 step's row is one round of loads.
template <typename T, bool TABLE>
static lz_status copy_rows(lz_cuda_ctx *c, const char *what, T *out, const T *src, const int32_t *idx, int n, int C) {
    if (n <= 0)
        return LZ_OK;
    const int V = 16 / (int)sizeof(T);
    const bool vec = C % V == 0 && lz_aligned16(out, src, src);
    int threads = vec ? (C / V + 31) / 32 * 32 : 256;
    threads = threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
    return lz_launch(c, what, copy_rows_kernel<T, TABLE>, dim3((unsigned)n), dim3((unsigned)threads), 0, out, src, idx,
                     C, vec);
}

template <typename T>
lz_status embedding_forward(lz_cuda_ctx *c, T *out, const T *table, const int32_t *ids, int n, int C) {
    return copy_rows<T, true>(c, "embedding", out, table, ids, n, C);
}

// Blocks of 256 threads for n_vec vectors: one vector a thread while that is at most a wave of
// blocks (a batch-1 step's row spread over several SMs), else EW_UNROLL vectors each, at most 64
// resident-sized waves (a grid-stride loop takes the rest).
int lz_vec_grid(const lz_cuda_ctx *c, size_t n_vec) {
    const size_t cap = (size_t)c->n_sms * 8 * 64;
    size_t g = (n_vec + 255) / 256;
    if (g > (size_t)c->n_sms * 8)
        g = (n_vec + 256 * EW_UNROLL - 1) / (256 * EW_UNROLL);
    return (int)(g < 1 ? 1 : g > cap ? cap : g);
}

template <typename T> lz_status rmsnorm_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, int n, int C, float eps) {
    constexpr int V = vec16<T>::N;
    const int n_vec = C / V;
    if (C % V == 0 && lz_aligned16(out, x, w) && n_vec <= 1024 * RMS_VECS) {
        // one vector per thread up to 1024 (512 threads for a 4096-wide bf16 row: one round of loads);
        // n_vec <= 1024 * RMS_VECS means threads * RMS_VECS >= n_vec after the clamp
        int threads = (n_vec + 31) / 32 * 32;
        threads = threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
        return lz_launch(c, "rmsnorm", rmsnorm_vec_kernel<T>, dim3((unsigned)n), dim3((unsigned)threads), 0, out, x, w,
                         C, eps);
    }
    return lz_launch(c, "rmsnorm", rmsnorm_kernel<T>, dim3((unsigned)n), dim3(C >= 1024 ? 1024 : ((C + 31) / 32) * 32),
                     0, out, x, w, C, eps);
}

template <typename T> lz_status add_forward(lz_cuda_ctx *c, T *y, const T *x, size_t n) {
    constexpr int V = vec16<T>::N;
    const size_t n_vec = lz_aligned16(y, x, y) ? n / V : 0, done = n_vec * V;
    if (n_vec > 0) {
        LZ_TRY(lz_launch(c, "add", add_vec_kernel<T>, dim3((unsigned)lz_vec_grid(c, n_vec)), dim3(256), 0, y, x, n_vec));
    }
    if (done < n) { // the tail (or everything, unaligned)
        LZ_TRY(lz_launch(c, "add", add_kernel<T>, dim3((unsigned)grid_for(n - done, 256)), dim3(256), 0, y + done,
                         x + done, n - done));
    }
    return LZ_OK;
}

template <typename T> lz_status swiglu_forward(lz_cuda_ctx *c, T *out, const T *gate, const T *up, size_t n) {
    constexpr int V = vec16<T>::N;
    const size_t n_vec = lz_aligned16(out, gate, up) ? n / V : 0, done = n_vec * V;
    if (n_vec > 0) {
        LZ_TRY(lz_launch(c, "swiglu", swiglu_vec_kernel<T, false>, dim3((unsigned)lz_vec_grid(c, n_vec)), dim3(256), 0,
                         out, gate, up, n_vec, n_vec, n_vec));
    }
    if (done < n) {
        LZ_TRY(lz_launch(c, "swiglu", swiglu_kernel<T>, dim3((unsigned)grid_for(n - done, 256)), dim3(256), 0,
                         out + done, gate + done, up + done, n - done));
    }
    return LZ_OK;
}

template <typename T>
lz_status swiglu_rows_forward(lz_cuda_ctx *c, T *out, const T *gate, const T *up, int rows, int cols, int ld) {
    constexpr int V = vec16<T>::N;
    if (cols % V != 0 || ld % V != 0 || !lz_aligned16(out, gate, up))
        return lz_fail(LZ_ERR_INTERNAL, "swiglu rows: %d columns %d apart are not whole aligned 16-byte vectors", cols, ld);
    const size_t n_vec = (size_t)rows * (cols / V);
    return lz_launch(c, "swiglu", swiglu_vec_kernel<T, true>, dim3((unsigned)lz_vec_grid(c, n_vec)), dim3(256), 0, out,
                     gate, up, n_vec, (size_t)(cols / V), (size_t)(ld / V));
}

template <typename T> lz_status gather_rows_forward(lz_cuda_ctx *c, T *out, const T *x, const int32_t *rows, int n, int C) {
    return copy_rows<T, false>(c, "gather_rows", out, x, rows, n, C);
}

template <typename T> lz_status argmax_rows_forward(lz_cuda_ctx *c, int32_t *ids, const T *x, int n, int C) {
    return lz_launch(c, "argmax_rows", argmax_rows_kernel<T>, dim3((unsigned)n), dim3(1024), 0, ids, x, C);
}

template <typename T> lz_status log_sigmoid_forward(lz_cuda_ctx *c, T *out, const T *x, int n) {
    return lz_launch(c, "log_sigmoid", log_sigmoid_kernel<T>, dim3((unsigned)grid_for((size_t)n, 256)), dim3(256), 0,
                     out, x, n);
}

template <typename T> static cudaDataType_t cuda_type();
template <> cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <> cudaDataType_t cuda_type<__nv_bfloat16>() { return CUDA_R_16BF; }

// Row-major out[n, o] = x[n, i] . W[o, i]^T is, column-major, out^T = W . x^T:
// C (o x n) = op_T(A: i x o, lda i) * B (i x n, ldb i).
template <typename T>
static lz_status gemm_xwt(lz_cuda_ctx *c, T *out, const T *x, const T *w, int n, int in, int out_features, float beta) {
    const float one = 1.0f;
    LZ_CUDA_TRY(cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out_features, n, in, &one, w, cuda_type<T>(), in, x,
                               cuda_type<T>(), in, &beta, out, cuda_type<T>(), out_features, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
    return LZ_OK;
}

template <typename T>
lz_status linear_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, const T *bias, int n, int in, int out_features) {
    // One-token steps and outputs of a few rows (the Lizard gate) are memory-bound: our GEMV.
    const bool vec_ok = in % (16 / (int)sizeof(T)) == 0;
    if (vec_ok && (lz_gemv_takes_step(c, n) || out_features <= 4))
        return gemv_forward<T>(c, out, x, w, bias, n, in, out_features);
    if constexpr (sizeof(T) == 2) { // decode steps of a few tokens: the weights streamed (linear_stream.cu)
        const lz_stream_segment seg = {out, w, bias, out_features};
        if (linear_stream_takes(c, 1, &seg, x, n, in, LZ_STREAM_STORE))
            return linear_stream_forward(c, 1, &seg, x, n, in, LZ_STREAM_STORE);
    }
    LZ_TRY(gemm_xwt<T>(c, out, x, w, n, in, out_features, 0.0f));
    if (bias) {
        const size_t total = (size_t)n * out_features;
        LZ_TRY(lz_launch(c, "linear bias", bias_kernel<T>, dim3((unsigned)grid_for(total, 256)), dim3(256), 0, out, bias,
                         out_features, total));
    }
    return LZ_OK;
}

// y[n, o] += x[n, i] . W[o, i]^T in one GEMM (beta = 1): a prompt's o_proj and down_proj onto the
// residual stream without writing the product and reading it back in a separate add.
template <typename T>
lz_status linear_accumulate_forward(lz_cuda_ctx *c, T *y, const T *x, const T *w, int n, int in, int out_features) {
    if constexpr (sizeof(T) == 2) {
        const lz_stream_segment seg = {y, w, NULL, out_features};
        if (linear_stream_takes(c, 1, &seg, x, n, in, LZ_STREAM_ACCUMULATE))
            return linear_stream_forward(c, 1, &seg, x, n, in, LZ_STREAM_ACCUMULATE);
    }
    return gemm_xwt<T>(c, y, x, w, n, in, out_features, 1.0f);
}

#define LZ_BASIC(T)                                                                                   \
    template lz_status embedding_forward<T>(lz_cuda_ctx *, T *, const T *, const int32_t *, int, int); \
    template lz_status rmsnorm_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, int, int, float);  \
    template lz_status add_forward<T>(lz_cuda_ctx *, T *, const T *, size_t);                          \
    template lz_status swiglu_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, size_t);            \
    template lz_status swiglu_rows_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, int, int, int); \
    template lz_status gather_rows_forward<T>(lz_cuda_ctx *, T *, const T *, const int32_t *, int, int); \
    template lz_status log_sigmoid_forward<T>(lz_cuda_ctx *, T *, const T *, int);                     \
    template lz_status argmax_rows_forward<T>(lz_cuda_ctx *, int32_t *, const T *, int, int);          \
    template lz_status linear_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, const T *, int, int, int); \
    template lz_status linear_accumulate_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, int, int, int);
LZ_INSTANTIATE(LZ_BASIC)
