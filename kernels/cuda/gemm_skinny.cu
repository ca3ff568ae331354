// gemm_skinny.cu - linear layers of 9..64 tokens (decode of a batch) on tensor cores, bf16:
// out[n, m] = x[n, k] . W[m, k]^T (+ bias) (+ out when accumulating onto the residual stream).
// Bound by the weight stream, like the GEMV: each block owns SK_BM weight rows (the mma's M side,
// A operand) for every token of the step (the N side, padded with zeros to 16 NB), and streams k in
// slices of 64 through a cp.async ring deep enough that ~100 KB of weights an SM are in flight.
// Each weight byte is read once; x slices come again from L2 for each row tile.
// Few row tiles (q/o: 32, k/v: 8) would leave SMs idle, so k is split: each split writes an fp32
// partial tile to c->skinny_ws, and the last split to arrive at its tile's counter sums the partials
// in split order (deterministic) and sets the counter back to zero (graph replays see zeros).
// Several weight matrices of one input (q, k, v; gate, up) are one launch, as in gemv.cu.
// Launched through lz_launch: the ring's first weight slices are issued before lz_pdl_wait().
#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait
#include "ptx.cuh" // lz_cp_async16, lz_ldsm_x4, lz_mma_bf16

typedef __nv_bfloat16 bf16;

enum {
    SK_BM = 128,        // weight rows a block (4 warps x 32)
    SK_BK = 64,         // k a slice: 128-byte rows, 8 chunks of 16 bytes
    SK_THREADS = 128,
    SK_MIN_SLICES = 4,  // a split reads at least this many slices (else partials cost what weights do)
    SK_MERGE = 8,       // partials a merging thread loads at once
};

// Ring depth by token tile: 16 KB of weights + NB 2 KB of x a slice, two blocks an SM (<= ~110 KB each).
__host__ __device__ constexpr int sk_stages(int nb) { return nb == 1 ? 6 : nb == 4 ? 4 : 5; }
__host__ __device__ constexpr size_t sk_smem(int nb) {
    return (size_t)sk_stages(nb) * (SK_BM + 16 * nb) * SK_BK * sizeof(bf16);
}
static_assert(sk_smem(4) >= (size_t)64 * (SK_BM + 4) * sizeof(float), "the epilogue tile reuses the ring");

static long skinny_launches; // host-side count, for the tests and the bench

// Tiles are stored with the 16-byte chunk index XOR (row % 8): ldmatrix's 8 rows hit 8 bank groups.
__device__ __forceinline__ int sk_swz(int row, int chunk) { return row * SK_BK + ((chunk ^ (row & 7)) << 3); }

