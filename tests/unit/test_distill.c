/* test_distill.c - the pieces of `lizard distill` on a tiny teacher:
 *  - the teacher's activations: target = causal softmax attention of the
 *    RoPE'd q, k (recomputed here in double from the captured q, k, v);
 *  - the written folder: the engine's Lizard layer (model load -> decoder
 *    layer) gives the same attention output as the training forward with the
 *    tensors that were written;
 *  - data: packing, every sequence once per epoch, order fixed by the seed,
 *    .npy errors; the learning-rate schedule; an AdamW step. */
#include <ftw.h>    // nftw
#include <math.h>   // fabs, exp, cos, sin, sqrt
#include <stdio.h>  // fopen, fwrite, snprintf
#include <stdlib.h> // malloc, calloc, free, mkdtemp
#include <string.h> // memset, strlen
#include <sys/stat.h> // mkdir

#include "commands.h"        // lz_cmd_init
#include "cpu/train_kernels.h" // lz_lizard_layer_sse_f32: the training forward
#include "decoder_layer.h"   // lz_decoder_layer_forward
#include "distill_data.h"    // the data under test
#include "distill_output.h"  // lz_distill_write_model
#include "distill_params.h"  // lz_distill_layer, lz_distill_lr
#include "distill_teacher.h" // lz_teacher
#include "model_load.h"      // lz_model_load
#include "test_util.h"       // CHECK
#include "tokenizer.h"       // lz_tokenizer_encode

static char root[] = "/tmp/lizard-distill-test-XXXXXX";
static char teacher_dir[256], out_dir[256];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static unsigned lcg(unsigned *s) { return *s = *s * 1664525u + 1013904223u; }

/* ---- the teacher's target ---------------------------------------------------------------- */

typedef struct {
    const lz_config *cfg;
    int batch, seq_len, layers_seen;
    double worst, scale;
    /* layer 0's activations, kept for the folder check */
    float *x0, *q0, *k0, *v0;
} target_ctx;

static void rope_double(double *x, int pos, const float *inv_freq, int d) {
    for (int j = 0; j < d / 2; j++) {
        const double angle = (double)(float)((float)pos * inv_freq[j]), a = x[j], b = x[j + d / 2];
        x[j] = a * cos(angle) - b * sin(angle);
        x[j + d / 2] = b * cos(angle) + a * sin(angle);
    }
}

static lz_status check_target(void *vctx, const lz_teacher_acts *acts) {
    target_ctx *c = vctx;
    const int d = c->cfg->head_dim, Hq = c->cfg->num_attention_heads, Hkv = c->cfg->num_key_value_heads;
    const int L = c->seq_len, T = c->batch * L;
    CHECK(acts->layer == c->layers_seen);
    c->layers_seen++;
    float inv_freq[512];
    lz_rope_inv_freq(c->cfg, inv_freq);
    double *qr = malloc(sizeof(double) * d), *kr = malloc(sizeof(double) * (size_t)L * Hkv * d);
    double *w = malloc(sizeof(double) * L), *o = malloc(sizeof(double) * d);
    for (int b = 0; b < c->batch; b++) {
        for (int t = 0; t < L; t++)
            for (int g = 0; g < Hkv; g++) {
                for (int j = 0; j < d; j++)
                    kr[((size_t)t * Hkv + g) * d + j] = acts->k[(((size_t)b * L + t) * Hkv + g) * d + j];
                rope_double(kr + ((size_t)t * Hkv + g) * d, t, inv_freq, d);
            }
        for (int i = 0; i < L; i++)
            for (int h = 0; h < Hq; h++) {
                const size_t row = ((size_t)b * L + i) * Hq + h;
                for (int j = 0; j < d; j++)
                    qr[j] = acts->q[row * d + j];
                rope_double(qr, i, inv_freq, d);
                double mx = -1e300, sum = 0;
                for (int t = 0; t <= i; t++) {
                    w[t] = 0;
                    for (int j = 0; j < d; j++)
                        w[t] += qr[j] * kr[((size_t)t * Hkv + h / (Hq / Hkv)) * d + j] / sqrt((double)d);
                    mx = w[t] > mx ? w[t] : mx;
                }
                memset(o, 0, sizeof(double) * d);
                for (int t = 0; t <= i; t++) {
                    const double e = exp(w[t] - mx);
                    sum += e;
                    for (int j = 0; j < d; j++)
                        o[j] += e * acts->v[(((size_t)b * L + t) * Hkv + h / (Hq / Hkv)) * d + j];
                }
                for (int j = 0; j < d; j++) {
                    c->worst = fmax(c->worst, fabs(o[j] / sum - acts->target[row * d + j]));
                    c->scale = fmax(c->scale, fabs(o[j] / sum));
                }
            }
    }
    if (acts->layer == 0) { // the embedding rows: the same input a distilled model's layer 0 sees
        const size_t C = (size_t)c->cfg->hidden_size, qn = (size_t)T * Hq * d, kn = (size_t)T * Hkv * d;
        c->x0 = malloc(sizeof(float) * T * C), c->q0 = malloc(sizeof(float) * qn);
        c->k0 = malloc(sizeof(float) * kn), c->v0 = malloc(sizeof(float) * kn);
        memcpy(c->x0, acts->x, sizeof(float) * T * C), memcpy(c->q0, acts->q, sizeof(float) * qn);
        memcpy(c->k0, acts->k, sizeof(float) * kn), memcpy(c->v0, acts->v, sizeof(float) * kn);
    }
    free(qr), free(kr), free(w), free(o);
    return LZ_OK;
}

