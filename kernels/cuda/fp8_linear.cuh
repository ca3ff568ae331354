// fp8_linear.cuh - linear layers whose weights are FP8 E4M3 codes with one fp32 scale per output row
// (kernels/fp8_rule.h), activations bf16. Decode-sized steps (up to LZ_FP8_GEMV_TOKENS tokens) stream
// the codes in a GEMV (fp8_gemv.cu: bf16 activations, fp32 sums, the row's scale once at the end);
// larger steps quantize each token's activations to E4M3 with a scale of their own (the rule's
// row scale, per token) and multiply on the FP8 tensor cores through cuBLASLt (fp8_gemm.cu), both
// scales applied to the fp32 (or bf16) product in one epilogue pass.
#ifndef LZ_FP8_LINEAR_CUH
#define LZ_FP8_LINEAR_CUH

#include "cuda_kernels.cuh" // lz_cuda_ctx

typedef __nv_bfloat16 lz_bf16;

// Steps of up to this many tokens take the GEMV (its accumulators a warp: 1, 4 or 8 tokens).
enum { LZ_FP8_GEMV_TOKENS = 8, LZ_FP8_MAX_SEGMENTS = 4 };

// Layers of one input in one launch: out[s][n, m[s]] = x . (scale[s] * codes[s])^T (+ bias[s]); a
// segment whose bit is set in `wide` holds bf16 weights instead (no scale): a Lizard layer's gate
// beside its FP8 q, k, v, so that the four still take one launch.
struct lz_fp8_segments {
    lz_bf16 *out[LZ_FP8_MAX_SEGMENTS];
    const uint8_t *w[LZ_FP8_MAX_SEGMENTS];
    const float *scale[LZ_FP8_MAX_SEGMENTS];
    const lz_bf16 *bias[LZ_FP8_MAX_SEGMENTS];
    int m[LZ_FP8_MAX_SEGMENTS];
    int count, total_rows;
    unsigned wide;
    // LZ_FP8_ROPE: segments 0 and 1 (q's and k's heads of 2 * rope_half rows) rotated at
    // rope_pos[token] with rope_freq [rope_half] (as gemv_kernel.cuh's RoPE epilogue)
    const float *rope_freq;
    const int32_t *rope_pos;
    int rope_half;
};

// What the product does with out: store it, add it (residual), or (GEMV, two segments of equal rows:
// gate, up) store silu(gate) * up into out[0], or (GEMV, one token, a softmax layer's q, k, v where
// lz_gemv_rope_fits) store it with RoPE applied to q and k.
enum lz_fp8_epilogue { LZ_FP8_STORE, LZ_FP8_RESIDUAL, LZ_FP8_SWIGLU, LZ_FP8_ROPE };

// fp8_weight.cu: an F8_E4M3 host tensor (codes, src->row_scale) onto the device; a bf16 or fp32 weight
// of the device replaced by its codes and scales (the rule of fp8_rule.h, computed where it lives);
// the weight's memory freed. Shapes the kernels cannot take (in_features not a multiple of 16) are
// refused by name.
lz_status lz_fp8_upload(lz_cuda_ctx *c, const lz_host_tensor *src, int64_t rows, int64_t cols, lz_weight *out);
lz_status lz_fp8_quantize_weight(lz_cuda_ctx *c, lz_weight *w);
void lz_fp8_free_weight(lz_weight *w);

// fp8_gemv.cu: n <= LZ_FP8_GEMV_TOKENS; k % 16 == 0.
lz_status lz_fp8_gemv(lz_cuda_ctx *c, lz_fp8_segments seg, const lz_bf16 *x, lz_fp8_epilogue epi, int n, int k);

// fp8_gemm.cu: the cuBLASLt handle, workspace and chosen algorithms (made once, before any step is
// recorded, by the first FP8 upload); the activations of a step quantized once per token, then each
// layer's product and epilogue (STORE or RESIDUAL).
lz_status lz_fp8_gemm_init(lz_cuda_ctx *c);
void lz_fp8_gemm_destroy(lz_cuda_ctx *c);
struct lz_fp8_acts {
    const uint8_t *codes; // [n, k]
    const float *scale;   // [n]
    void *acc;            // room for the largest product of the step: [n, m] fp32
    int n, k;
};
lz_status lz_fp8_quantize_acts(lz_cuda_ctx *c, const lz_bf16 *x, int n, int k, int64_t max_rows, lz_fp8_acts *a);
lz_status lz_fp8_gemm(lz_cuda_ctx *c, const lz_fp8_acts *a, lz_bf16 *out, const lz_weight *w, const lz_bf16 *bias,
                      lz_fp8_epilogue epi);

// fp8_linear.cu: the ops' FP8 forms (the GEMV or the GEMMs by the step's size).
// linear_many: ws[0 .. count) of one width, FP8 or (steps the GEMV takes) bf16 beside FP8 ones.
lz_status lz_fp8_linear_many(lz_cuda_ctx *c, int count, void *const *outs, const lz_bf16 *x, const lz_weight *const *ws,
                             const lz_weight *const *biases, lz_fp8_epilogue epi, int n);
// A softmax layer's FP8 q, k, v at one token with RoPE on q and k (where lz_gemv_rope_fits).
lz_status lz_fp8_rope(lz_cuda_ctx *c, void *const *outs, const lz_bf16 *x, const lz_weight *const *ws,
                      const lz_weight *const *biases, const float *inv_freq, const int32_t *token_pos, int head_dim);
// out = silu(x . wg^T + bg) * (x . wu^T + bu); up [n, wu->rows] is scratch for the GEMM path.
lz_status lz_fp8_swiglu(lz_cuda_ctx *c, lz_bf16 *out, lz_bf16 *up, const lz_bf16 *x, const lz_weight *wg,
                        const lz_weight *bg, const lz_weight *wu, const lz_weight *bu, int n);

static inline bool lz_is_fp8(const lz_weight *w) { return w && w->dtype == LZ_DTYPE_F8_E4M3; }

#endif
