// feature_map.cu - Hedgehog feature maps: u = x . W per head, then the two
// softmaxes (or exps) over the f features. Decode steps: one block per (token,
// output head). Prompts in bf16: one block per 64 tokens and output head, u on
// tensor cores (WMMA, fp32 accumulation) with the head's W in shared memory
// once per 64 tokens, the softmaxes as the epilogue (one warp per token).
#include <mma.h>       // nvcuda::wmma
#include <stdint.h>    // uintptr_t
#include <type_traits> // std::is_same

#include "cuda_kernels.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait

// grid (n, Hout), block fb x parts (fb = f rounded up to a warp multiple):
// thread (j, part) sums u_j over rows part, part + parts, ... of W, so that a
// decode step's few blocks still have many loads in flight; the parts meet in
// shared memory. smem: x head [d], partial u [parts][fb]
template <typename T>
__global__ void feature_map_kernel(T *out, const T *x, const T *w, int n_w, int Hx, int Hout, int d, int f, int fb,
                                   bool exp_map) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    float *part_u = xs + d;
    const int t = blockIdx.x, o = blockIdx.y, j = threadIdx.x % fb, part = threadIdx.x / fb, parts = blockDim.x / fb;
    const int rep = Hout / Hx;
    lz_pdl_wait(); // (a decode step's kernel: launched through lz_launch)
    lz_pdl_launch_dependents();
    const T *xh = x + ((size_t)t * Hx + o / rep) * d;
    const T *wh = w + (size_t)(n_w == 1 ? 0 : o) * d * f;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        xs[i] = lz_to_float(xh[i]);
    __syncthreads();
    float u = 0.0f;
    if (j < f) {
#pragma unroll 8
        for (int i = part; i < d; i += parts)
            u += xs[i] * lz_to_float(wh[(size_t)i * f + j]);
    }
    part_u[part * fb + j] = u;
    __syncthreads();
    u = 0.0f;
    for (int p = 0; p < parts; p++)
        u += part_u[p * fb + j];
    const bool mine = part == 0 && j < f; // every part now holds the full u_j; part 0 writes
    T *po = out + ((size_t)t * Hout + o) * 2 * f;
    if (exp_map) {
        if (mine) {
            po[j] = lz_from_float<T>(expf(u));
            po[f + j] = lz_from_float<T>(expf(-u));
        }
        return;
    }
    const bool valid = j < f;
    const float mx = lz_block_max(valid ? u : -INFINITY, red), mn = -lz_block_max(valid ? -u : -INFINITY, red);
    const float ep = mine ? expf(u - mx) : 0.0f, en = mine ? expf(mn - u) : 0.0f;
    const float sp = lz_block_sum(ep, red), sn = lz_block_sum(en, red);
    if (mine) {
        po[j] = lz_from_float<T>(ep / sp);
        po[f + j] = lz_from_float<T>(en / sn);
    }
}

// Tensor-core path -----------------------------------------------------------

typedef __nv_bfloat16 bf16;
enum {
    FM_ROWS = 64,         // tokens per block
    FM_MAX = 256,         // d and f (rounded up to 16) at most this
    FM_WARPS = 8,
    FM_TILES = FM_ROWS / 16 * (FM_MAX / 16) / FM_WARPS, // output tiles a warp holds, at most
    FM_MIN_TOKENS = 16    // fewer tokens: the per-token kernel (a block per token re-reading W is cheap then)
};

// Shared-memory layout: X [64][ldx] and W [dp][ldw] in bf16, rows padded by 8
// elements (16 bytes) against bank conflicts; once the product is done, U
// [64][ldu] fp32 reuses the same bytes.
struct fm_layout {
    int dp, fp, ldx, ldw, ldu;
    size_t bytes;
};
static fm_layout fm_layout_of(int d, int f) {
    fm_layout l;
    l.dp = (d + 15) / 16 * 16, l.fp = (f + 15) / 16 * 16;
    l.ldx = l.dp + 8, l.ldw = l.fp + 8, l.ldu = l.fp + 4;
    const size_t in = sizeof(bf16) * ((size_t)FM_ROWS * l.ldx + (size_t)l.dp * l.ldw);
    const size_t u = sizeof(float) * (size_t)FM_ROWS * l.ldu;
    l.bytes = in > u ? in : u;
    return l;
}

