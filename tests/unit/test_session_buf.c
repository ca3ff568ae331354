/* test_session_buf.c - the one-pass session message (session_buf.c) against
 * the message lz_session_pack writes from lz_state_io_save: the same bytes,
 * read back in place to the same state (with the sampler as a record or as a
 * SamplerState message, which is packed after the checksum and covered by
 * it), and every refusal kept (truncated, corrupted, foreign, wrong version). */
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, free, mkstemp, getenv
#include <string.h> // memcmp, memcpy
#include <unistd.h> // close, unlink

#include "session_buf.h"   // lz_session_save_slot, lz_session_view
#include "state_io.h"      // lz_state_io_save, lz_state_io_restore
#include "test_util.h"     // CHECK

#include "session_fixture.h" // fixture, open_fixture, close_fixture, layer_sizes

static bool with_sampling; /* the header carries a SamplerState (packed after the checksum), not a record */

static Lizard__SequenceState header(int32_t *tokens) {
    static uint8_t fp[LZ_FINGERPRINT_BYTES] = {1, 2, 3};
    static uint8_t sampler[8] = {9, 8, 7};
    static Lizard__SamplerState sampling = LIZARD__SAMPLER_STATE__INIT;
    Lizard__SequenceState msg = LIZARD__SEQUENCE_STATE__INIT;
    msg.fingerprint = (ProtobufCBinaryData){sizeof fp, fp};
    msg.position = POS;
    msg.tokens = tokens;
    msg.n_tokens = POS + 1;
    msg.has_pending = true;
    if (with_sampling) {
        sampling.temperature = 0.7, sampling.top_k = 40, sampling.top_p = 0.9, sampling.seed = 12345;
        sampling.draws = 7; // the message's last byte
        msg.sampling = &sampling;
    } else {
        msg.sampler = (ProtobufCBinaryData){sizeof sampler, sampler};
    }
    return msg;
}

/* The message as lz_session_pack writes it (copies of every layer). */
static void pack_old(fixture *f, bool bf16, int32_t *tokens, uint8_t **buf, size_t *len) {
    Lizard__StageState stage;
    CHECK(lz_state_io_save(&f->m, &f->st, 0, bf16, &stage) == LZ_OK);
    Lizard__StageState *stages[1] = {&stage};
    Lizard__SequenceState msg = header(tokens);
    msg.n_stages = 1;
    msg.stages = stages;
    CHECK(lz_session_pack(&msg, buf, len) == LZ_OK);
    lz_state_io_free(&stage);
}

/* Slot 1's state (every array) equals slot 0's, in the rows a message carries. */
static bool slots_equal(fixture *f) {
    bool same = f->st.slot_pos[1] == f->st.slot_pos[0];
    for (int i = 0; same && i < f->m.cfg.num_hidden_layers; i++) {
        const lz_layer *ly = &f->m.layers[i];
        const lz_layer_state *ls = &f->st.layers[i];
        size_t kv, s, z;
        layer_sizes(f, ly, &kv, &s, &z);
        const size_t used = ly->run_softmax ? kv / SLOTS / (size_t)f->st.kv_capacity * POS : kv / SLOTS;
        const void *arrays[4] = {ly->run_softmax ? ls->k_cache : ls->ring_k, ly->run_softmax ? ls->v_cache : ls->ring_v,
                                 ls->S, ls->z};
        const size_t half[4] = {kv / SLOTS, kv / SLOTS, s / SLOTS, z / SLOTS}, cmp[4] = {used, used, s / SLOTS, z / SLOTS};
        for (int a = 0; a < 4; a++) // the CPU backend's memory is the host's
            same = same && (!cmp[a] || memcmp((const char *)arrays[a], (const char *)arrays[a] + half[a], cmp[a]) == 0);
    }
    return same;
}

static void restore_into_slot1(fixture *f, const Lizard__SequenceState *msg) {
    CHECK(lz_state_reset_slot(&f->st, &f->m, 1) == LZ_OK);
    CHECK(msg->n_stages >= 1);
    size_t n = 0;
    Lizard__LayerState *all[64];
    for (size_t r = 0; r < msg->n_stages; r++)
        for (size_t j = 0; j < msg->stages[r]->n_layers && n < 64; j++)
            all[n++] = msg->stages[r]->layers[j];
    CHECK(lz_state_io_restore(&f->m, &f->st, 1, msg->position, all, n) == LZ_OK);
}

