/* test_bench_report.c - the figures `lizard bench` reports beside its results
 * come from a description of the whole model (lz_model_describe: a folder's
 * headers, or a shape with no files), not from loaded weights: for every
 * fixture folder and the tiny shapes, with and without --dtype fp8, the
 * description's parameter counts, state bytes, weight bytes and bounds equal
 * those of the model loaded (or made at random) on the CPU, counted as bench
 * counted them on the loaded model before. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv

#include "bench_report.h" // the code under test
#include "model_load.h"   // lz_model_describe, lz_model_load, lz_model_init_random
#include "model_presets.h" // lz_preset_config
#include "state.h"        // lz_state_bytes_at
#include "test_util.h"    // CHECK

/* An FP8 weight as the backend holds it: its parameters out of the activation type's count, 1 byte each and
 * 4 a row in. */
static void count_fp8(const lz_weight *w, double *params, double *bytes) {
    if (w->dtype != LZ_DTYPE_F8_E4M3 || !w->data)
        return;
    *params -= (double)w->rows * w->cols;
    *bytes += (double)w->rows * w->cols + 4.0 * (double)w->rows;
}

/* The weight bytes of a loaded model, from the dtypes its weights hold. */
static double loaded_weight_bytes(const lz_model *m) {
    double params = (double)(m->n_params_teacher + m->n_params_lizard), bytes = 0;
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
        const lz_layer *ly = &m->layers[i];
        const lz_weight *w[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (int k = 0; k < 7; k++)
            count_fp8(w[k], &params, &bytes);
    }
    count_fp8(&m->lm_head, &params, &bytes);
    return params * m->ops->act_size + bytes;
}

static double state_read(const lz_model *m, int context) {
    const lz_state_bytes s = lz_state_bytes_at(m, context);
    return (double)s.softmax_kv + 2.0 * (double)s.lizard_gla + (double)s.lizard_window;
}

/* The description `d` against the model `m` itself. */
static void compare(const char *what, const lz_model *d, const lz_model *m) {
    CHECK_MSG(d->n_params_teacher == m->n_params_teacher && d->n_params_lizard == m->n_params_lizard,
              "%s: described %zu + %zu parameters, loaded %zu + %zu", what, d->n_params_teacher, d->n_params_lizard,
              m->n_params_teacher, m->n_params_lizard);
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        CHECK_MSG(d->layers[i].run_softmax == m->layers[i].run_softmax &&
                      d->layers[i].dims.n_state_heads == m->layers[i].dims.n_state_heads,
                  "%s: layer %d", what, i);
    const int contexts[] = {1, 100, 32768};
    for (int j = 0; j < 3; j++) {
        const lz_state_bytes a = lz_state_bytes_at(d, contexts[j]), b = lz_state_bytes_at(m, contexts[j]);
        CHECK_MSG(a.softmax_kv == b.softmax_kv && a.lizard_gla == b.lizard_gla && a.lizard_window == b.lizard_window &&
                      a.n_softmax == b.n_softmax && a.n_lizard == b.n_lizard,
                  "%s: state at %d", what, contexts[j]);
    }
    const double weights = loaded_weight_bytes(m);
    CHECK_MSG(lz_bench_weight_bytes(d) == weights, "%s: weight bytes %.0f, loaded %.0f", what,
              lz_bench_weight_bytes(d), weights);
    // the bounds as bench computed them on the loaded model, with made-up ceilings
    lz_bench_report r = {.whole = *d, .copy_bps = 3e12, .gemm_flops = 7e14, .ranks = 1, .placement = "balanced"};
    for (int batch = 1; batch <= 64; batch *= 8) {
        const double want = batch * 3e12 / (weights + batch * state_read(m, 2048));
        CHECK_MSG(fabs(lz_bench_decode_bound(&r, batch, 2048) - want) <= 1e-9 * want, "%s: decode bound b%d", what,
                  batch);
    }
    const lz_config *c = &m->cfg;
    double flops = 2.0 * (double)(m->n_params_teacher + m->n_params_lizard) - 2.0 * c->vocab_size * c->hidden_size;
    for (int i = 0; i < c->num_hidden_layers; i++)
        flops += m->layers[i].run_softmax ? 4.0 * (300 / 2.0) * c->num_attention_heads * c->head_dim : 0;
    CHECK_MSG(fabs(lz_bench_prompt_bound(&r, 300) - 7e14 / flops) <= 1e-9 * 7e14 / flops, "%s: prompt bound", what);
    r.copy_bps = r.gemm_flops = 0; // not measured: no bound
    CHECK(lz_bench_decode_bound(&r, 1, 2048) == 0 && lz_bench_prompt_bound(&r, 300) == 0);
}

/* A folder (dir NULL: the shape `name`), described and loaded, without and with FP8 weights. */
static void check(const char *name, const char *dir, const lz_ops *ops, lz_backend *be) {
    for (int fp8 = 0; fp8 < 2; fp8++) {
        lz_config cfg;
        lz_status s = dir ? lz_config_load(dir, &cfg) : lz_preset_config(name, "test", &cfg);
        CHECK_MSG(s == LZ_OK, "%s: %s", name, lz_error_message());
        if (s != LZ_OK)
            return;
        cfg.fp8_weights = fp8;
        lz_model d, m;
        char what[128];
        snprintf(what, sizeof what, "%s%s", name, fp8 ? " (fp8)" : "");
        s = lz_model_describe(&d, dir, &cfg, ops);
        CHECK_MSG(s == LZ_OK, "%s: describe: %s", what, lz_error_message());
        lz_status l = s;
        if (s == LZ_OK)
            l = dir ? lz_model_load(&m, dir, &cfg, ops, be) : lz_model_init_random(&m, &cfg, ops, be, 7);
        CHECK_MSG(l == LZ_OK, "%s: load: %s", what, lz_error_message());
        if (s == LZ_OK && l == LZ_OK)
            compare(what, &d, &m);
        if (l == LZ_OK)
            lz_model_free(&m);
        if (s == LZ_OK)
            lz_model_free(&d);
    }
}

int main(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    CHECK(fixtures != NULL);
    if (!fixtures)
        return lz_test_finish("test_bench_report");
    lz_backend *be;
    const lz_ops *ops;
    CHECK(lz_cpu_backend_create(&be, &ops) == LZ_OK);
    const char *folders[] = {"hybrid50/model", "lizard_exp/model", "lizard_nonorm/model", "lizard_perhead/model",
                             "llama3/model", "llama3_bf16_sharded/model", "mistral/model", "fp8_fbgemm",
                             "fp8_ct_channel", "fp8_per_tensor", "hub_llama31_instruct", "hub_mistral7b_instruct"};
    for (size_t i = 0; i < sizeof folders / sizeof folders[0]; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", fixtures, folders[i]);
        check(folders[i], dir, ops, be);
    }
    const char *shapes[] = {"tiny-teacher", "tiny-hybrid", "tiny-lizard"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check(shapes[i], NULL, ops, be);
    ops->destroy(be);
    return lz_test_finish("test_bench_report");
}
