// gla_decode_prep_tc.cu - the streamed GLA decode's first launch (gla_decode_stream.cu) on tensor
// cores, for bf16: per (feature-map head, tile of PT_SEQS sequences) u = x . W as bf16 wmma products
// with fp32 accumulation (the inputs are bf16 already, so each product is exact and only the order
// of the sums differs from the CUDA-core prep), then phi = [softmax(u) ++ softmax(-u)] (or
// [exp(u) ++ exp(-u)]) as fp32 into scratch, and for the state heads z = gamma z + phi_k.
// Why: the CUDA-core prep reads each head's weight once per 8 sequences, through registers, a chain
// of loads, sums and a softmax several waves long; here the weight sits in shared memory for 32
// sequences, its copy issued before the PDL wait, and the products take a few instructions a warp.
// The CUDA-core prep stays for fp32 (exactness checks) and shapes this one does not take.
#include <mma.h> // nvcuda::wmma
#include <stdint.h> // uintptr_t

#include "gla_decode_stream.cuh"
#include "pdl.cuh" // lz_launch, lz_pdl_wait, lz_pdl_launch_dependents
#include "ptx.cuh" // lz_cp_async16, lz_fast_exp2, lz_log_sigmoid

enum {
    PT_THREADS = 256,
    PT_WARPS = PT_THREADS / 32,
    PT_SEQS = 32,                // sequences a block: two 16-row tiles of x
    PT_SPW = PT_SEQS / PT_WARPS, // sequences a warp finishes
    PT_PAD = 8,                  // bf16 row padding of W and x in shared memory (16 bytes: no ldmatrix bank conflicts)
    PT_ZH = 4,                   // z values a lane holds for each half of a sequence's 2f features: f <= 32 PT_ZH
};

// Shared memory in bytes: W [d][f + PAD] and x [SEQS][d + PAD] as bf16, u [SEQS][f + 4] as fp32,
// the tile's rows and slots [SEQS] as ints.
static __host__ __device__ size_t pt_smem(int d, int f) {
    return 2 * ((size_t)d * (f + PT_PAD) + (size_t)PT_SEQS * (d + PT_PAD)) + 4 * (size_t)PT_SEQS * (f + 4) +
           4 * 2 * (size_t)PT_SEQS;
}

