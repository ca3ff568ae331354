// backward_attention.cu - causal GQA softmax attention's backward (lz_cuda_bw_attention), the
// equations of cpu/backward/attention_backward.inc with the forward's probabilities recomputed.
//
// Scheme: query blocks through cuBLAS. Each sequence is walked in blocks of ATTN_BQ queries
// [i0, i0 + nb); a block's rows see keys 0 .. i0 + nb - 1 (L keys) and the block holds those rows
// whole, so their softmax is recomputed exactly from the block's own scores (no log-sum-exp from
// the forward is needed). For each kv head the Hq / Hkv query heads of its group are stacked as
// the rows of one matrix (M = rep * nb rows), and with scale = 1 / sqrt(d):
//   S = Q_blk K^T,  dP = dO_blk V^T                                  (products, batched over kv heads)
//   P = causal softmax(scale S),  D_i = sum_j P_ij dP_ij,  dS = P o (dP - D) scale   (one kernel)
//   dQ_blk = dS K,  dV += P^T dO_blk,  dK += dS^T Q_blk                (products; += across blocks)
// Why: every product runs in cuBLAS (on the bf16 backend bf16 operands on the tensor cores with
// fp32 accumulation, P and dS rounded to bf16; on the fp32 backend pedantic fp32 throughout, for
// the exactness tests), the one kernel of our own is a row-wise softmax, and causality wastes at
// most one nb x nb triangle a block (~ATTN_BQ / T of the work). The heads of a group meet inside a
// product's inner dimension and the blocks follow each other on the stream, so dK and dV are
// summed in a fixed order: the same inputs give the same bits. Memory: Hq x ATTN_BQ x L scores
// (S, dP, P, dS) in the backend's scratch (lz_cuda_scratch; ~100 MB in bf16 at Hq 32, T 2048),
// never T x T. A fused FlashAttention-2 kernel would skip the scores' round trips through memory;
// this scheme is chosen for being right by construction.
#include "backward_cuda.cuh" // lz_cuda_bw_attention, struct lz_backend

enum { ATTN_BQ = 128, ATTN_TB = 256 }; // queries a block; threads of the kernels

// ---- kernels -------------------------------------------------------------------------------------

// Qs, dOs [Hq][nb][d] (T) from the rows row0 .. row0 + nb - 1 of q (T) and dout (fp32), [N, Hq, d]
template <typename T>
__global__ void attn_bw_gather_kernel(T *Qs, T *dOs, const T *q, const float *dout, size_t row0, int nb, int Hq,
                                      int d) {
    const size_t n = (size_t)Hq * nb * d;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(e % d), r = (int)(e / d % nb), h = (int)(e / ((size_t)d * nb));
        const size_t src = ((row0 + r) * Hq + h) * d + c;
        Qs[e] = q[src];
        dOs[e] = lz_from_float<T>(dout[src]);
    }
}

// A warp per score row (head h, block row r; rows = Hq * nb, each L long): query i0 + r sees keys
// 0 .. i0 + r. P = softmax, dS = P (dP - D) scale, D = sum P dP; zero past the diagonal.
template <typename T>
__global__ void attn_bw_softmax_kernel(T *P, T *dS, const float *S, const float *dP, long rows, int nb, int L, int i0,
                                       float scale) {
    const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const int last = i0 + (int)(row % nb);
    const float *s = S + row * L, *dp = dP + row * L;
    float mx = -INFINITY;
    for (int j = lane; j <= last; j += 32)
        mx = fmaxf(mx, s[j]);
    mx = lz_warp_max(mx);
    float l = 0.0f, u = 0.0f; // sum of e^{scale (s - max)}, and of it times dP
    for (int j = lane; j <= last; j += 32) {
        const float e = expf((s[j] - mx) * scale);
        l += e;
        u += e * dp[j];
    }
    l = lz_warp_sum(l);
    u = lz_warp_sum(u);
    const float inv = 1.0f / l, D = u * inv;
    T *pr = P + row * L, *dsr = dS + row * L;
    for (int j = lane; j < L; j += 32) {
        const float p = j <= last ? expf((s[j] - mx) * scale) * inv : 0.0f;
        pr[j] = lz_from_float<T>(p);
        dsr[j] = lz_from_float<T>(j <= last ? p * (dp[j] - D) * scale : 0.0f);
    }
}

// dq rows row0 .. row0 + nb - 1 [N, Hq, d] (overwritten) from dQs [Hq][nb][d]
__global__ void attn_bw_scatter_kernel(float *dq, const float *dQs, size_t row0, int nb, int Hq, int d) {
    const size_t n = (size_t)Hq * nb * d;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(e % d), r = (int)(e / d % nb), h = (int)(e / ((size_t)d * nb));
        dq[((row0 + r) * Hq + h) * d + c] = dQs[e];
    }
}

// ---- launchers -----------------------------------------------------------------------------------

static int grid_for(size_t n) {
    const size_t blocks = (n + ATTN_TB - 1) / ATTN_TB;
    return blocks < 4096 ? (int)blocks : 4096;
}

