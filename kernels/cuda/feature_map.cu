// feature_map.cu - Hedgehog feature maps: u = x . W per head, then the two
// softmaxes (or exps) over the f features. Decode steps: one block per (token,
// output head). Prompts in bf16 with (d, f) in FMS_SHAPES (LLaMA's 128/128
// among them): the streaming kernel, a copy with a small GEMM inside (one block
// a SM, W staged once, warps on 16-token units: cp.async x, mma.sync, softmax
// from registers, 16-byte row stores); its reason and design above the kernel.
// Other bf16 prompts: one block per 64 tokens and output head, u on WMMA with
// the head's W in shared memory per block, the softmaxes as the epilogue (one
// warp per token).
#include <mma.h>       // nvcuda::wmma
#include <stdint.h>    // uintptr_t
#include <type_traits> // std::is_same

#include "cuda_kernels.cuh"
#include "ptx.cuh" // lz_cp_async16, lz_ldsm_x4, lz_mma_bf16, lz_fast_exp2
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

// Streaming prompt path (bf16, d in {64, 128}, f in {32, 64, 128}) ------------
//
// The map is a copy with a small GEMM inside: at 8K tokens the q map reads 67 MB
// and writes 134 MB. The kernel above re-staged W (32 KB) for every 64 tokens
// and head, went through shared memory for U, ran its epilogue one warp per
// token with 4-byte stores, and held one block of 64 tokens at a time: ~5x off
// the copy rate. Here one block a SM stages W once (again only when a per-head
// W changes head); each warp owns 16 tokens of one head at a time, its x rows
// prefetched FMS_NBUF - 1 units ahead by cp.async, u = x W on mma.sync into 64
// fp32 registers, the two softmaxes from those registers (a row's 128 values
// sit on the 4 lanes of a quad), the bf16 rows staged in shared memory and
// written out 16 bytes a lane, a whole 512-byte row per warp store.
enum {
    FMS_WARPS = 8,  // one block a SM (shared memory): 8 warps, up to 255 registers each
    FMS_ROWS = 16,  // tokens a warp unit (one mma row tile)
    FMS_GROUP = FMS_WARPS * FMS_ROWS, // tokens a block step (one head)
    FMS_NBUF = 3    // x buffers a warp: two units in flight while one is computed
};

template <int D, int F> struct fms_layout {
    static constexpr int LDX = D + 8, LDW = F + 8, LDO = 2 * F + 8; // bf16 elements; +16 bytes: no bank conflicts
    static constexpr size_t W_BYTES = sizeof(bf16) * D * LDW;
    static constexpr size_t WARP_BYTES = sizeof(bf16) * (FMS_NBUF * FMS_ROWS * LDX + FMS_ROWS * LDO);
    static constexpr size_t BYTES = W_BYTES + FMS_WARPS * WARP_BYTES;
};

// the unit's (head, first token) for block step `gi`: token-major when W is shared
// (neighbouring steps write neighbouring rows), head-major per head (W restaged rarely)
__device__ __forceinline__ void fms_unit(long gi, int tiles, int Hout, int n_w, int &o, int &t0) {
    if (n_w == 1)
        o = (int)(gi % Hout), t0 = (int)(gi / Hout) * FMS_GROUP;
    else
        o = (int)(gi / tiles), t0 = (int)(gi % tiles) * FMS_GROUP;
    t0 += (threadIdx.x >> 5) * FMS_ROWS;
}

// grid: min(steps, SMs) blocks, each a contiguous range of block steps (head, 128 tokens)
template <int D, int F>
__global__ void __launch_bounds__(32 * FMS_WARPS, 1)
    feature_map_stream_kernel(bf16 *__restrict__ out, const bf16 *__restrict__ x, const bf16 *__restrict__ w, int n_w,
                              int n, int Hx, int Hout, bool exp_map) {
    using L = fms_layout<D, F>;
    extern __shared__ __align__(128) unsigned char fm_smem[];
    bf16 *Ws = (bf16 *)fm_smem;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rep = Hout / Hx;
    bf16 *Xs = (bf16 *)(fm_smem + L::W_BYTES + warp * L::WARP_BYTES), *Os = Xs + FMS_NBUF * FMS_ROWS * L::LDX;
    const int tiles = (n + FMS_GROUP - 1) / FMS_GROUP;
    const long steps = (long)tiles * Hout, g0 = steps * blockIdx.x / gridDim.x, g1 = steps * (blockIdx.x + 1) / gridDim.x;

    // a unit's 16 x rows into buffer b (rows past n zero-filled), one commit group per unit
    auto load_x = [&](long gi, int b) {
        if (gi < g1) {
            int o, t0;
            fms_unit(gi, tiles, Hout, n_w, o, t0);
            constexpr int CPR = D / 8; // 16-byte chunks a row
#pragma unroll
            for (int e = lane; e < FMS_ROWS * CPR; e += 32) {
                const int r = e / CPR, ch = e % CPR, t = t0 + r;
                const bf16 *src = t < n ? x + ((size_t)t * Hx + o / rep) * D + ch * 8 : x;
                lz_cp_async16(lz_smem_u32(Xs + (b * FMS_ROWS + r) * L::LDX + ch * 8), src, t < n);
            }
        }
        lz_cp_async_commit();
    };
    // all of a thread's W loads in flight before its stores (a restage is on the block's critical path)
    auto load_w = [&](int o) {
        constexpr int PER = D * F / 8 / (32 * FMS_WARPS);
        static_assert(D * F / 8 % (32 * FMS_WARPS) == 0, "W in whole 16-byte chunks a thread");
        const bf16 *wh = w + (size_t)(n_w == 1 ? 0 : o) * D * F;
        uint4 v[PER];
#pragma unroll
        for (int i = 0; i < PER; i++)
            v[i] = *(const uint4 *)(wh + (size_t)(threadIdx.x + i * 32 * FMS_WARPS) * 8);
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int e = threadIdx.x + i * 32 * FMS_WARPS, r = e / (F / 8), c = (e % (F / 8)) * 8;
            *(uint4 *)(Ws + r * L::LDW + c) = v[i];
        }
    };

