/* test_gpu_ops.c - every op of the CUDA backend against the CPU reference,
 * through the two op tables, on random shapes (odd lengths, T not a multiple
 * of the GLA chunk, T < w, batches of mixed lengths, state carried across
 * steps, gates near 0 and 1), with poisoned outputs so that an unwritten
 * element fails; the prompt softmax attention alone on its own shapes, bf16
 * also with LIZARD_WGMMA=0 (the flash kernel other GPUs take); its decode steps alone (1, 5, 37
 * sequences, three steps a cache; also with LIZARD_DECODE_ATTN=1); the fused decode ops (GEMV
 * prologues/epilogues, the split, fused and streamed GLA decode for 1 to 70 sequences, LLaMA-3-8B's
 * Lizard shape among others) against the CPU's compositions. fp32: rel err
 * <= 1e-4 (1e-3 for the GLA/attention ops); bf16: <= 2e-2. Exit 77 (skip)
 * when no GPU is visible. */
#include <math.h>   // sqrt, NAN
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free, setenv
#include <string.h> // memcpy

#include <cuda_runtime_api.h> // cudaMemcpy (the GLA state is fp32 on every backend)

#include "knobs.h"     // lz_knobs_load (the tests set LIZARD_* variables before each backend)
#include "ops.h"       // lz_ops
#include "test_util.h" // CHECK

typedef struct {
    const lz_ops *ops;
    lz_backend *be;
} backend;

static unsigned rng = 12345u;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}
static float *rand_host(size_t n, float lo, float hi) {
    float *a = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        a[i] = frand(lo, hi);
    return a;
}

