// cuda_backend.cu - the CUDA backend: device memory, weight upload with dtype
// conversion, the per-step batch upload, and the op table (one per activation
// type) pointing at the launchers of this folder.
#include <limits.h> // INT_MAX
#include <stdlib.h> // malloc, free
#include <stdio.h>  // fprintf
#include <string.h> // memcpy
#include <time.h>   // clock_gettime

#include "backward_cuda.cuh"  // lz_cuda_backward_ops
#include "cuda_backend.cuh"   // struct lz_backend
#include "cuda_kernels.cuh"
#include "linear_joined.cuh" // lz_join_weights, linear_joined_run, linear_joined_forward, swiglu_joined_*
#include "linear_stream.cuh" // linear_stream_takes, linear_stream_forward
#include "weight_check.cuh"  // lz_first_nonfinite_device
#include "wgmma.cuh" // lz_wgmma_built

extern "C" {
#include "cuda_knobs.h"  // lz_cuda_knobs_read
#include "dtype.h"       // lz_convert_to_f32, lz_f32_to_bf16, lz_first_nonfinite
#include "knobs.h"       // lz_knobs_get
#include "sample_rule.h" // LZ_SAMPLE_MAX_VOCAB
}

lz_status lz_cuda_scratch(lz_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->scratch_bytes)
        return LZ_OK;
    // earlier kernels may still use the old scratch (side-stream work is joined into this stream)
    LZ_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    if (ctx->scratch)
        LZ_CUDA_TRY(cudaFree(ctx->scratch));
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
    LZ_CUDA_TRY(cudaMalloc(&ctx->scratch, bytes));
    ctx->scratch_bytes = bytes;
    ctx->buffers_moved = true;
    return LZ_OK;
}

static size_t elem_size(const lz_backend *be) { return be->dtype == LZ_DTYPE_BF16 ? 2 : 4; }

// Memory ----------------------------------------------------------------------

static lz_status cuda_alloc(lz_backend *be, size_t bytes, void **out) {
    const char *why = lz_gpu_error_cleared(cudaMalloc(out, bytes ? bytes : 1));
    if (why) {
        size_t free_b = 0, total = 0;
        (void)lz_gpu_error_cleared(cudaMemGetInfo(&free_b, &total)); // (the figures only: 0 of 0 if it fails too)
        return lz_fail(LZ_ERR_NOMEM, "cuda device %d: cannot allocate %zu bytes (%zu of %zu free): %s", be->device,
                       bytes, free_b, total, why);
    }
    return LZ_OK;
}

static void cuda_free(lz_backend *be, void *p) { cudaFree(p); }

static lz_status cuda_zero(lz_backend *be, void *p, size_t bytes) {
    LZ_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, be->ctx.stream));
    return LZ_OK;
}

static lz_status grow_stage(lz_backend *be, size_t bytes) {
    if (bytes <= be->stage_cap)
        return LZ_OK;
    if (be->h_stage)
        LZ_CUDA_TRY(cudaFreeHost(be->h_stage));
    be->h_stage = NULL;
    be->stage_cap = 0;
    LZ_CUDA_TRY(cudaMallocHost(&be->h_stage, bytes));
    be->stage_cap = bytes;
    return LZ_OK;
}

// Host to device, complete on return. Our stream is non-blocking, so a plain
// cudaMemcpy (legacy stream) is not ordered with it, and from pageable memory it
// may return before the data has landed: later work on the stream could read
// a partly written buffer.
static lz_status h2d(lz_backend *be, void *dst, const void *src, size_t bytes) {
    LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, be->ctx.stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    return LZ_OK;
}

// A weight that is not finite where it lies on the device is refused by name (from the mapping as it
// is, or converted: an F32 value beyond bf16's range becomes an infinity there).
static lz_status check_uploaded(lz_backend *be, const lz_host_tensor *src, const lz_weight *w) {
    const size_t n = (size_t)src->numel;
    size_t first = n;
    LZ_TRY(lz_first_nonfinite_device(&be->ctx, w->data, n, be->dtype, &first));
    if (first == n)
        return LZ_OK;
    const size_t src_es = lz_dtype_size(src->dtype);
    if (lz_first_nonfinite((const char *)src->data + first * src_es, src->dtype, 1) == 1) {
        float v = 0;
        lz_convert_to_f32(&v, (const char *)src->data + first * src_es, src->dtype, 1);
        return lz_fail(LZ_ERR_INPUT, "tensor '%s': element %zu (%g) is beyond the range of %s (--dtype)", src->name,
                       first, v, lz_dtype_name(be->dtype));
    }
    return lz_fail(LZ_ERR_INPUT, "tensor '%s': element %zu is a NaN or an infinity", src->name, first);
}

static lz_status upload_pieces(lz_backend *be, const lz_host_tensor *src, int64_t rows, int64_t cols,
                               lz_weight *out);

// Copies (converted on the host in pieces when the types differ), then checks on the device.
static lz_status cuda_upload_weight(lz_backend *be, const lz_host_tensor *src, int64_t rows, int64_t cols,
                                    lz_weight *out) {
    *out = (lz_weight){};
    lz_status s = upload_pieces(be, src, rows, cols, out);
    if (s == LZ_OK)
        s = check_uploaded(be, src, out);
    if (s != LZ_OK && out->data) {
        cuda_free(be, out->data); // (the error that matters is the one above)
        *out = (lz_weight){};
    }
    return s;
}

// Converts on the host in pieces of at most 16M elements, then copies.
static lz_status upload_pieces(lz_backend *be, const lz_host_tensor *src, int64_t rows, int64_t cols,
                               lz_weight *out) {
    if (rows * cols != src->numel)
        return lz_fail(LZ_ERR_INTERNAL, "tensor '%s': %lld elements viewed as [%lld, %lld]", src->name,
                       (long long)src->numel, (long long)rows, (long long)cols);
    *out = (lz_weight){NULL, be->dtype, rows, cols, true, 0};
    const size_t n = (size_t)src->numel, es = elem_size(be), piece = (size_t)1 << 24;
    LZ_TRY(cuda_alloc(be, n * es, &out->data));
    if (src->dtype == be->dtype) { // same type: straight from the mapping
        LZ_TRY(h2d(be, out->data, src->data, n * es));
        return LZ_OK;
    }
    LZ_TRY(grow_stage(be, piece * (sizeof(float) + es)));
    float *f32 = (float *)be->h_stage;
    uint16_t *b16 = (uint16_t *)(f32 + piece);
    const size_t src_es = lz_dtype_size(src->dtype);
    for (size_t i = 0; i < n; i += piece) {
        const size_t m = n - i < piece ? n - i : piece;
        lz_convert_to_f32(f32, (const char *)src->data + i * src_es, src->dtype, m);
        const void *host = f32;
        if (be->dtype == LZ_DTYPE_BF16) {
            for (size_t j = 0; j < m; j++)
                b16[j] = lz_f32_to_bf16(f32[j]);
            host = b16;
        }
        LZ_TRY(h2d(be, (char *)out->data + i * es, host, m * es));
    }
    return LZ_OK;
}

