// train_window.cu - the window branch with meta-memory logits for training
// (cpu/backward/window_backward.inc): forward WIN_i = sum_t e^{s_it} v_t / D_i,
// D_i = sum_j e^{t_j} + sum_t e^{s_it} over the last w positions, and the
// backward to the meta logits, dt_j = sum_i dD_i e^{t_j}, dD_i = -(dWIN_i . WIN_i) / D_i.
// The forward keeps each row's max and D_i e^{-max}, so the backward to the meta logits needs
// no scores, and the one to q, k, v (fine-tuning) gets P_it = e^{s_it - max_i} / (D_i e^{-max_i})
// from one recomputed score:
//   dv_t += P_it dWIN_i,  ds_it = P_it (dWIN_i . v_t - dWIN_i . WIN_i),
//   dq_i += ds_it k_t / sqrt(d),  dk_t += ds_it q_i / sqrt(d),
// each gradient row gathered by one warp over the rows it meets (no atomics).
#include "train_common.cuh" // lz_warp_sum, lz_block_sum, LZ_TB

// ---- kernels -------------------------------------------------------------------------------------

// a warp per (token, query head), online softmax; NR = ceil(d / 32) values per lane
template <int NR>
__global__ void window_forward_kernel(float *win, float *stats, const float *q, const float *k, const float *v,
                                      const float *meta, int n_seq, int T, lz_lizard_geom g) {
    const long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32, d = g.d;
    if (r >= (long)n_seq * T * g.Hq)
        return;
    const long row = r / g.Hq; // token b T + i
    const int h = (int)(r % g.Hq), i = (int)(row % T), kvh = h / (g.Hq / g.Hkv), first = max(0, i - g.w + 1);
    const float scale = 1.0f / sqrtf((float)d);
    float qr[NR], acc[NR];
    for (int u = 0; u < NR; u++) {
        const int j = lane + 32 * u;
        qr[u] = j < d ? q[r * d + j] : 0.0f;
        acc[u] = 0.0f;
    }
    float m = -INFINITY, den = 0.0f;
    for (int j = 0; j < g.m; j++)
        m = fmaxf(m, meta[j]);
    for (int j = 0; j < g.m; j++)
        den += expf(meta[j] - m);
    for (int t = first; t <= i; t++) {
        const size_t kv = ((size_t)(row - i + t) * g.Hkv + kvh) * d;
        float sc = 0.0f;
        for (int u = 0; u < NR; u++)
            if (lane + 32 * u < d)
                sc += qr[u] * k[kv + lane + 32 * u];
        sc = lz_warp_sum(sc) * scale;
        if (sc > m) { // a new max: rescale what was summed
            const float f = expf(m - sc);
            den *= f;
            for (int u = 0; u < NR; u++)
                acc[u] *= f;
            m = sc;
        }
        const float e = expf(sc - m);
        den += e;
        for (int u = 0; u < NR; u++)
            if (lane + 32 * u < d)
                acc[u] += e * v[kv + lane + 32 * u];
    }
    for (int u = 0; u < NR; u++)
        if (lane + 32 * u < d)
            win[r * d + lane + 32 * u] = acc[u] / den;
    if (lane == 0)
        stats[2 * r] = m, stats[2 * r + 1] = den;
}

// a warp per row: coef = -(dwin . win) / (D e^{-max})
__global__ void window_coef_kernel(float *coef, const float *dwin, const float *win, const float *stats, long rows,
                                   int d) {
    const long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    float dot = 0.0f;
    for (int j = lane; j < d; j += 32)
        dot += dwin[r * d + j] * win[r * d + j];
    dot = lz_warp_sum(dot);
    if (lane == 0)
        coef[r] = -dot / stats[2 * r + 1];
}

// a block per meta logit j: dmeta[j] += sum_r coef_r e^{t_j - max_r}
__global__ void window_dmeta_kernel(float *dmeta, const float *coef, const float *stats, const float *meta, long rows) {
    __shared__ float red[32];
    const int j = blockIdx.x;
    float acc = 0.0f;
    for (long r = threadIdx.x; r < rows; r += blockDim.x)
        acc += coef[r] * expf(meta[j] - stats[2 * r]);
    acc = lz_block_sum(acc, red);
    if (threadIdx.x == 0)
        dmeta[j] += acc;
}

// a warp per row: dot[r] = dwin_r . win_r
__global__ void window_rowdot_kernel(float *dot, const float *dwin, const float *win, long rows, int d) {
    const long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    float acc = 0.0f;
    for (int j = lane; j < d; j += 32)
        acc += dwin[r * d + j] * win[r * d + j];
    acc = lz_warp_sum(acc);
    if (lane == 0)
        dot[r] = acc;
}

