// backward_lizard.cu - a Lizard layer's attention for fine-tuning (lz_cuda_bw_lizard): the forward
// y = GLA + alpha WIN recomputed by the distillation kernels (train_cuda.h), then the backward of
// cpu/backward/layer_train.inc's lz_lizard_layer_backward from dout, with the input gradients of
// fine-tuning (dx, dq, dk, dv, added to) besides the trainable tensors' (grad, added to).
//
// The distillation kernels take n_seq sequences of T tokens packed one after the other, so the
// batch must be that (training batches are). They run on the backend's stream for the call.
#include <stdlib.h> // calloc, free
#include <string.h> // memset

#include "backward_cuda.cuh" // lz_cuda_bw_lizard*, struct lz_backend
#include "train_common.cuh"  // train_cuda.h, LZ_TB

enum { ALPHA_BLOCKS = 512 }; // blocks of the d alpha reduction (fixed: the same sum on every device)

// ---- kernels -------------------------------------------------------------------------------------

// the sum over the block in double (blockDim.x a multiple of 32); thread 0 gets it
__device__ double lizard_block_sum_f64(double v, double *smem32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0)
        smem32[warp] = v;
    __syncthreads();
    v = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            v += smem32[w];
    return v;
}

// y = GLA + alpha WIN: dWIN = alpha dout; partial[blk] = the block's share of d alpha = sum dout . WIN
__global__ void lizard_combine_kernel(double *partial, float *dwin, const float *dout, const float *win,
                                      const float *alpha, size_t n) {
    __shared__ double red[32];
    const float a = alpha[0];
    double da = 0.0;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        dwin[e] = a * dout[e];
        da += (double)dout[e] * win[e];
    }
    da = lizard_block_sum_f64(da, red);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = da;
}

// one thread: dalpha += the block sums, in order
__global__ void lizard_dalpha_kernel(float *dalpha, const double *partial, int blocks) {
    double da = 0.0;
    for (int b = 0; b < blocks; b++)
        da += partial[b];
    dalpha[0] += (float)da;
}

// ---- scratch -------------------------------------------------------------------------------------

// What the backward keeps between its kernels, for up to max_tokens rows. S0, z0 and the reduction
// scratch also depend on the number of chunks (n_seq times the chunks of T): sized at creation for
// one sequence of max_tokens rows, they grow when a batch needs more (short sequences).
struct lizard_bw_scratch {
    lz_lizard_geom g;
    int max_tokens, C;
    float *x, *q, *k, *v; // fp32 copies of the activations (bf16 backend)
    float *phi_q, *phi_k, *logit, *lg, *gla, *den, *win, *stats; // the forward
    float *dwin, *dphi_q, *dphi_k, *dlg;                         // the backward
    double *partial;
    float *S0, *z0, *work;
    size_t S0_cap, z0_cap, work_cap; // floats
};

// Floats of the buffers that depend on the chunks: S0, z0 and the reduction scratch (the largest
// that any backward asks for).
static void chunk_sizes(const lz_lizard_geom *g, int n_seq, int T, int C, size_t *S0, size_t *z0, size_t *work) {
    const size_t N = (size_t)n_seq * T, F = 2 * (size_t)g->f, slots = (size_t)n_seq * lz_train_chunks(T) * g->Hs;
    *S0 = slots * F * g->d;
    *z0 = slots * F;
    const size_t need[] = {lz_cuda_gla_backward_scratch(n_seq, T, g),
                           lz_cuda_feature_map_backward_scratch(g->n_wq, (int)N, g->Hq, g->d, g->f),
                           lz_cuda_feature_map_backward_scratch(g->n_wk, (int)N, g->Hs, g->d, g->f),
                           lz_cuda_gate_backward_scratch((int)N, C), lz_cuda_window_backward_scratch(n_seq, T, g)};
    *work = 0;
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        *work = need[i] > *work ? need[i] : *work;
}

static lz_status scratch_alloc(float **p, size_t floats, const char *what) {
    const cudaError_t e = cudaMalloc((void **)p, sizeof(float) * (floats ? floats : 1));
    if (e != cudaSuccess) {
        *p = NULL;
        cudaGetLastError(); // clear the failed allocation's error
        return lz_fail(LZ_ERR_NOMEM, "Lizard layer backward scratch (CUDA): %s, %zu floats: %s", what, floats,
                       cudaGetErrorString(e));
    }
    return LZ_OK;
}

