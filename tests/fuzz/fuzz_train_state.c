/* fuzz_train_state.c - libFuzzer target: a distillation state (distill_checkpoint.c through the
 * checkpoint unit's reader, checkpoint_unit.c) from any bytes, held as state.json, a NUL byte, then
 * tensors.safetensors. Checked against two runs of a tiny teacher (4 layers): one with
 * --softmax-layers 0,2 (layers 1 and 3 trained), one with --retain-fraction 0.5 (every layer a
 * candidate, the choice before step 3 of 8). A refusal must say why and leave the layers and the
 * progress as they were (they are poisoned with NaN and compared bit for bit); an accepted state
 * must hold finite tensors and a step in 1..8. */
#include <math.h>   // NAN, isfinite
#include <stdint.h> // uint8_t
#include <stdlib.h> // abort
#include <string.h> // memchr, memcmp, memset

#include "distill_checkpoint.h" // lz_distill_checkpoint_check

enum { LAYERS = 4 };
static const char signature[] = "teacher=fuzz;seed=1;";

/* Every layer's tensors at the fuzz geometry, their values NaN. */
static void poison(lz_distill_layer *layers) {
    const lz_lizard_geom g = {.Hq = 2, .Hkv = 1, .Hs = 1, .n_wq = 2, .n_wk = 1, .d = 4, .f = 2, .w = 4, .m = 2,
                              .normalize = true};
    for (int i = 0; i < LAYERS; i++) {
        if (!layers[i].param[0] && lz_distill_layer_init(&layers[i], i, &g, 8, 1) != 0)
            abort();
        for (int j = 0; j < LZ_DT_COUNT; j++)
            for (size_t e = 0; e < layers[i].numel[j]; e++)
                layers[i].param[j][e] = layers[i].m1[j][e] = layers[i].m2[j][e] = NAN;
    }
}

static bool untouched(const lz_distill_layer *layers) {
    for (int i = 0; i < LAYERS; i++)
        for (int j = 0; j < LZ_DT_COUNT; j++)
            for (size_t e = 0; e < layers[i].numel[j]; e++)
                if (!isnan(layers[i].param[j][e]) || !isnan(layers[i].m1[j][e]) || !isnan(layers[i].m2[j][e]))
                    return false;
    return true;
}

static void check(const lz_distill_resume_rules *rules, lz_distill_layer *layers, const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t state_len = nul ? (size_t)(nul - data) : size;
    lz_distill_progress p, before;
    memset(&p, 0, sizeof p);
    p.step = -7, p.chosen = true, p.softmax[1] = true; // what a refusal must leave as it is
    before = p;
    poison(layers);
    lz_error_clear();
    const lz_status s = lz_distill_checkpoint_check("fuzz", (const char *)data, state_len, nul ? nul + 1 : data + size,
                                                    nul ? size - state_len - 1 : 0, rules, &p, layers);
    if (s != LZ_OK) {
        if (lz_error_message()[0] == '\0' || !untouched(layers) || memcmp(&p, &before, sizeof p) != 0)
            abort(); // a refusal says why and changes nothing
        return;
    }
    if (p.step < 1 || p.step > rules->total_steps)
        abort();
    for (int i = 0; i < LAYERS; i++)
        for (int j = 0; rules->trained[i] && j < LZ_DT_COUNT; j++)
            for (size_t e = 0; e < layers[i].numel[j]; e++)
                if (!isfinite(layers[i].param[j][e]) || !isfinite(layers[i].m1[j][e]) || !isfinite(layers[i].m2[j][e]))
                    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lz_distill_layer layers[LAYERS];
    static const bool given_softmax[LAYERS] = {true, false, true, false}, given_trained[LAYERS] = {false, true, false, true};
    static const bool all[LAYERS] = {true, true, true, true};
    const lz_distill_resume_rules given = {signature, 8, LAYERS, given_trained, given_softmax, 0, 0};
    const lz_distill_resume_rules retained = {signature, 8, LAYERS, all, NULL, 2, 2};
    check(&given, layers, data, size);
    check(&retained, layers, data, size);
    return 0;
}
