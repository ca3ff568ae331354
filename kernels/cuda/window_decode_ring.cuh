// window_decode_ring.cuh - the Lizard window branch of a decode step as a persistent kernel
// (window_decode_ring.cu): large batches, bf16, head_dim 64 or 128, up to 8 query heads a kv head,
// windows of up to 256 keys, code built for sm_90 or later (the copy engine's tensor copies).
#ifndef LZ_WINDOW_DECODE_RING_CUH
#define LZ_WINDOW_DECODE_RING_CUH

#include "cuda_kernels.cuh"

// One token per sequence (n tokens, position p each): out += alpha * softmax over the window's keys
// (positions (p - w, p], row x % w of the rings ring_k, ring_v [slots][w][Hkv][d]) with the n_meta
// meta-memory logits in the denominator; this step's k and v stored into row p % w first.
template <typename T> struct wr_params {
    T *out;
    const T *q, *k, *v;
    T *ring_k, *ring_v;
    const T *meta;
    const int32_t *token_seq, *slot, *token_pos;
    int n, Hq, Hkv, d, w, n_meta;
    float alpha;
};

// Whether the kernel takes this step (LIZARD_WINDOW_RING, the shape, alignment, shared
// memory, the driver's tensor-map encoder).
template <typename T> bool window_decode_ring_fits(const lz_cuda_ctx *c, const wr_params<T> &p);
template <typename T> lz_status window_decode_ring(lz_cuda_ctx *c, const wr_params<T> &p);
// Once per backend: the kernels' shared memory limits.
template <typename T> lz_status window_decode_ring_init(lz_cuda_ctx *c);

#endif