static lz_status cuda_join_weights(lz_backend *be, int count, lz_weight *const *ws) {
    return lz_join_weights(&be->ctx, count, ws, elem_size(be));
}

static void cuda_free_weight(lz_backend *be, lz_weight *w) {
    if (w->owned && w->data)
        cudaFree(w->data);
    *w = (lz_weight){};
}

static lz_status cuda_random_weight(lz_backend *be, int64_t rows, int64_t cols, float mean, float std, uint64_t seed,
                                    lz_weight *out) {
    *out = (lz_weight){NULL, be->dtype, rows, cols, true, 0};
    const size_t n = (size_t)(rows * cols);
    LZ_TRY(cuda_alloc(be, n * elem_size(be), &out->data));
    if (be->dtype == LZ_DTYPE_BF16)
        return random_fill<__nv_bfloat16>(&be->ctx, (__nv_bfloat16 *)out->data, n, mean, std, seed);
    return random_fill<float>(&be->ctx, (float *)out->data, n, mean, std, seed);
}

static lz_status cuda_measure_ceilings(lz_backend *be, double *copy_bps, double *gemm_flops) {
    if (be->dtype == LZ_DTYPE_BF16)
        return measure_ceilings<__nv_bfloat16>(&be->ctx, copy_bps, gemm_flops);
    return measure_ceilings<float>(&be->ctx, copy_bps, gemm_flops);
}

static lz_status cuda_memory_info(lz_backend *be, size_t *free_b, size_t *total) {
    LZ_CUDA_TRY(cudaMemGetInfo(free_b, total));
    return LZ_OK;
}

static lz_status act_to_host_impl(lz_backend *be, float *dst, const void *src, size_t n) {
    if (be->dtype == LZ_DTYPE_F32) {
        LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, be->ctx.stream));
        LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
        return LZ_OK;
    }
    LZ_TRY(grow_stage(be, n * sizeof(uint16_t)));
    LZ_CUDA_TRY(cudaMemcpyAsync(be->h_stage, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, be->ctx.stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    const uint16_t *h = (const uint16_t *)be->h_stage;
    for (size_t i = 0; i < n; i++)
        dst[i] = lz_bf16_to_f32(h[i]);
    return LZ_OK;
}

// Greedy ids of n rows: the argmax on the device, then n int32 to the host.
static lz_status argmax_impl(lz_backend *be, int32_t *ids, const void *x, int n, int C) {
    if (n <= 0)
        return LZ_OK;
    if (n > be->ids_cap) {
        LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
        if (be->d_ids)
            LZ_CUDA_TRY(cudaFree(be->d_ids));
        be->d_ids = NULL;
        be->ids_cap = 0;
        LZ_CUDA_TRY(cudaMalloc(&be->d_ids, sizeof(int32_t) * (size_t)n));
        be->ids_cap = n;
    }
    LZ_TRY(be->dtype == LZ_DTYPE_F32 ? argmax_rows_forward<float>(&be->ctx, be->d_ids, (const float *)x, n, C)
                                     : argmax_rows_forward<__nv_bfloat16>(&be->ctx, be->d_ids, (const __nv_bfloat16 *)x, n, C));
    LZ_TRY(grow_stage(be, sizeof(int32_t) * (size_t)n));
    LZ_CUDA_TRY(cudaMemcpyAsync(be->h_stage, be->d_ids, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost, be->ctx.stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    memcpy(ids, be->h_stage, sizeof(int32_t) * (size_t)n);
    return LZ_OK;
}

// Sampled ids of n rows: the parameters up (n x 32 bytes), the kernel, n int32 down.
static lz_status sample_impl(lz_backend *be, int32_t *ids, const void *x, int n, int C, const lz_sample_row *params) {
    if (n <= 0)
        return LZ_OK;
    if (C < 1 || C > LZ_SAMPLE_MAX_VOCAB)
        return lz_fail(LZ_ERR_INPUT, "sample_rows: a vocabulary of %d tokens (1 to %d)", C, LZ_SAMPLE_MAX_VOCAB);
    const size_t param_bytes = sizeof(lz_sample_dev) * (size_t)n, bytes = param_bytes + sizeof(int32_t) * (size_t)n;
    if (n > be->sample_cap) {
        LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
        if (be->d_sample)
            LZ_CUDA_TRY(cudaFree(be->d_sample));
        be->d_sample = NULL;
        be->sample_cap = 0;
        LZ_CUDA_TRY(cudaMalloc(&be->d_sample, bytes));
        be->sample_cap = n;
    }
    LZ_TRY(grow_stage(be, bytes)); // the previous user of the staging buffer has synchronised
    lz_sample_dev *h = (lz_sample_dev *)be->h_stage;
    for (int r = 0; r < n; r++)
        h[r] = lz_sample_dev_of(&params[r]);
    int32_t *d_ids = (int32_t *)(be->d_sample + n), *h_ids = (int32_t *)(h + n);
    LZ_CUDA_TRY(cudaMemcpyAsync(be->d_sample, h, param_bytes, cudaMemcpyHostToDevice, be->ctx.stream));
    LZ_TRY(be->dtype == LZ_DTYPE_F32
               ? sample_rows_forward<float>(&be->ctx, d_ids, (const float *)x, n, C, be->d_sample)
               : sample_rows_forward<__nv_bfloat16>(&be->ctx, d_ids, (const __nv_bfloat16 *)x, n, C, be->d_sample));
    LZ_CUDA_TRY(cudaMemcpyAsync(h_ids, d_ids, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost, be->ctx.stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    memcpy(ids, h_ids, sizeof(int32_t) * (size_t)n);
    return LZ_OK;
}

static lz_status cuda_act_from_host(lz_backend *be, void *dst, const float *src, size_t n) {
    if (be->dtype == LZ_DTYPE_F32) {
        return h2d(be, dst, src, n * sizeof(float));
    }
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream)); // h_stage may feed an earlier copy
    LZ_TRY(grow_stage(be, n * sizeof(uint16_t)));
    uint16_t *h = (uint16_t *)be->h_stage;
    for (size_t i = 0; i < n; i++)
        h[i] = lz_f32_to_bf16(src[i]);
    return h2d(be, dst, h, n * sizeof(uint16_t));
}

static lz_status cuda_upload_f32(lz_backend *be, float *dst, const float *src, size_t n) {
    return h2d(be, dst, src, n * sizeof(float));
}

static lz_status cuda_copy_to_host(lz_backend *be, void *dst, const void *src, size_t bytes) {
    LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, be->ctx.stream));
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    return LZ_OK;
}
static lz_status cuda_copy_from_host(lz_backend *be, void *dst, const void *src, size_t bytes) {
    return h2d(be, dst, src, bytes);
}

static lz_status cuda_copy_to_host_async(lz_backend *be, void *dst, const void *src, size_t bytes) {
    LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, be->ctx.stream));
    return LZ_OK;
}
static lz_status cuda_copy_from_host_async(lz_backend *be, void *dst, const void *src, size_t bytes) {
    LZ_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, be->ctx.stream));
    return LZ_OK;
}

