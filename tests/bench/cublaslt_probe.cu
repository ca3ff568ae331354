// cublaslt_probe.cu - on the GPU machine: for each decode-sized linear product of the LLaMA-3-8B
// shape (out = x . W^T, bf16 in and out, fp32 accumulation, n = 2..64 tokens), the time of
// cublasGemmEx's default choice against every algorithm cuBLASLt's heuristic offers, with the
// weights rotated over copies that together exceed L2 (a decode step reads every weight from HBM).
// It answers one question: would choosing cuBLASLt algorithms by measurement beat the default?
// Build: nvcc -O2 -arch=sm_90a cublaslt_probe.cu -lcublasLt -lcublas -o cublaslt_probe
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_check.cuh" // CK, CB

static const size_t kWorkspace = (size_t)32 << 20;
static const int kReps = 40;

struct Shape {
    const char *name;
    int rows, in;
    float beta; // 1: accumulate onto the residual
};

__global__ void fill_kernel(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2bfloat16(((float)(h & 0xffff) / 65536.0f - 0.5f) * 0.05f);
    }
}

static int n_copies(size_t bytes) { // enough copies to pass 256 MB, so L2 (50 MB) holds none of the next
    int c = (int)((256ull << 20) / bytes) + 1;
    return c < 2 ? 2 : c;
}

static float time_default(cublasHandle_t h, cudaStream_t s, __nv_bfloat16 **w, int copies, const __nv_bfloat16 *x,
                          __nv_bfloat16 *y, const Shape &sh, int n) {
    const float one = 1.0f;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int r = -5; r < kReps; r++) {
        if (r == 0)
            CK(cudaEventRecord(a, s));
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.rows, n, sh.in, &one, w[(r + 5) % copies], CUDA_R_16BF, sh.in, x,
                        CUDA_R_16BF, sh.in, &sh.beta, y, CUDA_R_16BF, sh.rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms * 1000.0f / kReps;
}

static void describe(const cublasLtMatmulAlgo_t *algo, char *out, size_t cap) {
    int id = 0, tile = 0, stages = 0, splitk = 0, red = 0, swz = 0;
    size_t got;
    CB(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got));
    CB(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got));
    CB(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got));
    CB(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got));
    CB(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &got));
    CB(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &got));
    snprintf(out, cap, "algo %d tile %d stages %d splitk %d red %d swz %d", id, tile, stages, splitk, red, swz);
}

int main(int argc, char **argv) {
    const int max_algos = argc > 1 ? atoi(argv[1]) : 32;
    const Shape shapes[] = {{"q", 4096, 4096, 0}, {"kv", 1024, 4096, 0}, {"qkv fused", 6144, 4096, 0},
                            {"o+res", 4096, 4096, 1}, {"gate", 14336, 4096, 0}, {"gate+up fused", 28672, 4096, 0},
                            {"down+res", 4096, 14336, 1}};
    const int tokens[] = {2, 4, 8, 16, 32, 64};
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs, L2 %d MB; reps %d, weights rotated over copies totalling > 256 MB\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, kReps);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetStream(h, s));
    void *ws;
    CK(cudaMalloc(&ws, kWorkspace));
    CB(cublasSetWorkspace(h, ws, kWorkspace));
    cublasLtHandle_t lt;
    CB(cublasLtCreate(&lt));
    __nv_bfloat16 *x, *y;
    CK(cudaMalloc(&x, (size_t)64 * 14336 * 2));
    CK(cudaMalloc(&y, (size_t)64 * 28672 * 2));
    fill_kernel<<<1024, 256, 0, s>>>(x, (size_t)64 * 14336, 7);
    CK(cudaGetLastError());
    CK(cudaMemsetAsync(y, 0, (size_t)64 * 28672 * 2, s));
    for (const Shape &sh : shapes) {
        const size_t bytes = (size_t)sh.rows * sh.in * 2;
        const int copies = n_copies(bytes);
        __nv_bfloat16 **w = (__nv_bfloat16 **)calloc(copies, sizeof *w);
        for (int c = 0; c < copies; c++) {
            CK(cudaMalloc(&w[c], bytes));
            fill_kernel<<<1024, 256, 0, s>>>(w[c], bytes / 2, 11 + c);
            CK(cudaGetLastError());
        }
        CK(cudaStreamSynchronize(s));
        for (int n : tokens) {
            const float t_def = time_default(h, s, w, copies, x, y, sh, n);
            cublasLtMatmulDesc_t op;
            CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
            cublasLtMatrixLayout_t la, lb, lc;
            CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, sh.in, sh.rows, sh.in));
            CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, sh.in, n, sh.in));
            CB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, sh.rows, n, sh.rows));
            cublasLtMatmulPreference_t pref;
            CB(cublasLtMatmulPreferenceCreate(&pref));
            CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                                    sizeof kWorkspace));
            cublasLtMatmulHeuristicResult_t res[64];
            int got = 0;
            CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, max_algos > 64 ? 64 : max_algos, res, &got));
            float best = 1e30f, first = 0;
            int best_i = -1;
            const float one = 1.0f;
            for (int i = 0; i < got; i++) {
                if (res[i].state != CUBLAS_STATUS_SUCCESS)
                    continue;
                cudaEvent_t a, b;
                CK(cudaEventCreate(&a));
                CK(cudaEventCreate(&b));
                bool ok = true;
                for (int r = -5; r < kReps && ok; r++) {
                    if (r == 0)
                        CK(cudaEventRecord(a, s));
                    ok = cublasLtMatmul(lt, op, &one, w[(r + 5) % copies], la, x, lb, &sh.beta, y, lc, y, lc,
                                        &res[i].algo, ws, kWorkspace, s) == CUBLAS_STATUS_SUCCESS;
                }
                CK(cudaEventRecord(b, s));
                CK(cudaEventSynchronize(b));
                float ms;
                CK(cudaEventElapsedTime(&ms, a, b));
                const float us = ms * 1000.0f / kReps;
                if (i == 0)
                    first = us;
                if (ok && us < best)
                    best = us, best_i = i;
                CK(cudaEventDestroy(a));
                CK(cudaEventDestroy(b));
            }
            char d0[160] = "-", db[160] = "-";
            if (got > 0)
                describe(&res[0].algo, d0, sizeof d0);
            if (best_i >= 0)
                describe(&res[best_i].algo, db, sizeof db);
            printf("%-14s n %2d  %6.1f MB  default %7.2f us (%5.2f TB/s)  lt[0] %7.2f  best of %2d %7.2f us "
                   "(%5.2f TB/s, #%d)  [%s] first [%s]\n",
                   sh.name, n, bytes / 1e6, t_def, bytes / t_def / 1e6, first, got, best, bytes / best / 1e6, best_i,
                   db, d0);
            fflush(stdout);
            CB(cublasLtMatmulPreferenceDestroy(pref));
            CB(cublasLtMatrixLayoutDestroy(la));
            CB(cublasLtMatrixLayoutDestroy(lb));
            CB(cublasLtMatrixLayoutDestroy(lc));
            CB(cublasLtMatmulDescDestroy(op));
        }
        for (int c = 0; c < copies; c++)
            CK(cudaFree(w[c]));
        free(w);
    }
    return 0;
}
