// fp8_gemm.cu - FP8 linear layers for steps larger than the GEMV's (prompts, decode of many
// sequences): each token's activations quantized to E4M3 with a scale of its own (fp8_rule.h's row
// rule applied to the token's row: s_t = max |x_t| / 448), the product of the codes on the FP8
// tensor cores (cuBLASLt, E4M3 x E4M3, fp32 accumulation), then one epilogue pass that multiplies
// each element by its token's and its row's scales, adds the bias and stores or adds to the residual.
//
// cuBLAS is column-major: the row-major W [m, k] is k x m to it (op T), the row-major codes X [n, k]
// k x n (op N), and the product m x n column-major is out [n, m] row-major: the "TN" layout that FP8
// products require. Where cuBLASLt offers it for the shape (and LIZARD_FP8_SCALED is not 0), it
// applies the scales itself (outer-vector scaling: a vector of m row scales for A, of n token scales
// for B), the bias in its epilogue and the residual as beta = 1 into a bf16 output: one pass, no
// epilogue kernel. Else the product is written in fp32 (or, where that is not offered, bf16: one more
// rounding before the scales) and the epilogue kernel applies them. The choice is asked once per shape.
#include <cuda_fp8.h>  // __nv_cvt_float_to_fp8
#include <cublasLt.h>

#include "fp8_linear.cuh"
#include "fp8_rule.h" // lz_fp8_row_scale

namespace {

enum { LT_CACHE = 32 };
enum lt_mode { LT_SCALED, LT_F32, LT_BF16 }; // scales inside cuBLASLt; else the product in fp32 or bf16
struct lt_choice {
    int m, n, k;
    bool bias, residual; // (the scaled mode's epilogue and beta)
    lt_mode mode;
    cublasLtMatmulAlgo_t algo;
};
struct fp8_gemm_ctx {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    lt_choice cache[LT_CACHE];
    int cached, next;
};

// One block a token: the row's largest magnitude, its scale, then its codes (8 a thread at a time).
__global__ void quantize_acts_kernel(const lz_bf16 *x, int k, uint8_t *codes, float *scales) {
    __shared__ float red[32];
    const lz_bf16 *xt = x + (size_t)blockIdx.x * k;
    uint8_t *qt = codes + (size_t)blockIdx.x * k;
    float amax = 0.0f;
    for (int c = threadIdx.x * 8; c < k; c += blockDim.x * 8) {
        float v[8];
        vec16<lz_bf16>::load(v, xt + c);
#pragma unroll
        for (int i = 0; i < 8; i++)
            amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = lz_block_max(amax, red);
    const float s = lz_fp8_row_scale(amax);
    if (threadIdx.x == 0)
        scales[blockIdx.x] = s;
    for (int c = threadIdx.x * 8; c < k; c += blockDim.x * 8) {
        float v[8];
        vec16<lz_bf16>::load(v, xt + c);
        uint32_t word[2] = {0, 0};
#pragma unroll
        for (int i = 0; i < 8; i++) // round to nearest even, saturating at 448, as the rule
            word[i / 4] |= (uint32_t)__nv_cvt_float_to_fp8(v[i] / s, __NV_SATFINITE, __NV_E4M3) << (8 * (i % 4));
        *(uint2 *)(qt + c) = make_uint2(word[0], word[1]);
    }
}

// out[t][o] (=, +=) round(acc[t][o] * s_t * s_o + bias[o]).
template <typename A, bool RESIDUAL>
__global__ void fp8_epilogue_kernel(lz_bf16 *out, const A *acc, const float *tok_scale, const float *row_scale,
                                    const lz_bf16 *bias, int n, int m) {
    const size_t total = (size_t)n * m;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / m), o = (int)(i % m);
        float r = lz_to_float(acc[i]) * tok_scale[t] * row_scale[o];
        if (bias)
            r += __bfloat162float(bias[o]);
        if constexpr (RESIDUAL) // the product rounded first, as the unfused linear then add would
            out[i] = __float2bfloat16_rn(__bfloat162float(out[i]) + __bfloat162float(__float2bfloat16_rn(r)));
        else
            out[i] = __float2bfloat16_rn(r);
    }
}

fp8_gemm_ctx *ctx_of(lz_cuda_ctx *c) { return (fp8_gemm_ctx *)c->fp8_gemm; }