// A buffer of at least `need` floats: the old one is freed once the stream is done with it.
static lz_status scratch_grow(float **p, size_t *cap, size_t need, cudaStream_t stream, const char *what) {
    if (need <= *cap)
        return LZ_OK;
    LZ_CUDA_TRY(cudaStreamSynchronize(stream));
    LZ_CUDA_TRY(cudaFree(*p));
    *p = NULL;
    *cap = 0;
    LZ_TRY(scratch_alloc(p, need, what));
    *cap = need;
    return LZ_OK;
}

// The shapes the distillation kernels take, as the CPU entry checks them: the head mappings of
// train_gla.cuh and the feature maps (other ones would read the wrong heads), the feature map's
// and the window's limits (shared memory, registers).
static lz_status lizard_geom_check(const lz_lizard_geom *g) {
    if (g->f < 1 || g->f > LZ_TRAIN_MAX_F || g->d < 1 || g->d > LZ_TRAIN_MAX_D || g->w < 1)
        return lz_fail(LZ_ERR_INPUT,
                       "Lizard layer backward (CUDA): feature_dim %d, head_dim %d, window %d (limits %d, %d)", g->f,
                       g->d, g->w, LZ_TRAIN_MAX_F, LZ_TRAIN_MAX_D);
    if (g->Hq < 1 || g->Hkv < 1 || g->Hq % g->Hkv != 0 || (g->Hs != g->Hkv && g->Hs != g->Hq) ||
        (g->n_wq != 1 && g->n_wq != g->Hq) || (g->n_wk != 1 && g->n_wk != g->Hs))
        return lz_fail(LZ_ERR_INPUT, "Lizard layer backward (CUDA): heads Hq %d, Hkv %d, state %d, phi_q %d, phi_k %d",
                       g->Hq, g->Hkv, g->Hs, g->n_wq, g->n_wk);
    return LZ_OK;
}

void lz_cuda_bw_lizard_scratch_free(lz_backend *be, void *scratch) {
    lizard_bw_scratch *s = (lizard_bw_scratch *)scratch;
    if (!s)
        return;
    float *bufs[] = {s->x,   s->q,    s->k,     s->v,      s->phi_q,  s->phi_k, s->logit, s->lg, s->gla,
                     s->den, s->win,  s->stats, s->dwin,   s->dphi_q, s->dphi_k, s->dlg,  s->S0, s->z0,
                     s->work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            cudaFree(bufs[i]); // a free's error would be an earlier fault's, reported where it happened
    if (s->partial)
        cudaFree(s->partial);
    free(s);
}

lz_status lz_cuda_bw_lizard_scratch_create(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens,
                                           int C) {
    *out = NULL;
    if (max_tokens <= 0 || C <= 0)
        return lz_fail(LZ_ERR_INPUT, "Lizard layer backward scratch (CUDA): %d rows of width %d", max_tokens, C);
    LZ_TRY(lizard_geom_check(g));
    lizard_bw_scratch *s = (lizard_bw_scratch *)calloc(1, sizeof *s);
    if (!s)
        return lz_fail(LZ_ERR_NOMEM, "Lizard layer backward scratch (CUDA): out of memory");
    s->g = *g, s->max_tokens = max_tokens, s->C = C;
    const size_t N = (size_t)max_tokens, F = 2 * (size_t)g->f, qd = N * g->Hq * g->d, kd = N * g->Hkv * g->d;
    const bool bf16 = be->dtype == LZ_DTYPE_BF16;
    struct {
        float **p;
        size_t n;
        const char *what;
    } bufs[] = {{&s->x, bf16 ? N * C : 0, "x"},
                {&s->q, bf16 ? qd : 0, "q"},
                {&s->k, bf16 ? kd : 0, "k"},
                {&s->v, bf16 ? kd : 0, "v"},
                {&s->phi_q, N * g->Hq * F, "phi_q"},
                {&s->phi_k, N * g->Hs * F, "phi_k"},
                {&s->logit, N, "gate logits"},
                {&s->lg, N, "log gates"},
                {&s->gla, qd, "GLA"},
                {&s->den, N * g->Hq, "GLA normaliser"},
                {&s->win, qd, "WIN"},
                {&s->stats, 2 * N * g->Hq, "window stats"},
                {&s->dwin, qd, "dWIN"},
                {&s->dphi_q, N * g->Hq * F, "dphi_q"},
                {&s->dphi_k, N * g->Hs * F, "dphi_k"},
                {&s->dlg, N, "dlog_gamma"}};
    lz_status st = LZ_OK;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && st == LZ_OK; i++)
        if (bufs[i].n > 0) // (the fp32 backend reads its activations in place: no copies)
            st = scratch_alloc(bufs[i].p, bufs[i].n, bufs[i].what);
    if (st == LZ_OK) {
        chunk_sizes(g, 1, max_tokens, C, &s->S0_cap, &s->z0_cap, &s->work_cap);
        st = scratch_alloc(&s->S0, s->S0_cap, "chunk states");
        if (st == LZ_OK)
            st = scratch_alloc(&s->z0, s->z0_cap, "chunk normaliser states");
        if (st == LZ_OK)
            st = scratch_alloc(&s->work, s->work_cap, "reductions");
    }
    if (st == LZ_OK) {
        const cudaError_t e = cudaMalloc((void **)&s->partial, sizeof(double) * ALPHA_BLOCKS);
        if (e != cudaSuccess) {
            s->partial = NULL;
            cudaGetLastError();
            st = lz_fail(LZ_ERR_NOMEM, "Lizard layer backward scratch (CUDA): d alpha partials: %s",
                         cudaGetErrorString(e));
        }
    }
    if (st != LZ_OK) {
        lz_cuda_bw_lizard_scratch_free(be, s);
        return st;
    }
    *out = s;
    return LZ_OK;
}

