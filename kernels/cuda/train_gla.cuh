// train_gla.cuh - what the GLA training forward and backward share: the shape,
// and the chunk-local cumulative log gates.
#ifndef LZ_TRAIN_GLA_CUH
#define LZ_TRAIN_GLA_CUH

#include "train_common.cuh" // lz_block_mm, LZ_TB

enum { GC = LZ_TRAIN_CHUNK }; // tokens per chunk (64, as the CPU reference and the inference kernel)

struct train_gla_shape {
    int Hq, Hkv, Hs, d, F, qps, T, chunks; // F = 2f; qps = query heads per state head
    __device__ int value_head(int s) const { return Hs == Hkv ? s : s / (Hq / Hkv); }
    __device__ int chunk_len(int c) const { return min(GC, T - c * GC); }
    // index of state head s of chunk c of sequence b in S0 [n_seq, chunks, Hs, F, d] (in units of F x d)
    __device__ size_t slot(int b, int c, int s) const { return ((size_t)b * chunks + c) * Hs + s; }
};

static inline train_gla_shape train_gla_shape_of(const lz_lizard_geom *g, int T) {
    return {g->Hq, g->Hkv, g->Hs, g->d, 2 * g->f, g->Hq / g->Hs, T, lz_train_chunks(T)};
}

// G [n_seq * T]: chunk-local cumulative log gates (train_gla_forward.cu)
lz_status lz_cuda_gla_cumulative_gates(float *G, const float *log_gamma, int n_seq, int T);

// The chunk's G into Gs[0..n) (one barrier).
__device__ __forceinline__ void load_chunk_gates(float *Gs, const float *G, size_t row0, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        Gs[i] = G[row0 + i];
    __syncthreads();
}

#endif
