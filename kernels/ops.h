/* ops.h - the op table: every piece of math a stage needs, once per backend.
 *
 * Stages call these function pointers and never a backend directly, so a
 * model runs unchanged on the CPU reference (kernels/cpu, fp32) and on other
 * backends. Activations are `void *` in the backend's activation type
 * (fp32 on the CPU); the stages never index into them, they only pass them.
 * Shapes are written in comments as [rows, cols]; T = tokens in the step. */
#ifndef LZ_OPS_H
#define LZ_OPS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t, int64_t

#include "dtype.h" // lz_dtype, lz_host_tensor
#include "error.h" // lz_status
#include "knobs.h" // lz_knob_table

typedef struct lz_backend lz_backend; /* a backend's private context */
struct lz_backward_ops;                /* backward_ops.h: the gradients of these ops, for training */

/* A weight in backend memory: a row-major matrix [rows, cols]
 * (a linear layer's [out_features, in_features]); 1-D tensors have rows = 1. */
typedef struct {
    void *data;
    lz_dtype dtype;
    int64_t rows, cols;
    bool owned; /* false: points into the checkpoint's mapping (zero copy) */
    int64_t block_rows; /* join_weights: rows of the joined block this weight begins, padding included
                           (0: it begins none) */
} lz_weight;

/* The sequences of one step: sequence s owns activation rows
 * [start[s], start[s] + len[s]) and its first token sits at absolute position
 * pos[s] (= tokens already in its state); its state lives in slot[s]. */
typedef struct {
    int n_seqs;
    int n_tokens;
    const int32_t *slot;
    const int32_t *start;
    const int32_t *len;
    const int32_t *pos;
    const int32_t *token_pos; /* [n_tokens] absolute position of each row */
} lz_batch;

/* Attention geometry of one layer. */
typedef struct {
    int n_heads;        /* query heads */
    int n_kv_heads;
    int head_dim;
    /* softmax layers */
    int kv_capacity;    /* positions per slot in the KV cache */
    int sliding_window; /* 0 = full causal */
    /* Lizard layers */
    int n_state_heads;  /* heads of S/z: n_kv_heads, or n_heads if phi_k is per query head */
    int feature_dim;    /* f; phi has 2f features */
    int window;         /* w */
    int n_meta;         /* m */
    bool gla_normalize;
} lz_attn_dims;

/* Per-layer recurrent state of all slots, in backend memory. */
typedef struct {
    void *k_cache, *v_cache; /* softmax: [slots, kv_capacity, n_kv_heads, head_dim] */
    float *S;                /* Lizard: [slots, n_state_heads, 2f, head_dim] fp32 */
    float *z;                /* Lizard: [slots, n_state_heads, 2f] fp32 */
    void *ring_k, *ring_v;   /* Lizard: [slots, w, n_kv_heads, head_dim]; position p in row p % w */
} lz_layer_state;

/* How one logit row is sampled (sample_rows; the rule is in sample_rule.h). */
typedef struct {
    double temperature; /* 0: greedy (the first index of the largest logit) */
    int32_t top_k;      /* 0: off */
    double top_p;       /* in (0, 1]; 1: off */
    double u;           /* uniform in [0, 1): picks among the kept tokens */
} lz_sample_row;

/* One logit row sampled on the host by the rule of sample_rule.h (the CPU
 * reference's code, kernels/cpu/sample_rows.c): for callers that hold logits
 * on the host. scratch [C] lets the later selection passes skip most of the
 * row (NULL: they do not). */
int32_t sample_row(const float *x, int C, const lz_sample_row *params, int32_t *scratch);

