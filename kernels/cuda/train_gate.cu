// train_gate.cu - the per-token gate for training: logit = W_gamma . x,
// log gamma = log sigmoid(logit), and the backward to W_gamma and (fine-tuning)
// to x (cpu/backward/gate_backward.inc).
#include "train_common.cuh" // lz_log_sigmoid, lz_cuda_sum_slices, LZ_TB

enum { GATE_SLICE = 128 }; // tokens per partial sum of dW_gamma

// ---- kernels -------------------------------------------------------------------------------------

// a warp per token
__global__ void gate_forward_kernel(float *logit, float *log_gamma, const float *x, const float *wg, int N, int C) {
    const long t = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (t >= N)
        return;
    float acc = 0.0f;
    for (int c = lane; c < C; c += 32)
        acc += x[t * C + c] * wg[c];
    acc = lz_warp_sum(acc);
    if (lane == 0)
        logit[t] = acc, log_gamma[t] = lz_log_sigmoid(acc);
}

// grid (ceil(C / 256), slices): partial[slice][c] = sum over the slice's tokens of dlogit_t x[t][c]
__global__ void gate_backward_partial_kernel(float *partial, const float *dlog_gamma, const float *logit,
                                             const float *x, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t0 = blockIdx.y * GATE_SLICE, t1 = min(N, t0 + GATE_SLICE);
    __shared__ float dl[GATE_SLICE];
    for (int t = t0 + threadIdx.x; t < t1; t += blockDim.x)
        dl[t - t0] = dlog_gamma[t] / (1.0f + expf(logit[t])); // d log sigmoid(l) / dl = sigmoid(-l)
    __syncthreads();
    if (c >= C)
        return;
    float acc = 0.0f;
    for (int t = t0; t < t1; t++)
        acc += dl[t - t0] * x[(size_t)t * C + c];
    partial[(size_t)blockIdx.y * C + c] = acc;
}

// a thread per element: dx[t][c] += dlogit_t wg[c], dlogit_t = dlog_gamma[t] sigmoid(-logit[t])
__global__ void gate_backward_input_kernel(float *dx, const float *dlog_gamma, const float *logit, const float *wg,
                                           size_t n, int C) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / C;
        dx[e] += dlog_gamma[t] / (1.0f + expf(logit[t])) * wg[e % C];
    }
}

// ---- launchers -----------------------------------------------------------------------------------

extern "C" lz_status lz_cuda_gate_train_forward(float *logit, float *log_gamma, const float *x, const float *wg, int N,
                                                int C) {
    if (N <= 0)
        return LZ_OK;
    gate_forward_kernel<<<lz_div_up(N, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(logit, log_gamma, x, wg, N, C);
    LZ_LAUNCH_CHECK("gate_forward");
    return LZ_OK;
}

extern "C" size_t lz_cuda_gate_backward_scratch(int N, int C) { return (size_t)lz_div_up(N, GATE_SLICE) * C; }

extern "C" lz_status lz_cuda_gate_backward(float *dwg, const float *dlog_gamma, const float *logit, const float *x,
                                           int N, int C, float *scratch) {
    if (N <= 0)
        return LZ_OK;
    const int slices = lz_div_up(N, GATE_SLICE);
    gate_backward_partial_kernel<<<dim3(lz_div_up(C, LZ_TB), slices), LZ_TB, 0, lz_train_stream()>>>(
        scratch, dlog_gamma, logit, x, N, C);
    LZ_LAUNCH_CHECK("gate_backward_partial");
    return lz_cuda_sum_slices(dwg, scratch, (size_t)C, slices);
}

extern "C" lz_status lz_cuda_gate_backward_input(float *dx, const float *dlog_gamma, const float *logit,
                                                 const float *wg, int N, int C) {
    if (N <= 0 || C <= 0)
        return LZ_OK;
    const size_t n = (size_t)N * C;
    const int blocks = lz_div_up((long)n, LZ_TB) < 4096 ? lz_div_up((long)n, LZ_TB) : 4096;
    gate_backward_input_kernel<<<blocks, LZ_TB, 0, lz_train_stream()>>>(dx, dlog_gamma, logit, wg, n, C);
    LZ_LAUNCH_CHECK("gate_backward_input");
    return LZ_OK;
}
