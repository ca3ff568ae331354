// cuda_kernels.cuh - the launchers of the CUDA kernels, one per op, each a
// template over the activation type T (float or __nv_bfloat16), instantiated
// for both in its own .cu file. Same names and shapes as kernels/cpu.
#ifndef LZ_CUDA_KERNELS_CUH
#define LZ_CUDA_KERNELS_CUH

#include "cuda_common.cuh" // lz_cuda_batch, checks

enum { LZ_SIDE_STREAMS = 3 };

struct lz_cuda_ctx {
    cudaStream_t stream;
    cublasHandle_t cublas;
    int n_sms;
    size_t max_smem;       // opt-in shared memory per block
    size_t sm_smem;        // shared memory per SM
    void *scratch;         // device scratch for multi-pass kernels
    size_t scratch_bytes;
    bool buffers_moved;    // scratch or step arrays reallocated: recorded graphs are stale
    int gemv_tokens;       // LIZARD_GEMV_TOKENS: the largest step the decode GEMV takes (the rest: cuBLAS)
    bool hbm_idle_next;    // the kernel just launched barely reads HBM: the next one-token residual GEMV prefetches
    size_t l2_bytes;       // the device's L2 cache
    int fuse_tokens;       // LIZARD_FUSE_TOKENS: the fused dense decode ops take steps of up to this many tokens
    bool wgmma;            // the prompt attention may take attention_wgmma.cu: an sm_90a build on a
                           // compute capability 9.0 device, and not LIZARD_WGMMA=0
    int decode_attn;       // LIZARD_DECODE_ATTN: decode attention blocks an SM (-1: by the batch)
    int window_split_min;  // LIZARD_WINDOW_SPLIT_MIN: decode steps of this many sequences on take the split kernel (default 16)
    int gla_stream_min;    // LIZARD_GLA_STREAM_MIN: decode steps of this many sequences on take gla_decode_stream.cu
    int gla_spread_max;    // LIZARD_GLA_SPREAD: decode steps of up to this many sequences spread the GLA kernel (gla_decode.cu)
    int gla_ring_blocks;   // LIZARD_GLA_RING_BLOCKS: the ring kernel's blocks (default 0: one an SM; tests: few, many items each)
    int window_ring_min;   // LIZARD_WINDOW_RING: decode steps of this many sequences on take window_decode_ring.cu (0: none)
    int window_ring_blocks; // LIZARD_WINDOW_RING_BLOCKS: that kernel's blocks (default 0: one an SM; tests: few)
    unsigned *attn_count;  // decode attention: per (sequence, kv head) arrival counters, zero between launches
    int attn_count_n;
    // linear_stream.cu (bf16 linear layers at 2 .. LIZARD_STREAM_TOKENS tokens; 0: none) and its shares of
    // k a group of rows (LIZARD_STREAM_SPLIT, 0: by the launch's size; tests: 1 to 8)
    int stream_tokens;
    int stream_split;
    // linear_joined.cu: layers of one input whose weights were joined at load run as one product at steps
    // of up to LIZARD_JOIN_TOKENS tokens (0: weights not joined), into joined_out
    int join_tokens;
    void *joined_out;
    size_t joined_bytes;
    // Side streams (side_streams.cu): independent launches of a step side by side with the main
    // stream's (a layer's k, v and gate GEMMs beside q's), each with its own cuBLAS handle and
    // workspace. The ops switch c->stream and c->cublas to a side stream's while they launch onto
    // it (lz_on_side), and join the side back into c->stream before they return.
    cudaStream_t side[LZ_SIDE_STREAMS];
    cublasHandle_t side_cublas[LZ_SIDE_STREAMS];
    void *side_workspace[LZ_SIDE_STREAMS];
    cudaEvent_t fork_event, join_event[LZ_SIDE_STREAMS];
    int fork_tokens;       // LIZARD_FORK_TOKENS: linear layers side by side on steps of at most this many tokens
    bool on_side;          // launching onto a side stream now (lz_on_side)
};

// Grows ctx->scratch to at least `bytes` (synchronising the stream first).
lz_status lz_cuda_scratch(lz_cuda_ctx *ctx, size_t bytes);

