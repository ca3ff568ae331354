/* session_fixture.h - shared by the session tests: a random-weight preset
 * model on the CPU backend with a state of SLOTS slots whose every array is
 * filled with a pattern that differs by array and byte; slot 0 at POS. */
#ifndef LZ_TEST_SESSION_FIXTURE_H
#define LZ_TEST_SESSION_FIXTURE_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint8_t
#include <stdlib.h>  // malloc, free
#include <string.h>  // memset

#include "engine.h"        // lz_open_backend
#include "model_presets.h" // lz_preset_config
#include "test_util.h"     // CHECK

enum { SLOTS = 2, CAPACITY = 64, POS = 37 }; // 37 > the window of 16: the ring has wrapped

typedef struct {
    lz_backend *be;
    const lz_ops *ops;
    lz_model m;
    lz_state st;
} fixture;

/* Backend bytes of a state array, filled with a pattern that differs by array and byte. */
static void fill(fixture *f, void *dst, size_t bytes, unsigned seed) {
    uint8_t *h = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; i++)
        h[i] = (uint8_t)((i * 2654435761u + seed * 97u) >> 7);
    CHECK(f->ops->copy_from_host(f->be, dst, h, bytes) == LZ_OK);
    free(h);
}

/* The byte sizes of one layer's arrays (all slots): k/v (cache or ring), S, z. */
static void layer_sizes(const fixture *f, const lz_layer *ly, size_t *kv, size_t *s, size_t *z) {
    const size_t row = lz_layer_kv_row_elems(ly) * f->ops->act_size;
    *kv = SLOTS * row * (size_t)(ly->run_softmax ? f->st.kv_capacity : ly->dims.window);
    *s = ly->run_softmax ? 0 : SLOTS * sizeof(float) * lz_layer_s_elems(ly);
    *z = ly->run_softmax ? 0 : SLOTS * sizeof(float) * lz_layer_z_elems(ly);
}

static void fill_state(fixture *f) {
    for (int i = 0; i < f->m.cfg.num_hidden_layers; i++) {
        const lz_layer *ly = &f->m.layers[i];
        lz_layer_state *ls = &f->st.layers[i];
        size_t kv, s, z;
        layer_sizes(f, ly, &kv, &s, &z);
        fill(f, ly->run_softmax ? ls->k_cache : ls->ring_k, kv, 4u * (unsigned)i);
        fill(f, ly->run_softmax ? ls->v_cache : ls->ring_v, kv, 4u * (unsigned)i + 1);
        if (!ly->run_softmax) {
            fill(f, ls->S, s, 4u * (unsigned)i + 2);
            fill(f, ls->z, z, 4u * (unsigned)i + 3);
        }
    }
}

static bool open_fixture(fixture *f, const char *preset) {
    lz_config cfg;
    memset(f, 0, sizeof *f);
    if (lz_preset_config(preset, "test", &cfg) != LZ_OK || lz_open_backend("cpu", NULL, &f->be, &f->ops) != LZ_OK)
        return false;
    if (lz_model_init_random(&f->m, &cfg, f->ops, f->be, 3) != LZ_OK ||
        lz_state_create(&f->st, &f->m, SLOTS, CAPACITY) != LZ_OK)
        return false;
    fill_state(f);
    f->st.slot_pos[0] = POS;
    return true;
}

static void close_fixture(fixture *f) {
    lz_state_free(&f->st, &f->m);
    lz_model_free(&f->m);
    f->ops->destroy(f->be);
}

#endif