// One block: row tile blockIdx.x (over all segments), k split blockIdx.y of `splits`, each split
// `sps` slices. ws: [tile][split][N][SK_BM] fp32; count: [tiles], zero on entry and on exit.
template <int NB>
__global__ void __launch_bounds__(SK_THREADS) gemm_skinny_kernel(lz_gemv_segments<bf16> seg, const bf16 *x, int n,
                                                                 int k, int splits, int sps, float *ws,
                                                                 unsigned *count, int accumulate) {
    constexpr int N = 16 * NB, S = sk_stages(NB);
    extern __shared__ uint4 sk_smem_raw[];
    bf16 *sw = (bf16 *)sk_smem_raw, *sx = sw + S * SK_BM * SK_BK; // [S][SK_BM][SK_BK], [S][N][SK_BK]
    __shared__ int last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // the tile's segment; constant indices only, so that the segments stay in parameter space
    int m = seg.m[0], tile = blockIdx.x, here = (m + SK_BM - 1) / SK_BM;
    const bf16 *w = seg.w[0], *bias = seg.bias[0];
    bf16 *out = seg.out[0];
#pragma unroll
    for (int s = 1; s < LZ_GEMV_MAX_SEGMENTS; s++)
        if (s < seg.count && tile >= here) {
            tile -= here;
            m = seg.m[s], w = seg.w[s], bias = seg.bias[s], out = seg.out[s];
            here = (m + SK_BM - 1) / SK_BM;
        }
    const int row0 = tile * SK_BM;
    const int kt0 = blockIdx.y * sps, nkt = min(k / SK_BK - kt0, sps);

    // Thread tid copies chunk tid % 8 of rows tid / 8 + 16 j; rows past m and tokens past n are zeros.
    const int ch = tid & 7, r0 = tid >> 3;
    auto load_w = [&](int i) {
        bf16 *dst = sw + (i % S) * SK_BM * SK_BK;
        const size_t kc = (size_t)(kt0 + i) * SK_BK + ch * 8;
#pragma unroll
        for (int j = 0; j < SK_BM / 16; j++) {
            const int r = r0 + 16 * j;
            const bool ok = row0 + r < m;
            lz_cp_async16(dst + sk_swz(r, ch), ok ? w + (size_t)(row0 + r) * k + kc : w, ok);
        }
    };
    auto load_x = [&](int i) {
        bf16 *dst = sx + (i % S) * N * SK_BK;
        const size_t kc = (size_t)(kt0 + i) * SK_BK + ch * 8;
#pragma unroll
        for (int j = 0; j < NB; j++) {
            const int t = r0 + 16 * j;
            lz_cp_async16(dst + sk_swz(t, ch), t < n ? x + (size_t)t * k + kc : x, t < n);
        }
    };

    // weights first (no kernel writes them), then wait for the kernel that wrote x
#pragma unroll
    for (int i = 0; i < S - 1; i++)
        if (i < nkt)
            load_w(i);
    lz_pdl_wait(); // x, out, ws and count may belong to earlier kernels
    lz_pdl_launch_dependents();
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < nkt)
            load_x(i);
        lz_cp_async_commit(); // group i: slice i (group 0 also holds the weights issued above)
    }

    float acc[2][2 * NB][4]; // [m16 tile of the warp's 32 rows][n8 block][fragment]
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2 * NB; b++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[a][b][e] = 0.0f;
    const bool live = row0 + warp * 32 < m; // a warp of padding rows only skips the mma
    for (int i = 0; i < nkt; i++) {
        lz_cp_async_wait<S - 2>(); // slice i has landed (for this thread) ...
        __syncthreads();           // ... for every thread, and slice i - 1's stage is free
        if (i + S - 1 < nkt) {
            load_w(i + S - 1);
            load_x(i + S - 1);
        }
        lz_cp_async_commit();
        if (!live)
            continue;
        const uint32_t wb = lz_smem_u32(sw + (i % S) * SK_BM * SK_BK), xb = lz_smem_u32(sx + (i % S) * N * SK_BK);
#pragma unroll
        for (int kk = 0; kk < SK_BK / 16; kk++) {
            uint32_t a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) { // matrices: rows 0-7 / 8-15 x k 0-7, then k 8-15
                const int r = warp * 32 + mt * 16 + (lane & 15);
                lz_ldsm_x4(a[mt], wb + 2 * sk_swz(r, 2 * kk + (lane >> 4)));
            }
#pragma unroll
            for (int np = 0; np < NB; np++) { // matrices: tokens 0-7 x k 0-7, k 8-15, tokens 8-15 x ...
                uint32_t b[4];
                const int q = lane >> 3, t = np * 16 + (q >> 1) * 8 + (lane & 7);
                lz_ldsm_x4(b, xb + 2 * sk_swz(t, 2 * kk + (q & 1)));
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    lz_mma_bf16(acc[mt][2 * np], a[mt], b[0], b[1]);
                    lz_mma_bf16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
                }
            }
        }
    }
    lz_cp_async_wait<0>(); // (only empty groups are left)
    __syncthreads();       // the ring is free for the epilogue tile

    // The block's tile as fp32 [N][ld]: into shared memory when unsplit, else into its ws slot.
    const bool split = splits > 1;
    float *tile_ws = split ? ws + (size_t)blockIdx.x * splits * N * SK_BM : nullptr;
    float *dst = split ? tile_ws + (size_t)blockIdx.y * N * SK_BM : (float *)sk_smem_raw;
    const int ld = split ? SK_BM : SK_BM + 4; // (+4: the fragment stores hit 32 banks)
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nb = 0; nb < 2 * NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = warp * 32 + mt * 16 + (lane >> 2) + (e >> 1) * 8, t = nb * 8 + 2 * (lane & 3) + (e & 1);
                if (t < n && row0 + r < m)
                    dst[t * ld + r] = acc[mt][nb][e];
            }
    if (split) {
        __threadfence(); // the partial is visible before the arrival is counted
        __syncthreads();
        if (tid == 0) {
            const unsigned arrived = atomicAdd(count + blockIdx.x, 1u);
            last = arrived == (unsigned)splits - 1;
            if (last)
                count[blockIdx.x] = 0; // every split has arrived: ready for the next launch
        }
        __syncthreads();
        if (!last)
            return;
        __threadfence();
    } else {
        __syncthreads();
    }

    // 8 rows of one token a thread: the splits summed in order, + bias (+ out), 16-byte stores.
    for (int e = tid; e < n * (SK_BM / 8); e += SK_THREADS) {
        const int t = e / (SK_BM / 8), r = (e % (SK_BM / 8)) * 8;
        if (row0 + r >= m) // (m % 8 == 0: a group is all inside or all outside)
            continue;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (split) {
            // from L2 (other SMs wrote them), SK_MERGE splits' loads in flight before the adds (in split order)
            const float4 *p = (const float4 *)(tile_ws + t * SK_BM + r);
            for (int s0 = 0; s0 < splits; s0 += SK_MERGE) {
                float4 lo[SK_MERGE], hi[SK_MERGE];
#pragma unroll
                for (int u = 0; u < SK_MERGE; u++)
                    if (s0 + u < splits) {
                        lo[u] = __ldcg(p + (size_t)(s0 + u) * (N * SK_BM / 4));
                        hi[u] = __ldcg(p + (size_t)(s0 + u) * (N * SK_BM / 4) + 1);
                    }
#pragma unroll
                for (int u = 0; u < SK_MERGE; u++)
                    if (s0 + u < splits) {
                        v[0] += lo[u].x, v[1] += lo[u].y, v[2] += lo[u].z, v[3] += lo[u].w;
                        v[4] += hi[u].x, v[5] += hi[u].y, v[6] += hi[u].z, v[7] += hi[u].w;
                    }
            }
        } else {
            const float4 *p = (const float4 *)(dst + t * ld + r);
            const float4 lo = p[0], hi = p[1];
            v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
        }
        if (bias) {
            float bv[8];
            vec16<bf16>::load(bv, bias + row0 + r);
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] += bv[j];
        }
        bf16 *o = out + (size_t)t * m + row0 + r;
        if (accumulate) {
            float ov[8];
            vec16<bf16>::load(ov, o);
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] += ov[j];
        }
        uint4 packed;
        packed.x = lz_pack_bf16(v[0], v[1]), packed.y = lz_pack_bf16(v[2], v[3]);
        packed.z = lz_pack_bf16(v[4], v[5]), packed.w = lz_pack_bf16(v[6], v[7]);
        *(uint4 *)o = packed;
    }
}