// The kernels' own timeline (trace.cu; cmake -DLIZARD_TRACE=ON and LIZARD_TRACE=file, else nothing):
// the last `us` microseconds of it written to `path` when closed (path NULL: no timeline).
lz_status lz_trace_open(const char *path, int us);
lz_status lz_trace_close(void);

// Side streams (side_streams.cu). create: the streams, handles (math mode as the main one's) and
// events; destroy: what create made (safe on a partial create). fork: sides 0 .. n - 1 wait for the
// main stream's work so far; join: the main stream waits for theirs. Under graph capture the sides
// join the recording at the fork and must be joined before it ends.
lz_status lz_cuda_side_create(lz_cuda_ctx *c, size_t workspace_bytes, cublasMath_t math);
void lz_cuda_side_destroy(lz_cuda_ctx *c);
lz_status lz_cuda_fork(lz_cuda_ctx *c, int n);
lz_status lz_cuda_join(lz_cuda_ctx *c, int n);
// While alive, launches through c go to side stream i.
struct lz_on_side {
    lz_cuda_ctx *c;
    cudaStream_t stream;
    cublasHandle_t cublas;
    lz_on_side(lz_cuda_ctx *ctx, int i) : c(ctx), stream(ctx->stream), cublas(ctx->cublas) {
        c->stream = c->side[i], c->cublas = c->side_cublas[i], c->on_side = true;
    }
    ~lz_on_side() { c->stream = stream, c->cublas = cublas, c->on_side = false; }
    lz_on_side(const lz_on_side &) = delete;
    lz_on_side &operator=(const lz_on_side &) = delete;
};

template <typename T> lz_status embedding_forward(lz_cuda_ctx *c, T *out, const T *table, const int32_t *ids, int n, int C);
template <typename T> lz_status rmsnorm_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, int n, int C, float eps);
template <typename T>
lz_status linear_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, const T *bias, int n, int in, int out_features);
template <typename T>
lz_status linear_accumulate_forward(lz_cuda_ctx *c, T *y, const T *x, const T *w, int n, int in, int out_features);
template <typename T> lz_status add_forward(lz_cuda_ctx *c, T *y, const T *x, size_t n);
template <typename T> lz_status swiglu_forward(lz_cuda_ctx *c, T *out, const T *gate, const T *up, size_t n);
// out [rows][cols] = silu(gate) * up with gate and up rows ld elements apart (cols and ld whole 16-byte vectors)
template <typename T>
lz_status swiglu_rows_forward(lz_cuda_ctx *c, T *out, const T *gate, const T *up, int rows, int cols, int ld);
// Blocks of 256 threads for a grid-stride kernel over n_vec 16-byte vectors (basic.cu)
int lz_vec_grid(const lz_cuda_ctx *c, size_t n_vec);
template <typename T> lz_status argmax_rows_forward(lz_cuda_ctx *c, int32_t *ids, const T *x, int n, int C);
// sample_rows (sample_rows.cu): a row's lz_sample_row as the kernel reads it,
// computed on the host the way kernels/cpu/sample_rows.c computes it.
struct lz_sample_dev {
    float c;        // log2(e) / temperature
    int32_t top_k;  // 0 or >= vocab: off
    uint64_t p53;   // top-p as a 53-bit fraction; 2^53: off
    uint64_t u53;   // the uniform, < 2^53
    int greedy;     // temperature 0
};
lz_sample_dev lz_sample_dev_of(const lz_sample_row *p);
template <typename T>
lz_status sample_rows_forward(lz_cuda_ctx *c, int32_t *ids, const T *x, int n, int C, const lz_sample_dev *params);
template <typename T> lz_status gather_rows_forward(lz_cuda_ctx *c, T *out, const T *x, const int32_t *rows, int n, int C);
template <typename T> lz_status log_sigmoid_forward(lz_cuda_ctx *c, T *out, const T *x, int n);
template <typename T>
lz_status rope_forward(lz_cuda_ctx *c, T *q, T *k, const float *inv_freq, const lz_cuda_batch *b, int n_tokens,
                       const lz_attn_dims *dims);
