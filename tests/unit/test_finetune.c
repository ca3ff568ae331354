/* test_finetune.c - stage-2 fine-tuning on the tiny-hybrid preset (softmax
 * and Lizard layers, GQA), through `lizard finetune`'s own run (setup, the
 * pipeline's batch, the trained tensors):
 *  - with LoRA B = 0 the training forward is the inference engine's: the same
 *    cross-entropy from the engine's logits, and the merged folder is the base;
 *  - the whole model's gradient (LoRA on every module, the Lizard tensors)
 *    against a central difference of the loss along a random direction;
 *  - the merged folder run by the engine equals the training forward with
 *    LoRA unmerged.
 * `test_finetune cuda` runs the same on the CUDA backend in fp32 and, beside
 * it, compares the GPU's loss and gradient with the CPU's (fp32 and bf16);
 * exit 77 when no GPU is visible. On the CPU the same comparison runs CPU
 * against CPU, which must agree bit for bit. */
#include <ftw.h>    // nftw
#include <math.h>   // fabs, log, exp, sqrt
#include <stdio.h>  // remove, snprintf
#include <stdlib.h> // malloc, free, mkdtemp, getenv
#include <string.h> // memcpy, strcmp

#include "commands.h"     // lz_cmd_init
#include "engine.h"       // lz_engine_open, lz_engine_prefill
#include "finetune_run.h" // the code under test
#include "grad_check.h"   // urand
#include "test_util.h"    // CHECK

static char root[] = "/tmp/lizard-finetune-test-XXXXXX";
enum { T = 80, B = 2 }; // past one GLA chunk; two sequences a batch

static double batch_loss(lz_finetune_run *r, const int32_t *ids, bool learn) {
    double sum = 0;
    CHECK(lz_ft_pipeline_batch(r, ids, learn, 0, 1.0f, &sum) == LZ_OK);
    return sum;
}

/* CE of the next tokens from the engine's logits of `dir`, summed over the B sequences of ids */
static double engine_loss(const char *dir, const int32_t *ids) {
    lz_engine e;
    lz_engine_options eo = {.model_dir = dir, .device = "cpu", .dtype = "fp32", .n_slots = B, .max_context = T,
                            .prefill_chunk = T};
    CHECK(lz_engine_open(&e, &eo) == LZ_OK);
    const int V = e.model.cfg.vocab_size;
    float *logits = malloc(sizeof(float) * T * V);
    double loss = 0;
    for (int s = 0; s < B; s++) {
        const int32_t *seq = ids + (size_t)s * T;
        CHECK(lz_engine_prefill(&e, s, seq, T, logits, (lz_step_out){0}) == LZ_OK);
        for (int t = 0; t + 1 < T; t++) {
            const float *z = logits + (size_t)t * V;
            double mx = z[0], sum = 0;
            for (int v = 1; v < V; v++)
                mx = z[v] > mx ? z[v] : mx;
            for (int v = 0; v < V; v++)
                sum += exp(z[v] - mx);
            loss += mx + log(sum) - z[seq[t + 1]];
        }
    }
    free(logits);
    lz_engine_close(&e);
    return loss;
}

static bool setup(lz_finetune_run *r, const char *base, const char *out, const char *device, const char *dtype) {
    static char data[1024];
    const char *fixtures = getenv("LZ_FIXTURES");
    snprintf(data, sizeof data, "%s/corpus/finetune_slice.txt", fixtures ? fixtures : "tests/fixtures");
    memset(r, 0, sizeof *r);
    r->a = (lz_finetune_args){.model = base, .data = data, .out = out, .device = device, .dtype = dtype,
                              .targets = "q,k,v,o,gate,up,down", .tokens = B * T, .seq_len = T, .batch = B,
                              .warmup = -1, .lora_rank = 4, .lora_alpha = 8, .seed = 5, .log_every = 1,
                              .lr = 1e-3, .min_lr = -1, .clip = 1};
    const lz_status s = lz_finetune_setup(r);
    if (s != LZ_OK && strcmp(device, "cuda") == 0) { // no GPU here (or no CUDA in this build)
        fprintf(stderr, "test_finetune: cuda: %s\n", lz_error_message());
        lz_finetune_teardown(r);
        return false;
    }
    CHECK_MSG(s == LZ_OK, "setup: %s", lz_error_message());
    return true;
}

