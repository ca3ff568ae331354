// rope.cu - rotary embedding in HF's rotate-half layout, angle = pos * inv_freq in fp32 (as HF
// computes it), precise cosf/sinf (rope_rotate.cuh). Launched as a programmatic dependent (pdl.cuh).
//
// A block per token: its d/2 angles once into shared memory, then every q and k head of the token,
// V elements (16 bytes) of each half at a time: the angles depend on the token alone, not on the
// head, and a block per token and head (every thread its own cosf/sinf, 2-byte accesses) is many
// tiny blocks that launch faster than they run.
#include "cuda_kernels.cuh"
#include "pdl.cuh"         // lz_launch, lz_pdl_wait
#include "rope_rotate.cuh" // lz_rope_angle, lz_rope_turn

enum { ROPE_THREADS = 128 };

// V elements of a row, loaded and stored as one access (V = 16 bytes' worth, or 1)
template <typename T, int V> struct __align__(sizeof(T) * V) rope_vec {
    T e[V];
};

// grid (tokens), block ROPE_THREADS, shared: cos, sin [d / 2] floats. V divides d / 2; with V > 1 the
// rows are 16-byte aligned.
template <typename T, int V>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(T *q, T *k, const float *inv_freq, const int32_t *token_pos, int Hq, int Hkv, int d) {
    extern __shared__ float rope_cs[];
    const int t = blockIdx.x, half = d / 2;
    float *cs = rope_cs, *sn = rope_cs + half;
    lz_pdl_wait(); // q and k come from the previous kernel
    lz_pdl_launch_dependents();
    const float p = (float)token_pos[t];
    for (int j = threadIdx.x; j < half; j += blockDim.x)
        lz_rope_angle(p, inv_freq[j], &cs[j], &sn[j]);
    __syncthreads();
    const int per_head = half / V, items = (Hq + Hkv) * per_head;
    for (int e = threadIdx.x; e < items; e += blockDim.x) {
        const int h = e / per_head, j0 = (e % per_head) * V;
        T *x = h < Hq ? q + ((size_t)t * Hq + h) * d : k + ((size_t)t * Hkv + (h - Hq)) * d;
        rope_vec<T, V> a = *(const rope_vec<T, V> *)(x + j0), b = *(const rope_vec<T, V> *)(x + half + j0);
#pragma unroll
        for (int i = 0; i < V; i++) {
            float r0, r1;
            lz_rope_turn(lz_to_float(a.e[i]), lz_to_float(b.e[i]), cs[j0 + i], sn[j0 + i], &r0, &r1);
            a.e[i] = lz_from_float<T>(r0);
            b.e[i] = lz_from_float<T>(r1);
        }
        *(rope_vec<T, V> *)(x + j0) = a;
        *(rope_vec<T, V> *)(x + half + j0) = b;
    }
}
static_assert(sizeof(rope_vec<__nv_bfloat16, 8>) == 16 && sizeof(rope_vec<float, 4>) == 16, "rope_vec size");

template <typename T>
lz_status rope_forward(lz_cuda_ctx *c, T *q, T *k, const float *inv_freq, const lz_cuda_batch *b, int n_tokens,
                       const lz_attn_dims *dims) {
    constexpr int V = 16 / sizeof(T);
    const int d = dims->head_dim, half = d / 2;
    const size_t smem = sizeof(float) * 2 * (size_t)half;
    const auto kernel = half % V == 0 && lz_aligned16(q, k) ? rope_kernel<T, V> : rope_kernel<T, 1>;
    return lz_launch(c, "rope", kernel, dim3(n_tokens), dim3(ROPE_THREADS), smem, q, k, inv_freq, b->token_pos,
                     dims->n_heads, dims->n_kv_heads, d);
}

#define LZ_ROPE(T)                                                                                              \
    template lz_status rope_forward<T>(lz_cuda_ctx *, T *, T *, const float *, const lz_cuda_batch *, int,      \
                                       const lz_attn_dims *);
LZ_INSTANTIATE(LZ_ROPE)