/* An activation buffer on a backend, filled from host floats (NULL: NaN poison). */
static void *act(backend *b, const float *host, size_t n) {
    void *p;
    if (b->ops->alloc(b->be, n * b->ops->act_size + 16, &p) != LZ_OK)
        abort();
    float *tmp = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        tmp[i] = host ? host[i] : NAN;
    if (b->ops->act_from_host(b->be, p, tmp, n) != LZ_OK)
        abort();
    free(tmp);
    return p;
}
static float *f32buf(backend *b, const float *host, size_t n) {
    void *p;
    if (b->ops->alloc(b->be, n * sizeof(float) + 16, &p) != LZ_OK || b->ops->upload_f32(b->be, p, host, n) != LZ_OK)
        abort();
    return p;
}
static float *download(backend *b, const void *p, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    CHECK_MSG(b->ops->act_to_host(b->be, h, p, n) == LZ_OK, "%s", lz_error_message());
    return h;
}
/* fp32 state (S, z) whatever the activation type: host memcpy or cudaMemcpy. */
static float *download_f32(backend *b, const float *p, size_t n) {
    float *h = malloc(sizeof(float) * n);
    CHECK(b->ops->sync(b->be) == LZ_OK);
    if (strcmp(b->ops->name, "cpu") == 0)
        memcpy(h, p, sizeof(float) * n);
    else
        CHECK(cudaMemcpy(h, p, sizeof(float) * n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
}

/* A weight [rows, cols] from host floats. */
static lz_weight weight(backend *b, const float *host, int64_t rows, int64_t cols) {
    lz_host_tensor t = {.name = "test", .dtype = LZ_DTYPE_F32, .numel = rows * cols, .data = host};
    lz_weight w;
    if (b->ops->upload_weight(b->be, &t, rows, cols, &w) != LZ_OK)
        abort();
    return w;
}

static double rel_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (num != num)
        return INFINITY; // a NaN: an unwritten (poisoned) element or an overflow
    return sqrt(num / (den > 0 ? den : 1));
}

static double tol;        /* for elementwise/GEMM ops */
static double tol_attn;   /* for attention / GLA */
static const char *dtype_name;

static void compare(const char *what, backend *cpu, void *c, backend *gpu, void *g, size_t n, double limit) {
    float *hc = download(cpu, c, n), *hg = download(gpu, g, n);
    double e = rel_err(hg, hc, n);
    CHECK_MSG(e <= limit, "%s %s: rel err %.3g > %.3g", dtype_name, what, e, limit);
    free(hc);
    free(hg);
}

/* Outputs that are one dot product each, y_t = x_t . w (T tokens of a one-row layer, x [T, C]): the
 * error measured against the size of the products summed, sqrt(sum_t sum_k (x_tk w_k)^2), where that is
 * larger than |y|. bf16's rounding of the inputs errs by about 2^-9 of each product whatever the sum, so
 * a sum that cancels towards zero shows it in full relative to itself: over 96 random products at one
 * token, 13.6% of draws exceed 1e-2 (a simulation of the rounding alone), and this suite's data drew
 * such sums (0.075 and 0.052) once tests added before it moved the random stream. */
static void compare_dots(const char *what, backend *cpu, void *c, backend *gpu, void *g, const float *x, const float *w,
                         int T, int C, double limit) {
    float *hc = download(cpu, c, (size_t)T), *hg = download(gpu, g, (size_t)T);
    double num = 0, den = 0, terms = 0;
    for (int t = 0; t < T; t++) {
        const double d = (double)hg[t] - hc[t];
        num += d * d, den += (double)hc[t] * hc[t];
        for (int k = 0; k < C; k++)
            terms += ((double)x[(size_t)t * C + k] * w[k]) * ((double)x[(size_t)t * C + k] * w[k]);
    }
    const double e = num != num ? INFINITY : sqrt(num / (den > terms ? den : terms > 0 ? terms : 1));
    CHECK_MSG(e <= limit, "%s %s: rel err %.3g > %.3g (of the products' size)", dtype_name, what, e, limit);
    free(hc);
    free(hg);
}

/* A batch of sequences with the given lengths and starting positions. */
typedef struct {
    int n;
    int32_t slot[8], start[8], len[8], pos[8], token_pos[4096], rows[4096];
    lz_batch b;
} batch_buf;

static void make_batch(batch_buf *bb, int n, const int *lens, const int *pos) {
    bb->n = n;
    int t = 0;
    for (int s = 0; s < n; s++) {
        bb->slot[s] = n - 1 - s; // slots in another order than rows
        bb->start[s] = t;
        bb->len[s] = lens[s];
        bb->pos[s] = pos[s];
        for (int i = 0; i < lens[s]; i++, t++)
            bb->token_pos[t] = pos[s] + i;
    }
    for (int i = 0; i < t; i++)
        bb->rows[i] = (i * 7) % t;
    bb->b = (lz_batch){n, t, bb->slot, bb->start, bb->len, bb->pos, bb->token_pos};
}

static int32_t ids_buf[4096];

static void begin(backend *b, const batch_buf *bb) {
    CHECK_MSG(b->ops->begin_step(b->be, ids_buf, &bb->b, bb->rows, bb->b.n_tokens) == LZ_OK, "%s",
              lz_error_message());
}

#define BOTH(call_cpu, call_gpu)                                                             \
    do {                                                                                     \
        CHECK_MSG((call_cpu) == LZ_OK, "cpu: %s", lz_error_message());                       \
        CHECK_MSG((call_gpu) == LZ_OK, "gpu: %s", lz_error_message());                       \
    } while (0)

static void test_dense_ops(backend *c, backend *g) {
    const int T = 37, C = 96, O = 130, V = 50;
    const int lens[1] = {T}, pos[1] = {0};
    batch_buf bb;
    make_batch(&bb, 1, lens, pos);
    for (int i = 0; i < T; i++)
        ids_buf[i] = (i * 13) % V;
    begin(c, &bb), begin(g, &bb);
    float *hx = rand_host((size_t)T * C, -2, 2), *hw = rand_host((size_t)O * C, -0.5f, 0.5f);
    float *hb = rand_host(O, -1, 1), *hn = rand_host(C, 0.5f, 1.5f), *ht = rand_host((size_t)V * C, -1, 1);
    lz_weight cw = weight(c, hw, O, C), gw = weight(g, hw, O, C), cb = weight(c, hb, 1, O), gb = weight(g, hb, 1, O);
    lz_weight cn = weight(c, hn, 1, C), gn = weight(g, hn, 1, C), ct = weight(c, ht, V, C), gt = weight(g, ht, V, C);
    void *cx = act(c, hx, (size_t)T * C), *gx = act(g, hx, (size_t)T * C);
    void *co = act(c, NULL, (size_t)T * O), *go = act(g, NULL, (size_t)T * O);
    BOTH(c->ops->linear(c->be, co, cx, &cw, &cb, T), g->ops->linear(g->be, go, gx, &gw, &gb, T));
    compare("linear+bias", c, co, g, go, (size_t)T * O, tol);
    BOTH(c->ops->linear(c->be, co, cx, &cw, NULL, 1), g->ops->linear(g->be, go, gx, &gw, NULL, 1));
    compare("linear T=1", c, co, g, go, O, tol);
    { // linear layers of one input: one launch for decode-sized steps (q, k, v, gate), products beyond
        float *hw2 = rand_host((size_t)33 * C, -0.5f, 0.5f), *hw3 = rand_host(C, -0.5f, 0.5f);
        lz_weight cw2 = weight(c, hw2, 33, C), gw2 = weight(g, hw2, 33, C);
        lz_weight cw3 = weight(c, hw3, 1, C), gw3 = weight(g, hw3, 1, C);
        void *c2 = act(c, NULL, (size_t)T * 33), *g2 = act(g, NULL, (size_t)T * 33);
        void *c3 = act(c, NULL, T), *g3 = act(g, NULL, T);
        const int steps[4] = {1, 3, 8, T};
        for (int i = 0; i < 4; i++) {
            void *couts[3] = {co, c2, c3}, *gouts[3] = {go, g2, g3};
            const lz_weight *cws[3] = {&cw, &cw2, &cw3}, *gws[3] = {&gw, &gw2, &gw3};
            const lz_weight *cbs[3] = {&cb, NULL, NULL}, *gbs[3] = {&gb, NULL, NULL};
            BOTH(c->ops->linear_many(c->be, 3, couts, cx, cws, cbs, steps[i]),
                 g->ops->linear_many(g->be, 3, gouts, gx, gws, gbs, steps[i]));
            compare("linear_many (bias)", c, co, g, go, (size_t)steps[i] * O, tol);
            compare("linear_many (33 rows)", c, c2, g, g2, (size_t)steps[i] * 33, tol);
            compare_dots("linear_many (1 row)", c, c3, g, g3, hx, hw3, steps[i], C, tol);
        }
        free(hw2), free(hw3);
    }
    void *cy = act(c, NULL, (size_t)T * C), *gy = act(g, NULL, (size_t)T * C);
    BOTH(c->ops->rmsnorm(c->be, cy, cx, &cn, T, 1e-5f), g->ops->rmsnorm(g->be, gy, gx, &gn, T, 1e-5f));
    compare("rmsnorm", c, cy, g, gy, (size_t)T * C, tol);
    BOTH(c->ops->add(c->be, cy, cx, (size_t)T * C), g->ops->add(g->be, gy, gx, (size_t)T * C));
    compare("add", c, cy, g, gy, (size_t)T * C, tol);
    BOTH(c->ops->swiglu(c->be, cy, cx, cy, (size_t)T * C), g->ops->swiglu(g->be, gy, gx, gy, (size_t)T * C));
    compare("swiglu", c, cy, g, gy, (size_t)T * C, tol);
    { // the 16-byte paths: a count that leaves a tail, pointers one element off 16 bytes (scalar kernels)
        const size_t n = (size_t)T * C - 3;
        BOTH(c->ops->add(c->be, cy, cx, n), g->ops->add(g->be, gy, gx, n));
        compare("add (tail)", c, cy, g, gy, (size_t)T * C, tol);
        BOTH(c->ops->swiglu(c->be, cy, cx, cy, n), g->ops->swiglu(g->be, gy, gx, gy, n));
        compare("swiglu (tail)", c, cy, g, gy, (size_t)T * C, tol);
        void *cy1 = (char *)cy + c->ops->act_size, *gy1 = (char *)gy + g->ops->act_size;
        void *cx1 = (char *)cx + c->ops->act_size, *gx1 = (char *)gx + g->ops->act_size;
        BOTH(c->ops->add(c->be, cy1, cx1, n), g->ops->add(g->be, gy1, gx1, n));
        compare("add (unaligned)", c, cy, g, gy, (size_t)T * C, tol);
        // gate and up both x + 1: up = y would overlap the output shifted by one, a chain no parallel kernel follows
        BOTH(c->ops->swiglu(c->be, cy1, cx1, cx1, n), g->ops->swiglu(g->be, gy1, gx1, gx1, n));
        compare("swiglu (unaligned)", c, cy, g, gy, (size_t)T * C, tol);
    }
    { // RMSNorm rows as wide as LLaMA's (4096: vectors held in registers) and not a multiple of 8 (4100),
      // a few and many (70 rows, 4096 and 96 wide)
        const int widths[4] = {4096, 4100, 4096, 96}, rows[4] = {5, 5, 70, 70};
        for (int i = 0; i < 4; i++) {
            const int W = widths[i], R = rows[i];
            float *hwx = rand_host((size_t)R * W, -3, 3), *hwn = rand_host(W, 0.5f, 1.5f);
            lz_weight cwn = weight(c, hwn, 1, W), gwn = weight(g, hwn, 1, W);
            void *cwx = act(c, hwx, (size_t)R * W), *gwx = act(g, hwx, (size_t)R * W);
            void *cwy = act(c, NULL, (size_t)R * W), *gwy = act(g, NULL, (size_t)R * W);
            BOTH(c->ops->rmsnorm(c->be, cwy, cwx, &cwn, R, 1e-5f), g->ops->rmsnorm(g->be, gwy, gwx, &gwn, R, 1e-5f));
            char what[64];
            snprintf(what, sizeof what, "rmsnorm (%d rows of %d)", R, W);
            compare(what, c, cwy, g, gwy, (size_t)R * W, tol);
            c->ops->free_weight(c->be, &cwn), g->ops->free_weight(g->be, &gwn);
            c->ops->free(c->be, cwx), g->ops->free(g->be, gwx), c->ops->free(c->be, cwy), g->ops->free(g->be, gwy);
            free(hwx), free(hwn);
        }
    }
    BOTH(c->ops->embedding(c->be, cy, &ct, ids_buf, T), g->ops->embedding(g->be, gy, &gt, ids_buf, T));
    compare("embedding", c, cy, g, gy, (size_t)T * C, tol);
    void *cr = act(c, NULL, (size_t)T * C), *gr = act(g, NULL, (size_t)T * C);
    BOTH(c->ops->gather_rows(c->be, cr, cx, bb.rows, T, C), g->ops->gather_rows(g->be, gr, gx, bb.rows, T, C));
    compare("gather_rows", c, cr, g, gr, (size_t)T * C, tol);
    float *hl = rand_host(T, -30, 30);
    void *cl = act(c, hl, T), *gl = act(g, hl, T), *cs = act(c, NULL, T), *gs = act(g, NULL, T);
    BOTH(c->ops->log_sigmoid(c->be, cs, cl, T), g->ops->log_sigmoid(g->be, gs, gl, T));
    compare("log_sigmoid", c, cs, g, gs, T, tol);
    free(hx), free(hw), free(hb), free(hn), free(ht), free(hl);
    // greedy ids: values on a coarse grid (exact in bf16) so that rows have ties, broken to the lowest index
    const int R = 5, VOC = 128259;
    float *hv = malloc(sizeof(float) * (size_t)R * VOC);
    for (size_t i = 0; i < (size_t)R * VOC; i++)
        hv[i] = (float)(int)frand(0, 40) / 8.0f;
    hv[(size_t)2 * VOC + VOC - 1] = 9.0f; // the largest value last in a row
    hv[(size_t)3 * VOC] = 9.0f;           // and first
    void *cv = act(c, hv, (size_t)R * VOC), *gv = act(g, hv, (size_t)R * VOC);
    int32_t cid[5], gid[5] = {-1, -1, -1, -1, -1};
    BOTH(c->ops->argmax_rows(c->be, cid, cv, R, VOC), g->ops->argmax_rows(g->be, gid, gv, R, VOC));
    for (int r = 0; r < R; r++)
        CHECK_MSG(cid[r] == gid[r], "%s argmax_rows row %d: cpu %d, gpu %d", dtype_name, r, cid[r], gid[r]);
    CHECK(cid[2] == VOC - 1 && cid[3] == 0);
    free(hv);
}

/* The fused dense ops (norm_swiglu, linear_residual) against the CPU's compositions:
 * decode-sized steps (1..8 tokens: the fused GEMV) and a prompt-sized one (the composition), input widths
 * that leave the GEMV's unrolled loop partly empty. */
static void test_fused_dense(backend *c, backend *g) {
    const int widths[2] = {96, 1000}, O = 130, I = 72;
    const int steps[6] = {1, 2, 3, 5, 8, 37};
    for (int wi = 0; wi < 2; wi++) {
        const int C = widths[wi], Tmax = 37;
        if (!g->ops->norm_swiglu && !g->ops->linear_residual) {
            fprintf(stderr, "test_gpu_ops: %s: no fused dense ops\n", dtype_name);
            return;
        }
        float *hx = rand_host((size_t)Tmax * C, -2, 2), *hn = rand_host(C, 0.5f, 1.5f);
        float *hw = rand_host((size_t)O * C, -0.5f, 0.5f), *hb = rand_host(O, -1, 1);
        float *hg = rand_host((size_t)I * C, -0.1f, 0.1f), *hu = rand_host((size_t)I * C, -0.1f, 0.1f);
        float *hbu = rand_host(I, -0.5f, 0.5f), *hd = rand_host((size_t)O * I, -0.3f, 0.3f);
        float *hy = rand_host((size_t)Tmax * O, -1, 1), *hh = rand_host((size_t)Tmax * I, -1, 1);
        lz_weight cn = weight(c, hn, 1, C), gn = weight(g, hn, 1, C);
        lz_weight cw = weight(c, hw, O, C), gw = weight(g, hw, O, C);
        lz_weight cb = weight(c, hb, 1, O), gb = weight(g, hb, 1, O);
        lz_weight cg = weight(c, hg, I, C), gg = weight(g, hg, I, C), cu = weight(c, hu, I, C), gu = weight(g, hu, I, C);
        lz_weight cbu = weight(c, hbu, 1, I), gbu = weight(g, hbu, 1, I), cd = weight(c, hd, O, I), gd = weight(g, hd, O, I);
        void *cx = act(c, hx, (size_t)Tmax * C), *gx = act(g, hx, (size_t)Tmax * C);
        for (int si = 0; si < 6; si++) {
            const int T = steps[si];
            void *cxn = act(c, NULL, (size_t)T * C), *gxn = act(g, NULL, (size_t)T * C);
            // MLP input: silu(gate) * up, the up projection with a bias
            void *cm = act(c, NULL, (size_t)T * I), *gm = act(g, NULL, (size_t)T * I);
            void *cup = act(c, NULL, (size_t)T * I), *gup = act(g, NULL, (size_t)T * I);
            if (g->ops->norm_swiglu) {
                BOTH(c->ops->norm_swiglu(c->be, cm, cxn, cup, cx, &cn, 1e-5f, &cg, NULL, &cu, &cbu, T),
                     g->ops->norm_swiglu(g->be, gm, gxn, gup, gx, &gn, 1e-5f, &gg, NULL, &gu, &gbu, T));
                compare("norm_swiglu", c, cm, g, gm, (size_t)T * I, tol);
            }
            // residual: y += h . W^T + b (down_proj shape: I inputs, O outputs), and o_proj's (C inputs)
            void *cy = act(c, hy, (size_t)T * O), *gy = act(g, hy, (size_t)T * O);
            void *ch = act(c, hh, (size_t)T * I), *gh = act(g, hh, (size_t)T * I);
            void *ctmp = act(c, NULL, (size_t)T * O), *gtmp = act(g, NULL, (size_t)T * O);
            BOTH(c->ops->linear_residual(c->be, cy, ctmp, ch, &cd, &cb, T),
                 g->ops->linear_residual(g->be, gy, gtmp, gh, &gd, &gb, T));
            compare("linear_residual (bias)", c, cy, g, gy, (size_t)T * O, tol);
            BOTH(c->ops->linear_residual(c->be, cy, ctmp, cx, &cw, NULL, T),
                 g->ops->linear_residual(g->be, gy, gtmp, gx, &gw, NULL, T));
            compare("linear_residual", c, cy, g, gy, (size_t)T * O, tol);
            void *bufs_c[] = {cxn, cm, cup, cy, ch, ctmp}, *bufs_g[] = {gxn, gm, gup, gy, gh, gtmp};
            for (size_t i = 0; i < sizeof bufs_c / sizeof bufs_c[0]; i++)
                c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
        }
        lz_weight *all_c[] = {&cn, &cw, &cb, &cg, &cu, &cbu, &cd}, *all_g[] = {&gn, &gw, &gb, &gg, &gu, &gbu, &gd};
        for (size_t i = 0; i < sizeof all_c / sizeof all_c[0]; i++)
            c->ops->free_weight(c->be, all_c[i]), g->ops->free_weight(g->be, all_g[i]);
        c->ops->free(c->be, cx), g->ops->free(g->be, gx);
        free(hx), free(hn), free(hw), free(hb), free(hg), free(hu), free(hbu), free(hd), free(hy), free(hh);
    }
}

/* Up to 4 linear layers of one input width on both backends: random host weights, the two backends'
 * copies, and outputs for nmax tokens. */
typedef struct {
    int count;
    float *hw[4];
    lz_weight cw[4], gw[4];
    void *co[4], *go[4];
} layer_set;
static void layers_make(layer_set *s, backend *c, backend *g, int count, const int *rows, int C, int nmax) {
    s->count = count;
    for (int l = 0; l < count; l++) {
        s->hw[l] = rand_host((size_t)rows[l] * C, -0.5f, 0.5f);
        s->cw[l] = weight(c, s->hw[l], rows[l], C), s->gw[l] = weight(g, s->hw[l], rows[l], C);
        s->co[l] = act(c, NULL, (size_t)nmax * rows[l]), s->go[l] = act(g, NULL, (size_t)nmax * rows[l]);
    }
}
static void layers_free(layer_set *s, backend *c, backend *g) {
    for (int l = 0; l < s->count; l++) {
        c->ops->free_weight(c->be, &s->cw[l]), g->ops->free_weight(g->be, &s->gw[l]);
        c->ops->free(c->be, s->co[l]), g->ops->free(g->be, s->go[l]);
        free(s->hw[l]);
    }
}

/* linear_stream.cu (bf16 linear layers of a few tokens) against the CPU, on a backend opened with
 * LIZARD_STREAM_TOKENS=64 (every width of the kernel, not only the default's 2-4 tokens),
 * LIZARD_STREAM_SPLIT=split (the shares of k a group of 16 rows; "0": by the launch's size) and the GEMV
 * at one token only: layers of rows off the 16-row groups (130, 33, 1) and a whole number of them (64),
 * inputs of one 64-input chunk, 960 and LLaMA's 4096, steps at every mma width and off its 8-token
 * tiles, one to four layers a launch, a bias, the accumulating form (o and down onto the residual) and
 * the MLP's norm_swiglu (gate and up, a bias on each). Each linear_many runs twice: the results must
 * agree bit for bit (the shares are added in a fixed order). */
static void open_gpu(backend *g, lz_dtype dt, const char *name);
static void test_stream_linear(backend *c, const char *split) {
    backend gb, *g = &gb;
    char name[64];
    snprintf(name, sizeof name, "bf16 stream LIZARD_STREAM_SPLIT=%s", split);
    char gemv_tokens[16];
    snprintf(gemv_tokens, sizeof gemv_tokens, "%s", getenv("LIZARD_GEMV_TOKENS") ? getenv("LIZARD_GEMV_TOKENS") : "");
    setenv("LIZARD_GEMV_TOKENS", "1", 1);
    setenv("LIZARD_STREAM_TOKENS", "64", 1);
    setenv("LIZARD_STREAM_SPLIT", split, 1);
    open_gpu(g, LZ_DTYPE_BF16, name);
    setenv("LIZARD_GEMV_TOKENS", gemv_tokens, 1); // (main's setting for the backends after this one)
    unsetenv("LIZARD_STREAM_TOKENS"), unsetenv("LIZARD_STREAM_SPLIT");
    enum { L = 4, NMAX = 64 };
    const int widths[3] = {64, 960, 4096}, rows[L] = {130, 33, 1, 64};
    const int steps[10] = {2, 3, 8, 9, 16, 17, 32, 33, 63, 64};
    for (int wi = 0; wi < 3; wi++) {
        const int C = widths[wi];
        float *hx = rand_host((size_t)NMAX * C, -2, 2), *hb = rand_host(rows[0], -1, 1);
        float *hy = rand_host((size_t)NMAX * rows[0], -1, 1), *hn = rand_host(C, 0.5f, 1.5f);
        float *hu = rand_host((size_t)rows[0] * C, -0.5f, 0.5f), *hbu = rand_host(rows[0], -1, 1);
        layer_set ls;
        layers_make(&ls, c, g, L, rows, C, NMAX);
        float **hw = ls.hw;
        lz_weight *cw = ls.cw, *gw = ls.gw;
        void **co = ls.co, **go = ls.go;
        lz_weight cb = weight(c, hb, 1, rows[0]), gbias = weight(g, hb, 1, rows[0]);
        lz_weight cn = weight(c, hn, 1, C), gn = weight(g, hn, 1, C);
        lz_weight cu = weight(c, hu, rows[0], C), gu = weight(g, hu, rows[0], C);
        lz_weight cbu = weight(c, hbu, 1, rows[0]), gbu = weight(g, hbu, 1, rows[0]);
        void *cx = act(c, hx, (size_t)NMAX * C), *gx = act(g, hx, (size_t)NMAX * C);
        for (int si = 0; si < 10; si++) {
            const int n = steps[si], count = 1 + (si + wi) % L;
            const lz_weight *cws[L] = {&cw[0], &cw[1], &cw[2], &cw[3]}, *gws[L] = {&gw[0], &gw[1], &gw[2], &gw[3]};
            const lz_weight *cbs[L] = {&cb, NULL, NULL, NULL}, *gbs[L] = {&gbias, NULL, NULL, NULL};
            float *first[L] = {NULL};
            for (int run = 0; run < 2; run++) {
                for (int l = 0; l < count; l++) { // poison: an element the kernel leaves unwritten stays NaN
                    float *nan = rand_host((size_t)n * rows[l], NAN, NAN);
                    CHECK(g->ops->act_from_host(g->be, go[l], nan, (size_t)n * rows[l]) == LZ_OK);
                    free(nan);
                }
                if (run == 0)
                    CHECK_MSG(c->ops->linear_many(c->be, count, co, cx, cws, cbs, n) == LZ_OK, "cpu: %s", lz_error_message());
                CHECK_MSG(g->ops->linear_many(g->be, count, go, gx, gws, gbs, n) == LZ_OK, "gpu: %s", lz_error_message());
                for (int l = 0; l < count; l++) {
                    char what[112];
                    snprintf(what, sizeof what, "stream linear_many (%d of %d layers, %d rows, k %d, %d tokens)", l + 1,
                             count, rows[l], C, n);
                    if (rows[l] == 1)
                        compare_dots(what, c, co[l], g, go[l], hx, hw[l], n, C, tol);
                    else
                        compare(what, c, co[l], g, go[l], (size_t)n * rows[l], tol);
                    float *h = download(g, go[l], (size_t)n * rows[l]);
                    if (run == 0)
                        first[l] = h;
                    else {
                        CHECK_MSG(memcmp(h, first[l], sizeof(float) * (size_t)n * rows[l]) == 0,
                                  "%s %s: two launches differ", dtype_name, what);
                        free(h), free(first[l]);
                    }
                }
            }
            // onto a residual (the o and down projections): y += x . W^T
            void *cy = act(c, hy, (size_t)n * rows[0]), *gy = act(g, hy, (size_t)n * rows[0]);
            void *ct = act(c, NULL, (size_t)n * rows[0]), *gt = act(g, NULL, (size_t)n * rows[0]);
            BOTH(c->ops->linear_residual(c->be, cy, ct, cx, &cw[0], NULL, n),
                 g->ops->linear_residual(g->be, gy, gt, gx, &gw[0], NULL, n));
            char what[96];
            snprintf(what, sizeof what, "stream linear_residual (%d rows, k %d, %d tokens)", rows[0], C, n);
            compare(what, c, cy, g, gy, (size_t)n * rows[0], tol);
            // the MLP: silu(norm(x) . Wg^T + bg) * (norm(x) . Wu^T + bu), outputs poisoned
            void *cm = act(c, NULL, (size_t)n * rows[0]), *gm = act(g, NULL, (size_t)n * rows[0]);
            void *cxn = act(c, NULL, (size_t)n * C), *gxn = act(g, NULL, (size_t)n * C);
            if (c->ops->norm_swiglu && g->ops->norm_swiglu) {
                BOTH(c->ops->norm_swiglu(c->be, cm, cxn, ct, cx, &cn, 1e-5f, &cw[0], &cb, &cu, &cbu, n),
                     g->ops->norm_swiglu(g->be, gm, gxn, gt, gx, &gn, 1e-5f, &gw[0], &gbias, &gu, &gbu, n));
                snprintf(what, sizeof what, "stream norm_swiglu (%d rows, k %d, %d tokens)", rows[0], C, n);
                compare(what, c, cm, g, gm, (size_t)n * rows[0], tol);
            }
            void *bufs_c[] = {cy, ct, cm, cxn}, *bufs_g[] = {gy, gt, gm, gxn};
            for (int i = 0; i < 4; i++)
                c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
        }
        layers_free(&ls, c, g);
        lz_weight *all_c[] = {&cb, &cn, &cu, &cbu}, *all_g[] = {&gbias, &gn, &gu, &gbu};
        for (int i = 0; i < 4; i++)
            c->ops->free_weight(c->be, all_c[i]), g->ops->free_weight(g->be, all_g[i]);
        c->ops->free(c->be, cx), g->ops->free(g->be, gx);
        free(hx), free(hb), free(hy), free(hn), free(hu), free(hbu);
    }
    g->ops->destroy(g->be);
}

/* linear_joined.cu: q, k, v (and gate, up) joined into one allocation by the backend's join_weights, then
 * linear_many and norm_swiglu against the CPU, at steps the joined product takes (2 .. LIZARD_JOIN_TOKENS=64;
 * the GEMV at one token only) and beyond it (65), outputs poisoned. Twice: with a one-row layer (the Lizard
 * gate) joined at the end of the block (its padding rows fill the product's last vector), and apart (run
 * after the joined product). The join itself is checked: the weights lie one after another afterwards. */
static void test_joined_linear(backend *c, lz_dtype dt) {
    backend gb, *g = &gb;
    char name[64], gemv_tokens[16];
    snprintf(name, sizeof name, "%s joined", dt == LZ_DTYPE_F32 ? "fp32" : "bf16");
    snprintf(gemv_tokens, sizeof gemv_tokens, "%s", getenv("LIZARD_GEMV_TOKENS") ? getenv("LIZARD_GEMV_TOKENS") : "");
    setenv("LIZARD_GEMV_TOKENS", "1", 1);
    setenv("LIZARD_JOIN_TOKENS", "64", 1);
    open_gpu(g, dt, name);
    setenv("LIZARD_GEMV_TOKENS", gemv_tokens, 1);
    unsetenv("LIZARD_JOIN_TOKENS");
    if (!g->ops->join_weights) {
        fprintf(stderr, "test_gpu_ops: %s: no join_weights in this table\n", name);
        g->ops->destroy(g->be);
        return;
    }
    enum { L = 4, NMAX = 65, C = 1024, I = 200 };
    const int rows[L] = {136, 40, 40, 1}, steps[8] = {1, 2, 5, 9, 16, 37, 64, 65};
    float *hx = rand_host((size_t)NMAX * C, -2, 2), *hn = rand_host(C, 0.5f, 1.5f);
    float *hg = rand_host((size_t)I * C, -0.1f, 0.1f), *hu = rand_host((size_t)I * C, -0.1f, 0.1f);
    const size_t es = g->ops->act_size;
    void *cx = act(c, hx, (size_t)NMAX * C), *gx = act(g, hx, (size_t)NMAX * C);
    for (int joined = 3; joined <= L; joined++) { // the one-row layer apart, then joined
        layer_set ls;
        layers_make(&ls, c, g, L, rows, C, NMAX);
        float **hw = ls.hw;
        lz_weight *cw = ls.cw, *gw = ls.gw;
        void **co = ls.co, **go = ls.go;
        lz_weight *qkv[L] = {&gw[0], &gw[1], &gw[2], &gw[3]};
        CHECK_MSG(g->ops->join_weights(g->be, joined, qkv) == LZ_OK, "%s", lz_error_message());
        CHECK_MSG(g->ops->join_weights(g->be, joined, qkv) == LZ_OK, "%s (joining again)", lz_error_message());
        size_t off = 0;
        for (int l = 1; l < joined; l++) {
            off += (size_t)rows[l - 1] * C * es;
            CHECK_MSG((char *)gw[l].data == (char *)gw[0].data + off, "%s: layer %d of %d not joined", name, l + 1, joined);
        }
        CHECK_MSG(gw[0].block_rows == (joined == L ? 224 : 216) && gw[1].block_rows == 0,
                  "%s: block of %lld rows for %d layers", name, (long long)gw[0].block_rows, joined);
        for (int si = 0; si < 8; si++) {
            const int n = steps[si];
            const lz_weight *cws[L] = {&cw[0], &cw[1], &cw[2], &cw[3]}, *gws[L] = {&gw[0], &gw[1], &gw[2], &gw[3]};
            for (int count = 2; count <= L; count++) { // q, k; q, k, v; and the one-row layer
                for (int l = 0; l < count; l++) { // poison: an element left unwritten stays NaN
                    float *nan = rand_host((size_t)n * rows[l], NAN, NAN);
                    CHECK(g->ops->act_from_host(g->be, go[l], nan, (size_t)n * rows[l]) == LZ_OK);
                    free(nan);
                }
                BOTH(c->ops->linear_many(c->be, count, co, cx, cws, NULL, n),
                     g->ops->linear_many(g->be, count, go, gx, gws, NULL, n));
                for (int l = 0; l < count; l++) {
                    char what[112];
                    snprintf(what, sizeof what, "joined linear_many (%d of %d layers, %d joined, %d rows, %d tokens)", l + 1,
                             count, joined, rows[l], n);
                    if (rows[l] == 1)
                        compare_dots(what, c, co[l], g, go[l], hx, hw[l], n, C, tol);
                    else
                        compare(what, c, co[l], g, go[l], (size_t)n * rows[l], tol);
                }
            }
        }
        layers_free(&ls, c, g);
    }
    lz_weight cn = weight(c, hn, 1, C), gn = weight(g, hn, 1, C);
    lz_weight cg = weight(c, hg, I, C), gg = weight(g, hg, I, C), cu = weight(c, hu, I, C), gu = weight(g, hu, I, C);
    lz_weight *mlp[2] = {&gg, &gu};
    CHECK_MSG(g->ops->join_weights(g->be, 2, mlp) == LZ_OK, "%s", lz_error_message());
    CHECK_MSG((char *)gu.data == (char *)gg.data + (size_t)I * C * es, "%s: gate, up not joined", name);
    for (int si = 0; si < 8 && g->ops->norm_swiglu; si++) {
        const int n = steps[si];
        void *cxn = act(c, NULL, (size_t)n * C), *gxn = act(g, NULL, (size_t)n * C);
        void *cm = act(c, NULL, (size_t)n * I), *gm = act(g, NULL, (size_t)n * I);
        void *cup = act(c, NULL, (size_t)n * I), *gup = act(g, NULL, (size_t)n * I);
        BOTH(c->ops->norm_swiglu(c->be, cm, cxn, cup, cx, &cn, 1e-5f, &cg, NULL, &cu, NULL, n),
             g->ops->norm_swiglu(g->be, gm, gxn, gup, gx, &gn, 1e-5f, &gg, NULL, &gu, NULL, n));
        char what[64];
        snprintf(what, sizeof what, "joined norm_swiglu (%d tokens)", n);
        compare(what, c, cm, g, gm, (size_t)n * I, tol);
        void *bufs_c[] = {cxn, cm, cup}, *bufs_g[] = {gxn, gm, gup};
        for (int i = 0; i < 3; i++)
            c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
    }
    lz_weight *all_c[] = {&cn, &cg, &cu}, *all_g[] = {&gn, &gg, &gu};
    for (int i = 0; i < 3; i++)
        c->ops->free_weight(c->be, all_c[i]), g->ops->free_weight(g->be, all_g[i]);
    c->ops->free(c->be, cx), g->ops->free(g->be, gx);
    free(hx), free(hn), free(hg), free(hu);
    g->ops->destroy(g->be);
}

/* rope alone against the CPU: the kernel's 16-byte form (head_dim 128, 64; every head of a token from
 * one block) and its one-element form (head_dim 12: d / 2 not a whole vector), steps of 1-300 tokens at
 * positions up to ~200K (angles far past 2 pi), with HF's inv_freq. */
static void test_rope(backend *c, backend *g) {
    typedef struct { int Hq, Hkv, d, n, len[3], pos[3]; } rope_case;
    static const rope_case cases[] = {
        {32, 8, 128, 3, {300, 1, 37}, {0, 131000, 200000}}, // the 8B shape, a prompt and decode rows
        {8, 2, 64, 2, {2, 65}, {5, 4000}},
        {6, 3, 12, 2, {40, 3}, {0, 70000}}, // d / 2 = 6: one element at a time
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const rope_case *k = &cases[ci];
        batch_buf bb;
        make_batch(&bb, k->n, k->len, k->pos);
        begin(c, &bb), begin(g, &bb);
        const int T = bb.b.n_tokens;
        lz_attn_dims dims = {k->Hq, k->Hkv, k->d, 1, 0, k->Hkv, 1, 1, 0, true};
        float freq[128];
        for (int j = 0; j < k->d / 2; j++)
            freq[j] = 1.0f / powf(500000.0f, 2.0f * j / k->d);
        const size_t nq = (size_t)T * k->Hq * k->d, nk = (size_t)T * k->Hkv * k->d;
        float *hq = rand_host(nq, -2, 2), *hk = rand_host(nk, -2, 2);
        void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ck = act(c, hk, nk), *gk = act(g, hk, nk);
        float *cf = f32buf(c, freq, k->d / 2), *gf = f32buf(g, freq, k->d / 2);
        BOTH(c->ops->rope(c->be, cq, ck, cf, &bb.b, &dims), g->ops->rope(g->be, gq, gk, gf, &bb.b, &dims));
        char what[96];
        snprintf(what, sizeof what, "rope q (Hq %d, d %d, %d tokens)", k->Hq, k->d, T);
        compare(what, c, cq, g, gq, nq, tol);
        snprintf(what, sizeof what, "rope k (Hkv %d, d %d, %d tokens)", k->Hkv, k->d, T);
        compare(what, c, ck, g, gk, nk, tol);
        c->ops->free(c->be, cq), c->ops->free(c->be, ck), c->ops->free(c->be, cf);
        g->ops->free(g->be, gq), g->ops->free(g->be, gk), g->ops->free(g->be, gf);
        free(hq), free(hk);
    }
}

/* linear_many_rope (a softmax layer's q, k, v with RoPE folded into the GEMV) against the CPU's composition
 * (linear_many, rope): one-token steps on the fused epilogue (head_dim a multiple of 8), at positions far
 * from 0 (large angles); head_dim 20 and a 3-sequence step on the composition. */
static void test_linear_rope(backend *c, backend *g) {
    if (!g->ops->linear_many_rope) {
        fprintf(stderr, "test_gpu_ops: %s: no linear_many_rope in this table\n", dtype_name);
        return;
    }
    typedef struct { int Hq, Hkv, d, C, n, pos[3]; } rope_case;
    static const rope_case cases[] = {
        {8, 2, 128, 96, 1, {7}},         // LLaMA head_dim, group 4
        {4, 4, 64, 1000, 1, {100000}},   // group 1, a long row, a large angle
        {3, 1, 32, 64, 1, {0}},          // position 0 (no rotation), 3 query heads
        {2, 1, 20, 48, 1, {50}},         // head_dim 20: not whole blocks of 8 rows, the composition
        {4, 2, 64, 96, 3, {5, 77, 4000}}, // three sequences: the composition
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const rope_case *k = &cases[ci];
        const int T = k->n, C = k->C, nq = k->Hq * k->d, nk = k->Hkv * k->d;
        const int lens[3] = {1, 1, 1};
        batch_buf bb;
        make_batch(&bb, T, lens, k->pos);
        begin(c, &bb), begin(g, &bb);
        lz_attn_dims dims = {k->Hq, k->Hkv, k->d, 1, 0, k->Hkv, 8, 4, 0, true};
        float freq[64];
        for (int j = 0; j < k->d / 2; j++)
            freq[j] = 1.0f / powf(500000.0f, 2.0f * j / k->d);
        float *cf = f32buf(c, freq, k->d / 2), *gf = f32buf(g, freq, k->d / 2);
        float *hx = rand_host((size_t)T * C, -2, 2), *hwq = rand_host((size_t)nq * C, -0.3f, 0.3f);
        float *hwk = rand_host((size_t)nk * C, -0.3f, 0.3f), *hwv = rand_host((size_t)nk * C, -0.3f, 0.3f);
        float *hbq = rand_host(nq, -1, 1);
        lz_weight cwq = weight(c, hwq, nq, C), gwq = weight(g, hwq, nq, C), cwk = weight(c, hwk, nk, C);
        lz_weight gwk = weight(g, hwk, nk, C), cwv = weight(c, hwv, nk, C), gwv = weight(g, hwv, nk, C);
        lz_weight cbq = weight(c, hbq, 1, nq), gbq = weight(g, hbq, 1, nq);
        void *cx = act(c, hx, (size_t)T * C), *gx = act(g, hx, (size_t)T * C);
        void *cq = act(c, NULL, (size_t)T * nq), *gq = act(g, NULL, (size_t)T * nq);
        void *ck = act(c, NULL, (size_t)T * nk), *gk = act(g, NULL, (size_t)T * nk);
        void *cv = act(c, NULL, (size_t)T * nk), *gv = act(g, NULL, (size_t)T * nk);
        void *couts[3] = {cq, ck, cv}, *gouts[3] = {gq, gk, gv};
        const lz_weight *cws[3] = {&cwq, &cwk, &cwv}, *gws[3] = {&gwq, &gwk, &gwv};
        const lz_weight *cbs[3] = {&cbq, NULL, NULL}, *gbs[3] = {&gbq, NULL, NULL};
        BOTH(c->ops->linear_many(c->be, 3, couts, cx, cws, cbs, T),
             g->ops->linear_many_rope(g->be, 3, gouts, gx, gws, gbs, T, gf, &bb.b, &dims));
        CHECK_MSG(c->ops->rope(c->be, cq, ck, cf, &bb.b, &dims) == LZ_OK, "cpu: %s", lz_error_message());
        char what[96];
        snprintf(what, sizeof what, "linear_many_rope q (Hq %d, d %d, %d tokens)", k->Hq, k->d, T);
        compare(what, c, cq, g, gq, (size_t)T * nq, tol);
        snprintf(what, sizeof what, "linear_many_rope k (Hkv %d, d %d)", k->Hkv, k->d);
        compare(what, c, ck, g, gk, (size_t)T * nk, tol);
        compare("linear_many_rope v", c, cv, g, gv, (size_t)T * nk, tol);
        lz_weight *all_c[] = {&cwq, &cwk, &cwv, &cbq}, *all_g[] = {&gwq, &gwk, &gwv, &gbq};
        for (size_t i = 0; i < 4; i++)
            c->ops->free_weight(c->be, all_c[i]), g->ops->free_weight(g->be, all_g[i]);
        void *bufs_c[] = {cx, cq, ck, cv, cf}, *bufs_g[] = {gx, gq, gk, gv, gf};
        for (size_t i = 0; i < 5; i++)
            c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
        free(hx), free(hwq), free(hwk), free(hwv), free(hbq);
    }
}

typedef struct {
    int Hq, Hkv, Hs, d, f, w, m;
    bool normalize, exp_map;
    float gate_lo, gate_hi;
} lizard_shape;

/* Two steps on a batch of 3 sequences (prefill of mixed lengths, then a
 * decode step), GLA + window + feature maps + rope + softmax attention. */
static void test_attention_ops(backend *c, backend *g, const lizard_shape *sh) {
    const int n_slots = 3, cap = 300, F = 2 * sh->f, row = sh->Hkv * sh->d;
    lz_attn_dims dims = {sh->Hq, sh->Hkv, sh->d, cap, 0, sh->Hs, sh->f, sh->w, sh->m, sh->normalize};
    // state: S, z random (as if earlier steps ran), ring and KV caches random
    const size_t nS = (size_t)n_slots * sh->Hs * F * sh->d, nz = (size_t)n_slots * sh->Hs * F;
    const size_t nring = (size_t)n_slots * sh->w * row, nkv = (size_t)n_slots * cap * row;
    float *hS = rand_host(nS, 0, 0.2f), *hz = rand_host(nz, 0.5f, 1.5f), *hring = rand_host(nring, -1, 1);
    float *hkv = rand_host(nkv, -1, 1);
    lz_layer_state cst = {act(c, hkv, nkv), act(c, hkv, nkv), f32buf(c, hS, nS), f32buf(c, hz, nz), act(c, hring, nring),
                          act(c, hring, nring)};
    lz_layer_state gst = {act(g, hkv, nkv), act(g, hkv, nkv), f32buf(g, hS, nS), f32buf(g, hz, nz), act(g, hring, nring),
                          act(g, hring, nring)};
    float freq[128];
    for (int j = 0; j < sh->d / 2; j++)
        freq[j] = 1.0f / powf(10000.0f, 2.0f * j / sh->d);
    float *cf = f32buf(c, freq, sh->d / 2), *gf = f32buf(g, freq, sh->d / 2);
    const int prefill_lens[3] = {70, 5, 129}, prefill_pos[3] = {10, 0, 3}; // positions > 0: state from before
    const int decode_lens[3] = {1, 1, 1}, decode_pos[3] = {80, 5, 132};
    for (int step = 0; step < 2; step++) {
        batch_buf bb;
        make_batch(&bb, 3, step == 0 ? prefill_lens : decode_lens, step == 0 ? prefill_pos : decode_pos);
        const int T = bb.b.n_tokens;
        begin(c, &bb), begin(g, &bb);
        float *hq = rand_host((size_t)T * sh->Hq * sh->d, -1.5f, 1.5f), *hk = rand_host((size_t)T * row, -1.5f, 1.5f);
        float *hv = rand_host((size_t)T * row, -1, 1), *hgate = rand_host(T, sh->gate_lo, sh->gate_hi);
        float *hwq = rand_host((size_t)sh->Hq * sh->d * sh->f, -0.5f, 0.5f);
        float *hwk = rand_host((size_t)sh->Hs * sh->d * sh->f, -0.5f, 0.5f), *hmeta = rand_host(sh->m + 1, -1, 1);
        const size_t nq = (size_t)T * sh->Hq * sh->d;
        void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ck = act(c, hk, (size_t)T * row), *gk = act(g, hk, (size_t)T * row);
        void *cv = act(c, hv, (size_t)T * row), *gv = act(g, hv, (size_t)T * row);
        // feature maps (phi_k per state head reads kv head o / (Hs / Hkv))
        lz_weight cwq = weight(c, hwq, sh->Hq, (int64_t)sh->d * sh->f), gwq = weight(g, hwq, sh->Hq, (int64_t)sh->d * sh->f);
        lz_weight cwk = weight(c, hwk, sh->Hs, (int64_t)sh->d * sh->f), gwk = weight(g, hwk, sh->Hs, (int64_t)sh->d * sh->f);
        void *cpq = act(c, NULL, (size_t)T * sh->Hq * F), *gpq = act(g, NULL, (size_t)T * sh->Hq * F);
        void *cpk = act(c, NULL, (size_t)T * sh->Hs * F), *gpk = act(g, NULL, (size_t)T * sh->Hs * F);
        BOTH(c->ops->feature_map(c->be, cpq, cq, &cwq, T, sh->Hq, sh->Hq, sh->d, sh->f, sh->exp_map),
             g->ops->feature_map(g->be, gpq, gq, &gwq, T, sh->Hq, sh->Hq, sh->d, sh->f, sh->exp_map));
        compare("feature_map q", c, cpq, g, gpq, (size_t)T * sh->Hq * F, tol);
        BOTH(c->ops->feature_map(c->be, cpk, ck, &cwk, T, sh->Hkv, sh->Hs, sh->d, sh->f, sh->exp_map),
             g->ops->feature_map(g->be, gpk, gk, &gwk, T, sh->Hkv, sh->Hs, sh->d, sh->f, sh->exp_map));
        compare("feature_map k", c, cpk, g, gpk, (size_t)T * sh->Hs * F, tol);
        // gates
        void *cgl = act(c, hgate, T), *ggl = act(g, hgate, T), *clg = act(c, NULL, T), *glg = act(g, NULL, T);
        BOTH(c->ops->log_sigmoid(c->be, clg, cgl, T), g->ops->log_sigmoid(g->be, glg, ggl, T));
        // GLA: chunked for the prefill, recurrent for the decode step
        void *co = act(c, NULL, nq), *go = act(g, NULL, nq);
        if (step == 0)
            BOTH(c->ops->gla_chunked(c->be, co, cpq, cpk, cv, clg, &cst, &bb.b, &dims),
                 g->ops->gla_chunked(g->be, go, gpq, gpk, gv, glg, &gst, &bb.b, &dims));
        else
            BOTH(c->ops->gla_recurrent(c->be, co, cpq, cpk, cv, clg, &cst, &bb.b, &dims),
                 g->ops->gla_recurrent(g->be, go, gpq, gpk, gv, glg, &gst, &bb.b, &dims));
        compare(step == 0 ? "gla_chunked" : "gla_recurrent", c, co, g, go, nq, tol_attn);
        float *cS = download_f32(c, cst.S, nS), *gS = download_f32(g, gst.S, nS);
        double eS = rel_err(gS, cS, nS);
        CHECK_MSG(eS <= tol_attn, "%s GLA state S after step %d: rel err %.3g", dtype_name, step, eS);
        free(cS), free(gS);
        // window branch, accumulated into the GLA output
        lz_weight cm = weight(c, hmeta, 1, sh->m ? sh->m : 1), gm = weight(g, hmeta, 1, sh->m ? sh->m : 1);
        BOTH(c->ops->window_attention(c->be, co, cq, ck, cv, &cm, 0.7f, &cst, &bb.b, &dims),
             g->ops->window_attention(g->be, go, gq, gk, gv, &gm, 0.7f, &gst, &bb.b, &dims));
        compare("gla + window", c, co, g, go, nq, tol_attn);
        compare("window ring k", c, cst.ring_k, g, gst.ring_k, nring, tol);
        // softmax layer: rope then attention over the KV cache
        BOTH(c->ops->rope(c->be, cq, ck, cf, &bb.b, &dims), g->ops->rope(g->be, gq, gk, gf, &bb.b, &dims));
        compare("rope q", c, cq, g, gq, nq, tol);
        compare("rope k", c, ck, g, gk, (size_t)T * row, tol);
        void *ca = act(c, NULL, nq), *ga = act(g, NULL, nq);
        BOTH(c->ops->softmax_attention(c->be, ca, cq, ck, cv, &cst, &bb.b, &dims),
             g->ops->softmax_attention(g->be, ga, gq, gk, gv, &gst, &bb.b, &dims));
        compare("softmax_attention", c, ca, g, ga, nq, tol_attn);
        c->ops->free_weight(c->be, &cwq), g->ops->free_weight(g->be, &gwq), c->ops->free_weight(c->be, &cwk);
        g->ops->free_weight(g->be, &gwk), c->ops->free_weight(c->be, &cm), g->ops->free_weight(g->be, &gm);
        free(hq), free(hk), free(hv), free(hgate), free(hwq), free(hwk), free(hmeta);
    }
    free(hS), free(hz), free(hring), free(hkv);
}

/* The shapes of the GLA decode tests (test_gla_decode). */
static const lizard_shape gla_decode_shapes[] = {
    // Hq Hkv Hs  d    f   w  m  norm   exp    gate logits
    {32, 8, 8, 128, 128, 8, 4, true, false, -3, 3},  // LLaMA-3-8B's Lizard layer
    {16, 2, 2, 64, 32, 8, 4, true, false, 8, 12},    // 8 query heads a state head, gates near 1
    {16, 1, 1, 32, 16, 8, 4, false, false, -3, 3},   // 16 a state head, no normaliser
    {8, 2, 8, 32, 12, 8, 2, true, true, -3, 3},      // per-query-head state, exp map, f not of whole vectors
    {2, 2, 2, 16, 8, 4, 1, true, false, -14, -9},    // gates near 0, 2 blocks a cluster
    {6, 3, 3, 24, 20, 4, 1, true, false, -3, 3},     // d = 24: clusters of 2, odd head counts
};

/* The GLA decode step: the fused op (gates, feature maps, update; gla_decode) and the split
 * gla_recurrent, each on its own copy of the state, against the CPU, for 1, 3, 8 and 40 sequences
 * (one token each; slots scattered over 48, not in row order) over two steps (the state carried),
 * with shared (1 row) or per-head feature-map weights. main sets LIZARD_GLA_STREAM_MIN=8, so the
 * fused op runs the split kernel for 1 and 3 sequences and gla_decode_stream.cu for 8 and 40. */
static void test_gla_decode(backend *c, backend *g, const lizard_shape *sh, bool shared_wq) {
    if (!c->ops->gla_decode || !g->ops->gla_decode) {
        fprintf(stderr, "test_gpu_ops: %s: no gla_decode op\n", dtype_name);
        return;
    }
    enum { MAX_SEQS = 70 };
    const int n_slots = 72, F = 2 * sh->f, row = sh->Hkv * sh->d, nwq = shared_wq ? 1 : sh->Hq;
    lz_attn_dims dims = {sh->Hq, sh->Hkv, sh->d, 16, 0, sh->Hs, sh->f, sh->w, sh->m, sh->normalize};
    const size_t nS = (size_t)n_slots * sh->Hs * F * sh->d, nz = (size_t)n_slots * sh->Hs * F;
    float *hS = rand_host(nS, 0, 0.2f), *hz = rand_host(nz, 0.5f, 1.5f);
    float *hwq = rand_host((size_t)nwq * sh->d * sh->f, -0.5f, 0.5f);
    float *hwk = rand_host((size_t)sh->Hs * sh->d * sh->f, -0.5f, 0.5f);
    lz_weight cwq = weight(c, hwq, nwq, (int64_t)sh->d * sh->f), gwq = weight(g, hwq, nwq, (int64_t)sh->d * sh->f);
    lz_weight cwk = weight(c, hwk, sh->Hs, (int64_t)sh->d * sh->f), gwk = weight(g, hwk, sh->Hs, (int64_t)sh->d * sh->f);
    // [0]: the fused op's state, [1]: gla_recurrent's
    lz_layer_state cst[2], gst[2];
    for (int i = 0; i < 2; i++) {
        cst[i] = (lz_layer_state){NULL, NULL, f32buf(c, hS, nS), f32buf(c, hz, nz), NULL, NULL};
        gst[i] = (lz_layer_state){NULL, NULL, f32buf(g, hS, nS), f32buf(g, hz, nz), NULL, NULL};
    }
    const int counts[5] = {1, 3, 8, 40, MAX_SEQS}; // from 8 on the streamed path; 70: a partial prep tile
    for (int ci = 0; ci < 5; ci++) {
        for (int step = 0; step < 2; step++) {
            const int n = counts[ci];
            // one token a sequence; sequence s in slot (7 s + 3) mod 72 (distinct, gaps between)
            struct {
                int32_t slot[MAX_SEQS], start[MAX_SEQS], len[MAX_SEQS], pos[MAX_SEQS], token_pos[MAX_SEQS];
                int32_t rows[MAX_SEQS];
                lz_batch b;
            } bb;
            for (int s = 0; s < n; s++)
                bb.slot[s] = (7 * s + 3) % n_slots, bb.start[s] = s, bb.len[s] = 1, bb.pos[s] = 0,
                bb.token_pos[s] = 0, bb.rows[s] = s;
            bb.b = (lz_batch){n, n, bb.slot, bb.start, bb.len, bb.pos, bb.token_pos};
            CHECK_MSG(c->ops->begin_step(c->be, ids_buf, &bb.b, bb.rows, n) == LZ_OK, "%s", lz_error_message());
            CHECK_MSG(g->ops->begin_step(g->be, ids_buf, &bb.b, bb.rows, n) == LZ_OK, "%s", lz_error_message());
            const size_t nq = (size_t)n * sh->Hq * sh->d;
            float *hq = rand_host(nq, -1.5f, 1.5f), *hk = rand_host((size_t)n * row, -1.5f, 1.5f);
            float *hv = rand_host((size_t)n * row, -1, 1), *hgate = rand_host(n, sh->gate_lo, sh->gate_hi);
            void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ck = act(c, hk, (size_t)n * row), *gk = act(g, hk, (size_t)n * row);
            void *cv = act(c, hv, (size_t)n * row), *gv = act(g, hv, (size_t)n * row), *cgl = act(c, hgate, n), *ggl = act(g, hgate, n);
            void *co = act(c, NULL, nq), *go = act(g, NULL, nq);
            BOTH(c->ops->gla_decode(c->be, co, cq, ck, cv, cgl, &cwq, &cwk, sh->exp_map, &cst[0], &bb.b, &dims),
                 g->ops->gla_decode(g->be, go, gq, gk, gv, ggl, &gwq, &gwk, sh->exp_map, &gst[0], &bb.b, &dims));
            compare("gla_decode", c, co, g, go, nq, tol_attn);
            // the unfused path: feature maps and gates as separate ops, then gla_recurrent
            void *cpq = act(c, NULL, (size_t)n * sh->Hq * F), *gpq = act(g, NULL, (size_t)n * sh->Hq * F);
            void *cpk = act(c, NULL, (size_t)n * sh->Hs * F), *gpk = act(g, NULL, (size_t)n * sh->Hs * F);
            void *clg = act(c, NULL, n), *glg = act(g, NULL, n), *co2 = act(c, NULL, nq), *go2 = act(g, NULL, nq);
            BOTH(c->ops->feature_map(c->be, cpq, cq, &cwq, n, sh->Hq, sh->Hq, sh->d, sh->f, sh->exp_map),
                 g->ops->feature_map(g->be, gpq, gq, &gwq, n, sh->Hq, sh->Hq, sh->d, sh->f, sh->exp_map));
            BOTH(c->ops->feature_map(c->be, cpk, ck, &cwk, n, sh->Hkv, sh->Hs, sh->d, sh->f, sh->exp_map),
                 g->ops->feature_map(g->be, gpk, gk, &gwk, n, sh->Hkv, sh->Hs, sh->d, sh->f, sh->exp_map));
            BOTH(c->ops->log_sigmoid(c->be, clg, cgl, n), g->ops->log_sigmoid(g->be, glg, ggl, n));
            BOTH(c->ops->gla_recurrent(c->be, co2, cpq, cpk, cv, clg, &cst[1], &bb.b, &dims),
                 g->ops->gla_recurrent(g->be, go2, gpq, gpk, gv, glg, &gst[1], &bb.b, &dims));
            compare("gla_recurrent (split)", c, co2, g, go2, nq, tol_attn);
            for (int i = 0; i < 2; i++) {
                float *cS = download_f32(c, cst[i].S, nS), *gS = download_f32(g, gst[i].S, nS);
                float *cz = download_f32(c, cst[i].z, nz), *gz = download_f32(g, gst[i].z, nz);
                const double eS = rel_err(gS, cS, nS), ez = rel_err(gz, cz, nz);
                CHECK_MSG(eS <= tol_attn && ez <= tol_attn,
                          "%s %s state (Hq %d Hs %d d %d f %d, %d seqs, step %d): S rel err %.3g, z %.3g", dtype_name,
                          i == 0 ? "gla_decode" : "gla_recurrent", sh->Hq, sh->Hs, sh->d, sh->f, n, step, eS, ez);
                free(cS), free(gS), free(cz), free(gz);
            }
            void *bufs_c[] = {cq, ck, cv, cgl, co, cpq, cpk, clg, co2}, *bufs_g[] = {gq, gk, gv, ggl, go, gpq, gpk, glg, go2};
            for (size_t i = 0; i < sizeof bufs_c / sizeof bufs_c[0]; i++)
                c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
            free(hq), free(hk), free(hv), free(hgate);
        }
    }
    for (int i = 0; i < 2; i++) {
        c->ops->free(c->be, cst[i].S), c->ops->free(c->be, cst[i].z);
        g->ops->free(g->be, gst[i].S), g->ops->free(g->be, gst[i].z);
    }
    c->ops->free_weight(c->be, &cwq), g->ops->free_weight(g->be, &gwq);
    c->ops->free_weight(c->be, &cwk), g->ops->free_weight(g->be, &gwk);
    free(hS), free(hz), free(hwq), free(hwk);
}

/* Feature maps on their own: token counts on both sides of the prompt paths'
 * tiles (1 and 15 take the per-token kernel; 16-token warp units, 128-token
 * block steps), one map shared by all heads or one per head (read through a kv
 * head), 1, 8 and 32 heads, the exp map, (d, f) the streaming kernel takes
 * (128/128, 128/64, 64/64, 64/32) and ones that fall back to the WMMA kernel
 * (f = 24, 20, 12, odd f, d = 40). */
static void test_feature_maps(backend *c, backend *g) {
    typedef struct {
        int Hx, Hout, n_w, d, f;
        bool exp_map;
    } fm_shape;
    const fm_shape shapes[] = {
        {32, 32, 1, 128, 128, false}, // LLaMA-3-8B's phi_q: one map for every head
        {8, 8, 8, 128, 128, false},   // its phi_k: a map per kv head
        {8, 32, 32, 128, 128, false}, // a map per query head: a block's steps cross heads (W restaged)
        {2, 2, 2, 128, 128, true},    // per head, exp map
        {1, 1, 1, 128, 128, true},    // one head, exp map
        {4, 8, 8, 128, 64, false},    // per query head reading kv head o / 2
        {8, 8, 1, 64, 64, false},
        {1, 4, 4, 64, 32, true},      // four output heads from one input head
        {2, 6, 6, 64, 24, false},     // f not a multiple of 16: falls back
        {4, 4, 1, 128, 20, false},    // falls back
        {8, 8, 1, 64, 12, true},      // falls back
        {3, 3, 1, 40, 13, false},     // d not a multiple of 16, odd f (element loads and stores)
        {1, 2, 2, 16, 8, true},
    };
    const int counts[] = {1, 15, 17, 37, 64, 65, 128, 300, 1000, 1153};
    const bool bf16 = strcmp(dtype_name, "bf16") == 0;
    {
        backend *gb = g;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const fm_shape *sh = &shapes[si];
            float *hw = rand_host((size_t)sh->n_w * sh->d * sh->f, -0.3f, 0.3f);
            lz_weight cw = weight(c, hw, sh->n_w, (int64_t)sh->d * sh->f),
                      gw = weight(gb, hw, sh->n_w, (int64_t)sh->d * sh->f);
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                const int T = counts[ci];
                const size_t nx = (size_t)T * sh->Hx * sh->d, no = (size_t)T * sh->Hout * 2 * sh->f;
                float *hx = rand_host(nx, -1.5f, 1.5f);
                void *cx = act(c, hx, nx), *gx = act(gb, hx, nx), *co = act(c, NULL, no), *go = act(gb, NULL, no);
                BOTH(c->ops->feature_map(c->be, co, cx, &cw, T, sh->Hx, sh->Hout, sh->d, sh->f, sh->exp_map),
                     gb->ops->feature_map(gb->be, go, gx, &gw, T, sh->Hx, sh->Hout, sh->d, sh->f, sh->exp_map));
                char what[96];
                snprintf(what, sizeof what, "feature_map shape %zu T=%d", si, T);
                // in bf16 held to the attention bound: phi is an exponential of u = x . W, so u's absolute
                // error from bf16 inputs (~2^-9 of the products' size) is phi's relative error (1.05e-2 seen
                // on the H200 at 1e-2, exp map, d = 128)
                compare(what, c, co, gb, go, no, bf16 ? tol_attn : tol);
                c->ops->free(c->be, cx), gb->ops->free(gb->be, gx), c->ops->free(c->be, co), gb->ops->free(gb->be, go);
                free(hx);
            }
            c->ops->free_weight(c->be, &cw), gb->ops->free_weight(gb->be, &gw);
            free(hw);
        }
    }
}