template <typename T>
lz_status softmax_attention_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims);
template <typename T>
lz_status feature_map_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, int n_w, int n, int Hx, int Hout, int d,
                              int f, bool exp_map);
template <typename T>
lz_status gla_chunked_forward(lz_cuda_ctx *c, T *out, const T *phi_q, const T *phi_k, const T *v, const T *log_gamma,
                              lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims);
template <typename T>
lz_status gla_recurrent_forward(lz_cuda_ctx *c, T *out, const T *phi_q, const T *phi_k, const T *v,
                                const T *log_gamma, lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb,
                                const lz_attn_dims *dims);
// The GLA decode step split over a thread-block cluster per state head (gla_decode.cu): from the
// feature maps (gla_recurrent), or fused with the gate and the feature maps (gla_decode op).
// Above this many sequences a decode step has enough (sequence, head) blocks without the split, and
// the unsplit GLA kernel is faster.
enum { LZ_GLA_SPLIT_MAX_SEQS = 64 };
// The head shape for which the small-batch attention kernels (this GLA kernel, window_attention.cu's
// decode kernel) also have an instance with it fixed at compile time: LLaMA-3-8B's and Mistral-7B's
// Lizard layers (head_dim 128, 4 query heads a kv / state head).
enum { LZ_FIXED_HEAD_DIM = 128, LZ_FIXED_GROUP = 4 };
template <typename T> bool gla_decode_split_fits(const lz_cuda_ctx *c, const lz_attn_dims *dims, bool fused);
template <typename T>
lz_status gla_decode_split_forward(lz_cuda_ctx *c, T *out, const T *phi_q, const T *phi_k, const T *v,
                                   const T *log_gamma, lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb,
                                   const lz_attn_dims *dims);
template <typename T>
lz_status gla_decode_fused_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *gate_logit,
                                   const T *wq, int n_wq, const T *wk, int n_wk, bool exp_map, lz_layer_state *st,
                                   const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims);
// The GLA decode step for many sequences (gla_decode_stream.cu, from gla_stream_min sequences on): a
// launch for the gates and feature maps (fp32 into scratch, gla_decode_stream_scratch bytes; z
// updated), then one that streams S. (The window branch takes the persistent kernel of
// window_decode_ring.cu from window_ring_min sequences on; below it the cluster kernel of
// window_attention.cu.)
template <typename T> bool gla_decode_stream_fits(const lz_cuda_ctx *c, const lz_attn_dims *dims);
template <typename T> size_t gla_decode_stream_scratch(const lz_attn_dims *dims, int n_seqs);
template <typename T> lz_status gla_decode_stream_init(lz_cuda_ctx *c);
template <typename T>
lz_status gla_decode_stream_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *gate_logit,
                                    const T *wq, int n_wq, const T *wk, int n_wk, bool exp_map, lz_layer_state *st,
                                    const lz_cuda_batch *b, const lz_batch *hb, const lz_attn_dims *dims);
template <typename T>
lz_status window_attention_forward(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, const T *meta, float alpha,
                                   lz_layer_state *st, const lz_cuda_batch *b, const lz_batch *hb,
                                   const lz_attn_dims *dims);