// ---- the layer -----------------------------------------------------------------------------------

// The batch as the distillation kernels take it: n_seq sequences of T tokens, sequence s at rows
// s T .. s T + T - 1, each from position 0.
static lz_status lizard_batch_shape(const lz_batch *b, int *n_seq, int *T) {
    *n_seq = b->n_seqs;
    *T = b->n_seqs > 0 ? b->len[0] : 0;
    for (int s = 0; s < b->n_seqs; s++)
        if (b->len[s] != *T || b->start[s] != s * *T || b->pos[s] != 0)
            return lz_fail(LZ_ERR_INPUT,
                           "Lizard layer backward (CUDA): sequence %d of the batch starts at row %d with %d tokens "
                           "at position %d; every sequence must have the first's length (%d), start where the one "
                           "before it ends and be at position 0",
                           s, b->start[s], b->len[s], b->pos[s], *T);
    if (b->n_tokens != *n_seq * *T)
        return lz_fail(LZ_ERR_INPUT, "Lizard layer backward (CUDA): the batch has %d rows, its %d sequences %d",
                       b->n_tokens, *n_seq, *n_seq * *T);
    return LZ_OK;
}

// While alive, the distillation kernels launch on `stream`; then on the stream they had before
// (distillation's legacy default stream, or a caller's own).
struct train_stream_scope {
    cudaStream_t before;
    explicit train_stream_scope(cudaStream_t stream) : before(lz_train_stream()) { lz_cuda_train_set_stream(stream); }
    ~train_stream_scope() { lz_cuda_train_set_stream(before); }
    train_stream_scope(const train_stream_scope &) = delete;
    train_stream_scope &operator=(const train_stream_scope &) = delete;
};