// Pinned: device copies from and to it run at the bus rate (pageable memory
// goes through the driver's staging buffers at a fraction of it).
static lz_status cuda_host_alloc(lz_backend *be, size_t bytes, void **out) {
    *out = NULL;
    const char *why = lz_gpu_error_cleared(cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault));
    if (why) {
        *out = NULL;
        return lz_fail(LZ_ERR_NOMEM, "cuda device %d: cannot allocate %zu bytes of pinned host memory: %s",
                       be->device, bytes, why);
    }
    return LZ_OK;
}

static void cuda_host_free(lz_backend *be, void *p) {
    // no status to return from a free (nor a message to leave for a caller): said, rather than dropped
    const char *why = p ? lz_gpu_error(cudaFreeHost(p)) : NULL;
    if (why)
        fprintf(stderr, "lizard: cuda device %d: cudaFreeHost failed: %s\n", be->device, why);
}

static lz_status cuda_sync(lz_backend *be) {
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    return LZ_OK;
}

// The step's arrays ---------------------------------------------------------------

// Lays out every int32 array the kernels need in one pinned buffer and copies it once.
static lz_status begin_step_impl(lz_backend *be, const int32_t *ids, const lz_batch *b, const int32_t *rows,
                                 int n_rows) {
    const int S = b->n_seqs, T = b->n_tokens;
    int n_chunks = 0;
    for (int s = 0; s < S; s++)
        n_chunks += (b->len[s] + 63) / 64;
    const size_t need = 6 * (size_t)S + 3 * (size_t)T + (size_t)n_rows + 2 * (size_t)n_chunks;
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream)); // the previous step's copy is done with h_step
    if (need > be->step_cap) {
        if (be->h_step)
            LZ_CUDA_TRY(cudaFreeHost(be->h_step));
        if (be->d_step)
            LZ_CUDA_TRY(cudaFree(be->d_step));
        be->h_step = be->d_step = NULL;
        be->step_cap = 0;
        LZ_CUDA_TRY(cudaMallocHost(&be->h_step, need * 2 * sizeof(int32_t)));
        LZ_CUDA_TRY(cudaMalloc(&be->d_step, need * 2 * sizeof(int32_t)));
        be->step_cap = need * 2;
        be->ctx.buffers_moved = true;
    }
    int32_t *h = be->h_step, *d = be->d_step;
    size_t off = 0;
    auto put = [&](const int32_t *src, size_t n) -> const int32_t * {
        if (src)
            memcpy(h + off, src, n * sizeof(int32_t));
        const int32_t *dev = d + off;
        off += n;
        return dev;
    };
    lz_cuda_batch *cb = &be->batch;
    cb->slot = put(b->slot, S);
    cb->start = put(b->start, S);
    cb->len = put(b->len, S);
    cb->pos = put(b->pos, S);
    cb->token_pos = put(b->token_pos, T);
    cb->ids = put(ids, T);
    cb->rows = put(rows, n_rows);
    int32_t *token_seq = h + off, *chunk_row0, *chunk_len, *seq_chunk0, *seq_chunks;
    cb->token_seq = put(NULL, T);
    chunk_row0 = h + off;
    cb->chunk_row0 = put(NULL, n_chunks);
    chunk_len = h + off;
    cb->chunk_len = put(NULL, n_chunks);
    seq_chunk0 = h + off;
    cb->seq_chunk0 = put(NULL, S);
    seq_chunks = h + off;
    cb->seq_chunks = put(NULL, S);
    cb->n_chunks = n_chunks;
    cb->max_len = cb->max_end = 0;
    for (int s = 0, c = 0; s < S; s++) {
        seq_chunk0[s] = c;
        seq_chunks[s] = 0;
        for (int r = 0; r < b->len[s]; r += 64, c++, seq_chunks[s]++) {
            chunk_row0[c] = b->start[s] + r;
            chunk_len[c] = b->len[s] - r < 64 ? b->len[s] - r : 64;
        }
        for (int i = 0; i < b->len[s]; i++)
            token_seq[b->start[s] + i] = s;
        cb->max_len = b->len[s] > cb->max_len ? b->len[s] : cb->max_len;
        cb->max_end = b->pos[s] + b->len[s] > cb->max_end ? b->pos[s] + b->len[s] : cb->max_end;
    }
    LZ_CUDA_TRY(cudaMemcpyAsync(d, h, off * sizeof(int32_t), cudaMemcpyHostToDevice, be->ctx.stream));
    return LZ_OK;
}

// Profiling -----------------------------------------------------------------------

static double wall_now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Runs call(); with profiling on, syncs around it and books the time under `name`.
template <typename Call> static lz_status profiled(lz_backend *be, const char *name, Call call) {
    if (!be->prof.on)
        return call();
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    const double t0 = wall_now();
    lz_status s = call();
    LZ_CUDA_TRY(cudaStreamSynchronize(be->ctx.stream));
    int i = 0;
    while (i < LZ_PROFILE_OPS - 1 && be->prof.name[i] && strcmp(be->prof.name[i], name) != 0)
        i++;
    be->prof.name[i] = name;
    be->prof.seconds[i] += wall_now() - t0;
    be->prof.calls[i]++;
    return s;
}

static void print_profile(const lz_profile *p) {
    double total = 0;
    for (int i = 0; i < LZ_PROFILE_OPS && p->name[i]; i++)
        total += p->seconds[i];
    fprintf(stderr, "lizard profile (cuda): %.3f s in ops\n", total);
    for (int i = 0; i < LZ_PROFILE_OPS && p->name[i]; i++)
        fprintf(stderr, "  %-18s %9ld calls %10.3f ms %5.1f%%\n", p->name[i], p->calls[i], 1e3 * p->seconds[i],
                100.0 * p->seconds[i] / (total > 0 ? total : 1));
}

static lz_status cuda_begin_step(lz_backend *be, const int32_t *ids, const lz_batch *b, const int32_t *rows,
                                 int n_rows) {
    return profiled(be, "begin_step", [&] { return begin_step_impl(be, ids, b, rows, n_rows); });
}

