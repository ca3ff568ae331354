/* test_train_forward.c - a decoder layer's training forward (lz_decoder_layer_train_forward: what
 * distillation's teacher and fine-tuning run) against the inference layer (lz_decoder_layer_forward)
 * on the CPU: the tiny-hybrid preset (softmax and Lizard layers, GQA) at random, with and without
 * the attention and MLP biases a config may ask for, no LoRA. Both run the same ops on the same
 * input, so every layer's output must have the same bits; a bias the training forward leaves out
 * moves it by the bias itself (std 0.02). Two sequences of 37 and 70 tokens (past one GLA chunk). */
#include <stdlib.h> // malloc, free
#include <string.h> // memcmp, memset

#include "decoder_layer.h" // lz_decoder_layer_forward
#include "engine.h"        // lz_open_backend
#include "model_load.h"    // lz_model_init_random
#include "model_presets.h" // lz_preset_config
#include "state.h"         // lz_state
#include "test_util.h"     // CHECK, CHECK_MSG
#include "train_step.h"    // lz_decoder_layer_train_forward, lz_layer_tape

enum { LEN0 = 37, LEN1 = 70, N = LEN0 + LEN1 };

static float *random_rows(size_t n, unsigned seed) {
    float *a = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    return a;
}

/* Every layer of a random model with (or without) biases: the training forward's output against the
 * inference layer's, from the same input and from an emptied state. */
static void check_model(bool biases) {
    lz_config cfg;
    CHECK(lz_preset_config("tiny-hybrid", "test", &cfg) == LZ_OK);
    cfg.attention_bias = cfg.mlp_bias = biases;
    lz_backend *be = NULL;
    const lz_ops *ops = NULL;
    CHECK(lz_open_backend("cpu", NULL, &be, &ops) == LZ_OK);
    lz_model m;
    CHECK_MSG(lz_model_init_random(&m, &cfg, ops, be, 11) == LZ_OK, "random model: %s", lz_error_message());
    lz_state st;
    lz_workspace ws;
    lz_train_work work;
    lz_layer_train *layers = calloc((size_t)cfg.num_hidden_layers, sizeof *layers);
    CHECK(lz_state_create(&st, &m, 2, LEN1) == LZ_OK);
    CHECK(lz_workspace_create(&ws, &m, N, 0) == LZ_OK);
    CHECK(lz_train_work_create_forward(&work, &m, N, layers) == LZ_OK);
    const int32_t slot[2] = {0, 1}, start[2] = {0, LEN0}, len[2] = {LEN0, LEN1}, pos[2] = {0, 0};
    int32_t token_pos[N];
    for (int t = 0; t < N; t++)
        token_pos[t] = t < LEN0 ? t : t - LEN0;
    const lz_batch b = {2, N, slot, start, len, pos, token_pos};
    CHECK(lz_train_begin(&m, &st, &ws, &work, NULL, &b) == LZ_OK);
    const size_t n = (size_t)N * cfg.hidden_size;
    float *in = random_rows(n, 5), *inference = malloc(sizeof(float) * n), *training = malloc(sizeof(float) * n);
    int softmax = 0, lizard = 0;
    for (int l = 0; l < cfg.num_hidden_layers; l++) {
        lz_layer *ly = &m.layers[l];
        CHECK(lz_state_reset_slot(&st, &m, 0) == LZ_OK && lz_state_reset_slot(&st, &m, 1) == LZ_OK);
        memcpy(ws.x, in, sizeof(float) * n);
        CHECK(lz_decoder_layer_forward(&m, ly, &st.layers[l], &ws, &b, st.kv_capacity) == LZ_OK);
        memcpy(inference, ws.x, sizeof(float) * n);
        CHECK(lz_state_reset_slot(&st, &m, 0) == LZ_OK && lz_state_reset_slot(&st, &m, 1) == LZ_OK);
        memcpy(ws.x, in, sizeof(float) * n);
        CHECK(lz_decoder_layer_train_forward(&m, ly, &st.layers[l], &ws, &b, st.kv_capacity, &layers[l],
                                             &work.tape) == LZ_OK);
        memcpy(training, ws.x, sizeof(float) * n);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++)
            differ += memcmp(&inference[i], &training[i], sizeof(float)) != 0;
        CHECK_MSG(differ == 0, "%s layer %d (%s): %zu of %zu outputs differ from the inference layer's",
                  biases ? "with biases" : "without biases", l, ly->run_softmax ? "softmax" : "Lizard", differ, n);
        softmax += ly->run_softmax, lizard += !ly->run_softmax;
    }
    CHECK_MSG(softmax > 0 && lizard > 0, "tiny-hybrid: %d softmax and %d Lizard layers", softmax, lizard);
    free(in), free(inference), free(training), free(layers);
    lz_train_work_free(&work, &m);
    lz_workspace_free(&ws, &m);
    lz_state_free(&st, &m);
    lz_model_free(&m);
    ops->destroy(be);
}

int main(void) {
    check_model(false);
    check_model(true);
    return lz_test_finish("test_train_forward");
}