// The operation and the layouts of out^T [m, n] = W [m, k] . X^T (C the same as D).
struct lt_problem {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t a = NULL, b = NULL, d = NULL;
    ~lt_problem() {
        if (op)
            cublasLtMatmulDescDestroy(op);
        if (a)
            cublasLtMatrixLayoutDestroy(a);
        if (b)
            cublasLtMatrixLayoutDestroy(b);
        if (d)
            cublasLtMatrixLayoutDestroy(d);
    }
};
struct lt_args {
    int m, n, k;
    const float *row_scale, *tok_scale; // LT_SCALED
    const lz_bf16 *bias;                // LT_SCALED: the epilogue's (NULL: none)
};
lz_status lt_describe(lt_problem *p, lt_mode mode, const lt_args &g) {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LZ_CUDA_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (mode == LT_SCALED) {
        const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec));
        LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec));
        LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.row_scale,
                                                   sizeof g.row_scale));
        LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.tok_scale,
                                                   sizeof g.tok_scale));
        if (g.bias) {
            const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
            const cudaDataType_t bias_type = CUDA_R_16BF;
            LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
            LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
            LZ_CUDA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                       sizeof bias_type));
        }
    }
    LZ_CUDA_TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, g.k, g.m, g.k));
    LZ_CUDA_TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, g.k, g.n, g.k));
    LZ_CUDA_TRY(cublasLtMatrixLayoutCreate(&p->d, mode == LT_F32 ? CUDA_R_32F : CUDA_R_16BF, g.m, g.n, g.m));
    return LZ_OK;
}