/* Every trained tensor's values and gradient, in one host array each (the order of the params). */
static size_t total_of(const lz_ft_params *p) {
    size_t n = 0;
    for (int i = 0; i < p->n_params; i++)
        n += p->params[i].frozen ? 0 : p->params[i].n;
    return n;
}

static void get_grads(lz_finetune_run *r, float *out) {
    const lz_ft_params *p = &r->m.params;
    size_t k = 0;
    for (int i = 0; i < p->n_params; i++) {
        const lz_ft_param *q = &p->params[i];
        if (q->frozen)
            continue;
        CHECK(r->m.ops->copy_to_host(r->m.be, out + k, q->g, sizeof(float) * q->n) == LZ_OK);
        k += q->n;
    }
}

/* values = base + h * dir (host copies, then uploaded: the model follows) */
static void set_values(lz_finetune_run *r, const float *base, const float *dir, double h) {
    lz_ft_params *p = &r->m.params;
    size_t k = 0;
    for (int i = 0; i < p->n_params; i++) {
        lz_ft_param *q = &p->params[i];
        if (q->frozen)
            continue;
        for (size_t e = 0; e < q->n; e++, k++)
            q->host[LZ_FT_VALUES][e] = base[k] + (float)(h * (dir ? dir[k] : 0));
    }
    CHECK(lz_ft_params_upload(p, &r->m.model) == LZ_OK);
}

static void get_values(const lz_finetune_run *r, float *out) {
    const lz_ft_params *p = &r->m.params;
    size_t k = 0;
    for (int i = 0; i < p->n_params; i++) {
        const lz_ft_param *q = &p->params[i];
        if (!q->frozen) {
            memcpy(out + k, q->host[LZ_FT_VALUES], sizeof(float) * q->n);
            k += q->n;
        }
    }
}

/* The directional derivative of the batch's loss along a random direction: backward against a central
 * difference. tol: relative. */
static void check_gradient(lz_finetune_run *r, const int32_t *ids, double h, double tol, const char *what) {
    const size_t n = total_of(&r->m.params);
    float *vals = malloc(sizeof(float) * n), *dir = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    unsigned seed = 21;
    get_values(r, vals);
    for (size_t k = 0; k < n; k++)
        dir[k] = (float)(2 * urand(&seed) - 1);
    batch_loss(r, ids, true);
    get_grads(r, g);
    double directional = 0;
    for (size_t k = 0; k < n; k++)
        directional += (double)dir[k] * g[k];
    set_values(r, vals, dir, h);
    const double up = batch_loss(r, ids, false);
    set_values(r, vals, dir, -h);
    const double down = batch_loss(r, ids, false);
    set_values(r, vals, NULL, 0);
    const double fd = (up - down) / (2 * h);
    fprintf(stderr, "test_finetune: %s: directional derivative %.6g by differences, %.6g by the backward\n", what, fd,
            directional);
    CHECK_MSG(fabs(fd - directional) < tol * fabs(directional), "%s: whole-model gradient %g by differences, %g by "
              "the backward", what, fd, directional);
    free(vals), free(dir), free(g);
}