// Few-token linear layers (see gemv.cu): the kernel takes up to LZ_GEMV_MAX_TOKENS tokens; the
// launchers give it steps of up to LIZARD_GEMV_TOKENS and layers of at most 4 rows (the Lizard gate)
// at any size. Larger steps go to cuBLAS, which reads the weights faster there: the GEMV's 4 or 8
// tokens a warp multiply the loads of x by that many.
enum { LZ_GEMV_MAX_TOKENS = 8, LZ_GEMV_MAX_SEGMENTS = 4 };
// Whether the launchers give the GEMV a step of n tokens (the one place that decides it).
static inline bool lz_gemv_takes_step(const lz_cuda_ctx *c, int n) {
    return n >= 1 && n <= c->gemv_tokens;
}
// Linear layers of one input launched together: out[s][n, m[s]] = x . w[s]^T (+ bias[s]).
template <typename T> struct lz_gemv_segments {
    T *out[LZ_GEMV_MAX_SEGMENTS];
    const T *w[LZ_GEMV_MAX_SEGMENTS], *bias[LZ_GEMV_MAX_SEGMENTS];
    int m[LZ_GEMV_MAX_SEGMENTS];
    int count, total_rows;
    // LZ_GEMV_ROPE: segments 0 and 1 (q's and k's heads of 2 * rope_half rows) rotated at
    // rope_pos[token] with rope_freq [rope_half]
    const float *rope_freq;
    const int32_t *rope_pos;
    int rope_half;
};
template <typename T> lz_status gemv_segments_forward(lz_cuda_ctx *c, lz_gemv_segments<T> seg, const T *x, int n, int k);
template <typename T>
lz_status gemv_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, const T *bias, int n, int k, int m);
// The same with an epilogue (gemv_fused.cu), n <= LZ_GEMV_MAX_TOKENS (LZ_GEMV_STORE, out = x . W^T
// (+ bias), is gemv_segments_forward's):
//   LZ_GEMV_RESIDUAL: out += x . W^T (+ bias);
//   LZ_GEMV_SWIGLU: two segments of equal rows (gate, up), out[0] = silu(gate) * up;
//   LZ_GEMV_ROPE: out = x . W^T (+ bias), then RoPE on segments 0 and 1 (q, k; one token; see
//     lz_gemv_rope_fits).
enum lz_gemv_epilogue { LZ_GEMV_STORE, LZ_GEMV_RESIDUAL, LZ_GEMV_SWIGLU, LZ_GEMV_ROPE };
// Whether the RoPE epilogue takes a step of n tokens with q rows m_q, k rows m_k, total_rows in all
// and head_dim: a block's 8 warps hold rows i .. i + 3 and i + d/2 .. i + d/2 + 3 of one head, so
// every head and every segment comes in whole blocks.
static inline bool lz_gemv_rope_fits(int n, int m_q, int m_k, int total_rows, int head_dim) {
    return n == 1 && head_dim % 8 == 0 && m_q % head_dim == 0 && m_k % head_dim == 0 && total_rows % 8 == 0;
}
template <typename T>
lz_status gemv_fused_forward(lz_cuda_ctx *c, lz_gemv_segments<T> seg, const T *x, lz_gemv_epilogue epilogue, int n,
                             int k);

// The prompt path of the feature maps on tensor cores (bf16; feature_map.cu).
lz_status lz_feature_map_tc_init(lz_cuda_ctx *c);

// The prompt path of the Lizard window branch on tensor cores (bf16; window_tc.cu):
// out += alpha * WIN for every row of the step's chunks (the ring store stays the caller's).
lz_status lz_window_tc_init(lz_cuda_ctx *c);
bool lz_window_tc_fits(const lz_cuda_ctx *c, const lz_attn_dims *dims, const void *out, const void *q, const void *k,
                       const void *v, const void *ring_k, const void *ring_v);
lz_status lz_window_tc(lz_cuda_ctx *c, __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                       const __nv_bfloat16 *v, const __nv_bfloat16 *meta, float alpha, const lz_layer_state *st,
                       const lz_cuda_batch *b, const lz_attn_dims *dims);

// The GLA chunk output on tensor cores (bf16; gla_tc.cu).
size_t lz_gla_tc_smem(int F, int d);
bool lz_gla_tc_fits(const lz_cuda_ctx *c, int F, int d);
lz_status lz_gla_tc_init(lz_cuda_ctx *c);
lz_status lz_gla_tc_output(lz_cuda_ctx *c, __nv_bfloat16 *out, const __nv_bfloat16 *phi_q, const __nv_bfloat16 *phi_k,
                           const __nv_bfloat16 *v, const __nv_bfloat16 *log_gamma, const float *S_prev,
                           const float *z_prev, const int32_t *chunk_row0, const int32_t *chunk_len, int n_chunks,
                           int Hq, int Hkv, int Hs, int d, int F, bool normalize);