typedef struct lz_ops {
    const char *name;
    size_t act_size; /* bytes of one activation element */
    const struct lz_backward_ops *backward; /* the backend's backward op table (training), or NULL */

    /* memory (all return LZ_OK or a status with the error set) */
    lz_status (*alloc)(lz_backend *be, size_t bytes, void **out);
    void (*free)(lz_backend *be, void *p);
    lz_status (*zero)(lz_backend *be, void *p, size_t bytes);
    /* Makes a backend weight from a host tensor (converting dtype),
     * viewed as [rows, cols]; rows * cols must equal the tensor's numel. */
    lz_status (*upload_weight)(lz_backend *be, const lz_host_tensor *src, int64_t rows, int64_t cols, lz_weight *out);
    void (*free_weight)(lz_backend *be, lz_weight *w);
    /* Optional: lays weights of one width and type (each owning its memory) one after another in one
     * allocation, in order, so that layers of one input may run as one product. Each stays its own
     * lz_weight (the first owns the block and records its rows; free them together). The block may end
     * in a layer of few rows (a Lizard layer's gate: 1), padded with zero rows. Best effort: weights it
     * cannot join (memory, shapes) stay as they were. */
    lz_status (*join_weights)(lz_backend *be, int count, lz_weight *const *ws);
    /* A weight [rows, cols] of random values (uniform, given mean and std),
     * made where it lives: benchmarks start in seconds without files. */
    lz_status (*random_weight)(lz_backend *be, int64_t rows, int64_t cols, float mean, float std, uint64_t seed,
                               lz_weight *out);
    /* Optional (NULL when not measurable): the device's memory copy rate
     * (bytes read + written per second) and its GEMM rate (FLOP/s) in the
     * activation type, measured now. */
    lz_status (*measure_ceilings)(lz_backend *be, double *copy_bytes_per_s, double *gemm_flops);
    /* Optional: free and total device memory in bytes. */
    lz_status (*memory_info)(lz_backend *be, size_t *free_bytes, size_t *total_bytes);
    /* n activations -> host fp32 */
    lz_status (*act_to_host)(lz_backend *be, float *dst, const void *src, size_t n);
    /* n host fp32 values -> activations (converted to the backend's type) */
    lz_status (*act_from_host)(lz_backend *be, void *dst, const float *src, size_t n);
    /* Raw bytes between backend memory and the host (state snapshots). */
    lz_status (*copy_to_host)(lz_backend *be, void *dst, const void *src, size_t bytes);
    lz_status (*copy_from_host)(lz_backend *be, void *dst, const void *src, size_t bytes);
    /* The same, queued: complete when sync returns (the host side must stay
     * as it is until then). Many copies, one wait. */
    lz_status (*copy_to_host_async)(lz_backend *be, void *dst, const void *src, size_t bytes);
    lz_status (*copy_from_host_async)(lz_backend *be, void *dst, const void *src, size_t bytes);
    /* Host memory that these copies move at full speed (CUDA: pinned; CPU:
     * malloc), for buffers kept and reused (session messages). */
    lz_status (*host_alloc)(lz_backend *be, size_t bytes, void **out);
    void (*host_free)(lz_backend *be, void *p);
    /* n fp32 values (not activations: e.g. RoPE frequencies) host -> backend */
    lz_status (*upload_f32)(lz_backend *be, float *dst, const float *src, size_t n);
    lz_status (*sync)(lz_backend *be);
    void (*destroy)(lz_backend *be);

    /* Called once at the start of every step, before the math below, with the
     * host arrays that the step's ops will be given (a backend with its own
     * memory copies them over once here). */
    lz_status (*begin_step)(lz_backend *be, const int32_t *ids, const lz_batch *batch, const int32_t *logit_rows,
                            int n_logit_rows);

    /* Optional (NULL: not supported): replay of repeated decode steps. lz_step
     * calls graph_begin with a signature of everything the step's launches
     * depend on; *run_ops = false means the step's ops are already recorded and
     * graph_end replays them. graph_end(ok = false) abandons a recording.
     * graph_reset forgets every recording (state or workspace freed). */
    lz_status (*graph_begin)(lz_backend *be, uint64_t signature, bool *run_ops);
    lz_status (*graph_end)(lz_backend *be, bool ok);
    void (*graph_reset)(lz_backend *be);

    /* Optional (NULL: activations go through host memory and MPI): direct
     * device-to-device transfers between the ranks of a pipeline (NCCL).
     * p2p_id writes the unique id rank 0 creates (at most 256 bytes);
     * p2p_init joins the communicator with the id every rank received. */
    lz_status (*p2p_id)(lz_backend *be, void *id, size_t *len);
    lz_status (*p2p_init)(lz_backend *be, const void *id, size_t len, int rank, int n_ranks);
    lz_status (*p2p_send)(lz_backend *be, const void *buf, size_t bytes, int peer);
    lz_status (*p2p_recv)(lz_backend *be, void *buf, size_t bytes, int peer);

    /* math: each returns LZ_OK or the backend's failure (launch errors) */
    /* out[T, C] = table[ids[t], :] */
    lz_status (*embedding)(lz_backend *be, void *out, const lz_weight *table, const int32_t *ids, int T);
    /* out[T, C] = x / rms(x) * w */
    lz_status (*rmsnorm)(lz_backend *be, void *out, const void *x, const lz_weight *w, int T, float eps);
    /* out[T, rows] = x[T, cols] . W^T (+ bias[rows] if bias) */
    lz_status (*linear)(lz_backend *be, void *out, const void *x, const lz_weight *w, const lz_weight *bias, int T);
    /* outs[i][T, ws[i]->rows] = x . ws[i]^T (+ biases[i]) for i < count (<= 4): linear layers
     * of one input (q, k, v and the Lizard gate; gate and up), which a backend may launch as
     * one. biases may be NULL, as may any biases[i]. */
    lz_status (*linear_many)(lz_backend *be, int count, void *const *outs, const void *x, const lz_weight *const *ws,
                             const lz_weight *const *biases, int T);
    /* Fused forms of the decoder layer's dense ops, each optional (NULL: the stage runs the composition named).
     * The buffers named "the composition's" are scratch that a backend may use to compose (e.g. for prompts);
     * a backend that fuses leaves them as they are.
     * norm_swiglu: the MLP's input, out[T, I] = silu(n . w_gate^T + b_gate) * (n . w_up^T + b_up),
     *   n = rmsnorm(x; norm, eps); xn [T, C] and up [T, I] are the composition's (rmsnorm, linear_many, swiglu). */
    lz_status (*norm_swiglu)(lz_backend *be, void *out, void *xn, void *up, const void *x, const lz_weight *norm,
                             float eps, const lz_weight *w_gate, const lz_weight *b_gate, const lz_weight *w_up,
                             const lz_weight *b_up, int T);
    /* linear_residual: y[T, w->rows] += x . W^T (+ bias); tmp [T, w->rows] is the composition's (linear, add). */
    lz_status (*linear_residual)(lz_backend *be, void *y, void *tmp, const void *x, const lz_weight *w,
                                 const lz_weight *bias, int T);
    /* linear_many_rope: a softmax layer's projections, linear_many of count 3 (outs: q [T, Hq, d], k [T, Hkv, d],
     *   v), then rope on q and k (the composition: linear_many, rope). */
    lz_status (*linear_many_rope)(lz_backend *be, int count, void *const *outs, const void *x,
                                  const lz_weight *const *ws, const lz_weight *const *biases, int T,
                                  const float *inv_freq, const lz_batch *batch, const lz_attn_dims *dims);
    /* y[T, C] += x[T, C] */
    lz_status (*add)(lz_backend *be, void *y, const void *x, size_t n);
    /* out[T, n] = silu(gate) * up, gate/up [T, n] */
    lz_status (*swiglu)(lz_backend *be, void *out, const void *gate, const void *up, size_t n);
    /* out[n, C] = x[rows[i], :] */
    lz_status (*gather_rows)(lz_backend *be, void *out, const void *x, const int32_t *rows, int n, int C);
    /* ids[r] (host) = first index of the largest value of row r of x [n, C]
     * (greedy decoding on the device: n ids cross to the host, not n x C logits) */
    lz_status (*argmax_rows)(lz_backend *be, int32_t *ids, const void *x, int n, int C);
    /* ids[r] (host) = row r of x [n, C] sampled with params[r] (host): sampled
     * decoding on the device, so n ids cross to the host, not n x C logits */
    lz_status (*sample_rows)(lz_backend *be, int32_t *ids, const void *x, int n, int C, const lz_sample_row *params);
    /* In place, HF rotate-half RoPE on q [T, Hq, d] and k [T, Hkv, d] at
     * batch->token_pos; inv_freq [d/2] fp32 in backend memory. */
    lz_status (*rope)(lz_backend *be, void *q, void *k, const float *inv_freq, const lz_batch *batch,
                 const lz_attn_dims *dims);
    /* Softmax layer: appends k, v [T, Hkv, d] to the cache, then
     * out[T, Hq, d] = causal GQA attention of q over the slot's cache. */
    lz_status (*softmax_attention)(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                              lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims);
    /* Hedgehog map: out[T, Hout, 2f] = [softmax(u) ++ softmax(-u)] (or exp),
     * u = x[t, o / (Hout / Hx), :] . W[Hw == 1 ? 0 : o]  with W [Hw, d, f]. */
    lz_status (*feature_map)(lz_backend *be, void *out, const void *x, const lz_weight *w, int T, int Hx, int Hout,
                        int head_dim, int f, bool exp_map);
    /* log_gamma[T] = log(sigmoid(gate_logit[T])) computed stably */
    lz_status (*log_sigmoid)(lz_backend *be, void *out, const void *x, int T);
    /* Gated linear attention for any step (chunked form), reading and
     * updating S, z of each sequence's slot:
     * out[T, Hq, d] = GLA of phi_q [T, Hq, 2f], phi_k [T, Hs, 2f], v [T, Hkv, d], log_gamma [T]. */
    lz_status (*gla_chunked)(lz_backend *be, void *out, const void *phi_q, const void *phi_k, const void *v,
                        const void *log_gamma, lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims);
    /* The same for steps where every sequence has exactly one token: the
     * recurrent form (update S, z; read them out). */
    lz_status (*gla_recurrent)(lz_backend *be, void *out, const void *phi_q, const void *phi_k, const void *v,
                          const void *log_gamma, lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims);
    /* Optional (NULL: log_sigmoid, feature_map of q and of k, then gla_recurrent): the GLA branch of a step
     * where every sequence has exactly one token, in one: out[T, Hq, d] from q [T, Hq, d], k, v [T, Hkv, d],
     * the gate's logit [T] and the feature maps' weights (fmap_q [Hq or 1, d * f], fmap_k [Hs or 1, d * f], as
     * feature_map reads them), updating S, z. */
    lz_status (*gla_decode)(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                            const void *gate_logit, const lz_weight *fmap_q, const lz_weight *fmap_k, bool exp_map,
                            lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims);
    /* Window branch: out[T, Hq, d] += alpha * WIN over the last w positions
     * (ring + this step's k, v; raw q and k, no RoPE), meta logits [m] in the
     * denominator; then stores this step's k, v in the ring. */
    lz_status (*window_attention)(lz_backend *be, void *out, const void *q, const void *k, const void *v,
                             const lz_weight *meta_logits, float alpha, lz_layer_state *st, const lz_batch *batch,
                             const lz_attn_dims *dims);
} lz_ops;

/* The CPU reference backend (kernels/cpu): fp32 activations and weights. */
lz_status lz_cpu_backend_create(lz_backend **be, const lz_ops **ops);

/* The CUDA backend (kernels/cuda), when built with LIZARD_CUDA: activations
 * and weights in `dtype` (LZ_DTYPE_BF16 or LZ_DTYPE_F32), GLA state in fp32.
 * The GPU is picked by the local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID or LOCAL_RANK; 0 without) modulo the visible GPUs.
 * The table has the fused ops gla_decode, norm_swiglu (SwiGLU in the gate/up GEMV's epilogue),
 * linear_residual (a prompt's GEMM accumulating in place; decode: the residual add in the GEMV's
 * epilogue) and linear_many_rope (RoPE in the q/k/v GEMV's epilogue). */
lz_status lz_cuda_backend_create(lz_dtype dtype, lz_backend **be, const lz_ops **ops);
/* The CUDA backend's knobs (kernels/cuda/cuda_knobs.c, docs/knobs.md), which it reads when created.
 * In every build, with or without the backend, so that main checks them at start (lz_knobs_check). */
extern const lz_knob_table lz_cuda_knob_table;

#endif