/* The window branch on prompts (the tensor-core path in bf16) and decode
 * steps: one sequence of 1, 37, 64, 65 or 300 tokens continuing a sequence
 * whose ring already holds keys (T < w and T > w), sequences of mixed lengths
 * and positions in one step; then the ring as the next step sees it. */
static void test_window_prompts(backend *c, backend *g) {
    typedef struct {
        int Hq, Hkv, d, w, m;
    } win_shape;
    typedef struct {
        int n, lens[3], pos[3];
    } win_step;
    const win_shape shapes[] = {
        {8, 2, 128, 128, 4}, // LLaMA-like: group of 4, window 128, meta logits
        {4, 4, 64, 48, 0},   // window shorter than a tile, no meta logits
        {6, 2, 32, 200, 2},  // window longer than the prompts
    };
    const win_step steps[] = {
        {1, {1}, {50}},   {1, {37}, {0}},   {1, {37}, {90}},          {1, {64}, {200}},
        {1, {65}, {5}},   {1, {300}, {0}},  {1, {300}, {1000}},       {2, {300, 37}, {77, 0}},
        {3, {1, 100, 7}, {10, 130, 3}},     {2, {65, 129}, {300, 20}},
    };
    const int n_slots = 3;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const win_shape *sh = &shapes[si];
        const int row = sh->Hkv * sh->d;
        lz_attn_dims dims = {sh->Hq, sh->Hkv, sh->d, 0, 0, sh->Hkv, 16, sh->w, sh->m, true};
        float *hmeta = rand_host(sh->m + 1, -1, 1);
        lz_weight cm = weight(c, hmeta, 1, sh->m ? sh->m : 1), gm = weight(g, hmeta, 1, sh->m ? sh->m : 1);
        for (size_t ti = 0; ti < sizeof steps / sizeof steps[0]; ti++) {
            const win_step *st = &steps[ti];
            batch_buf bb;
            make_batch(&bb, st->n, st->lens, st->pos);
            const int T = bb.b.n_tokens;
            begin(c, &bb), begin(g, &bb);
            const size_t nring = (size_t)n_slots * sh->w * row, nq = (size_t)T * sh->Hq * sh->d;
            float *hring_k = rand_host(nring, -1, 1), *hring_v = rand_host(nring, -1, 1);
            float *hq = rand_host(nq, -1.5f, 1.5f), *hk = rand_host((size_t)T * row, -1.5f, 1.5f);
            float *hv = rand_host((size_t)T * row, -1, 1), *ho = rand_host(nq, -0.05f, 0.05f);
            lz_layer_state cst = {0}, gst = {0};
            cst.ring_k = act(c, hring_k, nring), cst.ring_v = act(c, hring_v, nring);
            gst.ring_k = act(g, hring_k, nring), gst.ring_v = act(g, hring_v, nring);
            void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ck = act(c, hk, (size_t)T * row), *gk = act(g, hk, (size_t)T * row);
            void *cv = act(c, hv, (size_t)T * row), *gv = act(g, hv, (size_t)T * row), *co = act(c, ho, nq), *go = act(g, ho, nq);
            BOTH(c->ops->window_attention(c->be, co, cq, ck, cv, &cm, 0.7f, &cst, &bb.b, &dims),
                 g->ops->window_attention(g->be, go, gq, gk, gv, &gm, 0.7f, &gst, &bb.b, &dims));
            char what[96];
            snprintf(what, sizeof what, "window shape %zu step %zu (T=%d)", si, ti, T);
            compare(what, c, co, g, go, nq, tol_attn);
            snprintf(what, sizeof what, "window ring k shape %zu step %zu", si, ti);
            compare(what, c, cst.ring_k, g, gst.ring_k, nring, tol);
            snprintf(what, sizeof what, "window ring v shape %zu step %zu", si, ti);
            compare(what, c, cst.ring_v, g, gst.ring_v, nring, tol);
            void *bufs_c[7] = {cst.ring_k, cst.ring_v, cq, ck, cv, co, NULL}, *bufs_g[7] = {gst.ring_k, gst.ring_v, gq, gk, gv, go, NULL};
            for (int i = 0; bufs_c[i]; i++)
                c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
            free(hring_k), free(hring_v), free(hq), free(hk), free(hv), free(ho);
        }
        c->ops->free_weight(c->be, &cm), g->ops->free_weight(g->be, &gm);
        free(hmeta);
    }
}