static void test_same_bytes_and_state(const char *preset, bool bf16) {
    fixture f;
    CHECK_MSG(open_fixture(&f, preset), "%s: %s", preset, lz_error_message());
    int32_t tokens[POS + 1];
    for (int i = 0; i <= POS; i++)
        tokens[i] = i * 3;
    uint8_t *old = NULL;
    size_t old_len = 0;
    pack_old(&f, bf16, tokens, &old, &old_len);
    lz_session_buf b;
    lz_session_buf_init(&b, &f.m);
    Lizard__SequenceState msg = header(tokens);
    CHECK(lz_session_save_slot(&f.m, &f.st, 0, bf16, &msg, &b) == LZ_OK);
    CHECK(msg.n_stages == 0 && msg.stages == NULL);
    CHECK_MSG(b.len == old_len && memcmp(b.data, old, old_len) == 0, "%s: %zu bytes vs %zu", preset, b.len, old_len);

    Lizard__SequenceState *view = NULL, *unpacked = NULL;
    CHECK(lz_session_view(b.data, b.len, "test", msg.fingerprint.data, &view) == LZ_OK);
    CHECK(lz_session_unpack(old, old_len, "test", msg.fingerprint.data, &unpacked) == LZ_OK);
    if (view && unpacked) {
        CHECK(view->position == POS && view->n_tokens == POS + 1 && view->has_pending);
        CHECK(!with_sampling || (view->sampling && view->sampling->top_k == 40 && view->sampling->draws == 7 &&
                                 view->sampling->temperature == 0.7 && view->sampling->seed == 12345));
        CHECK(view->n_stages == 1 && view->stages[0]->n_layers == unpacked->stages[0]->n_layers);
        for (size_t j = 0; j < view->stages[0]->n_layers; j++) {
            const Lizard__LayerState *a = view->stages[0]->layers[j], *c = unpacked->stages[0]->layers[j];
            CHECK(a->layer == c->layer && a->kind == c->kind && a->rows == c->rows && a->elem_bytes == c->elem_bytes);
            CHECK(a->state_elem_bytes == c->state_elem_bytes);
            CHECK(a->k.len == c->k.len && (!a->k.len || memcmp(a->k.data, c->k.data, a->k.len) == 0));
            CHECK(a->s.len == c->s.len && (!a->s.len || memcmp(a->s.data, c->s.data, a->s.len) == 0));
            CHECK(a->k.len == 0 || (a->k.data >= b.data && a->k.data < b.data + b.len)); // in place, not copied
        }
        restore_into_slot1(&f, view);
        if (!bf16)
            CHECK_MSG(slots_equal(&f), "%s: restored slot differs", preset);
    }
    lz_session_view_free(view);
    lizard__sequence_state__free_unpacked(unpacked, NULL);
    if (with_sampling) { // the sampler is under the checksum: another count of draws is refused
        CHECK(b.data[b.len - 1] == 7);
        b.data[b.len - 1] = 6;
        view = NULL;
        CHECK_FAILS_WITH(lz_session_view(b.data, b.len, "test", msg.fingerprint.data, &view), LZ_ERR_INPUT,
                         "checksum");
        b.data[b.len - 1] = 7;
    }

    // file: written atomically, read back into the buffer
    char path[] = "/tmp/test-session-buf-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(lz_session_write_file(path, b.data, b.len) == LZ_OK);
    lz_session_buf r;
    lz_session_buf_init(&r, &f.m);
    CHECK(lz_session_buf_read_file(path, &r) == LZ_OK);
    CHECK(r.len == old_len && memcmp(r.data, old, old_len) == 0);
    unlink(path);
    lz_session_buf_free(&r);
    lz_session_buf_free(&b);
    free(old);
    close_fixture(&f);
}

