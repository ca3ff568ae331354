/* test_finetune.c - stage-2 fine-tuning on the tiny-hybrid preset (softmax
 * and Lizard layers, GQA):
 *  - the whole model's gradient (LoRA on every module, the Lizard tensors)
 *    against a central difference of the loss along a random direction, in
 *    fp32 (each op's own f64 check is tests/unit/test_train_model.c);
 *  - the training forward (base weights + LoRA, unmerged) against the
 *    inference engine on the merged folder: the same cross-entropy from the
 *    engine's logits;
 *  - the merged folder with LoRA B = 0 is the base model. */
#include <ftw.h>    // nftw
#include <math.h>   // fabs, log, exp
#include <stdio.h>  // remove, snprintf
#include <stdlib.h> // malloc, free, mkdtemp
#include <string.h> // memcpy

#include "commands.h"     // lz_cmd_init
#include "engine.h"       // lz_engine_open, lz_engine_prefill
#include "finetune_run.h" // the code under test
#include "grad_check.h"   // urand
#include "test_util.h"    // CHECK

static char root[] = "/tmp/lizard-finetune-test-XXXXXX";
enum { T = 80 }; // past one GLA chunk

static double sequence_loss(lz_ft_model *m, const int32_t *ids, bool learn, float scale) {
    double loss = 0;
    CHECK(lz_ft_sequence(m, ids, learn, scale, 0, 0, &loss) == LZ_OK);
    return loss;
}

/* CE of the next tokens from the engine's logits of `dir` */
static double engine_loss(const char *dir, const int32_t *ids) {
    lz_engine e;
    lz_engine_options eo = {.model_dir = dir, .device = "cpu", .dtype = "fp32", .n_slots = 1, .max_context = T,
                            .prefill_chunk = T};
    CHECK(lz_engine_open(&e, &eo) == LZ_OK);
    const int V = e.model.cfg.vocab_size;
    float *logits = malloc(sizeof(float) * T * V);
    CHECK(lz_engine_prefill(&e, 0, ids, T, logits, (lz_step_out){0}) == LZ_OK);
    double loss = 0;
    for (int t = 0; t + 1 < T; t++) {
        const float *z = logits + (size_t)t * V;
        double mx = z[0], sum = 0;
        for (int v = 1; v < V; v++)
            mx = z[v] > mx ? z[v] : mx;
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        loss += mx + log(sum) - z[ids[t + 1]];
    }
    free(logits);
    lz_engine_close(&e);
    return loss;
}

static void load(lz_finetune_run *r, const char *base, const char *out) {
    memset(r, 0, sizeof *r);
    r->a.model = base, r->a.out = out;
    lz_config cfg;
    CHECK(lz_config_load(base, &cfg) == LZ_OK);
    const lz_lora_config lora = {.rank = 4, .alpha = 8, .target = {true, true, true, true, true, true, true},
                                 .seed = 5};
    const lz_train_ops *ops;
    CHECK(lz_train_ops_get("cpu", &ops) == LZ_OK);
    CHECK(lz_ft_model_load(&r->model, base, &cfg, &lora, T, 1, ops) == LZ_OK);
}

static void check_gradient(lz_ft_model *m, const int32_t *ids) {
    unsigned seed = 21;
    size_t total = 0;
    for (int i = 0; i < m->n_params; i++)
        total += m->params[i].n;
    float *dir = malloc(sizeof(float) * total), *saved = malloc(sizeof(float) * total);
    for (int i = 0; i < m->n_params; i++)
        memset(m->params[i].g, 0, sizeof(float) * m->params[i].n);
    sequence_loss(m, ids, true, 1.0f);
    double directional = 0;
    size_t k = 0;
    for (int i = 0; i < m->n_params; i++)
        for (size_t e = 0; e < m->params[i].n; e++, k++) {
            dir[k] = (float)(2 * urand(&seed) - 1);
            saved[k] = m->params[i].w[e];
            directional += (double)dir[k] * m->params[i].g[e];
        }
    double side[2];
    const double h = 2e-3;
    for (int s = 0; s < 2; s++) {
        k = 0;
        for (int i = 0; i < m->n_params; i++)
            for (size_t e = 0; e < m->params[i].n; e++, k++)
                m->params[i].w[e] = saved[k] + (float)((s ? -h : h) * dir[k]);
        side[s] = sequence_loss(m, ids, false, 1.0f);
    }
    k = 0;
    for (int i = 0; i < m->n_params; i++)
        for (size_t e = 0; e < m->params[i].n; e++, k++)
            m->params[i].w[e] = saved[k];
    const double fd = (side[0] - side[1]) / (2 * h);
    CHECK_MSG(fabs(fd - directional) < 0.02 * fabs(directional), "whole-model gradient: %g by differences, %g "
              "by the backward", fd, directional);
    free(dir), free(saved);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    CHECK(mkdtemp(root) != NULL);
    char base[512], out0[512], out1[512];
    snprintf(base, sizeof base, "%s/base", root);
    snprintf(out0, sizeof out0, "%s/zero", root);
    snprintf(out1, sizeof out1, "%s/merged", root);
    char *argv[] = {"init", "--config", "tiny-hybrid", "--out", base, "--seed", "3"};
    CHECK(lz_cmd_init(7, argv) == LZ_OK);
    int32_t ids[T];
    unsigned seed = 7;
    for (int t = 0; t < T; t++)
        ids[t] = (int32_t)(urand(&seed) * 500);
    lz_finetune_run r;
    load(&r, base, out0);
    lz_ft_model *m = &r.model;
    // B = 0: the merged folder is the base, and the training forward is the engine's
    const double base_engine = engine_loss(base, ids), start = sequence_loss(m, ids, false, 1.0f);
    CHECK_MSG(fabs(start - base_engine) < 1e-4 * base_engine, "training forward %.8g, engine %.8g", start,
              base_engine);
    CHECK(lz_finetune_write_model(&r) == LZ_OK);
    CHECK_NEAR(engine_loss(out0, ids), base_engine, 1e-6 * base_engine);
    // LoRA B and the Lizard tensors moved: the gradient, then the merged folder against the unmerged forward
    for (int i = 0; i < m->n_params; i++)
        for (size_t e = 0; e < m->params[i].n; e++)
            m->params[i].w[e] += (float)(0.05 * (2 * urand(&seed) - 1));
    check_gradient(m, ids);
    const double moved = sequence_loss(m, ids, false, 1.0f);
    CHECK_MSG(fabs(moved - start) > 1e-3 * start, "the perturbation changed nothing (%g, %g)", moved, start);
    r.a.out = out1;
    CHECK(lz_finetune_write_model(&r) == LZ_OK);
    const double merged = engine_loss(out1, ids);
    CHECK_MSG(fabs(moved - merged) < 1e-4 * merged, "base + LoRA %.8g, merged folder in the engine %.8g", moved,
              merged);
    lz_finetune_teardown(&r);
    nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return lz_test_finish("test_finetune");
}