static lz_status cuda_argmax_rows(lz_backend *be, int32_t *ids, const void *x, int n, int C) {
    return profiled(be, "argmax_rows", [&] { return argmax_impl(be, ids, x, n, C); });
}

static lz_status cuda_sample_rows(lz_backend *be, int32_t *ids, const void *x, int n, int C,
                                  const lz_sample_row *params) {
    return profiled(be, "sample_rows", [&] { return sample_impl(be, ids, x, n, C, params); });
}

static lz_status cuda_act_to_host(lz_backend *be, float *dst, const void *src, size_t n) {
    return profiled(be, "act_to_host", [&] { return act_to_host_impl(be, dst, src, n); });
}

// Graphs --------------------------------------------------------------------------

static void cuda_graph_reset(lz_backend *be) {
    lz_graph_cache *g = &be->graphs;
    for (int i = 0; i < LZ_GRAPHS; i++) {
        if (g->exec[i])
            cudaGraphExecDestroy(g->exec[i]);
        g->exec[i] = NULL;
        g->seen[i] = false;
        g->sig[i] = 0;
    }
}

static lz_status cuda_graph_begin(lz_backend *be, uint64_t sig, bool *run_ops) {
    lz_graph_cache *g = &be->graphs;
    *run_ops = true;
    g->mode = 0;
    if (g->off)
        return LZ_OK;
    if (be->ctx.buffers_moved) {
        cuda_graph_reset(be);
        be->ctx.buffers_moved = false;
    }
    int i = 0;
    while (i < LZ_GRAPHS && !(g->seen[i] && g->sig[i] == sig))
        i++;
    if (i == LZ_GRAPHS) { // first sight: run eagerly, record next time
        i = g->next;
        g->next = (g->next + 1) % LZ_GRAPHS;
        if (g->exec[i])
            cudaGraphExecDestroy(g->exec[i]);
        g->exec[i] = NULL;
        g->sig[i] = sig;
        g->seen[i] = true;
        return LZ_OK;
    }
    g->current = i;
    if (g->exec[i]) {
        g->mode = 2;
        *run_ops = false;
        return LZ_OK;
    }
    LZ_CUDA_TRY(cudaStreamBeginCapture(be->ctx.stream, cudaStreamCaptureModeThreadLocal));
    g->mode = 1;
    return LZ_OK;
}

static lz_status end_capture(lz_backend *be, cudaGraph_t *graph) {
    LZ_CUDA_TRY(cudaStreamEndCapture(be->ctx.stream, graph));
    return LZ_OK;
}
static lz_status instantiate(cudaGraphExec_t *exec, cudaGraph_t graph) {
    LZ_CUDA_TRY(cudaGraphInstantiate(exec, graph, 0));
    return LZ_OK;
}

static lz_status cuda_graph_end(lz_backend *be, bool ok) {
    lz_graph_cache *g = &be->graphs;
    const int mode = g->mode, i = g->current;
    g->mode = 0;
    if (mode == 1) {
        cudaGraph_t graph = NULL;
        const lz_status ended = end_capture(be, &graph); // ended whatever happened, or the stream stays captured
        if (!ok || ended != LZ_OK) {
            if (graph)
                cudaGraphDestroy(graph);
            g->seen[i] = false;
            return ok ? ended : LZ_OK; // (!ok: the caller reports the op's own error)
        }
        const lz_status made = instantiate(&g->exec[i], graph);
        cudaGraphDestroy(graph);
        LZ_TRY(made);
    }
    if (mode != 0 && ok)
        LZ_CUDA_TRY(cudaGraphLaunch(g->exec[i], be->ctx.stream));
    return LZ_OK;
}

// Pipeline transfers ----------------------------------------------------------------

static lz_status cuda_p2p_id(lz_backend *be, void *id, size_t *len) { return lz_nccl_id(id, len); }
static lz_status cuda_p2p_init(lz_backend *be, const void *id, size_t len, int rank, int n_ranks) {
    return lz_nccl_init(&be->ctx, &be->nccl, id, len, rank, n_ranks);
}
static lz_status cuda_p2p_send(lz_backend *be, const void *buf, size_t bytes, int peer) {
    return profiled(be, "p2p_send", [&] { return lz_nccl_send(&be->ctx, be->nccl, buf, bytes, peer); });
}
static lz_status cuda_p2p_recv(lz_backend *be, void *buf, size_t bytes, int peer) {
    return profiled(be, "p2p_recv", [&] { return lz_nccl_recv(&be->ctx, be->nccl, buf, bytes, peer); });
}

// The GEMV's segments for linear layers of one input (count <= LZ_GEMV_MAX_SEGMENTS).
template <typename T>
static lz_gemv_segments<T> gemv_segments_of(int count, void *const *outs, const lz_weight *const *ws,
                                            const lz_weight *const *biases) {
    lz_gemv_segments<T> seg = {};
    seg.count = count;
    for (int i = 0; i < count; i++) {
        const lz_weight *b = biases ? biases[i] : NULL;
        seg.out[i] = (T *)outs[i], seg.w[i] = (const T *)ws[i]->data, seg.m[i] = (int)ws[i]->rows;
        seg.bias[i] = b && b->data ? (const T *)b->data : NULL;
    }
    return seg;
}

// A bf16 layer as linear_stream.cu's segment (outputs out; no bias where b is absent or empty).
static lz_stream_segment stream_segment(void *out, const lz_weight *w, const lz_weight *b) {
    return {(__nv_bfloat16 *)out, (const __nv_bfloat16 *)w->data, b && b->data ? (const __nv_bfloat16 *)b->data : NULL,
            (int)w->rows};
}