/* The window branch on decode steps (window_decode_kernel below 16 sequences, attention_decode.cu's
 * split kernel from there, window_decode_ring.cu's persistent kernel from LIZARD_WINDOW_RING
 * sequences in bf16; all also store the new keys into the ring: clusters of 8 blocks down to 1
 * as the batch grows, several staging passes for long windows):
 * 1, 3, 8 and 70 sequences of one token each, four steps in a row on the same rings (what a step
 * stores is what the next reads), positions below w, crossing w, at it and far past it; LLaMA-3-8B's
 * shape, group 8, an odd group, a long window, head_dim 256 (fp32: the tile kernel) and 24 (the tile
 * kernel), w = 64 and w = 100 (the persistent kernel's tile counts known and not, padding rows), group 3
 * at head_dim 128 (which the persistent kernel leaves to the split kernel). */
static void test_window_decode(backend *c, backend *g) {
    typedef struct {
        int Hq, Hkv, d, w, m;
    } win_shape;
    const win_shape shapes[] = {
        {32, 8, 128, 128, 4}, // LLaMA-3-8B's Lizard layer
        {16, 2, 64, 16, 2},   // group 8, a short window
        {6, 2, 32, 20, 0},    // group 3, no meta logits
        {8, 2, 64, 300, 3},   // a window of several staging passes
        {4, 2, 256, 8, 1},    // head_dim 256
        {4, 2, 24, 8, 1},     // a key row not of 16-byte vectors
        {8, 2, 128, 64, 2},   // w = 64 (the persistent kernel's 4-tile instance)
        {4, 1, 64, 100, 1},   // a window of whole tiles and 4 rows (its padding rows)
        {12, 4, 128, 32, 2},  // group 3 at head_dim 128 (not the persistent kernel's: its groups are 1, 2, 4, 8)
    };
    enum { MAX_SEQS = 70 };
    const int n_slots = MAX_SEQS + 2, n_steps = 4, batches[4] = {1, 3, 8, MAX_SEQS};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const win_shape *sh = &shapes[si];
        const int row = sh->Hkv * sh->d, w = sh->w;
        lz_attn_dims dims = {sh->Hq, sh->Hkv, sh->d, 0, 0, sh->Hkv, 16, w, sh->m, true};
        float *hmeta = rand_host(sh->m + 1, -1, 1);
        lz_weight cm = weight(c, hmeta, 1, sh->m ? sh->m : 1), gm = weight(g, hmeta, 1, sh->m ? sh->m : 1);
        for (int bi = 0; bi < 4; bi++) {
            const int n = batches[bi];
            const size_t nring = (size_t)n_slots * w * row, nq = (size_t)n * sh->Hq * sh->d;
            float *hring_k = rand_host(nring, -1, 1), *hring_v = rand_host(nring, -1, 1);
            lz_layer_state cst = {0}, gst = {0};
            cst.ring_k = act(c, hring_k, nring), cst.ring_v = act(c, hring_v, nring);
            gst.ring_k = act(g, hring_k, nring), gst.ring_v = act(g, hring_v, nring);
            // starts below w, just below w (the steps cross it), at w, far past it
            const int starts[8] = {0, w - 2, 3 * w + 1, 5, w, 1, 7 * w - 1, w / 2};
            for (int step = 0; step < n_steps; step++) {
                // one token a sequence; sequence s in slot (5 s + 1) mod 72 (distinct, not in order)
                struct {
                    int32_t slot[MAX_SEQS], start[MAX_SEQS], len[MAX_SEQS], pos[MAX_SEQS], token_pos[MAX_SEQS];
                    int32_t rows[MAX_SEQS];
                    lz_batch b;
                } bb;
                for (int s = 0; s < n; s++) {
                    const int p = starts[s % 8] + (s / 8) * 3 + step;
                    bb.slot[s] = (5 * s + 1) % n_slots, bb.start[s] = s, bb.len[s] = 1, bb.pos[s] = p;
                    bb.token_pos[s] = p, bb.rows[s] = s;
                }
                bb.b = (lz_batch){n, n, bb.slot, bb.start, bb.len, bb.pos, bb.token_pos};
                CHECK_MSG(c->ops->begin_step(c->be, ids_buf, &bb.b, bb.rows, n) == LZ_OK, "%s", lz_error_message());
                CHECK_MSG(g->ops->begin_step(g->be, ids_buf, &bb.b, bb.rows, n) == LZ_OK, "%s", lz_error_message());
                float *hq = rand_host(nq, -1.5f, 1.5f), *hk = rand_host((size_t)n * row, -1.5f, 1.5f);
                float *hv = rand_host((size_t)n * row, -1, 1), *ho = rand_host(nq, -0.05f, 0.05f);
                void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ck = act(c, hk, (size_t)n * row);
                void *gk = act(g, hk, (size_t)n * row), *cv = act(c, hv, (size_t)n * row), *gv = act(g, hv, (size_t)n * row);
                void *co = act(c, ho, nq), *go = act(g, ho, nq);
                BOTH(c->ops->window_attention(c->be, co, cq, ck, cv, &cm, 0.7f, &cst, &bb.b, &dims),
                     g->ops->window_attention(g->be, go, gq, gk, gv, &gm, 0.7f, &gst, &bb.b, &dims));
                char what[112];
                snprintf(what, sizeof what, "window decode shape %zu, %d seqs, step %d", si, n, step);
                compare(what, c, co, g, go, nq, tol_attn);
                snprintf(what, sizeof what, "window decode ring k shape %zu, %d seqs, step %d", si, n, step);
                compare(what, c, cst.ring_k, g, gst.ring_k, nring, tol);
                snprintf(what, sizeof what, "window decode ring v shape %zu, %d seqs, step %d", si, n, step);
                compare(what, c, cst.ring_v, g, gst.ring_v, nring, tol);
                void *bufs_c[5] = {cq, ck, cv, co, NULL}, *bufs_g[5] = {gq, gk, gv, go, NULL};
                for (int i = 0; bufs_c[i]; i++)
                    c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
                free(hq), free(hk), free(hv), free(ho);
            }
            c->ops->free(c->be, cst.ring_k), c->ops->free(c->be, cst.ring_v);
            g->ops->free(g->be, gst.ring_k), g->ops->free(g->be, gst.ring_v);
            free(hring_k), free(hring_v);
        }
        c->ops->free_weight(c->be, &cm), g->ops->free_weight(g->be, &gm);
        free(hmeta);
    }
}