#pragma unroll
    for (int b = 0; b < FMS_NBUF - 1; b++)
        load_x(g0 + b, b);
    int w_head = -1; // the head whose W is staged
    for (long gi = g0; gi < g1; gi++) {
        int o, t0;
        fms_unit(gi, tiles, Hout, n_w, o, t0);
        const int wo = n_w == 1 ? 0 : o; // block-uniform
        if (wo != w_head) {
            __syncthreads(); // every warp is done with the previous W
            load_w(wo);
            __syncthreads();
            w_head = wo;
        }
        const int b = (int)((gi - g0) % FMS_NBUF);
        load_x(gi + FMS_NBUF - 1, (int)((gi - g0 + FMS_NBUF - 1) % FMS_NBUF));
        lz_cp_async_wait<FMS_NBUF - 1>();
        __syncwarp(); // the other lanes' chunks of this unit are visible
        if (t0 >= n)
            continue; // warp-uniform: the last step's warps past the prompt

        // u = x W: a 16 x F tile, F / 8 mma n-tiles of 4 fp32 a lane
        float acc[F / 8][4];
#pragma unroll
        for (int j = 0; j < F / 8; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        const bf16 *xb = Xs + b * FMS_ROWS * L::LDX;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            uint32_t a[4];
            lz_ldsm_x4(a, lz_smem_u32(xb + ((lane & 7) + ((lane >> 3) & 1) * 8) * L::LDX + ks * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < F / 16; np++) {
                uint32_t bb[4]; // n-tiles 2np (bb[0..1]) and 2np + 1 (bb[2..3])
                lz_ldsm_x4_trans(bb, lz_smem_u32(Ws + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::LDW + np * 16 + (lane >> 4) * 8));
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float *c = acc[2 * np + h];
                    lz_mma_bf16(c, a, bb[2 * h], bb[2 * h + 1]);
                }
            }
        }

        // epilogue: lane holds rows g = lane / 4 (acc[j][0..1]) and g + 8 (acc[j][2..3]),
        // columns 8j + 2q + {0, 1} (q = lane % 4); a row's values on the 4 lanes of its quad.
        // exp(v) = 2^(v log2 e), on the SFU; max-subtracted in fp32 as the reference.
        const float L2E = 1.4426950408889634f;
        float mp[2] = {0.0f, 0.0f}, mq[2] = {0.0f, 0.0f}; // log2e * (max u, min u); 0 for the exp map
        if (!exp_map) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float mx = -INFINITY, mn = INFINITY;
#pragma unroll
                for (int j = 0; j < F / 8; j++) {
                    mx = fmaxf(mx, fmaxf(acc[j][2 * h], acc[j][2 * h + 1]));
                    mn = fminf(mn, fminf(acc[j][2 * h], acc[j][2 * h + 1]));
                }
#pragma unroll
                for (int s = 1; s < 4; s <<= 1) {
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, s));
                    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, s));
                }
                mp[h] = mx * L2E, mq[h] = mn * L2E;
            }
        }
        float ep[F / 8][4], sp[2] = {0.0f, 0.0f}, sn[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < F / 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float yp = fmaf(acc[j][i], L2E, -mp[i >> 1]), yn = fmaf(-acc[j][i], L2E, mq[i >> 1]);
                yp = lz_fast_exp2(yp), yn = lz_fast_exp2(yn);
                ep[j][i] = yp, acc[j][i] = yn; // u is no longer needed
                sp[i >> 1] += yp, sn[i >> 1] += yn;
            }
        float ip[2] = {1.0f, 1.0f}, in[2] = {1.0f, 1.0f};
        if (!exp_map) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int s = 1; s < 4; s <<= 1) {
                    sp[h] += __shfl_xor_sync(0xffffffffu, sp[h], s);
                    sn[h] += __shfl_xor_sync(0xffffffffu, sn[h], s);
                }
                ip[h] = 1.0f / sp[h], in[h] = 1.0f / sn[h];
            }
        }
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int j = 0; j < F / 8; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                bf16 *row = Os + (g + 8 * h) * L::LDO + 8 * j + 2 * q;
                *(__nv_bfloat162 *)row = __floats2bfloat162_rn(ep[j][2 * h] * ip[h], ep[j][2 * h + 1] * ip[h]);
                *(__nv_bfloat162 *)(row + F) =
                    __floats2bfloat162_rn(acc[j][2 * h] * in[h], acc[j][2 * h + 1] * in[h]);
            }
        __syncwarp();
        // rows out 16 bytes a lane: a token's 2F outputs are contiguous
        constexpr int CPR = 2 * F / 8;
