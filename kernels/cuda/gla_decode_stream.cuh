// gla_decode_stream.cuh - what the two launches of the streamed GLA decode (gla_decode_stream.cu)
// share with the tensor-core feature-map prep (gla_decode_prep_tc.cu): the launch parameters, and
// the prep's entry points.
#ifndef LZ_GLA_DECODE_STREAM_CUH
#define LZ_GLA_DECODE_STREAM_CUH

#include "cuda_kernels.cuh"

template <typename T> struct gs_params {
    T *out;                    // [n, Hq, d]
    const T *q, *k, *v, *gate; // q [n, Hq, d], k and v [n, Hkv, d], gate logits [n] (one token per sequence)
    const T *wq, *wk;          // [n_wq, d, f], [n_wk, d, f] (1 row: shared by all heads)
    float *S, *z;              // [slots, Hs, F, d], [slots, Hs, F]
    float *phi_q, *phi_k;      // scratch: [n_seqs, Hq, F], [n_seqs, Hs, F]
    const int32_t *start, *slot;
    int n_seqs, Hq, Hkv, Hs, d, f, n_wq, n_wk, cols;
    bool normalize, exp_map;
};

// The bf16 tensor-core prep (phi_q, phi_k and z for the stream kernel, gla_decode_prep_tc.cu): where
// it takes the shape (d a multiple of 16, f of 32 up to 128, 16-byte aligned rows), its
// launch, and its once-per-backend setup.
bool gla_decode_prep_tc_fits(const lz_cuda_ctx *c, const gs_params<__nv_bfloat16> &p);
lz_status gla_decode_prep_tc(lz_cuda_ctx *c, const gs_params<__nv_bfloat16> &p);
lz_status gla_decode_prep_tc_init(lz_cuda_ctx *c);

// The persistent state update (gla_decode_ring.cu), the stream kernel's replacement where it fits
// (aligned rows, 3 stages of shared memory): its test, launch and setup.
template <typename T> bool gla_decode_ring_fits(const lz_cuda_ctx *c, const gs_params<T> &p);
template <typename T> lz_status gla_decode_ring(lz_cuda_ctx *c, const gs_params<T> &p);
template <typename T> lz_status gla_decode_ring_init(lz_cuda_ctx *c);

#endif
