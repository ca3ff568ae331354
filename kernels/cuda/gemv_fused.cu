// gemv_fused.cu - the decode GEMV (gemv_kernel.cuh) with the op after it folded in:
//   epilogue residual: out[t, row] += the row's result (o_proj and down_proj onto the residual stream);
//   epilogue SwiGLU: the two halves of a warp stream gate row r and up row r, and lane 0 writes
//     silu(gate) * up (the gate and up outputs never reach memory, and the SwiGLU launch goes);
//   epilogue RoPE (q, k, v of a softmax layer, one token): a block's warps take rows i .. i + 3 and
//     i + d/2 .. i + d/2 + 3 of a head, meet in shared memory and write the rotated pairs (the rope
//     launch goes).
// The epilogues round as the unfused ops do (the product to T, then the add or the SwiGLU).
#include "gemv_kernel.cuh"

template <typename T, int EPI>
static lz_status by_tokens(lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, int n, int k) {
    if (n <= 1)
        return lz_gemv_launch<T, 1, EPI>(c, seg, x, n, k);
    if (n <= 4)
        return lz_gemv_launch<T, 4, EPI>(c, seg, x, n, k);
    return lz_gemv_launch<T, LZ_GEMV_MAX_TOKENS, EPI>(c, seg, x, n, k);
}

template <typename T>
lz_status gemv_fused_forward(lz_cuda_ctx *c, lz_gemv_segments<T> seg, const T *x, lz_gemv_epilogue epilogue, int n,
                             int k) {
    if (n < 1 || n > LZ_GEMV_MAX_TOKENS || k % vec16<T>::N != 0 || seg.count < 1 || seg.count > LZ_GEMV_MAX_SEGMENTS)
        return lz_fail(LZ_ERR_INTERNAL, "fused GEMV: %d tokens, %d inputs, %d segments", n, k, seg.count);
    if (epilogue == LZ_GEMV_SWIGLU) {
        if (seg.count != 2 || seg.m[0] != seg.m[1])
            return lz_fail(LZ_ERR_INTERNAL, "fused GEMV: SwiGLU needs two segments of equal rows");
        seg.total_rows = seg.m[0];
        return by_tokens<T, LZ_GEMV_SWIGLU>(c, seg, x, n, k);
    }
    seg.total_rows = 0;
    for (int s = 0; s < seg.count; s++)
        seg.total_rows += seg.m[s];
    if (epilogue == LZ_GEMV_ROPE) {
        if (seg.count < 2 || !lz_gemv_rope_fits(n, seg.m[0], seg.m[1], seg.total_rows, 2 * seg.rope_half))
            return lz_fail(LZ_ERR_INTERNAL, "fused GEMV: RoPE on %d + %d of %d rows, %d tokens", seg.m[0], seg.m[1],
                           seg.total_rows, n);
        return lz_gemv_launch<T, 1, LZ_GEMV_ROPE>(c, seg, x, n, k);
    }
    if (epilogue == LZ_GEMV_RESIDUAL)
        return by_tokens<T, LZ_GEMV_RESIDUAL>(c, seg, x, n, k);
    return lz_fail(LZ_ERR_INTERNAL, "fused GEMV: epilogue %d", (int)epilogue);
}

#define LZ_GEMV_FUSED(T)                                                                                         \
    template lz_status gemv_fused_forward<T>(lz_cuda_ctx *, lz_gemv_segments<T>, const T *, lz_gemv_epilogue, int, int);
LZ_INSTANTIATE(LZ_GEMV_FUSED)