// dst [rows][ld] (bf16, ld % 8 == 0) = src rows `stride` apart, `cols` valid
// columns of `rows_valid` valid rows; zeros elsewhere up to `width` (% 8 == 0)
// columns. 16-byte loads when a source row stays 16-byte aligned (vec).
__device__ void fm_load_tile(bf16 *dst, int ld, const bf16 *src, size_t stride, int rows, int rows_valid, int cols,
                             int width, bool vec) {
    const int vecs = width / 8;
    for (int e = threadIdx.x; e < rows * vecs; e += blockDim.x) {
        const int r = e / vecs, c = (e % vecs) * 8;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r < rows_valid) {
            const bf16 *sr = src + (size_t)r * stride + c;
            if (vec && c + 8 <= cols) {
                val = *(const uint4 *)sr;
            } else {
                bf16 *h = (bf16 *)&val;
#pragma unroll
                for (int i = 0; i < 8; i++) // constant indices keep val in registers
                    if (c + i < cols)
                        h[i] = sr[i];
            }
        }
        *(uint4 *)(dst + (size_t)r * ld + c) = val;
    }
}

// grid (ceil(n / 64), Hout), block 32 * FM_WARPS
__global__ void __launch_bounds__(32 * FM_WARPS) feature_map_tc_kernel(bf16 *out, const bf16 *x, const bf16 *w, int n_w,
                                                                       int n, int Hx, int Hout, int d, int f,
                                                                       fm_layout L, bool vec_x, bool vec_w,
                                                                       bool exp_map) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char fm_smem[];
    bf16 *Xs = (bf16 *)fm_smem, *Ws = Xs + (size_t)FM_ROWS * L.ldx;
    float *U = (float *)fm_smem; // after the product
    const int t0 = blockIdx.x * FM_ROWS, o = blockIdx.y, rows = min(FM_ROWS, n - t0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    fm_load_tile(Xs, L.ldx, x + ((size_t)t0 * Hx + o / (Hout / Hx)) * d, (size_t)Hx * d, FM_ROWS, rows, d, L.dp, vec_x);
    fm_load_tile(Ws, L.ldw, w + (size_t)(n_w == 1 ? 0 : o) * d * f, f, L.dp, d, f, L.fp, vec_w);
    __syncthreads();
    // U = X W: 4 x fp/16 output tiles, warp `warp` owns tiles warp, warp + 8, ...
    const int col_tiles = L.fp / 16, n_tiles = FM_ROWS / 16 * col_tiles;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM_TILES];
#pragma unroll
    for (int k = 0; k < FM_TILES; k++) {
        const int tile = warp + k * FM_WARPS, ti = tile / col_tiles, tj = tile % col_tiles;
        if (tile >= n_tiles)
            break;
        wmma::fill_fragment(acc[k], 0.0f);
        for (int kk = 0; kk < L.dp; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
            wmma::load_matrix_sync(a, Xs + (size_t)ti * 16 * L.ldx + kk, L.ldx);
            wmma::load_matrix_sync(b, Ws + (size_t)kk * L.ldw + tj * 16, L.ldw);
            wmma::mma_sync(acc[k], a, b, acc[k]);
        }
    }
    __syncthreads(); // every warp is done with X and W: U may overwrite them
