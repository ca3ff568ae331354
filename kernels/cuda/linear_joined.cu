// linear_joined.cu - linear layers of one input as one cuBLAS product at decode-sized steps, their
// weights laid one after another at load (lz_join_weights: a layer's q, k, v and a Lizard layer's gate;
// the MLP's gate, up).
// Why: at 2-64 tokens a product of 8-34 MB is latency-bound in cuBLAS, and each comes with a split-K
// reduction; one product of the joined weights takes little longer than one of them alone, and
// cuBLASLt's other algorithms gain little on these shapes (tests/bench/cublaslt_probe.cu), so the
// gain is in the joining, not in the choice.
// The product lands in ctx->joined_out ([n][rows of all the layers]); a small kernel then hands each
// layer its columns (or SwiGLU reads gate and up from both halves of a row: swiglu_rows_forward), since
// the ops after it take each layer's output as its own dense array. A Lizard layer's one-row gate
// joins its q, k, v.
#include <limits.h> // INT_MAX

#include "linear_joined.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait

// Where each layer's columns go: layer s takes 16-byte vectors [end[s - 1], end[s]) of a joined row, of
// which its first rows[s] elements (all but in a last layer of fewer rows than a vector's multiple).
struct lz_join_split {
    void *out[LZ_JOIN_MAX_LAYERS];
    int end[LZ_JOIN_MAX_LAYERS], rows[LZ_JOIN_MAX_LAYERS];
    int row_vecs; // 16-byte vectors in a joined row (= end[count - 1])
};

// One thread per 16-byte vector of the joined [n][row_vecs] output, copied to its layer's row.
template <typename T> __global__ void joined_split_kernel(const uint4 *in, lz_join_split p, int n) {
    constexpr int V = 16 / sizeof(T);
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const int total = n * p.row_vecs;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int t = i / p.row_vecs, v = i - t * p.row_vecs;
        int s = 0, start = 0;
        while (v >= p.end[s]) // (v < end[count - 1], so s stays below count)
            start = p.end[s++];
        const int col = (v - start) * V, rows = p.rows[s];
        const uint4 r = in[i];
        if (rows % V == 0) {
            *(uint4 *)((T *)p.out[s] + (size_t)t * rows + col) = r;
        } else { // the last layer, off the vectors (a Lizard gate: one row); the rest is the block's padding
            const T *e = (const T *)&r;
            for (int j = 0; j < V && col + j < rows; j++)
                ((T *)p.out[s])[(size_t)t * rows + col + j] = e[j];
        }
    }
}

template <typename T> static bool follows(const lz_weight *a, const lz_weight *b) {
    return a->cols == b->cols && a->data &&
           (const char *)b->data == (const char *)a->data + (size_t)a->rows * (size_t)a->cols * sizeof(T);
}

// A step the joined product may take: 1 .. LIZARD_JOIN_TOKENS tokens, on the main stream (the one
// joined_out belongs to), with an output buffer that holds its n x rows elements and element indices
// that fit an int (the kernels' thread indices).
template <typename T> static bool joined_step(const lz_cuda_ctx *c, int n, size_t rows) {
    const size_t elems = (size_t)n * rows;
    return n >= 1 && n <= c->join_tokens && !c->on_side && c->joined_out && elems <= INT_MAX &&
           elems * sizeof(T) <= c->joined_bytes;
}

// Rows of a run's product: its rows up to whole 16-byte vectors of the output (the block's zero rows
// fill a gate's last vector; a block's rows are a multiple of LZ_JOIN_ROW_ALIGN, so they stay in it).
template <typename T> static int product_rows(long rows) {
    constexpr int V = 16 / sizeof(T);
    static_assert(LZ_JOIN_ROW_ALIGN % V == 0, "a joined block ends on whole vectors");
    return lz_div_up(rows, V) * V;
}

template <typename T>
int linear_joined_run(const lz_cuda_ctx *c, int count, void *const *outs, const lz_weight *const *ws,
                      const lz_weight *const *biases, int n) {
    constexpr int V = 16 / sizeof(T);
    const size_t block = ws[0]->block_rows > 0 ? (size_t)ws[0]->block_rows : 0;
    int run = 1;
    size_t rows = (size_t)ws[0]->rows;
    while (run < count && run < LZ_JOIN_MAX_LAYERS && ws[run - 1]->rows % V == 0 && follows<T>(ws[run - 1], ws[run]) &&
           rows + (size_t)ws[run]->rows <= block)
        rows += (size_t)ws[run++]->rows;
    if (run < 2 || !joined_step<T>(c, n, (size_t)product_rows<T>((long)rows)))
        return 0;
    for (int i = 0; i < run; i++)
        if ((biases && biases[i] && biases[i]->data) || (ws[i]->rows % V == 0 && !lz_aligned16(outs[i])))
            return 0;
    return run;
}

template <typename T>
lz_status linear_joined_forward(lz_cuda_ctx *c, int run, void *const *outs, const T *x, const lz_weight *const *ws,
                                int n) {
    constexpr int V = 16 / sizeof(T);
    lz_join_split p = {};
    int rows = 0;
    for (int i = 0; i < run; i++) {
        rows += (int)ws[i]->rows;
        p.out[i] = outs[i], p.end[i] = lz_div_up(rows, V), p.rows[i] = (int)ws[i]->rows;
    }
    for (int i = run; i < LZ_JOIN_MAX_LAYERS; i++)
        p.end[i] = INT_MAX;
    const int m = product_rows<T>(rows);
    p.row_vecs = m / V;
    T *joined = (T *)c->joined_out;
    LZ_TRY(linear_forward<T>(c, joined, x, (const T *)ws[0]->data, NULL, n, (int)ws[0]->cols, m));
    return lz_launch(c, "joined split", joined_split_kernel<T>, dim3((unsigned)lz_vec_grid(c, (size_t)n * p.row_vecs)),
                     dim3(256), 0, (const uint4 *)joined, p, n);
}