// a warp per (token i, query head h): dq_i += sum over the window's t of ds_it k_t / sqrt(d)
template <int NR>
__global__ void window_dq_kernel(float *dq, const float *dwin, const float *stats, const float *dot, const float *q,
                                 const float *k, const float *v, int n_seq, int T, lz_lizard_geom g) {
    const long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32, d = g.d;
    if (r >= (long)n_seq * T * g.Hq)
        return;
    const long row = r / g.Hq; // token b T + i
    const int h = (int)(r % g.Hq), i = (int)(row % T), kvh = h / (g.Hq / g.Hkv), first = max(0, i - g.w + 1);
    const float scale = 1.0f / sqrtf((float)d), mx = stats[2 * r], den = stats[2 * r + 1], D = dot[r];
    float qr[NR], gr[NR], acc[NR];
#pragma unroll
    for (int u = 0; u < NR; u++) {
        const int j = lane + 32 * u;
        qr[u] = j < d ? q[r * d + j] : 0.0f;
        gr[u] = j < d ? dwin[r * d + j] : 0.0f;
        acc[u] = 0.0f;
    }
    for (int t = first; t <= i; t++) {
        const size_t kv = ((size_t)(row - i + t) * g.Hkv + kvh) * d;
        float sc = 0.0f, dp = 0.0f;
#pragma unroll
        for (int u = 0; u < NR; u++)
            if (lane + 32 * u < d) {
                sc += qr[u] * k[kv + lane + 32 * u];
                dp += gr[u] * v[kv + lane + 32 * u];
            }
        sc = lz_warp_sum(sc) * scale;
        dp = lz_warp_sum(dp);
        const float ds = expf(sc - mx) / den * (dp - D) * scale;
#pragma unroll
        for (int u = 0; u < NR; u++)
            if (lane + 32 * u < d)
                acc[u] += ds * k[kv + lane + 32 * u];
    }
#pragma unroll
    for (int u = 0; u < NR; u++)
        if (lane + 32 * u < d)
            dq[r * d + lane + 32 * u] += acc[u];
}

// a warp per (token t, kv head): dk_t, dv_t from every query row that sees t (the heads of the group
// in order, each over i = t .. t + w - 1 in its sequence)
template <int NR>
__global__ void window_dkv_kernel(float *dk, float *dv, const float *dwin, const float *stats, const float *dot,
                                  const float *q, const float *k, const float *v, int n_seq, int T, lz_lizard_geom g) {
    const long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32, d = g.d;
    if (r >= (long)n_seq * T * g.Hkv)
        return;
    const long row = r / g.Hkv; // token b T + t
    const int kvh = (int)(r % g.Hkv), t = (int)(row % T), last = min(T - 1, t + g.w - 1), rep = g.Hq / g.Hkv;
    const float scale = 1.0f / sqrtf((float)d);
    float kr[NR], vr[NR], adk[NR], adv[NR];
#pragma unroll
    for (int u = 0; u < NR; u++) {
        const int j = lane + 32 * u;
        kr[u] = j < d ? k[r * d + j] : 0.0f;
        vr[u] = j < d ? v[r * d + j] : 0.0f;
        adk[u] = adv[u] = 0.0f;
    }
    for (int hl = 0; hl < rep; hl++)
        for (int i = t; i <= last; i++) {
            const long qrow = (row - t + i) * g.Hq + kvh * rep + hl; // (token, query head) of the row
            const float *qi = q + qrow * d, *gi = dwin + qrow * d;
            float sc = 0.0f, dp = 0.0f;
#pragma unroll
            for (int u = 0; u < NR; u++)
                if (lane + 32 * u < d) {
                    sc += qi[lane + 32 * u] * kr[u];
                    dp += gi[lane + 32 * u] * vr[u];
                }
            sc = lz_warp_sum(sc) * scale;
            dp = lz_warp_sum(dp);
            const float p = expf(sc - stats[2 * qrow]) / stats[2 * qrow + 1], ds = p * (dp - dot[qrow]) * scale;
#pragma unroll
            for (int u = 0; u < NR; u++)
                if (lane + 32 * u < d) {
                    adk[u] += ds * qi[lane + 32 * u];
                    adv[u] += p * gi[lane + 32 * u];
                }
        }
#pragma unroll
    for (int u = 0; u < NR; u++)
        if (lane + 32 * u < d) {
            dk[r * d + lane + 32 * u] += adk[u];
            dv[r * d + lane + 32 * u] += adv[u];
        }
}

// ---- launchers -----------------------------------------------------------------------------------