lz_status lz_cuda_bw_lizard(lz_backend *be, void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq,
                            float *dk, float *dv, const float *dout, const lz_lizard_params_f32 *p, const void *x,
                            const void *q, const void *k, const void *v, const lz_batch *b, const lz_lizard_geom *g,
                            int C) {
    lizard_bw_scratch *s = (lizard_bw_scratch *)scratch;
    if (!s || !dx || !dq || !dk || !dv || !dout)
        return lz_fail(LZ_ERR_INPUT, "Lizard layer backward (CUDA): the scratch, dx, dq, dk, dv and dout are all "
                                     "required");
    LZ_TRY(lizard_geom_check(g));
    int n_seq, T;
    LZ_TRY(lizard_batch_shape(b, &n_seq, &T));
    const int N = n_seq * T, d = g->d, f = g->f;
    if (N > s->max_tokens)
        return lz_fail(LZ_ERR_INPUT, "Lizard layer backward (CUDA): %d rows, the scratch holds %d", N, s->max_tokens);
    if (g->Hq != s->g.Hq || g->Hkv != s->g.Hkv || g->Hs != s->g.Hs || g->d != s->g.d || g->f != s->g.f || C != s->C)
        return lz_fail(LZ_ERR_INPUT, "Lizard layer backward (CUDA): a layer's shape differs from its scratch's");
    if (N == 0)
        return LZ_OK;
    const cudaStream_t stream = be->ctx.stream;
    train_stream_scope on_stream(stream);
    size_t S0_need, z0_need, work_need;
    chunk_sizes(g, n_seq, T, C, &S0_need, &z0_need, &work_need);
    LZ_TRY(scratch_grow(&s->S0, &s->S0_cap, S0_need, stream, "chunk states"));
    LZ_TRY(scratch_grow(&s->z0, &s->z0_cap, z0_need, stream, "chunk normaliser states"));
    LZ_TRY(scratch_grow(&s->work, &s->work_cap, work_need, stream, "reductions"));

    const size_t nq = (size_t)N * g->Hq * d, nk = (size_t)N * g->Hkv * d;
    const float *xf = (const float *)x, *qf = (const float *)q, *kf = (const float *)k, *vf = (const float *)v;
    if (be->dtype == LZ_DTYPE_BF16) {
        LZ_TRY(lz_cuda_bf16_to_f32(s->x, x, (size_t)N * C));
        LZ_TRY(lz_cuda_bf16_to_f32(s->q, q, nq));
        LZ_TRY(lz_cuda_bf16_to_f32(s->k, k, nk));
        LZ_TRY(lz_cuda_bf16_to_f32(s->v, v, nk));
        xf = s->x, qf = s->q, kf = s->k, vf = s->v;
    }

    // the forward, keeping what the backward reads
    LZ_TRY(lz_cuda_gate_train_forward(s->logit, s->lg, xf, p->wg, N, C));
    LZ_TRY(lz_cuda_feature_map_train_forward(s->phi_q, qf, p->wq, g->n_wq, N, g->Hq, g->Hq, d, f, g->exp_map));
    LZ_TRY(lz_cuda_feature_map_train_forward(s->phi_k, kf, p->wk, g->n_wk, N, g->Hkv, g->Hs, d, f, g->exp_map));
    LZ_TRY(lz_cuda_gla_train_forward(s->gla, s->S0, s->z0, s->den, s->phi_q, s->phi_k, vf, s->lg, n_seq, T, g));
    LZ_TRY(lz_cuda_window_train_forward(s->win, s->stats, qf, kf, vf, p->meta, n_seq, T, g));

    // y = GLA + alpha WIN: dGLA = dout, dWIN = alpha dout, d alpha = sum dout . WIN
    lizard_combine_kernel<<<ALPHA_BLOCKS, LZ_TB, 0, stream>>>(s->partial, s->dwin, dout, s->win, p->alpha, nq);
    LZ_LAUNCH_CHECK("lizard_combine");
    if (grad) {
        lizard_dalpha_kernel<<<1, 1, 0, stream>>>(grad->alpha, s->partial, ALPHA_BLOCKS);
        LZ_LAUNCH_CHECK("lizard_dalpha");
        LZ_TRY(lz_cuda_window_backward(grad->meta, s->dwin, s->win, s->stats, p->meta, n_seq, T, g, s->work));
    }
    LZ_TRY(lz_cuda_window_backward_input(dq, dk, dv, s->dwin, s->win, s->stats, qf, kf, vf, n_seq, T, g, s->work));
    LZ_TRY(lz_cuda_gla_backward_full(s->dphi_q, s->dphi_k, s->dlg, dv, dout, s->gla, s->S0, s->z0, s->den, s->phi_q,
                                     s->phi_k, vf, s->lg, n_seq, T, g, s->work));
    if (grad) {
        LZ_TRY(lz_cuda_feature_map_backward(grad->wq, s->dphi_q, s->phi_q, qf, g->n_wq, N, g->Hq, g->Hq, d, f,
                                            g->exp_map, s->work));
        LZ_TRY(lz_cuda_feature_map_backward(grad->wk, s->dphi_k, s->phi_k, kf, g->n_wk, N, g->Hkv, g->Hs, d, f,
                                            g->exp_map, s->work));
        LZ_TRY(lz_cuda_gate_backward(grad->wg, s->dlg, s->logit, xf, N, C, s->work));
    }
    LZ_TRY(lz_cuda_feature_map_backward_input(dq, s->dphi_q, s->phi_q, p->wq, g->n_wq, N, g->Hq, g->Hq, d, f,
                                              g->exp_map, s->work));
    LZ_TRY(lz_cuda_feature_map_backward_input(dk, s->dphi_k, s->phi_k, p->wk, g->n_wk, N, g->Hkv, g->Hs, d, f,
                                              g->exp_map, s->work));
    return lz_cuda_gate_backward_input(dx, s->dlg, s->logit, p->wg, N, C);
}