// Linear layers of one input: one GEMV launch for one-token steps (gemv.cu), one streamed launch for
// bf16 steps of 2 to LIZARD_STREAM_TOKENS tokens (linear_stream.cu), else one cuBLAS product for the
// layers joined at load (linear_joined.cu) and one for each of the rest.
template <typename T>
static lz_status linear_many_forward(lz_cuda_ctx *c, int count, void *const *outs, const T *x,
                                     const lz_weight *const *ws, const lz_weight *const *biases, int n) {
    bool together = lz_gemv_takes_step(c, n) && count <= LZ_GEMV_MAX_SEGMENTS;
    if constexpr (sizeof(T) == 2) { // decode steps of a few tokens: one launch streams all of them
        lz_stream_segment seg[LZ_STREAM_MAX_SEGMENTS];
        bool stream = !together && count <= LZ_STREAM_MAX_SEGMENTS;
        for (int i = 0; i < count && stream; i++) {
            seg[i] = stream_segment(outs[i], ws[i], biases ? biases[i] : NULL);
            stream = ws[i]->cols == ws[0]->cols;
        }
        if (stream && linear_stream_takes(c, count, seg, x, n, (int)ws[0]->cols, LZ_STREAM_STORE))
            return linear_stream_forward(c, count, seg, x, n, (int)ws[0]->cols, LZ_STREAM_STORE);
    }
    for (int i = 0; i < count; i++)
        together &= ws[i]->cols == ws[0]->cols && ws[i]->cols % (16 / sizeof(T)) == 0;
    if (!together) {
        // the first layers as one product where their weights were joined at load (linear_joined.cu: q, k,
        // v and a Lizard layer's gate); the rest (layers not joined) after it on the main stream
        const int run = linear_joined_run<T>(c, count, outs, ws, biases, n);
        if (run >= 2) {
            LZ_TRY(linear_joined_forward<T>(c, run, outs, x, ws, n));
            return run == count ? LZ_OK
                                : linear_many_forward<T>(c, count - run, outs + run, x, ws + run,
                                                         biases ? biases + run : NULL, n);
        }
        auto one = [&](int i) {
            const lz_weight *b = biases ? biases[i] : NULL;
            return linear_forward<T>(c, (T *)outs[i], x, (const T *)ws[i]->data, b && b->data ? (const T *)b->data : NULL,
                                     n, (int)ws[i]->cols, (int)ws[i]->rows);
        };
        // side by side: q, k, v and the gate (3 or 4 layers), or the MLP's gate and up (2)
        const int sides = count - 1 < LZ_SIDE_STREAMS ? count - 1 : LZ_SIDE_STREAMS;
        if (sides < 1 || n > c->fork_tokens) {
            for (int i = 0; i < count; i++)
                LZ_TRY(one(i));
            return LZ_OK;
        }
        LZ_TRY(lz_cuda_fork(c, sides));
        lz_status s = one(0); // the first (q, the largest) on the main stream, launched first
        for (int i = 1; i < count && s == LZ_OK; i++) {
            lz_on_side side(c, (i - 1) % sides);
            s = one(i);
        }
        const lz_status j = lz_cuda_join(c, sides); // joined even after a failure: a recording must end
        return s != LZ_OK ? s : j;
    }
    lz_gemv_segments<T> seg = gemv_segments_of<T>(count, outs, ws, biases);
    return gemv_segments_forward<T>(c, seg, x, n, (int)ws[0]->cols);
}

// The fused ops (ops.h): one fused launch for decode-sized steps, the composition otherwise.
template <typename T> static bool gemv_takes(const lz_cuda_ctx *c, const lz_weight *w, int n) {
    return lz_gemv_takes_step(c, n) && w->cols % (16 / (int64_t)sizeof(T)) == 0;
}
// The fused GEMV takes steps of up to ctx->fuse_tokens tokens (LIZARD_FUSE_TOKENS).
template <typename T> static bool fused_gemv_takes(const lz_cuda_ctx *c, const lz_weight *w, int n) {
    return gemv_takes<T>(c, w, n) && n <= c->fuse_tokens;
}

// The RMSNorm, then the gate/up products with SwiGLU folded in.
template <typename T>
static lz_status norm_swiglu_forward(lz_cuda_ctx *c, T *out, T *xn, T *up, const T *x, const lz_weight *norm, float eps,
                                     const lz_weight *wg, const lz_weight *bg, const lz_weight *wu,
                                     const lz_weight *bu, int n) {
    if (!(fused_gemv_takes<T>(c, wg, n) && wg->rows == wu->rows && wg->cols == wu->cols && norm->cols == wg->cols)) {
        void *outs[2] = {out, up}; // the plain ops' composition, as the stage would compose it
        const lz_weight *w[2] = {wg, wu}, *b[2] = {bg, bu};
        LZ_TRY(rmsnorm_forward<T>(c, xn, x, (const T *)norm->data, n, (int)norm->cols, eps));
        if constexpr (sizeof(T) == 2) { // a few tokens: gate and up streamed, SwiGLU in the same launch
            const lz_stream_segment seg[2] = {stream_segment(out, wg, bg), stream_segment(up, wu, bu)};
            if (wg->cols == wu->cols && linear_stream_takes(c, 2, seg, xn, n, (int)wg->cols, LZ_STREAM_SWIGLU))
                return linear_stream_forward(c, 2, seg, xn, n, (int)wg->cols, LZ_STREAM_SWIGLU);
        }
        if (swiglu_joined_takes<T>(c, out, wg, bg, wu, bu, n)) // gate and up as one product
            return swiglu_joined_forward<T>(c, out, xn, wg, n);
        LZ_TRY(linear_many_forward<T>(c, 2, outs, xn, w, b, n));
        return swiglu_forward<T>(c, out, out, up, (size_t)n * (size_t)wg->rows);
    }
    lz_gemv_segments<T> seg = {};
    seg.count = 2;
    seg.out[0] = seg.out[1] = out;
    seg.w[0] = (const T *)wg->data, seg.w[1] = (const T *)wu->data;
    seg.m[0] = seg.m[1] = (int)wg->rows;
    seg.bias[0] = bg && bg->data ? (const T *)bg->data : NULL;
    seg.bias[1] = bu && bu->data ? (const T *)bu->data : NULL;
    LZ_TRY(rmsnorm_forward<T>(c, xn, x, (const T *)norm->data, n, (int)norm->cols, eps));
    return gemv_fused_forward<T>(c, seg, xn, LZ_GEMV_SWIGLU, n, (int)wg->cols);
}

// y += x . W^T (+ bias). Decode-sized: the fused GEMV epilogue (steps of up to fuse_tokens) or the
// GEMV then the add; prompt-sized: one GEMM accumulating into y.
template <typename T>
static lz_status linear_residual_forward(lz_cuda_ctx *c, T *y, T *tmp, const T *x, const lz_weight *w,
                                         const lz_weight *bias, int n) {
    const T *b = bias && bias->data ? (const T *)bias->data : NULL;
    const bool gemv = gemv_takes<T>(c, w, n);
    if (!gemv && !b)
        return linear_accumulate_forward<T>(c, y, x, (const T *)w->data, n, (int)w->cols, (int)w->rows);
    if (!fused_gemv_takes<T>(c, w, n)) {
        LZ_TRY(linear_forward<T>(c, tmp, x, (const T *)w->data, b, n, (int)w->cols, (int)w->rows));
        return add_forward<T>(c, y, tmp, (size_t)n * (size_t)w->rows);
    }
    lz_gemv_segments<T> seg = {};
    seg.count = 1;
    seg.out[0] = y, seg.w[0] = (const T *)w->data, seg.bias[0] = b, seg.m[0] = (int)w->rows;
    return gemv_fused_forward<T>(c, seg, x, LZ_GEMV_RESIDUAL, n, (int)w->cols);
}