#pragma unroll
    for (int k = 0; k < FM_TILES; k++) {
        const int tile = warp + k * FM_WARPS, ti = tile / col_tiles, tj = tile % col_tiles;
        if (tile >= n_tiles)
            break;
        wmma::store_matrix_sync(U + (size_t)ti * 16 * L.ldu + tj * 16, acc[k], L.ldu, wmma::mem_row_major);
    }
    __syncthreads();
    // the epilogue: one warp per token row, pairs of features per lane when f is even
    const bool pairs = f % 2 == 0;
    for (int r = warp; r < rows; r += FM_WARPS) {
        const float *u = U + (size_t)r * L.ldu;
        bf16 *po = out + ((size_t)(t0 + r) * Hout + o) * 2 * f;
        float mx = 0.0f, mn = 0.0f, sp = 1.0f, sn = 1.0f;
        if (!exp_map) {
            mx = -INFINITY, mn = INFINITY;
            for (int j = lane; j < f; j += 32) {
                mx = fmaxf(mx, u[j]);
                mn = fminf(mn, u[j]);
            }
            mx = lz_warp_max(mx), mn = -lz_warp_max(-mn);
            float a = 0.0f, b = 0.0f;
            for (int j = lane; j < f; j += 32) {
                a += expf(u[j] - mx);
                b += expf(mn - u[j]);
            }
            sp = lz_warp_sum(a), sn = lz_warp_sum(b);
        }
        // exp map: exp(u - 0) / 1 and exp(0 - u) / 1
        if (pairs) {
            for (int j = 2 * lane; j < f; j += 64) {
                *(__nv_bfloat162 *)(po + j) = __floats2bfloat162_rn(expf(u[j] - mx) / sp, expf(u[j + 1] - mx) / sp);
                *(__nv_bfloat162 *)(po + f + j) =
                    __floats2bfloat162_rn(expf(mn - u[j]) / sn, expf(mn - u[j + 1]) / sn);
            }
        } else {
            for (int j = lane; j < f; j += 32) {
                po[j] = __float2bfloat16_rn(expf(u[j] - mx) / sp);
                po[f + j] = __float2bfloat16_rn(expf(mn - u[j]) / sn);
            }
        }
    }
}

lz_status lz_feature_map_tc_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(feature_map_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return LZ_OK;
}

static bool feature_map_tc_fits(const lz_cuda_ctx *c, int n, int d, int f) {
    const fm_layout L = fm_layout_of(d, f);
    return !c->tc_off && n >= FM_MIN_TOKENS && L.dp <= FM_MAX && L.fp <= FM_MAX && L.bytes <= c->max_smem;
}

static lz_status feature_map_tc(lz_cuda_ctx *c, bf16 *out, const bf16 *x, const bf16 *w, int n_w, int n, int Hx,
                                int Hout, int d, int f, bool exp_map) {
    const fm_layout L = fm_layout_of(d, f);
    // 16-byte loads where every source row starts 16-byte aligned
    const bool vec_x = d % 8 == 0 && ((uintptr_t)x & 15) == 0, vec_w = f % 8 == 0 && ((uintptr_t)w & 15) == 0;
    feature_map_tc_kernel<<<dim3((n + FM_ROWS - 1) / FM_ROWS, Hout), 32 * FM_WARPS, L.bytes, c->stream>>>(
        out, x, w, n_w, n, Hx, Hout, d, f, L, vec_x, vec_w, exp_map);
    LZ_LAUNCH_CHECK("feature_map (tensor cores)");
    return LZ_OK;
}

// Launcher ----------------------------------------------------------------------

template <typename T>
lz_status feature_map_forward(lz_cuda_ctx *c, T *out, const T *x, const T *w, int n_w, int n, int Hx, int Hout, int d,
                              int f, bool exp_map) {
    if constexpr (std::is_same<T, bf16>::value) {
        if (feature_map_tc_fits(c, n, d, f))
            return feature_map_tc(c, out, x, w, n_w, n, Hx, Hout, d, f, exp_map);
    }
    const int fb = ((f + 31) / 32) * 32;
    if (fb > 1024)
        return lz_fail(LZ_ERR_INPUT, "CUDA feature map supports feature_dim <= 1024, got %d", f);
    int parts = 512 / fb; // about 512 threads a block, and no more parts than rows
    parts = parts < 1 ? 1 : (parts > d ? d : parts);
    const size_t smem = sizeof(float) * ((size_t)d + (size_t)parts * fb);
    if (smem > 48 * 1024) // the default limit: no opt-in needed
        return lz_fail(LZ_ERR_INPUT, "CUDA feature map needs %zu bytes of shared memory for head_dim %d (at most 48 KB)",
                       smem, d);
    LZ_TRY(lz_launch(c, "feature_map", feature_map_kernel<T>, dim3((unsigned)n, (unsigned)Hout), dim3((unsigned)(fb * parts)),
                     smem, out, x, w, n_w, Hx, Hout, d, f, fb, exp_map));
    LZ_LAUNCH_CHECK("feature_map");
    return LZ_OK;
}

#define LZ_FMAP(T)                                                                                               \
    template lz_status feature_map_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, int, int, int, int, int,  \
                                              int, bool);
LZ_INSTANTIATE(LZ_FMAP)