template <typename T>
bool swiglu_joined_takes(const lz_cuda_ctx *c, T *out, const lz_weight *wg, const lz_weight *bg, const lz_weight *wu,
                         const lz_weight *bu, int n) {
    constexpr int V = 16 / sizeof(T);
    return wg->rows == wu->rows && follows<T>(wg, wu) && wg->block_rows >= 2 * wg->rows && !(bg && bg->data) &&
           !(bu && bu->data) &&
           wg->rows % V == 0 && lz_aligned16(out) && joined_step<T>(c, n, 2 * (size_t)wg->rows);
}

template <typename T>
lz_status swiglu_joined_forward(lz_cuda_ctx *c, T *out, const T *x, const lz_weight *wg, int n) {
    const int I = (int)wg->rows;
    T *joined = (T *)c->joined_out;
    LZ_TRY(linear_forward<T>(c, joined, x, (const T *)wg->data, NULL, n, (int)wg->cols, 2 * I));
    return swiglu_rows_forward<T>(c, out, joined, joined + I, n, I, 2 * I);
}

// The layers' weights one after the other into block, then `pad` zero bytes.
static lz_status copy_joined(lz_cuda_ctx *c, char *block, int count, lz_weight *const *ws, const size_t *bytes,
                             size_t total, size_t pad) {
    size_t off = 0;
    for (int i = 0; i < count; off += bytes[i++])
        LZ_CUDA_TRY(cudaMemcpyAsync(block + off, ws[i]->data, bytes[i], cudaMemcpyDeviceToDevice, c->stream));
    if (pad)
        LZ_CUDA_TRY(cudaMemsetAsync(block + total, 0, pad, c->stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(c->stream));
    return LZ_OK;
}

lz_status lz_join_weights(lz_cuda_ctx *c, int count, lz_weight *const *ws, size_t es) {
    if (c->join_tokens < 1 || count < 2 || count > LZ_JOIN_MAX_LAYERS)
        return LZ_OK;
    size_t bytes[LZ_JOIN_MAX_LAYERS], total = 0, rows = 0;
    for (int i = 0; i < count; i++) {
        const lz_weight *w = ws[i];
        if (!w->data || !w->owned || w->cols != ws[0]->cols || w->dtype != ws[0]->dtype)
            return LZ_OK;
        bytes[i] = (size_t)w->rows * (size_t)w->cols * es;
        if (i < count - 1 && bytes[i] % 256 != 0) // each layer's rows stay aligned as cudaMalloc's would be
            return LZ_OK;
        total += bytes[i], rows += (size_t)w->rows;
    }
    if (rows > INT_MAX - LZ_JOIN_ROW_ALIGN)
        return LZ_OK;
    // zero rows up to a multiple of LZ_JOIN_ROW_ALIGN, so that a last layer of few rows (the Lizard gate)
    // fills whole 16-byte vectors of the product
    const size_t block_rows = (size_t)lz_div_up((long)rows, LZ_JOIN_ROW_ALIGN) * LZ_JOIN_ROW_ALIGN;
    const size_t pad = (block_rows - rows) * (size_t)ws[0]->cols * es;
    // the product's output first: without it the joined weights would never be used
    const size_t out_bytes = (size_t)c->join_tokens * block_rows * es;
    if (out_bytes > c->joined_bytes) {
        void *p = NULL;
        if (lz_gpu_error_cleared(cudaMalloc(&p, out_bytes)))
            return LZ_OK; // too little memory: the layers stay apart
        if (c->joined_out) {
            LZ_CUDA_TRY(cudaStreamSynchronize(c->stream));
            LZ_CUDA_TRY(cudaFree(c->joined_out));
        }
        c->joined_out = p, c->joined_bytes = out_bytes, c->buffers_moved = true;
    }
    char *block = NULL;
    if (lz_gpu_error_cleared(cudaMalloc((void **)&block, total + pad)))
        return LZ_OK;
    const lz_status s = copy_joined(c, block, count, ws, bytes, total, pad);
    if (s != LZ_OK) {
        cudaFree(block);
        lz_error_prefix("joining %d weights of %zu bytes: ", count, total);
        return s;
    }
    size_t off = 0;
    for (int i = 0; i < count; off += bytes[i++]) {
        LZ_CUDA_TRY(cudaFree(ws[i]->data));
        ws[i]->data = block + off;
        ws[i]->owned = i == 0; // the first frees the block
        ws[i]->block_rows = i == 0 ? (int64_t)block_rows : 0;
    }
    return LZ_OK;
}

void lz_joined_destroy(lz_cuda_ctx *c) {
    if (c->joined_out)
        cudaFree(c->joined_out);
    c->joined_out = NULL, c->joined_bytes = 0;
}

#define LZ_JOINED(T)                                                                                                 \
    template int linear_joined_run<T>(const lz_cuda_ctx *, int, void *const *, const lz_weight *const *,            \
                                      const lz_weight *const *, int);                                                \
    template lz_status linear_joined_forward<T>(lz_cuda_ctx *, int, void *const *, const T *,                        \
                                                const lz_weight *const *, int);                                      \
    template bool swiglu_joined_takes<T>(const lz_cuda_ctx *, T *, const lz_weight *, const lz_weight *,             \
                                         const lz_weight *, const lz_weight *, int);                                 \
    template lz_status swiglu_joined_forward<T>(lz_cuda_ctx *, T *, const T *, const lz_weight *, int);
LZ_INSTANTIATE(LZ_JOINED)
