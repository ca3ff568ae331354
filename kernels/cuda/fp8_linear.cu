// fp8_linear.cu - the FP8 forms of the linear ops: the GEMV for decode-sized steps, the activations
// quantized once a step and one FP8 product a layer for the rest.
#include "fp8_linear.cuh"

static const lz_bf16 *bias_of(const lz_weight *const *biases, int i) {
    const lz_weight *b = biases ? biases[i] : NULL;
    return b && b->data ? (const lz_bf16 *)b->data : NULL;
}

lz_status lz_fp8_linear_many(lz_cuda_ctx *c, int count, void *const *outs, const lz_bf16 *x, const lz_weight *const *ws,
                             const lz_weight *const *biases, lz_fp8_epilogue epi, int n) {
    if (count < 1 || count > LZ_FP8_MAX_SEGMENTS || epi == LZ_FP8_SWIGLU)
        return lz_fail(LZ_ERR_INTERNAL, "fp8 linear: %d layers", count);
    int64_t max_rows = 0;
    for (int i = 0; i < count; i++) {
        const bool ok = lz_is_fp8(ws[i]) || (ws[i]->dtype == LZ_DTYPE_BF16 && n <= LZ_FP8_GEMV_TOKENS);
        if (!ok || ws[i]->cols != ws[0]->cols)
            return lz_fail(LZ_ERR_INTERNAL, "fp8 linear: layer %d is not FP8 (or bf16 in a GEMV) of width %lld", i,
                           (long long)ws[0]->cols);
        max_rows = ws[i]->rows > max_rows ? ws[i]->rows : max_rows;
    }
    const int k = (int)ws[0]->cols;
    if (n <= LZ_FP8_GEMV_TOKENS) { // one launch streams every layer's codes
        lz_fp8_segments seg = {};
        seg.count = count;
        for (int i = 0; i < count; i++) {
            seg.out[i] = (lz_bf16 *)outs[i], seg.w[i] = (const uint8_t *)ws[i]->data, seg.scale[i] = ws[i]->scale;
            seg.bias[i] = bias_of(biases, i), seg.m[i] = (int)ws[i]->rows;
            seg.wide |= lz_is_fp8(ws[i]) ? 0u : 1u << i;
        }
        return lz_fp8_gemv(c, seg, x, epi, n, k);
    }
    lz_fp8_acts a;
    LZ_TRY(lz_fp8_quantize_acts(c, x, n, k, max_rows, &a));
    for (int i = 0; i < count; i++)
        LZ_TRY(lz_fp8_gemm(c, &a, (lz_bf16 *)outs[i], ws[i], bias_of(biases, i), epi));
    return LZ_OK;
}

lz_status lz_fp8_rope(lz_cuda_ctx *c, void *const *outs, const lz_bf16 *x, const lz_weight *const *ws,
                      const lz_weight *const *biases, const float *inv_freq, const int32_t *token_pos, int head_dim) {
    lz_fp8_segments seg = {};
    seg.count = 3;
    for (int i = 0; i < 3; i++) {
        seg.out[i] = (lz_bf16 *)outs[i], seg.w[i] = (const uint8_t *)ws[i]->data, seg.scale[i] = ws[i]->scale;
        seg.bias[i] = bias_of(biases, i), seg.m[i] = (int)ws[i]->rows;
    }
    seg.rope_freq = inv_freq, seg.rope_pos = token_pos, seg.rope_half = head_dim / 2;
    return lz_fp8_gemv(c, seg, x, LZ_FP8_ROPE, 1, (int)ws[0]->cols);
}

lz_status lz_fp8_swiglu(lz_cuda_ctx *c, lz_bf16 *out, lz_bf16 *up, const lz_bf16 *x, const lz_weight *wg,
                        const lz_weight *bg, const lz_weight *wu, const lz_weight *bu, int n) {
    const lz_weight *ws[2] = {wg, wu}, *bs[2] = {bg, bu};
    if (wg->rows != wu->rows || wg->cols != wu->cols || !lz_is_fp8(wg) || !lz_is_fp8(wu))
        return lz_fail(LZ_ERR_INTERNAL, "fp8 swiglu: gate [%lld, %lld] and up [%lld, %lld]", (long long)wg->rows,
                       (long long)wg->cols, (long long)wu->rows, (long long)wu->cols);
    if (n <= LZ_FP8_GEMV_TOKENS) { // gate and up rows on the two halves of a warp, SwiGLU in its epilogue
        lz_fp8_segments seg = {};
        seg.count = 2;
        for (int i = 0; i < 2; i++) {
            seg.out[i] = out, seg.w[i] = (const uint8_t *)ws[i]->data, seg.scale[i] = ws[i]->scale;
            seg.bias[i] = bias_of(bs, i), seg.m[i] = (int)ws[i]->rows;
        }
        return lz_fp8_gemv(c, seg, x, LZ_FP8_SWIGLU, n, (int)wg->cols);
    }
    void *outs[2] = {out, up}; // rounded to bf16 each, then silu(gate) * up, as the unfused ops
    LZ_TRY(lz_fp8_linear_many(c, 2, outs, x, ws, bs, LZ_FP8_STORE, n));
    return swiglu_forward<lz_bf16>(c, out, out, up, (size_t)n * (size_t)wg->rows);
}