/* ---- the written folder runs what was trained -------------------------------------------------- */

/* per_head: phi_q per query head, phi_k per kv head (else one map each);
 * exp_map and normalize as in the lizard block. */
static void check_written_folder(lz_teacher *t, target_ctx *c, const int32_t *ids, bool per_head, bool exp_map,
                                 bool normalize) {
    const lz_config *cfg = &t->model.cfg;
    const int L = c->seq_len, H = cfg->hidden_size, n = cfg->num_hidden_layers;
    const lz_lizard_geom g = {.Hq = cfg->num_attention_heads, .Hkv = cfg->num_key_value_heads,
                              .Hs = cfg->num_key_value_heads, .n_wq = per_head ? cfg->num_attention_heads : 1,
                              .n_wk = per_head ? cfg->num_key_value_heads : 1, .d = cfg->head_dim, .f = 8, .w = 6,
                              .m = 3, .normalize = normalize, .exp_map = exp_map};
    lz_distill_layer layers[8];
    bool softmax[8];
    for (int i = 0; i < n; i++) {
        softmax[i] = i % 2 == 1;
        CHECK(lz_distill_layer_init(&layers[i], i, &g, H, 5) == 0);
        layers[i].param[LZ_DT_META][1] = 0.5f, layers[i].param[LZ_DT_ALPHA][0] = 0.75f; // not the defaults
    }
    const lz_lizard_config lc = {.feature_dim = 8, .feature_map = exp_map ? LZ_FMAP_EXP : LZ_FMAP_SOFTMAX,
                                 .window_size = 6, .num_meta_tokens = 3, .gla_normalize = normalize};
    CHECK(lz_distill_write_model(out_dir, teacher_dir, t->model.ckpt, layers, softmax, n, &lc) == LZ_OK);
    // the training forward of layer 0 (sequence 0) with these tensors
    lz_lizard_scratch_f32 s;
    CHECK(lz_lizard_scratch_create_f32(&s, &g, L, H) == 0);
    const lz_lizard_params_f32 p = lz_distill_layer_params(&layers[0]);
    float *zero = calloc((size_t)L * g.Hq * g.d, sizeof(float));
    lz_lizard_layer_sse_f32(&p, NULL, 1, c->x0, c->q0, c->k0, c->v0, zero, L, &g, &s);
    // the engine's layer 0 from the folder
    lz_config dcfg;
    lz_model m;
    lz_state st;
    lz_workspace ws;
    CHECK(lz_config_load(out_dir, &dcfg) == LZ_OK);
    CHECK(dcfg.has_lizard && !dcfg.softmax_layer[0] && dcfg.softmax_layer[1]);
    lz_status ok = lz_model_load(&m, out_dir, &dcfg, t->ops, t->be);
    CHECK_MSG(ok == LZ_OK, "load %s: %s", out_dir, lz_error_message());
    if (ok == LZ_OK && lz_state_create(&st, &m, 1, L) == LZ_OK && lz_workspace_create(&ws, &m, L, 0) == LZ_OK) {
        int32_t slot = 0, start = 0, len = L, pos = 0, tpos[64];
        for (int i = 0; i < L; i++)
            tpos[i] = i;
        lz_batch b = {1, L, &slot, &start, &len, &pos, tpos};
        CHECK(lz_step_begin(&m, &st, &ws, ids, &b, NULL, 0) == LZ_OK);
        CHECK(lz_step_embed(&m, &ws, ids, &b) == LZ_OK);
        CHECK(lz_decoder_layer_forward(&m, &m.layers[0], &st.layers[0], &ws, &b, L) == LZ_OK);
        const float *att = ws.att;
        double worst = 0, scale = 0;
        for (size_t e = 0; e < (size_t)L * g.Hq * g.d; e++) {
            const double y = (double)s.gla[e] + 0.75 * s.win[e];
            worst = fmax(worst, fabs(y - att[e]));
            scale = fmax(scale, fabs(y));
        }
        CHECK_MSG(scale > 0.01 && worst <= 1e-4 * scale,
                  "engine layer 0 vs training forward (per_head %d exp %d normalize %d): %g of %g", per_head, exp_map,
                  normalize, worst, scale);
        lz_workspace_free(&ws, &m);
        lz_state_free(&st, &m);
    }
    if (ok == LZ_OK)
        lz_model_free(&m);
    lz_lizard_scratch_free_f32(&s);
    free(zero);
    for (int i = 0; i < n; i++)
        lz_distill_layer_free(&layers[i]);
}

