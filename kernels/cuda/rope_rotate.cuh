// rope_rotate.cuh - one rotate-half pair of RoPE, shared by the rope kernel and the q/k/v GEMV's
// RoPE epilogue so that both give the same bits: (a, b) = (x[j], x[j + d/2]) at angle
// pos * inv_freq[j] (fp32, as HF computes it; precise cosf/sinf), products rounded explicitly
// (no contraction choice left to the compiler).
#ifndef LZ_ROPE_ROTATE_CUH
#define LZ_ROPE_ROTATE_CUH

// cos and sin of pos * inv_freq, the angle rounded to fp32 first
__device__ __forceinline__ void lz_rope_angle(float pos, float inv_freq, float *cs, float *sn) {
    const float angle = __fmul_rn(pos, inv_freq);
    *cs = cosf(angle);
    *sn = sinf(angle);
}

// the pair (a, b) turned by the angle whose cos and sin are given
__device__ __forceinline__ void lz_rope_turn(float a, float b, float cs, float sn, float *x, float *y) {
    *x = __fmaf_rn(a, cs, -__fmul_rn(b, sn));
    *y = __fmaf_rn(b, cs, __fmul_rn(a, sn));
}

__device__ __forceinline__ void lz_rope_rotate(float a, float b, float pos, float inv_freq, float *x, float *y) {
    float cs, sn;
    lz_rope_angle(pos, inv_freq, &cs, &sn);
    lz_rope_turn(a, b, cs, sn, x, y);
}

#endif