// q, k, v then RoPE on q and k. One-token steps: the GEMV's RoPE epilogue (the rope launch goes);
// otherwise the composition.
template <typename T>
static lz_status linear_many_rope_forward(lz_cuda_ctx *c, int count, void *const *outs, const T *x,
                                          const lz_weight *const *ws, const lz_weight *const *biases, int n,
                                          const float *inv_freq, const lz_cuda_batch *b, const lz_attn_dims *d) {
    const int hd = d->head_dim;
    bool fused = count == 3 && ws[0]->rows == (int64_t)d->n_heads * hd && ws[1]->rows == (int64_t)d->n_kv_heads * hd;
    int64_t total = 0;
    for (int i = 0; i < count && fused; i++) {
        fused = fused_gemv_takes<T>(c, ws[i], n) && ws[i]->cols == ws[0]->cols;
        total += ws[i]->rows;
    }
    if (!fused || total > INT_MAX ||
        !lz_gemv_rope_fits(n, (int)ws[0]->rows, (int)ws[1]->rows, (int)total, hd)) {
        LZ_TRY(linear_many_forward<T>(c, count, outs, x, ws, biases, n));
        return rope_forward<T>(c, (T *)outs[0], (T *)outs[1], inv_freq, b, n, d);
    }
    lz_gemv_segments<T> seg = gemv_segments_of<T>(count, outs, ws, biases);
    seg.rope_freq = inv_freq, seg.rope_pos = b->token_pos, seg.rope_half = hd / 2;
    return gemv_fused_forward<T>(c, seg, x, LZ_GEMV_ROPE, n, (int)ws[0]->cols);
}

// Many sequences: the feature maps then the state streamed (two launches); few: gates, feature maps
// and the recurrent update in one cluster launch where the shape allows; else the four ops with the
// intermediates in scratch.
template <typename T>
static lz_status gla_decode_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *gate_logit,
                                    const lz_weight *fq, const lz_weight *fk, bool exp_map, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *d) {
    if (hb->n_seqs >= c->gla_stream_min && hb->n_tokens == hb->n_seqs && gla_decode_stream_fits<T>(c, d))
        return gla_decode_stream_forward<T>(c, out, q, k, v, gate_logit, (const T *)fq->data, (int)fq->rows,
                                            (const T *)fk->data, (int)fk->rows, exp_map, st, b, hb, d);
    if (gla_decode_split_fits<T>(c, d, true) && hb->n_seqs <= LZ_GLA_SPLIT_MAX_SEQS)
        return gla_decode_fused_forward<T>(c, out, q, k, v, gate_logit, (const T *)fq->data, (int)fq->rows,
                                           (const T *)fk->data, (int)fk->rows, exp_map, st, b, hb, d);
    const int n = hb->n_tokens, F = 2 * d->feature_dim;
    const size_t nq = (size_t)n * d->n_heads * F, nk = (size_t)n * d->n_state_heads * F;
    LZ_TRY(lz_cuda_scratch(c, sizeof(T) * (nq + nk + (size_t)n)));
    T *phi_q = (T *)c->scratch, *phi_k = phi_q + nq, *lg = phi_k + nk;
    LZ_TRY(log_sigmoid_forward<T>(c, lg, gate_logit, n));
    LZ_TRY(feature_map_forward<T>(c, phi_q, q, (const T *)fq->data, (int)fq->rows, n, d->n_heads, d->n_heads,
                                  d->head_dim, d->feature_dim, exp_map));
    LZ_TRY(feature_map_forward<T>(c, phi_k, k, (const T *)fk->data, (int)fk->rows, n, d->n_kv_heads,
                                  d->n_state_heads, d->head_dim, d->feature_dim, exp_map));
    return gla_recurrent_forward<T>(c, out, phi_q, phi_k, v, lg, st, b, hb, d);
}

// Op adapters -------------------------------------------------------------------