static void check_teacher(void) {
    snprintf(teacher_dir, sizeof teacher_dir, "%s/teacher", root);
    snprintf(out_dir, sizeof out_dir, "%s/out", root);
    char *argv[] = {"init", "--config", "tiny-teacher", "--out", teacher_dir, "--seed", "3"};
    CHECK(lz_cmd_init(7, argv) == LZ_OK);
    lz_teacher t;
    CHECK_FAILS_WITH(lz_teacher_open(&t, teacher_dir, 1, 5000, NULL, 0), LZ_ERR_INPUT, "max_position_embeddings");
    const int batch = 2, L = 40; // L > one GLA chunk is not needed here; 2 sequences share nothing
    CHECK(lz_teacher_open(&t, teacher_dir, batch, L, NULL, 0) == LZ_OK);
    int32_t ids[2 * 40];
    unsigned seed = 9;
    for (int i = 0; i < batch * L; i++)
        ids[i] = (int32_t)(lcg(&seed) >> 8) % t.model.cfg.vocab_size;
    target_ctx c = {.cfg = &t.model.cfg, .batch = batch, .seq_len = L};
    CHECK(lz_teacher_run(&t, ids, t.model.cfg.num_hidden_layers, 0, check_target, &c) == LZ_OK);
    CHECK(c.layers_seen == t.model.cfg.num_hidden_layers);
    CHECK_MSG(c.scale > 0.01 && c.worst <= 1e-4 * c.scale, "teacher target vs double attention: %g of %g", c.worst,
              c.scale);
    check_written_folder(&t, &c, ids, true, false, true);
    check_written_folder(&t, &c, ids, false, true, false);
    free(c.x0), free(c.q0), free(c.k0), free(c.v0);
    lz_teacher_close(&t);
}

/* ---- data ----------------------------------------------------------------------------------------- */