#pragma unroll
        for (int e = lane; e < FMS_ROWS * CPR; e += 32) {
            const int r = e / CPR, ch = e % CPR, t = t0 + r;
            if (t < n)
                *(uint4 *)(out + ((size_t)t * Hout + o) * 2 * F + ch * 8) = *(const uint4 *)(Os + r * L::LDO + ch * 8);
        }
        __syncwarp(); // Os is read before the next unit overwrites it
    }
    lz_cp_async_wait<0>();
}

// the instantiations: (d, f) pairs the streaming path takes
#define FMS_SHAPES(X) X(128, 128) X(128, 64) X(64, 64) X(64, 32)

lz_status lz_feature_map_tc_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(feature_map_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
#define FMS_INIT(D, F)                                                                                             \
    if (fms_layout<D, F>::BYTES <= c->max_smem)                                                                    \
        LZ_CUDA_TRY(cudaFuncSetAttribute(feature_map_stream_kernel<D, F>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                         (int)fms_layout<D, F>::BYTES));
    FMS_SHAPES(FMS_INIT)
#undef FMS_INIT
    return LZ_OK;
}

// The streaming path when (d, f) is one of FMS_SHAPES, its shared memory fits and
// every row starts 16-byte aligned (*taken); else the caller takes the WMMA kernel.
static lz_status feature_map_stream(lz_cuda_ctx *c, bf16 *out, const bf16 *x, const bf16 *w, int n_w, int n, int Hx,
                                    int Hout, int d, int f, bool exp_map, bool *taken) {
    *taken = false;
    if ((((uintptr_t)out | (uintptr_t)x | (uintptr_t)w) & 15) != 0)
        return LZ_OK;
    const long steps = (long)((n + FMS_GROUP - 1) / FMS_GROUP) * Hout;
    const unsigned grid = (unsigned)(steps < c->n_sms ? steps : c->n_sms); // one block a SM: its shared memory
#define FMS_CASE(D, F)                                                                                             \
    if (d == D && f == F && fms_layout<D, F>::BYTES <= c->max_smem) {                                              \
        feature_map_stream_kernel<D, F><<<grid, 32 * FMS_WARPS, fms_layout<D, F>::BYTES, c->stream>>>(              \
            out, x, w, n_w, n, Hx, Hout, exp_map);                                                                  \
        *taken = true;                                                                                              \
        LZ_LAUNCH_CHECK("feature_map (stream)");                                                                    \
        return LZ_OK;                                                                                               \
    }
    FMS_SHAPES(FMS_CASE)
#undef FMS_CASE
    return LZ_OK;
}

static bool feature_map_tc_fits(const lz_cuda_ctx *c, int n, int d, int f) {
    const fm_layout L = fm_layout_of(d, f);
    return n >= FM_MIN_TOKENS && L.dp <= FM_MAX && L.fp <= FM_MAX && L.bytes <= c->max_smem;
}

static lz_status feature_map_tc(lz_cuda_ctx *c, bf16 *out, const bf16 *x, const bf16 *w, int n_w, int n, int Hx,
                                int Hout, int d, int f, bool exp_map) {
    bool taken;
    LZ_TRY(feature_map_stream(c, out, x, w, n_w, n, Hx, Hout, d, f, exp_map, &taken));
    if (taken)
        return LZ_OK;
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
    return lz_launch(c, "feature_map", feature_map_kernel<T>, dim3((unsigned)n, (unsigned)Hout), dim3((unsigned)(fb * parts)),
                     smem, out, x, w, n_w, Hx, Hout, d, f, fb, exp_map);
}

#define LZ_FMAP(T)                                                                                               \
    template lz_status feature_map_forward<T>(lz_cuda_ctx *, T *, const T *, const T *, int, int, int, int, int,  \
                                              int, bool);
LZ_INSTANTIATE(LZ_FMAP)