/* Every refusal lz_session_unpack makes, made by the view too, without a crash on any prefix. */
static void test_refusals(void) {
    fixture f;
    CHECK(open_fixture(&f, "tiny-hybrid"));
    int32_t tokens[POS + 1] = {0};
    lz_session_buf b;
    lz_session_buf_init(&b, &f.m);
    Lizard__SequenceState msg = header(tokens);
    CHECK(lz_session_save_slot(&f.m, &f.st, 0, false, &msg, &b) == LZ_OK);
    Lizard__SequenceState *v = NULL;
    uint8_t *copy = malloc(b.len);
    for (size_t cut = 0; cut < b.len; cut += cut < 64 ? 1 : 997) { // truncated anywhere: refused
        memcpy(copy, b.data, cut);
        lz_error_clear();
        CHECK_MSG(lz_session_view(copy, cut, "cut.lzs", NULL, &v) == LZ_ERR_INPUT && !v, "cut at %zu", cut);
    }
    lz_error_clear();
    for (size_t at = 0; at < b.len; at += at < 256 ? 1 : 1 + b.len / 61) { // any byte flipped: never a wrong state
        memcpy(copy, b.data, b.len);
        copy[at] ^= 0x55;
        lz_error_clear();
        if (lz_session_view(copy, b.len, "flip.lzs", msg.fingerprint.data, &v) != LZ_OK) {
            CHECK_MSG(!v && lz_error_message()[0], "flip at %zu: refused without a message", at);
            continue;
        }
        Lizard__LayerState **all = v->n_stages == 1 ? v->stages[0]->layers : NULL;
        CHECK(lz_state_reset_slot(&f.st, &f.m, 1) == LZ_OK);
        if (all && lz_state_io_restore(&f.m, &f.st, 1, v->position, all, v->stages[0]->n_layers) == LZ_OK)
            CHECK_MSG(slots_equal(&f), "flip at %zu: accepted as another state", at); // e.g. a bool's 1 -> 0x54
        lz_session_view_free(v);
        v = NULL;
    }
    lz_error_clear();
    memcpy(copy, b.data, b.len);
    copy[b.len - 20] ^= 1; // a payload byte near the end (the last layer's)
    CHECK_FAILS_WITH(lz_session_view(copy, b.len, "flip.lzs", NULL, &v), LZ_ERR_INPUT, "checksum mismatch");
    const uint8_t other[LZ_FINGERPRINT_BYTES] = {7};
    CHECK_FAILS_WITH(lz_session_view(b.data, b.len, "x.lzs", other, &v), LZ_ERR_INPUT, "another model");
    const uint8_t junk[] = "not a session";
    CHECK_FAILS_WITH(lz_session_view(junk, sizeof junk - 1, "junk.lzs", NULL, &v), LZ_ERR_INPUT, "junk.lzs");

    // version 1 (bytewise checksum) and a future version: refused by name
    Lizard__SequenceState *u = NULL;
    CHECK(lz_session_unpack(b.data, b.len, "test", NULL, &u) == LZ_OK);
    if (u) {
        u->version = 1;
        size_t len = lizard__sequence_state__get_packed_size(u);
        uint8_t *old = malloc(len);
        lizard__sequence_state__pack(u, old);
        CHECK_FAILS_WITH(lz_session_view(old, len, "v1.lzs", NULL, &v), LZ_ERR_INPUT, "session version 1");
        CHECK_FAILS_WITH(lz_session_unpack(old, len, "v1.lzs", NULL, &v), LZ_ERR_INPUT, "session version 1");
        free(old);
        lizard__sequence_state__free_unpacked(u, NULL);
    }
    free(copy);
    lz_session_buf_free(&b);
    close_fixture(&f);
}

/* A message of several stages (as a pipeline writes it) reads in place too. */
static void test_stages(void) {
    fixture f;
    CHECK(open_fixture(&f, "tiny-hybrid"));
    Lizard__StageState stage;
    CHECK(lz_state_io_save(&f.m, &f.st, 0, false, &stage) == LZ_OK);
    Lizard__StageState a = LIZARD__STAGE_STATE__INIT, c = LIZARD__STAGE_STATE__INIT;
    a.layers = stage.layers, a.n_layers = 1;
    c.layers = stage.layers + 1, c.n_layers = stage.n_layers - 1;
    Lizard__StageState *stages[2] = {&a, &c};
    int32_t tokens[POS + 1] = {0};
    Lizard__SequenceState msg = header(tokens);
    msg.n_stages = 2;
    msg.stages = stages;
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK(lz_session_pack(&msg, &buf, &len) == LZ_OK);
    Lizard__SequenceState *v = NULL;
    CHECK(lz_session_view(buf, len, "two.lzs", NULL, &v) == LZ_OK);
    if (v) {
        CHECK(v->n_stages == 2 && v->stages[0]->n_layers == 1 && v->stages[1]->n_layers == stage.n_layers - 1);
        restore_into_slot1(&f, v);
        CHECK(slots_equal(&f));
    }
    lz_session_view_free(v);
    free(buf);
    lz_state_io_free(&stage);
    close_fixture(&f);
}

/* A version-1 file on disk (the fuzz seed, from before the wide checksum): refused by name by both readers. */
static void test_version1_file(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/../fuzz/corpus/session/llama3.lzs", fixtures ? fixtures : "tests/fixtures");
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK_MSG(lz_session_read_file(path, &buf, &len) == LZ_OK, "%s", lz_error_message());
    Lizard__SequenceState *m = NULL;
    if (buf) {
        CHECK_FAILS_WITH(lz_session_view(buf, len, "old.lzs", NULL, &m), LZ_ERR_INPUT, "old.lzs: session version 1");
        CHECK_FAILS_WITH(lz_session_unpack(buf, len, "old.lzs", NULL, &m), LZ_ERR_INPUT, "old.lzs: session version 1");
    }
    free(buf);
}

int main(void) {
    test_same_bytes_and_state("tiny-hybrid", false);
    test_same_bytes_and_state("tiny-hybrid", true);
    test_same_bytes_and_state("tiny-lizard", false);
    test_same_bytes_and_state("tiny-teacher", false);
    with_sampling = true;
    test_same_bytes_and_state("tiny-hybrid", false);
    test_same_bytes_and_state("tiny-lizard", true);
    with_sampling = false;
    test_refusals();
    test_stages();
    test_version1_file();
    return lz_test_finish("test_session_buf");
}