/* Moves LoRA B and the Lizard tensors off their start, the same way for every run. */
static void perturb(lz_finetune_run *r) {
    const size_t n = total_of(&r->m.params);
    float *vals = malloc(sizeof(float) * n), *dir = malloc(sizeof(float) * n);
    unsigned seed = 99;
    get_values(r, vals);
    for (size_t k = 0; k < n; k++)
        dir[k] = (float)(2 * urand(&seed) - 1);
    set_values(r, vals, dir, 0.05);
    free(vals), free(dir);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* The loss and gradient of `device` in `dtype` against the CPU's (fp32) on the same tensors. out: a
 * folder that holds no model (setup refuses one without --resume); neither run writes it. */
static void compare_devices(const char *base, const char *out, const int32_t *ids, const char *device,
                            const char *dtype, double loss_tol, double grad_tol) {
    lz_finetune_run cpu, gpu;
    const bool both = setup(&cpu, base, out, "cpu", "fp32") && setup(&gpu, base, out, device, dtype);
    CHECK_MSG(both, "compare_devices: %s %s: setup failed", device, dtype);
    if (!both)
        return;
    perturb(&cpu), perturb(&gpu);
    const double lc = batch_loss(&cpu, ids, true), lg = batch_loss(&gpu, ids, true);
    const size_t n = total_of(&cpu.m.params);
    float *gc = malloc(sizeof(float) * n), *gg = malloc(sizeof(float) * n);
    get_grads(&cpu, gc), get_grads(&gpu, gg);
    double num = 0, den = 0;
    for (size_t k = 0; k < n; k++)
        num += ((double)gg[k] - gc[k]) * ((double)gg[k] - gc[k]), den += (double)gc[k] * gc[k];
    const double rel = sqrt(num / den);
    fprintf(stderr, "test_finetune: %s %s against cpu: loss %.8g / %.8g (rel %.2e), gradient rel L2 %.2e\n", device,
            dtype, lg, lc, fabs(lg - lc) / lc, rel);
    CHECK_MSG(fabs(lg - lc) <= loss_tol * lc, "%s %s loss %.8g, cpu %.8g", device, dtype, lg, lc);
    CHECK_MSG(rel <= grad_tol, "%s %s gradient: relative L2 error %.3g against the cpu's", device, dtype, rel);
    free(gc), free(gg);
    lz_finetune_teardown(&cpu), lz_finetune_teardown(&gpu);
}

int main(int argc, char **argv) {
    const char *device = argc > 1 ? argv[1] : "cpu";
    CHECK(mkdtemp(root) != NULL);
    char base[512], out0[512], out1[512], unused[512];
    snprintf(base, sizeof base, "%s/base", root);
    snprintf(out0, sizeof out0, "%s/zero", root);
    snprintf(out1, sizeof out1, "%s/merged", root);
    snprintf(unused, sizeof unused, "%s/unwritten", root);
    char *argv_init[] = {"init", "--config", "tiny-hybrid", "--out", base, "--seed", "3"};
    CHECK(lz_cmd_init(7, argv_init) == LZ_OK);
    int32_t ids[B * T];
    unsigned seed = 7;
    for (int t = 0; t < B * T; t++)
        ids[t] = (int32_t)(urand(&seed) * 500);
    lz_finetune_run r;
    const bool cuda = strcmp(device, "cuda") == 0;
    if (!setup(&r, base, out0, device, "fp32")) {
        nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        return 77;
    }
    // B = 0: the training forward is the engine's, and the merged folder is the base
    const double base_engine = engine_loss(base, ids), start = batch_loss(&r, ids, false);
    CHECK_MSG(fabs(start - base_engine) < 1e-5 * base_engine, "training forward %.8g, engine %.8g", start,
              base_engine);
    CHECK(lz_ft_params_download(&r.m.params, &r.m.model) == LZ_OK);
    CHECK(lz_finetune_write_model(&r) == LZ_OK);
    CHECK_NEAR(engine_loss(out0, ids), base_engine, 1e-6 * base_engine);
    // LoRA B and the Lizard tensors moved: the gradient, then the merged folder against the unmerged forward
    perturb(&r);
    check_gradient(&r, ids, 2e-3, 0.02, cuda ? "cuda fp32" : "cpu");
    const double moved = batch_loss(&r, ids, false);
    CHECK_MSG(fabs(moved - start) > 1e-3 * start, "the perturbation changed nothing (%g, %g)", moved, start);
    r.a.out = out1;
    CHECK(lz_ft_params_download(&r.m.params, &r.m.model) == LZ_OK);
    CHECK(lz_finetune_write_model(&r) == LZ_OK);
    const double merged = engine_loss(out1, ids);
    CHECK_MSG(fabs(moved - merged) < 1e-4 * merged, "base + LoRA %.8g, merged folder in the engine %.8g", moved,
              merged);
    lz_finetune_teardown(&r);
    if (cuda) {
        compare_devices(base, unused, ids, "cuda", "fp32", 1e-5, 1e-3);
        compare_devices(base, unused, ids, "cuda", "bf16", 2e-2, 0.1);
    } else {
        compare_devices(base, unused, ids, "cpu", "fp32", 0, 0);
    }
    nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return lz_test_finish("test_finetune");
}