// Attributes once per backend (not per launch: decode steps are captured in graphs).
lz_status gemm_skinny_init(lz_cuda_ctx *c) {
    void (*fns[4])(lz_gemv_segments<bf16>, const bf16 *, int, int, int, int, float *, unsigned *, int) = {
        gemm_skinny_kernel<1>, gemm_skinny_kernel<2>, gemm_skinny_kernel<3>, gemm_skinny_kernel<4>};
    for (int nb = 1; nb <= 4; nb++) {
        c->skinny_per_sm[nb - 1] = 0;
        if (sk_smem(nb) > c->max_smem)
            continue; // this GPU cannot hold the ring: cuBLAS
        LZ_CUDA_TRY(cudaFuncSetAttribute(fns[nb - 1], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sk_smem(nb)));
        LZ_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c->skinny_per_sm[nb - 1], fns[nb - 1], SK_THREADS,
                                                                  sk_smem(nb)));
    }
    return LZ_OK;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T>
bool gemm_skinny_takes(const lz_cuda_ctx *c, const lz_gemv_segments<T> &seg, const T *x, int n, int k) {
    if constexpr (sizeof(T) != 2) {
        return false;
    } else {
        if (c->skinny_off || n < LZ_SKINNY_MIN_TOKENS || n > LZ_SKINNY_MAX_TOKENS || k <= 0 || k % SK_BK != 0 ||
            seg.count < 1 || seg.count > LZ_GEMV_MAX_SEGMENTS || !aligned16(x) || c->skinny_per_sm[(n + 15) / 16 - 1] <= 0)
            return false;
        for (int s = 0; s < seg.count; s++)
            if (seg.m[s] <= 0 || seg.m[s] % 8 != 0 || !seg.w[s] || !aligned16(seg.w[s]) || !aligned16(seg.out[s]) ||
                !aligned16(seg.bias[s]))
                return false;
        return true;
    }
}

// Split workspace and counters: grown outside graph recording (every step shape runs once eagerly first).
static lz_status skinny_buffers(lz_cuda_ctx *c, size_t ws_bytes, int tiles) {
    if (ws_bytes > c->skinny_ws_bytes) {
        const size_t want = ws_bytes > ((size_t)16 << 20) ? ws_bytes : ((size_t)16 << 20);
        LZ_CUDA_TRY(cudaStreamSynchronize(c->stream)); // earlier launches may still use the old one
        if (c->skinny_ws)
            LZ_CUDA_TRY(cudaFree(c->skinny_ws));
        c->skinny_ws = NULL;
        c->skinny_ws_bytes = 0;
        LZ_CUDA_TRY(cudaMalloc(&c->skinny_ws, want));
        c->skinny_ws_bytes = want;
        c->buffers_moved = true;
    }
    if (tiles > c->skinny_count_n) {
        const int want = tiles > 4096 ? tiles : 4096;
        LZ_CUDA_TRY(cudaStreamSynchronize(c->stream));
        if (c->skinny_count)
            LZ_CUDA_TRY(cudaFree(c->skinny_count));
        c->skinny_count = NULL;
        c->skinny_count_n = 0;
        LZ_CUDA_TRY(cudaMalloc(&c->skinny_count, sizeof(unsigned) * want));
        LZ_CUDA_TRY(cudaMemsetAsync(c->skinny_count, 0, sizeof(unsigned) * want, c->stream));
        c->skinny_count_n = want;
        c->buffers_moved = true;
    }
    return LZ_OK;
}