/* The prompt path of a retained softmax layer alone (bf16, head_dim 64 or 128:
 * attention_flash.cu; fp32 and other shapes: the older kernels), through
 * softmax_attention on both op tables: lengths around the 64-row chunk and key
 * tile, a long prompt, a prompt continuing a cached prefix, several sequences of
 * mixed lengths and starts in one step (a one-token row beside prompts too).
 * Cache positions that no row may see are NaN, and so is the output, so a kernel
 * that reads a key it must not see, or leaves a row unwritten, fails. */
typedef struct {
    int Hq, Hkv, d, window;
} prompt_shape;

static void test_softmax_prompt(backend *c, backend *g, const prompt_shape *sh) {
    enum { SLOTS = 3, CAP = 1300 };
    static const struct {
        int n, len[3], pos[3];
    } cases[] = {
        {1, {63}, {0}},
        {1, {64}, {0}},
        {1, {65}, {0}},
        {1, {200}, {0}},
        {1, {1100}, {0}},
        {1, {130}, {300}},              // continues a cached prefix of 300 keys (off the tile grid)
        {1, {1}, {700}},                // one token: the decode path
        {2, {2, 1000}, {64, 129}},      // short and long, both after a prefix
        {3, {1, 200, 77}, {500, 37, 0}}, // a one-token row in a prompt step
    };
    const int row = sh->Hkv * sh->d;
    const lz_attn_dims dims = {sh->Hq, sh->Hkv, sh->d, CAP, sh->window, sh->Hkv, 0, 0, 0, false};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        batch_buf bb;
        make_batch(&bb, cases[ci].n, cases[ci].len, cases[ci].pos);
        const int T = bb.b.n_tokens;
        begin(c, &bb), begin(g, &bb);
        // the cache: the prefix a row may see is random, everything else NaN
        const size_t nkv = (size_t)SLOTS * CAP * row;
        float *hkc = malloc(sizeof(float) * nkv), *hvc = malloc(sizeof(float) * nkv);
        for (size_t i = 0; i < nkv; i++)
            hkc[i] = hvc[i] = NAN;
        for (int s = 0; s < bb.n; s++) {
            const int p0 = bb.pos[s], lo = sh->window > 0 && p0 - sh->window + 1 > 0 ? p0 - sh->window + 1 : 0;
            for (size_t i = ((size_t)bb.slot[s] * CAP + lo) * row; i < ((size_t)bb.slot[s] * CAP + p0) * row; i++)
                hkc[i] = frand(-1.5f, 1.5f), hvc[i] = frand(-1, 1);
        }
        lz_layer_state cst = {act(c, hkc, nkv), act(c, hvc, nkv), NULL, NULL, NULL, NULL};
        lz_layer_state gst = {act(g, hkc, nkv), act(g, hvc, nkv), NULL, NULL, NULL, NULL};
        const size_t nq = (size_t)T * sh->Hq * sh->d;
        float *hq = rand_host(nq, -2.5f, 2.5f), *hk = rand_host((size_t)T * row, -1.5f, 1.5f);
        float *hv = rand_host((size_t)T * row, -1, 1);
        void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ca = act(c, NULL, nq), *ga = act(g, NULL, nq);
        void *ck = act(c, hk, (size_t)T * row), *gk = act(g, hk, (size_t)T * row);
        void *cv = act(c, hv, (size_t)T * row), *gv = act(g, hv, (size_t)T * row);
        BOTH(c->ops->softmax_attention(c->be, ca, cq, ck, cv, &cst, &bb.b, &dims),
             g->ops->softmax_attention(g->be, ga, gq, gk, gv, &gst, &bb.b, &dims));
        char what[160];
        snprintf(what, sizeof what, "softmax prompt Hq %d Hkv %d d %d window %d, case %zu (T %d)", sh->Hq, sh->Hkv,
                 sh->d, sh->window, ci, T);
        compare(what, c, ca, g, ga, nq, tol_attn);
        CHECK(g->ops->sync(g->be) == LZ_OK);
        void *bufs_c[6] = {cst.k_cache, cst.v_cache, cq, ck, cv, ca};
        void *bufs_g[6] = {gst.k_cache, gst.v_cache, gq, gk, gv, ga};
        for (int i = 0; i < 6; i++)
            c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
        free(hkc), free(hvc), free(hq), free(hk), free(hv);
    }
}