extern "C" lz_status lz_cuda_window_train_forward(float *win, float *stats, const float *q, const float *k,
                                                  const float *v, const float *meta, int n_seq, int T,
                                                  const lz_lizard_geom *g) {
    const long rows = (long)n_seq * T * g->Hq;
    if (rows <= 0)
        return LZ_OK;
    const int grid = lz_div_up(rows, LZ_TB / 32), nr = lz_div_up(g->d, 32);
#define LZ_WIN_CASE(R)                                                                                                 \
    if (nr <= R) {                                                                                                     \
        window_forward_kernel<R><<<grid, LZ_TB, 0, lz_train_stream()>>>(win, stats, q, k, v, meta, n_seq, T, *g);      \
        LZ_LAUNCH_CHECK("window_forward");                                                                             \
        return LZ_OK;                                                                                                  \
    }
    LZ_WIN_CASE(1)
    LZ_WIN_CASE(2)
    LZ_WIN_CASE(4)
    LZ_WIN_CASE(8)
    LZ_WIN_CASE(16)
    LZ_WIN_CASE(32)
#undef LZ_WIN_CASE
    return lz_fail(LZ_ERR_INPUT, "window training kernel: head_dim %d above %d", g->d, LZ_TRAIN_MAX_D);
}

extern "C" size_t lz_cuda_window_backward_scratch(int n_seq, int T, const lz_lizard_geom *g) {
    return (size_t)n_seq * T * g->Hq;
}

extern "C" lz_status lz_cuda_window_backward(float *dmeta, const float *dwin, const float *win, const float *stats,
                                             const float *meta, int n_seq, int T, const lz_lizard_geom *g,
                                             float *scratch) {
    const long rows = (long)n_seq * T * g->Hq;
    if (rows <= 0 || g->m <= 0)
        return LZ_OK;
    window_coef_kernel<<<lz_div_up(rows, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(scratch, dwin, win, stats, rows,
                                                                                     g->d);
    LZ_LAUNCH_CHECK("window_coef");
    window_dmeta_kernel<<<g->m, LZ_TB, 0, lz_train_stream()>>>(dmeta, scratch, stats, meta, rows);
    LZ_LAUNCH_CHECK("window_dmeta");
    return LZ_OK;
}

template <int NR>
static lz_status window_input_launch(float *dq, float *dk, float *dv, const float *dwin, const float *stats,
                                     const float *dot, const float *q, const float *k, const float *v, int n_seq,
                                     int T, const lz_lizard_geom *g) {
    const long q_rows = (long)n_seq * T * g->Hq, kv_rows = (long)n_seq * T * g->Hkv;
    window_dq_kernel<NR><<<lz_div_up(q_rows, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(dq, dwin, stats, dot, q, k,
                                                                                          v, n_seq, T, *g);
    LZ_LAUNCH_CHECK("window_dq");
    window_dkv_kernel<NR><<<lz_div_up(kv_rows, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(dk, dv, dwin, stats, dot,
                                                                                            q, k, v, n_seq, T, *g);
    LZ_LAUNCH_CHECK("window_dkv");
    return LZ_OK;
}

extern "C" lz_status lz_cuda_window_backward_input(float *dq, float *dk, float *dv, const float *dwin, const float *win,
                                                   const float *stats, const float *q, const float *k, const float *v,
                                                   int n_seq, int T, const lz_lizard_geom *g, float *scratch) {
    const long rows = (long)n_seq * T * g->Hq;
    if (rows <= 0)
        return LZ_OK;
    window_rowdot_kernel<<<lz_div_up(rows, LZ_TB / 32), LZ_TB, 0, lz_train_stream()>>>(scratch, dwin, win, rows, g->d);
    LZ_LAUNCH_CHECK("window_rowdot");
    const int nr = lz_div_up(g->d, 32);
    if (nr <= 1)
        return window_input_launch<1>(dq, dk, dv, dwin, stats, scratch, q, k, v, n_seq, T, g);
    if (nr <= 2)
        return window_input_launch<2>(dq, dk, dv, dwin, stats, scratch, q, k, v, n_seq, T, g);
    if (nr <= 4)
        return window_input_launch<4>(dq, dk, dv, dwin, stats, scratch, q, k, v, n_seq, T, g);
    if (nr <= 8)
        return window_input_launch<8>(dq, dk, dv, dwin, stats, scratch, q, k, v, n_seq, T, g);
    if (nr <= 16)
        return window_input_launch<16>(dq, dk, dv, dwin, stats, scratch, q, k, v, n_seq, T, g);
    if (nr <= 32)
        return window_input_launch<32>(dq, dk, dv, dwin, stats, scratch, q, k, v, n_seq, T, g);
    return lz_fail(LZ_ERR_INPUT, "window training kernel: head_dim %d above %d", g->d, LZ_TRAIN_MAX_D);
}