template <int NB>
static lz_status launch(lz_cuda_ctx *c, const lz_gemv_segments<bf16> &seg, const bf16 *x, int n, int k, int tiles,
                        int splits, int sps, bool accumulate) {
    return lz_launch(c, "gemm_skinny", gemm_skinny_kernel<NB>, dim3((unsigned)tiles, (unsigned)splits),
                     dim3(SK_THREADS), sk_smem(NB), seg, x, n, k, splits, sps, c->skinny_ws, c->skinny_count,
                     accumulate ? 1 : 0);
}

template <typename T>
lz_status gemm_skinny_forward(lz_cuda_ctx *c, lz_gemv_segments<T> seg, const T *x, int n, int k, bool accumulate) {
    if constexpr (sizeof(T) != 2) {
        return lz_fail(LZ_ERR_INTERNAL, "gemm_skinny: bf16 only");
    } else {
        if (!gemm_skinny_takes<T>(c, seg, x, n, k))
            return lz_fail(LZ_ERR_INTERNAL,
                           "gemm_skinny: %d tokens, k %d, %d segments (m[0] %d): needs bf16, %d..%d tokens, k %% %d == 0, "
                           "m %% 8 == 0, 16-byte aligned pointers",
                           n, k, seg.count, seg.m[0], LZ_SKINNY_MIN_TOKENS, LZ_SKINNY_MAX_TOKENS, SK_BK);
        int tiles = 0;
        seg.total_rows = 0;
        for (int s = 0; s < seg.count; s++)
            tiles += (seg.m[s] + SK_BM - 1) / SK_BM, seg.total_rows += seg.m[s];
        // Split k until the grid fills one wave of resident blocks, each split >= SK_MIN_SLICES slices.
        // The merge is one block's: it reads splits x n x SK_BM partials from L2 while the rest of the
        // GPU idles, so splits^2 n <= 64 slices keeps it within ~2x that block's own weight bytes
        // (k/v alone at 64 tokens: 8 splits, not 16). LIZARD_SKINNY_SPLITS caps it (1: no split).
        const int nb = (n + 15) / 16, slices = k / SK_BK, slots = c->skinny_per_sm[nb - 1] * c->n_sms;
        int splits = slots / tiles, most = slices / SK_MIN_SLICES;
        splits = splits < most ? splits : most;
        while (splits > 1 && (size_t)splits * splits * n > (size_t)64 * slices)
            splits--;
        if (c->skinny_max_splits > 0 && splits > c->skinny_max_splits)
            splits = c->skinny_max_splits;
        splits = splits > 1 ? splits : 1;
        const int sps = (slices + splits - 1) / splits;
        splits = (slices + sps - 1) / sps; // no empty split
        if (splits > 1)
            LZ_TRY(skinny_buffers(c, sizeof(float) * (size_t)tiles * splits * 16 * nb * SK_BM, tiles));
        skinny_launches++;
        const bf16 *xb = (const bf16 *)x;
        switch (nb) {
        case 1: return launch<1>(c, seg, xb, n, k, tiles, splits, sps, accumulate);
        case 2: return launch<2>(c, seg, xb, n, k, tiles, splits, sps, accumulate);
        case 3: return launch<3>(c, seg, xb, n, k, tiles, splits, sps, accumulate);
        default: return launch<4>(c, seg, xb, n, k, tiles, splits, sps, accumulate);
        }
    }
}

// Launches so far (host calls, not graph replays): which path a linear layer took.
extern "C" long lz_gemm_skinny_launches(void) { return skinny_launches; }

#define LZ_GEMM_SKINNY(T)                                                                                           \
    template bool gemm_skinny_takes<T>(const lz_cuda_ctx *, const lz_gemv_segments<T> &, const T *, int, int);    \
    template lz_status gemm_skinny_forward<T>(lz_cuda_ctx *, lz_gemv_segments<T>, const T *, int, int, bool);
LZ_INSTANTIATE(LZ_GEMM_SKINNY)