/* Decode steps of a retained softmax layer alone (attention_split_kernel on the usual shapes, the
 * older kernels on others): 1, 5 and 37 sequences, a new key with no cache before it, lengths below
 * one tile, across split boundaries and up to ~3000 keys, a capacity far above the length, a sliding
 * window, groups 1, 2, 4 and 8, head_dim 64 to 256; three steps in a row on each cache (the arrival
 * counters must be back at zero, and the next step reads the keys the kernel appended), then the
 * appended cache rows themselves. Positions no row may see are NaN, and so is the output. */
typedef struct {
    int Hq, Hkv, d, window, cap, n, pos[37];
} decode_case;

static void test_softmax_decode(backend *c, backend *g, const decode_case *k) {
    enum { STEPS = 3 };
    const int n = k->n, row = k->Hkv * k->d;
    const lz_attn_dims dims = {k->Hq, k->Hkv, k->d, k->cap, k->window, k->Hkv, 0, 0, 0, false};
    int32_t slot[37], start[37], len[37], pos[37], rows[37];
    const size_t nkv = (size_t)n * k->cap * row;
    float *hkc = malloc(sizeof(float) * nkv), *hvc = malloc(sizeof(float) * nkv);
    for (size_t i = 0; i < nkv; i++)
        hkc[i] = hvc[i] = NAN;
    for (int s = 0; s < n; s++) {
        slot[s] = n - 1 - s, start[s] = s, len[s] = 1, rows[s] = s;
        const int p0 = k->pos[s], lo = k->window > 0 && p0 - k->window + 1 > 0 ? p0 - k->window + 1 : 0;
        for (size_t i = ((size_t)slot[s] * k->cap + lo) * row; i < ((size_t)slot[s] * k->cap + p0) * row; i++)
            hkc[i] = frand(-1.5f, 1.5f), hvc[i] = frand(-1, 1);
    }
    lz_layer_state cst = {act(c, hkc, nkv), act(c, hvc, nkv), NULL, NULL, NULL, NULL};
    lz_layer_state gst = {act(g, hkc, nkv), act(g, hvc, nkv), NULL, NULL, NULL, NULL};
    const size_t nq = (size_t)n * k->Hq * k->d, nk = (size_t)n * row;
    for (int step = 0; step < STEPS; step++) {
        for (int s = 0; s < n; s++)
            pos[s] = k->pos[s] + step;
        const lz_batch b = {n, n, slot, start, len, pos, pos};
        CHECK(c->ops->begin_step(c->be, ids_buf, &b, rows, n) == LZ_OK);
        CHECK_MSG(g->ops->begin_step(g->be, ids_buf, &b, rows, n) == LZ_OK, "%s", lz_error_message());
        float *hq = rand_host(nq, -2.5f, 2.5f), *hk = rand_host(nk, -1.5f, 1.5f), *hv = rand_host(nk, -1, 1);
        void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ca = act(c, NULL, nq), *ga = act(g, NULL, nq);
        void *ck = act(c, hk, nk), *gk = act(g, hk, nk), *cv = act(c, hv, nk), *gv = act(g, hv, nk);
        BOTH(c->ops->softmax_attention(c->be, ca, cq, ck, cv, &cst, &b, &dims),
             g->ops->softmax_attention(g->be, ga, gq, gk, gv, &gst, &b, &dims));
        char what[160];
        snprintf(what, sizeof what, "softmax decode Hq %d Hkv %d d %d window %d cap %d, %d seqs, step %d", k->Hq,
                 k->Hkv, k->d, k->window, k->cap, n, step);
        compare(what, c, ca, g, ga, nq, tol_attn);
        void *bufs_c[4] = {cq, ck, cv, ca}, *bufs_g[4] = {gq, gk, gv, ga};
        for (int i = 0; i < 4; i++)
            c->ops->free(c->be, bufs_c[i]), g->ops->free(g->be, bufs_g[i]);
        free(hq), free(hk), free(hv);
    }
    for (int kv = 0; kv < 2; kv++) { // the rows the steps appended
        float *cc = download(c, kv ? cst.v_cache : cst.k_cache, nkv), *gc = download(g, kv ? gst.v_cache : gst.k_cache, nkv);
        for (int s = 0; s < n; s++) {
            const size_t at = ((size_t)slot[s] * k->cap + k->pos[s]) * row;
            const double e = rel_err(gc + at, cc + at, (size_t)STEPS * row);
            CHECK_MSG(e <= tol, "%s softmax decode d %d, %d seqs: appended %s rows of sequence %d: rel err %.3g",
                      dtype_name, k->d, n, kv ? "value" : "key", s, e);
        }
        free(cc), free(gc);
    }
    CHECK(g->ops->sync(g->be) == LZ_OK);
    c->ops->free(c->be, cst.k_cache), c->ops->free(c->be, cst.v_cache);
    g->ops->free(g->be, gst.k_cache), g->ops->free(g->be, gst.v_cache);
    free(hkc), free(hvc);
}