// The mode and algorithm of a product: from the cache, else asked of cuBLASLt in the order scaled
// (where allowed), fp32, bf16.
lz_status lt_choose(fp8_gemm_ctx *g, bool allow_scaled, const lt_args &args, bool residual, lt_choice **out) {
    const bool bias = args.bias != NULL;
    for (int i = 0; i < g->cached; i++) {
        lt_choice *c = &g->cache[i];
        if (c->m == args.m && c->n == args.n && c->k == args.k && c->bias == bias && c->residual == residual) {
            *out = c;
            return LZ_OK;
        }
    }
    cublasLtMatmulPreference_t pref;
    LZ_CUDA_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t ps = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &g->workspace_bytes, sizeof g->workspace_bytes);
    // activations are 16-byte aligned, not always 256 as the heuristic assumes unless told
    const uint32_t align = 16;
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && ps == CUBLAS_STATUS_SUCCESS; i++)
        ps = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
    lt_choice ch = {args.m, args.n, args.k, bias, residual, LT_F32, {}};
    bool found = false;
    for (int mode = allow_scaled ? LT_SCALED : LT_F32; mode <= LT_BF16 && !found && ps == CUBLAS_STATUS_SUCCESS;
         mode++) {
        lt_problem p;
        const lz_status s = lt_describe(&p, (lt_mode)mode, args);
        if (s != LZ_OK) {
            cublasLtMatmulPreferenceDestroy(pref);
            return s;
        }
        // (an answer, not a failure: a mode cuBLASLt does not offer here is NOT_SUPPORTED or no result)
        cublasLtMatmulHeuristicResult_t r = {};
        int count = 0;
        if (cublasLtMatmulAlgoGetHeuristic(g->lt, p.op, p.a, p.b, p.d, p.d, pref, 1, &r, &count) ==
                CUBLAS_STATUS_SUCCESS && count > 0 && r.state == CUBLAS_STATUS_SUCCESS) {
            ch.mode = (lt_mode)mode, ch.algo = r.algo, found = true;
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    LZ_CUDA_TRY(ps);
    if (!found)
        return lz_fail(LZ_ERR_INTERNAL, "cuBLASLt offers no FP8 (E4M3 x E4M3) product of [%d, %d] x [%d, %d]^T on this "
                       "device (FP8 tensor cores: compute capability 8.9 or later)", args.n, args.k, args.m, args.k);
    const int i = g->cached < LT_CACHE ? g->cached++ : (g->next++ % LT_CACHE);
    g->cache[i] = ch;
    *out = &g->cache[i];
    return LZ_OK;
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

} // namespace

lz_status lz_fp8_gemm_init(lz_cuda_ctx *c) {
    if (c->fp8_gemm)
        return LZ_OK;
    fp8_gemm_ctx *g = (fp8_gemm_ctx *)calloc(1, sizeof *g);
    if (!g)
        return lz_fail(LZ_ERR_NOMEM, "fp8: out of host memory");
    c->fp8_gemm = g;
    g->workspace_bytes = (size_t)32 << 20; // our own: cuBLASLt must not allocate while a step is recorded
    LZ_CUDA_TRY(cublasLtCreate(&g->lt));
    LZ_CUDA_TRY(cudaMalloc(&g->workspace, g->workspace_bytes));
    return LZ_OK;
}

void lz_fp8_gemm_destroy(lz_cuda_ctx *c) {
    fp8_gemm_ctx *g = ctx_of(c);
    if (!g)
        return;
    if (g->workspace)
        cudaFree(g->workspace);
    if (g->lt)
        cublasLtDestroy(g->lt);
    free(g);
    c->fp8_gemm = NULL;
}

lz_status lz_fp8_quantize_acts(lz_cuda_ctx *c, const lz_bf16 *x, int n, int k, int64_t max_rows, lz_fp8_acts *a) {
    if (k % 16 != 0)
        return lz_fail(LZ_ERR_INTERNAL, "fp8: activations of width %d (a multiple of 16 expected)", k);
    const size_t codes = align256((size_t)n * k), scales = align256(sizeof(float) * (size_t)n);
    LZ_TRY(lz_cuda_scratch(c, codes + scales + sizeof(float) * (size_t)n * (size_t)max_rows));
    uint8_t *base = (uint8_t *)c->scratch;
    *a = {base, (const float *)(base + codes), base + codes + scales, n, k};
    quantize_acts_kernel<<<n, 256, 0, c->stream>>>(x, k, base, (float *)(base + codes));
    LZ_LAUNCH_CHECK("fp8 quantize_acts");
    return LZ_OK;
}

lz_status lz_fp8_gemm(lz_cuda_ctx *c, const lz_fp8_acts *a, lz_bf16 *out, const lz_weight *w, const lz_bf16 *bias,
                      lz_fp8_epilogue epi) {
    fp8_gemm_ctx *g = ctx_of(c);
    if (!g)
        return lz_fail(LZ_ERR_INTERNAL, "fp8: the cuBLASLt context was not made (lz_fp8_gemm_init)");
    if (w->cols != a->k || w->rows > INT_MAX || epi == LZ_FP8_SWIGLU)
        return lz_fail(LZ_ERR_INTERNAL, "fp8_gemm: weight [%lld, %lld] for activations of width %d",
                       (long long)w->rows, (long long)w->cols, a->k);
    const int m = (int)w->rows, n = a->n, k = a->k;
    const bool res = epi == LZ_FP8_RESIDUAL;
    lt_args args = {m, n, k, w->scale, a->scale, bias};
    lt_choice *ch;
    LZ_TRY(lt_choose(g, c->fp8_scaled, args, res, &ch));
    if (ch->mode != LT_SCALED)
        args.bias = NULL; // (the epilogue kernel adds it)
    lt_problem p;
    LZ_TRY(lt_describe(&p, ch->mode, args));
    const float one = 1.0f, zero = 0.0f;
    if (ch->mode == LT_SCALED) { // out (=, +=) s_o . s_t . (W X^T) (+ bias), rounded once
        LZ_CUDA_TRY(cublasLtMatmul(g->lt, p.op, &one, w->data, p.a, a->codes, p.b, res ? &one : &zero, out, p.d, out,
                                   p.d, &ch->algo, g->workspace, g->workspace_bytes, c->stream));
        return LZ_OK;
    }
    LZ_CUDA_TRY(cublasLtMatmul(g->lt, p.op, &one, w->data, p.a, a->codes, p.b, &zero, a->acc, p.d, a->acc, p.d,
                               &ch->algo, g->workspace, g->workspace_bytes, c->stream));
    const size_t total = (size_t)n * m;
    const int grid = (int)((total + 255) / 256 < (size_t)c->n_sms * 8 ? (total + 255) / 256 : (size_t)c->n_sms * 8);
    const bool f32 = ch->mode == LT_F32;
    if (f32 && res)
        fp8_epilogue_kernel<float, true><<<grid, 256, 0, c->stream>>>(out, (const float *)a->acc, a->scale, w->scale, bias, n, m);
    else if (f32)
        fp8_epilogue_kernel<float, false><<<grid, 256, 0, c->stream>>>(out, (const float *)a->acc, a->scale, w->scale, bias, n, m);
    else if (res)
        fp8_epilogue_kernel<lz_bf16, true><<<grid, 256, 0, c->stream>>>(out, (const lz_bf16 *)a->acc, a->scale, w->scale, bias, n, m);
    else
        fp8_epilogue_kernel<lz_bf16, false><<<grid, 256, 0, c->stream>>>(out, (const lz_bf16 *)a->acc, a->scale, w->scale, bias, n, m);
    LZ_LAUNCH_CHECK("fp8 epilogue");
    return LZ_OK;
}