// grid (Hq + Hs map heads, ceil(n / PT_SEQS)), block PT_THREADS; heads as in gla_decode_prep_kernel.
// The chain after the PDL wait is one round trip for x (the weight, the rows and the slots are in
// shared memory by then), the products, then one for z and the gates, which overlap the softmaxes.
// Warp w finishes sequences w, w + PT_WARPS, ... side by side (their reductions interleaved), in the
// log2 domain with ex2.approx (a sequence after another, with expf and divisions, is issue-latency
// bound).
__global__ void __launch_bounds__(PT_THREADS, 3) gla_decode_prep_tc_kernel(gs_params<__nv_bfloat16> p) {
    using namespace nvcuda;
    using bf = __nv_bfloat16;
    constexpr float L2E = 1.4426950408889634f;
    extern __shared__ __align__(128) unsigned char pt_sm[];
    const int h = blockIdx.x, seq0 = blockIdx.y * PT_SEQS, d = p.d, f = p.f, F = 2 * f, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31, ldw = f + PT_PAD, ldx = d + PT_PAD, ldu = f + 4;
    bf *ws = (bf *)pt_sm, *xs = ws + (size_t)d * ldw;
    float *us = (float *)(xs + (size_t)PT_SEQS * ldx);
    int *rows = (int *)(us + (size_t)PT_SEQS * ldu), *slots = rows + PT_SEQS;
    const bool is_k = h >= p.Hq;
    const int s = h - p.Hq, nseq = min(PT_SEQS, p.n_seqs - seq0);
    const bf *W = is_k ? p.wk + (size_t)(p.n_wk == 1 ? 0 : s) * d * f : p.wq + (size_t)(p.n_wq == 1 ? 0 : h) * d * f;
    const int wch = f / 8, xch = d / 8; // 16-byte chunks a row
    for (int e = tid; e < d * wch; e += PT_THREADS) // no kernel writes weights: before the wait
        lz_cp_async16(ws + (size_t)(e / wch) * ldw + (e % wch) * 8, W + (size_t)(e / wch) * f + (e % wch) * 8);
    lz_cp_async_commit();
    if (tid < nseq) // the step's arrays come from a copy before the step's first kernel
        rows[tid] = p.start[seq0 + tid], slots[tid] = p.slot[seq0 + tid];
    __syncthreads();
    lz_pdl_wait();
    lz_pdl_launch_dependents();
    const bf *x = is_k ? p.k : p.q;
    const int Hx = is_k ? p.Hkv : p.Hq, xh = is_k ? s / (p.Hs / p.Hkv) : h;
    for (int e = tid; e < PT_SEQS * xch; e += PT_THREADS) {
        const int r = e / xch, c = e % xch;
        bf *dst = xs + (size_t)r * ldx + c * 8;
        if (r < nseq)
            lz_cp_async16(dst, x + ((size_t)rows[r] * Hx + xh) * d + c * 8);
        else
            *(uint4 *)dst = make_uint4(0u, 0u, 0u, 0u);
    }
    lz_cp_async_commit();
    lz_cp_async_wait<0>();
    __syncthreads();
    // u[SEQS][f] = x . W: 16 x 16 output tiles over the warps; the second row tile only where it holds sequences
    const int tn = f / 16, tiles = (nseq > 16 ? 2 : 1) * tn;
    for (int tile = warp; tile < tiles; tile += PT_WARPS) {
        const int ti = tile / tn, tj = tile % tn;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < d; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf, wmma::row_major> b;
            wmma::load_matrix_sync(a, xs + (size_t)ti * 16 * ldx + kk, ldx);
            wmma::load_matrix_sync(b, ws + (size_t)kk * ldw + tj * 16, ldw);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(us + (size_t)ti * 16 * ldu + tj * 16, acc, ldu, wmma::mem_row_major);
    }
    __syncthreads();
    // this warp's sequences r_i = warp + PT_WARPS i; lane holds features lane + 32 c of each half.
    // z and the gates first: their loads overlap the softmaxes.
    float zr[PT_SPW][2][PT_ZH], gate[PT_SPW]; // gate: the logit
#pragma unroll
    for (int i = 0; i < PT_SPW; i++) {
        const int r = warp + PT_WARPS * i;
        const bool mine = is_k && r < nseq;
        const float *zh = mine ? p.z + ((size_t)slots[r] * p.Hs + s) * F : NULL;
        gate[i] = mine ? lz_to_float(p.gate[rows[r]]) : 0.0f;
#pragma unroll
        for (int c = 0; c < PT_ZH; c++) {
            const int j = lane + 32 * c;
            zr[i][0][c] = mine && j < f ? __ldcg(zh + j) : 0.0f;
            zr[i][1][c] = mine && j < f ? __ldcg(zh + f + j) : 0.0f;
        }
    }
    // phi = [softmax(u) ++ softmax(-u)]: mx, mn the max and min of u (log2 units below), ip, in the
    // reciprocal sums; the exp map: mx = mn = 0, ip = in = 1. Rows past nseq are zeros (not written).
    float mx[PT_SPW], mn[PT_SPW], ip[PT_SPW], in[PT_SPW];
#pragma unroll
    for (int i = 0; i < PT_SPW; i++)
        mx[i] = 0.0f, mn[i] = 0.0f, ip[i] = 1.0f, in[i] = 1.0f;
    if (!p.exp_map) {
#pragma unroll
        for (int i = 0; i < PT_SPW; i++) {
            const float *u = us + (size_t)(warp + PT_WARPS * i) * ldu;
            mx[i] = -INFINITY, mn[i] = INFINITY;
#pragma unroll
            for (int c = 0; c < PT_ZH; c++)
                if (lane + 32 * c < f)
                    mx[i] = fmaxf(mx[i], u[lane + 32 * c]), mn[i] = fminf(mn[i], u[lane + 32 * c]);
        }
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
            for (int i = 0; i < PT_SPW; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], off));
                mn[i] = fminf(mn[i], __shfl_xor_sync(0xffffffffu, mn[i], off));
            }