/* The chunked GLA alone on the shapes that select the bf16 tensor-core prompt path (2f % 32 == 0,
 * head_dim % 16 == 0) and on a few that do not: lengths around the chunk (1, 63, 64, 65), long prompts
 * (300, 2000), batches of mixed lengths whose slots hold a state from earlier steps, gates near 0 and 1,
 * query groups of 1 to 8, head_dim up to 256, poisoned outputs; the state S and z after the prompt too. */
typedef struct {
    int Hq, Hkv, Hs, d, f;
    bool normalize;
    float gate_lo, gate_hi; /* gate logits; log gates = log_sigmoid */
    int n, lens[3];
} gla_case;

static void test_gla_chunked(backend *c, backend *g, const gla_case *k) {
    const int n_slots = 3, F = 2 * k->f, pos[3] = {0, 7, 100};
    lz_attn_dims dims = {k->Hq, k->Hkv, k->d, 1, 0, k->Hs, k->f, 1, 0, k->normalize};
    const size_t nS = (size_t)n_slots * k->Hs * F * k->d, nz = (size_t)n_slots * k->Hs * F;
    float *hS = rand_host(nS, 0, 0.2f), *hz = rand_host(nz, 0.5f, 1.5f);
    lz_layer_state cst = {NULL, NULL, f32buf(c, hS, nS), f32buf(c, hz, nz), NULL, NULL};
    lz_layer_state gst = {NULL, NULL, f32buf(g, hS, nS), f32buf(g, hz, nz), NULL, NULL};
    batch_buf bb;
    make_batch(&bb, k->n, k->lens, pos);
    const int T = bb.b.n_tokens;
    begin(c, &bb), begin(g, &bb);
    const size_t nq = (size_t)T * k->Hq * F, nk = (size_t)T * k->Hs * F, nv = (size_t)T * k->Hkv * k->d;
    const size_t no = (size_t)T * k->Hq * k->d;
    float *hq = rand_host(nq, 0, 1), *hk = rand_host(nk, 0, 1), *hv = rand_host(nv, -1, 1);
    float *hg = rand_host(T, k->gate_lo, k->gate_hi);
    for (int i = 0; i < T; i++)
        hg[i] = -log1pf(expf(-hg[i])); // log_sigmoid
    void *cq = act(c, hq, nq), *gq = act(g, hq, nq), *ck = act(c, hk, nk), *gk = act(g, hk, nk);
    void *cv = act(c, hv, nv), *gv = act(g, hv, nv), *cg = act(c, hg, T), *gg = act(g, hg, T);
    void *co = act(c, NULL, no), *go = act(g, NULL, no);
    BOTH(c->ops->gla_chunked(c->be, co, cq, ck, cv, cg, &cst, &bb.b, &dims),
         g->ops->gla_chunked(g->be, go, gq, gk, gv, gg, &gst, &bb.b, &dims));
    char what[160];
    snprintf(what, sizeof what, "gla_chunked Hq %d Hkv %d Hs %d d %d f %d norm %d gates [%g, %g] lens %d %d %d", k->Hq,
             k->Hkv, k->Hs, k->d, k->f, k->normalize, k->gate_lo, k->gate_hi, k->lens[0], k->n > 1 ? k->lens[1] : 0,
             k->n > 2 ? k->lens[2] : 0);
    compare(what, c, co, g, go, no, tol_attn);
    float *cS = download_f32(c, cst.S, nS), *gS = download_f32(g, gst.S, nS);
    float *cz = download_f32(c, cst.z, nz), *gz = download_f32(g, gst.z, nz);
    const double eS = rel_err(gS, cS, nS), ez = rel_err(gz, cz, nz);
    CHECK_MSG(eS <= tol_attn && ez <= tol_attn, "%s %s: state rel err S %.3g z %.3g", dtype_name, what, eS, ez);
    free(cS), free(gS), free(cz), free(gz), free(hS), free(hz), free(hq), free(hk), free(hv), free(hg);
    c->ops->free(c->be, cst.S), g->ops->free(g->be, gst.S), c->ops->free(c->be, cst.z), g->ops->free(g->be, gst.z);
    void *bufs[2][5] = {{cq, ck, cv, cg, co}, {gq, gk, gv, gg, go}};
    for (int i = 0; i < 5; i++)
        c->ops->free(c->be, bufs[0][i]), g->ops->free(g->be, bufs[1][i]);
}