// The whole chunked GLA prompt path on tensor cores (bf16; gla_prompt_tc.cu): state, scan and output.
lz_status lz_gla_prompt_init(lz_cuda_ctx *c);
bool lz_gla_prompt_fits(const lz_cuda_ctx *c, const __nv_bfloat16 *out, const __nv_bfloat16 *phi_q,
                        const __nv_bfloat16 *phi_k, const __nv_bfloat16 *v, int Hq, int Hs, int d, int F);
lz_status lz_gla_prompt(lz_cuda_ctx *c, __nv_bfloat16 *out, const __nv_bfloat16 *phi_q, const __nv_bfloat16 *phi_k,
                        const __nv_bfloat16 *v, const __nv_bfloat16 *log_gamma, float *S, float *z,
                        const int32_t *chunk_row0, const int32_t *chunk_len, const int32_t *seq_chunk0,
                        const int32_t *seq_chunks, const int32_t *slot, int n_chunks, int n_seqs, int Hq, int Hkv,
                        int Hs, int d, int F, bool normalize);

// The prompt path of softmax attention on tensor cores (bf16; attention_tc.cu).
bool lz_attention_tc_fits(const lz_cuda_ctx *c, int d);
lz_status lz_attention_tc_init(lz_cuda_ctx *c);
lz_status lz_attention_tc(lz_cuda_ctx *c, __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *kc,
                          const __nv_bfloat16 *vc, const int32_t *chunk_row0, const int32_t *chunk_len,
                          const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos, int n_chunks,
                          int Hq, int Hkv, int d, int capacity, int sliding_window);
// The same on Hopper, warp-specialised: a producer warpgroup feeding the copy engine, two consumer
// warpgroups on wgmma (bf16, head_dim 128, an even GQA group; attention_wgmma.cu).
bool lz_attention_wgmma_fits(const lz_cuda_ctx *c, int d, int Hq, int Hkv, int n_chunks, const void *q,
                             const void *kc, const void *vc);
lz_status lz_attention_wgmma_init(lz_cuda_ctx *c);
lz_status lz_attention_wgmma(lz_cuda_ctx *c, __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *kc,
                             const __nv_bfloat16 *vc, const int32_t *chunk_row0, const int32_t *chunk_len,
                             const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos, int n_tokens,
                             int n_chunks, int Hq, int Hkv, int capacity, int sliding_window);
// The same, FlashAttention-2 style (bf16, head_dim 64 or 128; attention_flash.cu).
bool lz_attention_flash_fits(const lz_cuda_ctx *c, int d, int Hq, int Hkv, int n_chunks);
lz_status lz_attention_flash_init(lz_cuda_ctx *c);
lz_status lz_attention_flash(lz_cuda_ctx *c, __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *kc,
                             const __nv_bfloat16 *vc, const int32_t *chunk_row0, const int32_t *chunk_len,
                             const int32_t *token_seq, const int32_t *slot, const int32_t *token_pos, int n_chunks,
                             int Hq, int Hkv, int d, int capacity, int sliding_window);

// NCCL point-to-point between the ranks of a pipeline (nccl_p2p.cu).
lz_status lz_nccl_id(void *id, size_t *len);
lz_status lz_nccl_init(lz_cuda_ctx *c, void **comm, const void *id, size_t len, int rank, int n_ranks);
lz_status lz_nccl_send(lz_cuda_ctx *c, void *comm, const void *buf, size_t bytes, int peer);
lz_status lz_nccl_recv(lz_cuda_ctx *c, void *comm, void *buf, size_t bytes, int peer);
void lz_nccl_free(void *comm);

// Kernel attributes (shared-memory limits), set once when the backend starts.
template <typename T> lz_status gla_init(lz_cuda_ctx *c);
template <typename T> lz_status gla_decode_init(lz_cuda_ctx *c);
template <typename T> lz_status attention_init(lz_cuda_ctx *c);
template <typename T> lz_status window_init(lz_cuda_ctx *c);
template <typename T> lz_status random_fill(lz_cuda_ctx *c, T *w, size_t n, float mean, float std, uint64_t seed);
template <typename T> lz_status measure_ceilings(lz_cuda_ctx *c, double *copy_bytes_per_s, double *gemm_flops);

#define LZ_INSTANTIATE(macro) \
    macro(float)              \
    macro(__nv_bfloat16)

#endif