#pragma unroll
        for (int i = 0; i < PT_SPW; i++) {
            const float *u = us + (size_t)(warp + PT_WARPS * i) * ldu;
            float sp = 0.0f, sn = 0.0f;
#pragma unroll
            for (int c = 0; c < PT_ZH; c++)
                if (lane + 32 * c < f)
                    sp += lz_fast_exp2((u[lane + 32 * c] - mx[i]) * L2E), sn += lz_fast_exp2((mn[i] - u[lane + 32 * c]) * L2E);
            ip[i] = sp, in[i] = sn;
        }
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
            for (int i = 0; i < PT_SPW; i++) {
                ip[i] += __shfl_xor_sync(0xffffffffu, ip[i], off);
                in[i] += __shfl_xor_sync(0xffffffffu, in[i], off);
            }
#pragma unroll
        for (int i = 0; i < PT_SPW; i++)
            ip[i] = 1.0f / ip[i], in[i] = 1.0f / in[i];
    }
#pragma unroll
    for (int i = 0; i < PT_SPW; i++) {
        const int r = warp + PT_WARPS * i, qs = seq0 + r;
        if (r >= nseq)
            break;
        const float *u = us + (size_t)r * ldu;
        float *ph = is_k ? p.phi_k + ((size_t)qs * p.Hs + s) * F : p.phi_q + ((size_t)qs * p.Hq + h) * F;
        float *zh = is_k ? p.z + ((size_t)slots[r] * p.Hs + s) * F : NULL;
        const float g = is_k ? expf(lz_log_sigmoid(gate[i])) : 0.0f;
#pragma unroll
        for (int c = 0; c < PT_ZH; c++) {
            const int j = lane + 32 * c;
            if (j < f) {
                const float a = lz_fast_exp2((u[j] - mx[i]) * L2E) * ip[i], b = lz_fast_exp2((mn[i] - u[j]) * L2E) * in[i];
                ph[j] = a, ph[f + j] = b;
                if (is_k)
                    zh[j] = g * zr[i][0][c] + a, zh[f + j] = g * zr[i][1][c] + b;
            }
        }
    }
}

bool gla_decode_prep_tc_fits(const lz_cuda_ctx *c, const gs_params<__nv_bfloat16> &p) {
    const uintptr_t rows = (uintptr_t)p.wq | (uintptr_t)p.wk | (uintptr_t)p.q | (uintptr_t)p.k;
    return p.d % 16 == 0 && p.f % 32 == 0 && p.f <= 32 * PT_ZH && (rows & 15) == 0 &&
           pt_smem(p.d, p.f) <= c->max_smem;
}

lz_status gla_decode_prep_tc(lz_cuda_ctx *c, const gs_params<__nv_bfloat16> &p) {
    const dim3 grid((unsigned)(p.Hq + p.Hs), (unsigned)((p.n_seqs + PT_SEQS - 1) / PT_SEQS));
    return lz_launch(c, "gla decode (prep, tensor cores)", gla_decode_prep_tc_kernel, grid, dim3(PT_THREADS),
                     pt_smem(p.d, p.f), p);
}

lz_status gla_decode_prep_tc_init(lz_cuda_ctx *c) {
    LZ_CUDA_TRY(cudaFuncSetAttribute(gla_decode_prep_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)c->max_smem));
    return LZ_OK;
}