static const gla_case gla_cases[] = {
    // Hq Hkv Hs  d    f  norm  gate logits  n  lens
    {8, 2, 2, 128, 128, true, -3, 3, 1, {1}},  // the LLaMA-3-8B shape (group 4, 2f = 256)
    {8, 2, 2, 128, 128, true, -3, 3, 1, {63}},
    {8, 2, 2, 128, 128, true, -3, 3, 1, {64}},
    {8, 2, 2, 128, 128, true, -3, 3, 1, {65}},
    {8, 2, 2, 128, 128, true, -3, 3, 1, {300}},
    {8, 2, 2, 128, 128, true, -3, 3, 1, {2000}},
    {8, 2, 2, 128, 128, true, -3, 3, 3, {65, 1, 300}},      // mixed lengths, states from before
    {8, 2, 2, 128, 128, true, 8, 12, 3, {300, 64, 2000}},   // gates near 1
    {8, 2, 2, 128, 128, true, -14, -9, 3, {129, 3, 200}},   // gates near 0
    {4, 2, 4, 64, 32, true, -3, 3, 3, {100, 37, 64}},       // a state per query head (group 1)
    {16, 2, 2, 64, 32, true, -2, 4, 2, {150, 17}},          // group 8: each warp takes four tasks
    {2, 1, 1, 256, 16, true, -3, 3, 2, {130, 66}},          // head_dim 256, 2f = 32
    {4, 2, 2, 32, 16, false, -3, 3, 2, {65, 200}},          // no normaliser
    {4, 2, 2, 48, 24, true, -3, 3, 2, {70, 9}},             // 2f = 48: the older kernels
};

/* A CUDA backend of dtype dt (its switches read from the environment now) for the tests that
 * follow: name in their messages, and bf16's or fp32's tolerances. */
static void open_gpu(backend *g, lz_dtype dt, const char *name) {
    static char label[96];
    CHECK_MSG(lz_knobs_load() == LZ_OK, "%s", lz_error_message());
    CHECK_MSG(lz_cuda_backend_create(dt, &g->be, &g->ops) == LZ_OK, "%s", lz_error_message());
    snprintf(label, sizeof label, "%s", name);
    dtype_name = label;
    tol = dt == LZ_DTYPE_F32 ? 1e-5 : 1e-2;
    tol_attn = dt == LZ_DTYPE_F32 ? 1e-4 : 2e-2;
}

int main(void) {
    backend cpu, gpu;
    setenv("LIZARD_FUSE_TOKENS", "8", 0); // the fused GEMV at 1 to 8 tokens (the default fuses 1)
    setenv("LIZARD_GEMV_TOKENS", "8", 0); // the GEMV at 2 to 8 tokens too (by default cuBLAS takes them)
    setenv("LIZARD_GLA_STREAM_MIN", "8", 1); // both GLA decode paths in test_gla_decode
    setenv("LIZARD_FORK_TOKENS", "64", 0);   // the 37-token steps' linear layers side by side too (default: 32)
    CHECK(lz_cpu_backend_create(&cpu.be, &cpu.ops) == LZ_OK);
    CHECK_MSG(lz_knobs_load() == LZ_OK, "%s", lz_error_message());
    const lz_dtype dtypes[2] = {LZ_DTYPE_F32, LZ_DTYPE_BF16};
    const prompt_shape prompts[] = {
        // Hq Hkv  d  window
        {8, 2, 128, 0},   // GQA group 4 (two heads per flash block), LLaMA head_dim: the wgmma kernel on sm_90a
        {16, 8, 128, 0},  // group 2, the wgmma kernel's other pairing
        {8, 2, 128, 100}, // group 4 with a sliding window, on the wgmma kernel
        {4, 4, 64, 0},    // group 1 (one head per block)
        {4, 4, 128, 100}, // sliding window (Mistral) shorter than the prompts
        {8, 2, 64, 37},   // window off the tile grid, group 4
        {4, 2, 32, 0},    // a head_dim the flash kernel leaves to the older one
    };
    static const decode_case decodes[] = {
        // Hq Hkv  d  window cap  n  positions (the first step's)
        {32, 8, 128, 0, 2048, 1, {2045}},                      // LLaMA-3-8B, one sequence filling the cache
        {32, 8, 128, 0, 4096, 1, {100}},                       // capacity far above the length
        {32, 8, 128, 0, 17000, 1, {16990}},                    // above 16K: 33 splits, merged from L2
        {32, 8, 128, 0, 2100, 5, {0, 5, 63, 700, 2090}},       // an empty cache, mixed lengths
        {4, 4, 64, 0, 3000, 37, {0,    1,    7,    31,   32,   33,   63,   64,   65,  127,  128, 200, 255,
                                 256,  257,  511,  700,  750,  751,  1000, 1024, 1500, 1600, 2000, 2047, 2048,
                                 2500, 2900, 2996, 3,    9,    15,   100,  300,  900,  1200, 2222}}, // group 1
        {16, 2, 128, 300, 1500, 5, {10, 297, 299, 300, 1400}}, // group 8, sliding window
        {8, 2, 256, 0, 1200, 3, {1100, 64, 5}},                // head_dim 256
        {16, 8, 64, 0, 700, 3, {600, 1, 130}},                 // group 2
        {12, 4, 96, 0, 500, 2, {400, 3}},                      // group 3, head_dim 96: the older kernels
        {4, 2, 32, 0, 300, 2, {250, 40}},                      // head_dim 32: the older kernels
    };
    for (int di = 0; di < 2; di++) {
        lz_error_clear();
        if (lz_cuda_backend_create(dtypes[di], &gpu.be, &gpu.ops) != LZ_OK) {
            fprintf(stderr, "test_gpu_ops: skipped: %s\n", lz_error_message());
            return 77;
        }
        dtype_name = di == 0 ? "fp32" : "bf16";
        tol = di == 0 ? 1e-5 : 1e-2;
        tol_attn = di == 0 ? 1e-4 : 2e-2;
        test_dense_ops(&cpu, &gpu);
        const lizard_shape shapes[] = {
            // Hq Hkv Hs  d   f   w   m  norm   exp    gate logits
            {4, 2, 2, 16, 8, 4, 3, true, false, -3, 3},
            {8, 2, 8, 32, 16, 16, 2, true, true, -3, 3},    // per-query-head state, exp map
            {4, 1, 1, 64, 32, 130, 0, false, false, -3, 3}, // MQA, window > prefill, no meta, no normaliser
            {8, 4, 4, 128, 64, 8, 4, true, false, 8, 12},   // LLaMA head_dim, gates near 1
            {2, 2, 2, 16, 8, 4, 1, true, false, -14, -9},   // gates near 0
        };
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            test_attention_ops(&cpu, &gpu, &shapes[i]);
        test_fused_dense(&cpu, &gpu);
        test_rope(&cpu, &gpu);
        test_linear_rope(&cpu, &gpu);
        for (size_t i = 0; i < sizeof gla_decode_shapes / sizeof gla_decode_shapes[0]; i++)
            test_gla_decode(&cpu, &gpu, &gla_decode_shapes[i], i % 2 == 0);
        test_feature_maps(&cpu, &gpu);
        test_window_prompts(&cpu, &gpu);
        test_window_decode(&cpu, &gpu);
        for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++)
            test_softmax_prompt(&cpu, &gpu, &prompts[i]);
        for (size_t i = 0; i < sizeof decodes / sizeof decodes[0]; i++)
            test_softmax_decode(&cpu, &gpu, &decodes[i]);
        for (size_t i = 0; i < sizeof gla_cases / sizeof gla_cases[0]; i++)
            test_gla_chunked(&cpu, &gpu, &gla_cases[i]);
        gpu.ops->destroy(gpu.be);
    }
    // q, k, v and gate, up joined into one product each (linear_joined.cu)
    test_joined_linear(&cpu, LZ_DTYPE_F32);
    test_joined_linear(&cpu, LZ_DTYPE_BF16);
    // the bf16 linear layers of a few tokens on linear_stream.cu: the shares of k by the launch's size,
    // then 1, 2 and 8 forced
    test_stream_linear(&cpu, "0");
    test_stream_linear(&cpu, "1");
    test_stream_linear(&cpu, "2");
    test_stream_linear(&cpu, "8");
    // the bf16 prompt attention again on the mma.sync flash kernel (other GPUs' path) where wgmma took it
    setenv("LIZARD_WGMMA", "0", 1);
    open_gpu(&gpu, LZ_DTYPE_BF16, "bf16 LIZARD_WGMMA=0");
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++)
        test_softmax_prompt(&cpu, &gpu, &prompts[i]);
    gpu.ops->destroy(gpu.be);
    unsetenv("LIZARD_WGMMA");
    // the decode attention with one block an SM (one split for most shapes: whole sequences a block,
    // output written directly)
    setenv("LIZARD_DECODE_ATTN", "1", 1);
    for (int di = 0; di < 2; di++) {
        open_gpu(&gpu, dtypes[di], di == 0 ? "fp32 LIZARD_DECODE_ATTN=1" : "bf16 LIZARD_DECODE_ATTN=1");
        for (size_t i = 0; i < sizeof decodes / sizeof decodes[0]; i++)
            test_softmax_decode(&cpu, &gpu, &decodes[i]);
        gpu.ops->destroy(gpu.be);
    }
    unsetenv("LIZARD_DECODE_ATTN");
    // the GLA decode's state update on gla_decode_ring.cu with three blocks walking all items (a ring of
    // stages refilled many times; every shape)
    setenv("LIZARD_GLA_RING_BLOCKS", "3", 1);
    for (int di = 0; di < 2; di++) {
        open_gpu(&gpu, dtypes[di], di == 0 ? "fp32 LIZARD_GLA_RING_BLOCKS=3" : "bf16 LIZARD_GLA_RING_BLOCKS=3");
        for (size_t i = 0; i < sizeof gla_decode_shapes / sizeof gla_decode_shapes[0]; i++)
            test_gla_decode(&cpu, &gpu, &gla_decode_shapes[i], i % 2 == 0);
        gpu.ops->destroy(gpu.be);
    }
    unsetenv("LIZARD_GLA_RING_BLOCKS");
    // the window's decode steps on the persistent kernel (window_decode_ring.cu) at every batch size,
    // three blocks walking all items (a ring of stages refilled many times)
    setenv("LIZARD_WINDOW_RING", "1", 1);
    setenv("LIZARD_WINDOW_RING_BLOCKS", "3", 1);
    open_gpu(&gpu, LZ_DTYPE_BF16, "bf16 LIZARD_WINDOW_RING=1 LIZARD_WINDOW_RING_BLOCKS=3");
    test_window_decode(&cpu, &gpu);
    gpu.ops->destroy(gpu.be);
    unsetenv("LIZARD_WINDOW_RING_BLOCKS");
    // the window's decode steps on the split kernel (attention_decode.cu) at every batch size: one
    // split a ring (the default), then several (the last split merges, meta logits in the merge)
    setenv("LIZARD_WINDOW_RING", "0", 1);
    setenv("LIZARD_WINDOW_SPLIT_MIN", "1", 1);
    for (int mi = 0; mi < 4; mi++) {
        const int di = mi % 2;
        if (mi >= 2)
            setenv("LIZARD_DECODE_ATTN", "8", 1);
        char name[80];
        snprintf(name, sizeof name, "%s LIZARD_WINDOW_SPLIT_MIN=1%s", di == 0 ? "fp32" : "bf16",
                 mi >= 2 ? " LIZARD_DECODE_ATTN=8" : "");
        open_gpu(&gpu, dtypes[di], name);
        test_window_decode(&cpu, &gpu);
        gpu.ops->destroy(gpu.be);
    }
    unsetenv("LIZARD_DECODE_ATTN");
    unsetenv("LIZARD_WINDOW_SPLIT_MIN");
    unsetenv("LIZARD_WINDOW_RING");
    cpu.ops->destroy(cpu.be);
    return lz_test_finish("test_gpu_ops");
}