static void write_npy(const char *path, const char *descr, const char *shape, const void *data, size_t bytes) {
    char header[128];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    int pad = (64 - (10 + n + 1) % 64) % 64;
    unsigned short hlen = (unsigned short)(n + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hlen, (unsigned char)(hlen >> 8)};
    FILE *fp = fopen(path, "wb");
    fwrite(pre, 1, 10, fp);
    fwrite(header, 1, (size_t)n, fp);
    for (int i = 0; i < pad; i++)
        fputc(' ', fp);
    fputc('\n', fp);
    fwrite(data, 1, bytes, fp);
    fclose(fp);
}

static void check_data(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/ids.npy", root);
    int32_t ids[100];
    for (int i = 0; i < 100; i++)
        ids[i] = i; // sequence s of length 8 starts with 8 s
    write_npy(path, "<i4", "(100,)", ids, sizeof ids);
    lz_distill_data d;
    CHECK(lz_distill_data_load(&d, path, teacher_dir, 512, 8, 7) == LZ_OK);
    CHECK(d.n_seqs == 12);
    int32_t batch[3 * 8], again[3 * 8];
    int seen[12] = {0};
    bool packed = true;
    for (int step = 0; step < 4; step++) { // one epoch: 4 steps of 3
        lz_distill_data_batch(&d, (uint64_t)step, 3, batch);
        for (int b = 0; b < 3; b++) {
            seen[batch[b * 8] / 8]++;
            for (int i = 1; i < 8; i++)
                packed &= batch[b * 8 + i] == batch[b * 8] + i && batch[b * 8] % 8 == 0;
        }
    }
    CHECK(packed);
    bool each_once = true;
    for (int s = 0; s < 12; s++)
        each_once &= seen[s] == 1;
    CHECK_MSG(each_once, "an epoch visits every sequence once");
    lz_distill_data_batch(&d, 5, 3, batch); // epoch 1, then back to epoch 0: the same batches
    lz_distill_data_batch(&d, 1, 3, again);
    lz_distill_data_batch(&d, 5, 3, again);
    CHECK(memcmp(batch, again, sizeof batch) == 0);
    lz_distill_data e;
    CHECK(lz_distill_data_load(&e, path, teacher_dir, 512, 8, 8) == LZ_OK);
    bool differs = false;
    for (int step = 0; step < 4; step++) {
        lz_distill_data_batch(&d, (uint64_t)step, 3, batch);
        lz_distill_data_batch(&e, (uint64_t)step, 3, again);
        differs |= memcmp(batch, again, sizeof batch) != 0;
    }
    CHECK_MSG(differs, "seeds 7 and 8 give the same order");
    lz_distill_data_free(&d);
    lz_distill_data_free(&e);
    // errors name the path and the fault
    CHECK_FAILS_WITH(lz_distill_data_load(&d, path, teacher_dir, 50, 8, 0), LZ_ERR_INPUT, "outside the vocabulary");
    CHECK_FAILS_WITH(lz_distill_data_load(&d, path, teacher_dir, 512, 101, 0), LZ_ERR_INPUT, "fewer than one");
    snprintf(path, sizeof path, "%s/f.npy", root);
    float fl[4] = {0};
    write_npy(path, "<f4", "(4,)", fl, sizeof fl);
    CHECK_FAILS_WITH(lz_distill_data_load(&d, path, teacher_dir, 512, 2, 0), LZ_ERR_INPUT, "int32");
    snprintf(path, sizeof path, "%s/two.npy", root);
    write_npy(path, "<i4", "(2, 2)", ids, 16);
    CHECK_FAILS_WITH(lz_distill_data_load(&d, path, teacher_dir, 512, 2, 0), LZ_ERR_INPUT, "1-D");
    snprintf(path, sizeof path, "%s/empty.npy", root);
    write_npy(path, "<i4", "(0,)", ids, 0);
    CHECK_FAILS_WITH(lz_distill_data_load(&d, path, teacher_dir, 512, 2, 0), LZ_ERR_INPUT, "no tokens");
    snprintf(path, sizeof path, "%s/empty.txt", root);
    fclose(fopen(path, "w"));
    CHECK_FAILS_WITH(lz_distill_data_load(&d, path, teacher_dir, 512, 2, 0), LZ_ERR_INPUT, "no tokens");
    // a folder: its *.txt files in name order, each with its BOS; other files ignored
    char dir[512], file[600];
    snprintf(dir, sizeof dir, "%s/texts", root);
    mkdir(dir, 0755);
    CHECK_FAILS_WITH(lz_distill_data_load(&d, dir, teacher_dir, 512, 2, 0), LZ_ERR_INPUT, "no *.txt");
    const char *names[3] = {"b.txt", "a.txt", "c.md"}, *texts[3] = {"warm rock", "the lizard", "ignored"};
    for (int i = 0; i < 3; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        FILE *fp = fopen(file, "w");
        fputs(texts[i], fp);
        fclose(fp);
    }
    CHECK(lz_distill_data_load(&d, dir, teacher_dir, 512, 1, 0) == LZ_OK);
    lz_tokenizer *tok;
    int32_t *a_ids = NULL, *b_ids = NULL;
    int na = 0, nb = 0;
    CHECK(lz_tokenizer_load(teacher_dir, &tok) == LZ_OK);
    CHECK(lz_tokenizer_encode(tok, "the lizard", 10, true, &a_ids, &na) == LZ_OK);
    CHECK(lz_tokenizer_encode(tok, "warm rock", 9, true, &b_ids, &nb) == LZ_OK);
    CHECK_MSG(d.n_ids == (size_t)(na + nb) && memcmp(d.ids, a_ids, sizeof(int32_t) * na) == 0 &&
                  memcmp(d.ids + na, b_ids, sizeof(int32_t) * nb) == 0,
              "folder stream: %zu ids, expected a.txt (%d) then b.txt (%d)", d.n_ids, na, nb);
    free(a_ids), free(b_ids);
    lz_tokenizer_free(tok);
    lz_distill_data_free(&d);
    snprintf(path, sizeof path, "%s/missing.txt", root);
    CHECK_FAILS_WITH(lz_distill_data_load(&d, path, teacher_dir, 512, 2, 0), LZ_ERR_IO, "missing.txt");
}