template <typename T> struct cuda_ops {
    static lz_status embedding(lz_backend *be, void *out, const lz_weight *t, const int32_t *ids, int n) {
        return profiled(be, "embedding", [&] { return embedding_forward<T>(&be->ctx, (T *)out, (const T *)t->data, be->batch.ids, n, (int)t->cols); });
    }
    static lz_status rmsnorm(lz_backend *be, void *out, const void *x, const lz_weight *w, int n, float eps) {
        return profiled(be, "rmsnorm", [&] { return rmsnorm_forward<T>(&be->ctx, (T *)out, (const T *)x, (const T *)w->data, n, (int)w->cols, eps); });
    }
    static lz_status linear(lz_backend *be, void *out, const void *x, const lz_weight *w, const lz_weight *b, int n) {
        return profiled(be, "linear", [&] { return linear_forward<T>(&be->ctx, (T *)out, (const T *)x, (const T *)w->data,
                                 b && b->data ? (const T *)b->data : NULL, n, (int)w->cols, (int)w->rows); });
    }
    static lz_status linear_many(lz_backend *be, int count, void *const *outs, const void *x,
                                 const lz_weight *const *ws, const lz_weight *const *biases, int n) {
        return profiled(be, "linear", [&] { return linear_many_forward<T>(&be->ctx, count, outs, (const T *)x, ws, biases, n); });
    }
    static lz_status norm_swiglu(lz_backend *be, void *out, void *xn, void *up, const void *x, const lz_weight *norm,
                                 float eps, const lz_weight *wg, const lz_weight *bg, const lz_weight *wu,
                                 const lz_weight *bu, int n) {
        return profiled(be, "norm_swiglu", [&] { return norm_swiglu_forward<T>(&be->ctx, (T *)out, (T *)xn, (T *)up, (const T *)x, norm, eps, wg, bg, wu, bu, n); });
    }
    static lz_status linear_residual(lz_backend *be, void *y, void *tmp, const void *x, const lz_weight *w,
                                     const lz_weight *bias, int n) {
        return profiled(be, "linear_residual", [&] { return linear_residual_forward<T>(&be->ctx, (T *)y, (T *)tmp, (const T *)x, w, bias, n); });
    }
    static lz_status linear_many_rope(lz_backend *be, int count, void *const *outs, const void *x,
                                      const lz_weight *const *ws, const lz_weight *const *biases, int n,
                                      const float *inv_freq, const lz_batch *b, const lz_attn_dims *d) {
        return profiled(be, "linear_rope", [&] { return linear_many_rope_forward<T>(&be->ctx, count, outs, (const T *)x, ws, biases, n,
                                               inv_freq, &be->batch, d); });
    }
    static lz_status gla_decode(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                                const void *gate_logit, const lz_weight *fq, const lz_weight *fk, bool exp_map,
                                lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
        return profiled(be, "gla_decode", [&] { return gla_decode_forward<T>(&be->ctx, (T *)out, (const T *)q, (const T *)k, (const T *)v, (const T *)gate_logit,
                                     fq, fk, exp_map, st, &be->batch, b, d); });
    }
    static lz_status add(lz_backend *be, void *y, const void *x, size_t n) {
        return profiled(be, "add", [&] { return add_forward<T>(&be->ctx, (T *)y, (const T *)x, n); });
    }
    static lz_status swiglu(lz_backend *be, void *out, const void *g, const void *u, size_t n) {
        return profiled(be, "swiglu", [&] { return swiglu_forward<T>(&be->ctx, (T *)out, (const T *)g, (const T *)u, n); });
    }
    static lz_status gather(lz_backend *be, void *out, const void *x, const int32_t *rows, int n, int C) {
        return profiled(be, "gather_rows", [&] { return gather_rows_forward<T>(&be->ctx, (T *)out, (const T *)x, be->batch.rows, n, C); });
    }
    static lz_status rope(lz_backend *be, void *q, void *k, const float *inv_freq, const lz_batch *b,
                          const lz_attn_dims *d) {
        return profiled(be, "rope", [&] { return rope_forward<T>(&be->ctx, (T *)q, (T *)k, inv_freq, &be->batch, b->n_tokens, d); });
    }
    static lz_status softmax_attention(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                                       lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
        return profiled(be, "softmax_attention", [&] { return softmax_attention_forward<T>(&be->ctx, (T *)out, (const T *)q, (const T *)k, (const T *)v, st,
                                            &be->batch, b, d); });
    }
    static lz_status feature_map(lz_backend *be, void *out, const void *x, const lz_weight *w, int n, int Hx, int Hout,
                                 int d, int f, bool exp_map) {
        return profiled(be, "feature_map", [&] { return feature_map_forward<T>(&be->ctx, (T *)out, (const T *)x, (const T *)w->data, (int)w->rows, n, Hx, Hout,
                                      d, f, exp_map); });
    }
    static lz_status log_sigmoid(lz_backend *be, void *out, const void *x, int n) {
        return profiled(be, "log_sigmoid", [&] { return log_sigmoid_forward<T>(&be->ctx, (T *)out, (const T *)x, n); });
    }
    static lz_status gla_chunked(lz_backend *be, void *out, const void *pq, const void *pk, const void *v,
                                 const void *lg, lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
        return profiled(be, "gla_chunked", [&] { return gla_chunked_forward<T>(&be->ctx, (T *)out, (const T *)pq, (const T *)pk, (const T *)v, (const T *)lg, st,
                                      &be->batch, b, d); });
    }
    static lz_status gla_recurrent(lz_backend *be, void *out, const void *pq, const void *pk, const void *v,
                                   const void *lg, lz_layer_state *st, const lz_batch *b, const lz_attn_dims *d) {
        return profiled(be, "gla_recurrent", [&] { return gla_recurrent_forward<T>(&be->ctx, (T *)out, (const T *)pq, (const T *)pk, (const T *)v, (const T *)lg,
                                        st, &be->batch, b, d); });
    }
    static lz_status window(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                            const lz_weight *meta, float alpha, lz_layer_state *st, const lz_batch *b,
                            const lz_attn_dims *d) {
        return profiled(be, "window_attention", [&] { return window_attention_forward<T>(&be->ctx, (T *)out, (const T *)q, (const T *)k, (const T *)v,
                                           (const T *)meta->data, alpha, st, &be->batch, b, d); });
    }
};

static void cuda_destroy(lz_backend *be);

// The fused decode ops (the stages compose the others from the plain ops): the GLA decode, the
// residual adds folded into o_proj's and down_proj's GEMVs, SwiGLU into the gate/up GEMV (its RMSNorm
// a launch of its own) and a softmax layer's RoPE into its q/k/v GEMV (docs/benchmarks.md has the
// measurements that chose them).
template <typename T> static lz_ops make_ops(const char *name) {
    lz_ops o = {};
    o.name = name;
    o.act_size = sizeof(T);
    o.backward = lz_cuda_backward_ops();
    o.alloc = cuda_alloc;
    o.free = cuda_free;
    o.zero = cuda_zero;
    o.upload_weight = cuda_upload_weight;
    o.free_weight = cuda_free_weight;
    o.join_weights = cuda_join_weights;
    o.random_weight = cuda_random_weight;
    o.measure_ceilings = cuda_measure_ceilings;
    o.memory_info = cuda_memory_info;
    o.act_to_host = cuda_act_to_host;
    o.act_from_host = cuda_act_from_host;
    o.upload_f32 = cuda_upload_f32;
    o.copy_to_host = cuda_copy_to_host;
    o.copy_from_host = cuda_copy_from_host;
    o.copy_to_host_async = cuda_copy_to_host_async;
    o.copy_from_host_async = cuda_copy_from_host_async;
    o.host_alloc = cuda_host_alloc;
    o.host_free = cuda_host_free;
    o.sync = cuda_sync;
    o.destroy = cuda_destroy;
    o.begin_step = cuda_begin_step;
    o.graph_begin = cuda_graph_begin;
    o.graph_end = cuda_graph_end;
    o.graph_reset = cuda_graph_reset;
    o.p2p_id = cuda_p2p_id;
    o.p2p_init = cuda_p2p_init;
    o.p2p_send = cuda_p2p_send;
    o.p2p_recv = cuda_p2p_recv;
    o.embedding = cuda_ops<T>::embedding;
    o.rmsnorm = cuda_ops<T>::rmsnorm;
    o.linear = cuda_ops<T>::linear;
    o.linear_many = cuda_ops<T>::linear_many;
    o.add = cuda_ops<T>::add;
    o.swiglu = cuda_ops<T>::swiglu;
    o.gather_rows = cuda_ops<T>::gather;
    o.argmax_rows = cuda_argmax_rows;
    o.sample_rows = cuda_sample_rows;
    o.rope = cuda_ops<T>::rope;
    o.softmax_attention = cuda_ops<T>::softmax_attention;
    o.feature_map = cuda_ops<T>::feature_map;
    o.log_sigmoid = cuda_ops<T>::log_sigmoid;
    o.gla_chunked = cuda_ops<T>::gla_chunked;
    o.gla_recurrent = cuda_ops<T>::gla_recurrent;
    o.window_attention = cuda_ops<T>::window;
    o.gla_decode = cuda_ops<T>::gla_decode;
    o.norm_swiglu = cuda_ops<T>::norm_swiglu;
    o.linear_residual = cuda_ops<T>::linear_residual;
    o.linear_many_rope = cuda_ops<T>::linear_many_rope;
    return o;
}

static const lz_ops cuda_ops_table[2] = {make_ops<float>("cuda-fp32"), make_ops<__nv_bfloat16>("cuda-bf16")}; // [bf16?]

// Creation ------------------------------------------------------------------------