// The activation type's cuBLAS names: bf16 operands with fp32 accumulation, or pedantic fp32.
template <typename T> struct attn_types;
template <> struct attn_types<__nv_bfloat16> {
    static constexpr cudaDataType ab = CUDA_R_16BF;
    static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};
template <> struct attn_types<float> {
    static constexpr cudaDataType ab = CUDA_R_32F;
    static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F_PEDANTIC;
};

// Column-major as cuBLAS sees it: C_b (fp32, m x n) = op(A_b) op(B_b) + beta C_b for b < batch,
// A and B of the activation type T. Row-major matrices are read as their transposes.
template <typename T>
static lz_status gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T *A,
                      int lda, long long sA, const T *B, int ldb, long long sB, float beta, float *C, int ldc,
                      long long sC, int batch) {
    const float one = 1.0f;
    LZ_CUDA_TRY(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, A, attn_types<T>::ab, lda, sA, B,
                                           attn_types<T>::ab, ldb, sB, &beta, C, CUDA_R_32F, ldc, sC, batch,
                                           attn_types<T>::compute, CUBLAS_GEMM_DEFAULT));
    return LZ_OK;
}

// Scratch of one query block, carved from the backend's scratch (256-byte aligned pieces).
template <typename T> struct attn_block_bufs {
    float *S, *dP, *dQs;
    T *P, *dS, *Qs, *dOs;
};

static size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <typename T> static size_t attn_scratch_bytes(int Hq, int d, int max_len) {
    const size_t scores = (size_t)Hq * ATTN_BQ * max_len, rows = (size_t)Hq * ATTN_BQ * d;
    return 2 * round256(sizeof(float) * scores) + round256(sizeof(float) * rows) + 2 * round256(sizeof(T) * scores) +
           2 * round256(sizeof(T) * rows);
}

template <typename T> static attn_block_bufs<T> attn_carve(void *base, int Hq, int d, int max_len) {
    const size_t scores = (size_t)Hq * ATTN_BQ * max_len, rows = (size_t)Hq * ATTN_BQ * d;
    char *p = (char *)base;
    auto take = [&](size_t bytes) {
        char *at = p;
        p += round256(bytes);
        return (void *)at;
    };
    attn_block_bufs<T> b;
    b.S = (float *)take(sizeof(float) * scores);
    b.dP = (float *)take(sizeof(float) * scores);
    b.dQs = (float *)take(sizeof(float) * rows);
    b.P = (T *)take(sizeof(T) * scores);
    b.dS = (T *)take(sizeof(T) * scores);
    b.Qs = (T *)take(sizeof(T) * rows);
    b.dOs = (T *)take(sizeof(T) * rows);
    return b;
}

// One sequence: rows start .. start + len - 1 of every tensor.
template <typename T>
static lz_status attn_bw_sequence(lz_cuda_ctx *c, const attn_block_bufs<T> &bb, float *dq, float *dk, float *dv,
                                  const float *dout, const T *q, const T *k, const T *v, size_t start, int len, int Hq,
                                  int Hkv, int d) {
    const int rep = Hq / Hkv, ldkv = Hkv * d;
    const float scale = 1.0f / sqrtf((float)d);
    const T *K = k + start * ldkv, *V = v + start * ldkv; // kv head h's rows: K + h d, ldkv apart
    float *dK = dk + start * ldkv, *dV = dv + start * ldkv; // zeroed by attn_bw: the blocks add to them
    const cublasOperation_t N = CUBLAS_OP_N, Tr = CUBLAS_OP_T;
    for (int i0 = 0; i0 < len; i0 += ATTN_BQ) {
        const int nb = len - i0 < ATTN_BQ ? len - i0 : ATTN_BQ, L = i0 + nb, M = rep * nb;
        const size_t row0 = start + (size_t)i0, n_rows = (size_t)Hq * nb * d;
        attn_bw_gather_kernel<T><<<grid_for(n_rows), ATTN_TB, 0, c->stream>>>(bb.Qs, bb.dOs, q, dout, row0, nb, Hq, d);
        LZ_LAUNCH_CHECK("attn_bw_gather");
        const long long sMd = (long long)M * d, sML = (long long)M * L;
        // S (M x L, row-major) = Qs K^T: column-major S^T (L x M) = K (L x d) . Qs^T (d x M)
        LZ_TRY(gemm<T>(c->cublas, Tr, N, L, M, d, K, ldkv, d, bb.Qs, d, sMd, 0.0f, bb.S, L, sML, Hkv));
        LZ_TRY(gemm<T>(c->cublas, Tr, N, L, M, d, V, ldkv, d, bb.dOs, d, sMd, 0.0f, bb.dP, L, sML, Hkv));
        const long score_rows = (long)Hq * nb;
        attn_bw_softmax_kernel<T><<<lz_div_up(score_rows, ATTN_TB / 32), ATTN_TB, 0, c->stream>>>(
            bb.P, bb.dS, bb.S, bb.dP, score_rows, nb, L, i0, scale);
        LZ_LAUNCH_CHECK("attn_bw_softmax");
        // dQs (M x d) = dS K: column-major dQs^T (d x M) = K^T (d x L) . dS^T (L x M)
        LZ_TRY(gemm<T>(c->cublas, N, N, d, M, L, K, ldkv, d, bb.dS, L, sML, 0.0f, bb.dQs, d, sMd, Hkv));
        attn_bw_scatter_kernel<<<grid_for(n_rows), ATTN_TB, 0, c->stream>>>(dq, bb.dQs, row0, nb, Hq, d);
        LZ_LAUNCH_CHECK("attn_bw_scatter");
        // dV (L x d) += P^T dOs: column-major dV^T (d x L) += dOs^T (d x M) . P (M x L)
        LZ_TRY(gemm<T>(c->cublas, N, Tr, d, L, M, bb.dOs, d, sMd, bb.P, L, sML, 1.0f, dV, ldkv, d, Hkv));
        LZ_TRY(gemm<T>(c->cublas, N, Tr, d, L, M, bb.Qs, d, sMd, bb.dS, L, sML, 1.0f, dK, ldkv, d, Hkv));
    }
    return LZ_OK;
}