/* ---- schedule and AdamW ------------------------------------------------------------------------------ */

static void check_optimizer(void) {
    lz_adamw_config c = {.lr = 1e-2, .min_lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.999,
                         .eps = 1e-8, .warmup = 4, .total_steps = 20};
    CHECK_NEAR(lz_distill_lr(&c, 0), 2.5e-3, 1e-12);
    CHECK_NEAR(lz_distill_lr(&c, 3), 1e-2, 1e-12);
    CHECK_NEAR(lz_distill_lr(&c, 4), 1e-2, 1e-12);
    CHECK_NEAR(lz_distill_lr(&c, 19), 1e-3, 1e-12);
    bool falling = true;
    for (long s = 4; s < 19; s++)
        falling &= lz_distill_lr(&c, s + 1) < lz_distill_lr(&c, s);
    CHECK(falling);
    // first AdamW step: each tensor moves by lr * (sign(g) + decay * p) (bias-corrected moments)
    lz_lizard_geom g = {.Hq = 2, .Hkv = 1, .Hs = 1, .n_wq = 1, .n_wk = 1, .d = 2, .f = 2, .m = 2};
    lz_distill_layer l;
    CHECK(lz_distill_layer_init(&l, 0, &g, 3, 1) == 0);
    const float wq0 = l.param[LZ_DT_WQ][0], meta0 = l.param[LZ_DT_META][0];
    l.grad[LZ_DT_WQ][0] = 0.3f, l.grad[LZ_DT_META][0] = -2.0f;
    lz_distill_layer_adamw(&l, &c, 0);
    CHECK_NEAR(l.param[LZ_DT_WQ][0], wq0 - 2.5e-3 * (1 + 0.1 * wq0), 1e-6);
    CHECK_NEAR(l.param[LZ_DT_META][0], meta0 + 2.5e-3, 1e-6); // no decay on the meta logits
    CHECK(l.param[LZ_DT_ALPHA][0] == 1.0f);                  // zero gradient: no move
    lz_distill_layer_free(&l);
}

int main(void) {
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    check_teacher();
    check_data();
    check_optimizer();
    nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return lz_test_finish("test_distill");
}
