// attention_decode.cuh - decode-step attention (attention_decode.cu), shared by the retained softmax
// layers (KV cache) and the Lizard window branch (ring of the last w keys, meta-memory logits).
#ifndef LZ_ATTENTION_DECODE_CUH
#define LZ_ATTENTION_DECODE_CUH

#include "cuda_kernels.cuh"

// Whether a kernel takes `group` query heads per kv head at this head_dim (and LIZARD_DECODE_ATTN
// is not 0).
template <typename T> bool lz_attention_decode_fits(const lz_cuda_ctx *c, int group, int d);
// One token per sequence (n tokens): out = softmax(q K^T / sqrt(d)) V over the keys of positions
// [p - sliding_window + 1 (or 0), p], this step's k and v appended at position p first. kc, vc:
// [slots][capacity][Hkv][d]; ring: the row of position x is x % capacity (the window's rings, with
// capacity = sliding_window = w): then out += alpha * result (else out = result), and the window's
// n_meta meta-memory logits (meta) add their mass to the denominator.
template <typename T>
lz_status lz_attention_decode(lz_cuda_ctx *c, T *out, const T *q, const T *k, const T *v, T *kc, T *vc,
                              const lz_cuda_batch *b, int n, int Hq, int Hkv, int d, int capacity, int sliding_window,
                              bool ring, const T *meta, int n_meta, float alpha);
// Once per backend: the kernels' shared memory limits and the LIZARD_DECODE_* switches.
template <typename T> lz_status lz_attention_decode_init(lz_cuda_ctx *c);

#endif