template <typename T>
static lz_status attn_bw(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const T *q, const T *k,
                         const T *v, const lz_batch *b, int Hq, int Hkv, int d) {
    lz_cuda_ctx *c = &be->ctx;
    // every row of dq, dk, dv is overwritten: zero first, as the CPU's, so that rows outside the
    // sequences come out 0 and dK, dV start the sum over the query blocks from 0
    const size_t rows = (size_t)b->n_tokens;
    LZ_CUDA_TRY(cudaMemsetAsync(dq, 0, sizeof(float) * rows * Hq * d, c->stream));
    LZ_CUDA_TRY(cudaMemsetAsync(dk, 0, sizeof(float) * rows * Hkv * d, c->stream));
    LZ_CUDA_TRY(cudaMemsetAsync(dv, 0, sizeof(float) * rows * Hkv * d, c->stream));
    int max_len = 0;
    for (int s = 0; s < b->n_seqs; s++)
        max_len = b->len[s] > max_len ? b->len[s] : max_len;
    if (max_len == 0)
        return LZ_OK;
    LZ_TRY(lz_cuda_scratch(c, attn_scratch_bytes<T>(Hq, d, max_len)));
    const attn_block_bufs<T> bb = attn_carve<T>(c->scratch, Hq, d, max_len);
    cublasPointerMode_t mode;
    LZ_CUDA_TRY(cublasGetPointerMode(c->cublas, &mode));
    LZ_CUDA_TRY(cublasSetPointerMode(c->cublas, CUBLAS_POINTER_MODE_HOST)); // alpha, beta on the host
    lz_status st = LZ_OK;
    for (int s = 0; s < b->n_seqs && st == LZ_OK; s++)
        if (b->len[s] > 0)
            st = attn_bw_sequence<T>(c, bb, dq, dk, dv, dout, q, k, v, (size_t)b->start[s], b->len[s], Hq, Hkv, d);
    LZ_CUDA_TRY(cublasSetPointerMode(c->cublas, mode));
    return st;
}

lz_status lz_cuda_bw_attention(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const void *q,
                               const void *k, const void *v, const lz_batch *b, const lz_attn_dims *dims) {
    const int Hq = dims->n_heads, Hkv = dims->n_kv_heads, d = dims->head_dim;
    if (Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0 || d <= 0)
        return lz_fail(LZ_ERR_INPUT, "attention backward (CUDA): %d query heads, %d kv heads, head_dim %d", Hq, Hkv,
                       d);
    if (b->n_tokens < 0)
        return lz_fail(LZ_ERR_INPUT, "attention backward (CUDA): a batch of %d rows", b->n_tokens);
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->len[s] < 0 || b->start[s] < 0 || b->start[s] + b->len[s] > b->n_tokens)
            return lz_fail(LZ_ERR_INPUT, "attention backward (CUDA): sequence %d (rows %d + %d) outside the %d rows",
                           s, b->start[s], b->len[s], b->n_tokens);
        if (b->pos[s] != 0) // a query's keys are its sequence's rows from the first: no cached prefix
            return lz_fail(LZ_ERR_INPUT,
                           "attention backward (CUDA): sequence %d starts at position %d; training sequences start "
                           "at 0",
                           s, b->pos[s]);
        if (dims->sliding_window > 0 && b->len[s] > dims->sliding_window) // the mask would differ from causal
            return lz_fail(LZ_ERR_INPUT,
                           "attention backward (CUDA): sequence %d of %d tokens is longer than the sliding window %d "
                           "(only full causal attention is differentiated)",
                           s, b->len[s], dims->sliding_window);
    }
    if (be->dtype == LZ_DTYPE_BF16)
        return attn_bw<__nv_bfloat16>(be, dq, dk, dv, dout, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k,
                                      (const __nv_bfloat16 *)v, b, Hq, Hkv, d);
    return attn_bw<float>(be, dq, dk, dv, dout, (const float *)q, (const float *)k, (const float *)v, b, Hq, Hkv, d);
}