static void cuda_destroy(lz_backend *be) {
    if (!be)
        return;
    if (be->prof.on)
        print_profile(&be->prof);
    if (lz_trace_close() != LZ_OK) // (a destructor: the trace is lost, nothing else)
        fprintf(stderr, "lizard: %s\n", lz_error_message());
    cuda_graph_reset(be);
    lz_nccl_free(be->nccl);
    lz_cuda_side_destroy(&be->ctx);
    lz_joined_destroy(&be->ctx);
    if (be->cublas_workspace)
        cudaFree(be->cublas_workspace);
    cudaStreamSynchronize(be->ctx.stream);
    if (be->ctx.cublas)
        cublasDestroy(be->ctx.cublas);
    if (be->ctx.scratch)
        cudaFree(be->ctx.scratch);
    if (be->ctx.attn_count)
        cudaFree(be->ctx.attn_count);
    if (be->h_step)
        cudaFreeHost(be->h_step);
    if (be->d_step)
        cudaFree(be->d_step);
    if (be->h_stage)
        cudaFreeHost(be->h_stage);
    if (be->d_ids)
        cudaFree(be->d_ids);
    if (be->d_sample)
        cudaFree(be->d_sample);
    if (be->ctx.stream)
        cudaStreamDestroy(be->ctx.stream);
    free(be);
}

static lz_status init_device(lz_backend *be, const lz_cuda_knobs *k) {
    int count = 0;
    const char *why = lz_gpu_error_cleared(cudaGetDeviceCount(&count)); // a machine without a GPU: bad input
    if (why || count == 0)
        return lz_fail(LZ_ERR_INPUT, "--device cuda: no CUDA device available (%s)", why ? why : "0 devices");
    be->device = lz_knobs_get()->local_rank % count;
    LZ_CUDA_TRY(cudaSetDevice(be->device));
    cudaDeviceProp prop;
    LZ_CUDA_TRY(cudaGetDeviceProperties(&prop, be->device));
    be->ctx.n_sms = prop.multiProcessorCount;
    be->ctx.max_smem = prop.sharedMemPerBlockOptin;
    be->ctx.l2_bytes = (size_t)prop.l2CacheSize;
    be->ctx.sm_smem = prop.sharedMemPerMultiprocessor;
    be->ctx.wgmma = be->ctx.wgmma && prop.major == 9 && prop.minor == 0; // sm_90a code runs on 9.0 only
    LZ_CUDA_TRY(cudaStreamCreateWithFlags(&be->ctx.stream, cudaStreamNonBlocking));
    LZ_CUDA_TRY(cublasCreate(&be->ctx.cublas));
    LZ_CUDA_TRY(cublasSetStream(be->ctx.cublas, be->ctx.stream));
    // a workspace of our own: cuBLAS must not allocate while a decode step is recorded
    const size_t ws_bytes = (size_t)32 << 20;
    LZ_CUDA_TRY(cudaMalloc(&be->cublas_workspace, ws_bytes));
    LZ_CUDA_TRY(cublasSetWorkspace(be->ctx.cublas, be->cublas_workspace, ws_bytes));
    // fp32 runs are exactness checks: no TF32 shortcuts
    const cublasMath_t math = be->dtype == LZ_DTYPE_F32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
    LZ_CUDA_TRY(cublasSetMathMode(be->ctx.cublas, math));
    LZ_TRY(lz_cuda_side_create(&be->ctx, ws_bytes, math));
    LZ_TRY(lz_trace_open(k->trace, k->trace_us));
    if (be->dtype == LZ_DTYPE_BF16) {
        LZ_TRY(gla_init<__nv_bfloat16>(&be->ctx));
        LZ_TRY(gla_decode_init<__nv_bfloat16>(&be->ctx));
        LZ_TRY(attention_init<__nv_bfloat16>(&be->ctx));
        LZ_TRY(window_init<__nv_bfloat16>(&be->ctx));
        LZ_TRY(lz_gla_tc_init(&be->ctx));
        LZ_TRY(lz_attention_tc_init(&be->ctx));
        LZ_TRY(lz_feature_map_tc_init(&be->ctx));
        LZ_TRY(lz_attention_flash_init(&be->ctx));
        LZ_TRY(lz_attention_wgmma_init(&be->ctx));
    } else {
        LZ_TRY(gla_init<float>(&be->ctx));
        LZ_TRY(gla_decode_init<float>(&be->ctx));
        LZ_TRY(attention_init<float>(&be->ctx));
        LZ_TRY(window_init<float>(&be->ctx));
    }
    return LZ_OK;
}

// The context's kernel knobs (cuda_knobs.h, docs/knobs.md), read once when the backend is created.
static void take_knobs(lz_cuda_ctx *c, const lz_cuda_knobs *k) {
    c->wgmma = lz_wgmma_built() && k->wgmma; // and a 9.0 device (init_device)
    c->gemv_tokens = k->gemv_tokens;
    c->fuse_tokens = k->fuse_tokens;
    c->window_split_min = k->window_split_min;
    c->gla_ring_blocks = k->gla_ring_blocks;
    c->window_ring_min = k->window_ring;
    c->window_ring_blocks = k->window_ring_blocks;
    c->gla_stream_min = k->gla_stream_min;
    c->gla_spread_max = k->gla_spread;
    c->fork_tokens = k->fork_tokens;
    c->stream_tokens = k->stream_tokens;
    c->stream_split = k->stream_split;
    c->join_tokens = k->join_tokens;
    c->decode_attn = k->decode_attn;
}

extern "C" lz_status lz_cuda_backend_create(lz_dtype dtype, lz_backend **out, const lz_ops **ops) {
    if (dtype != LZ_DTYPE_BF16 && dtype != LZ_DTYPE_F32)
        return lz_fail(LZ_ERR_INPUT, "--dtype: the CUDA backend runs bf16 or fp32");
    lz_backend *be = (lz_backend *)calloc(1, sizeof(lz_backend));
    if (!be)
        return lz_fail(LZ_ERR_NOMEM, "cuda backend: out of memory");
    be->dtype = dtype;
    lz_cuda_knobs ck = {};
    lz_status ks = lz_knobs_status();
    if (ks == LZ_OK)
        ks = lz_cuda_knobs_read(&ck);
    if (ks != LZ_OK) {
        free(be);
        return ks;
    }
    const lz_knobs *k = lz_knobs_get();
    be->prof.on = k->profile;
    take_knobs(&be->ctx, &ck);
    be->graphs.off = k->profile || k->no_graphs;
    lz_status s = init_device(be, &ck);
    if (s != LZ_OK) {
        cuda_destroy(be);
        return s;
    }
    *out = be;
    *ops = &cuda_ops_table[dtype == LZ_DTYPE_BF16];
    return LZ_OK;
}
