/* test_session_chunks.c - session format version 3 (session_chunks.c): a
 * tiny-hybrid state split into many chunks reads back to the same records and
 * restores bit-identical; every damage to the file (cut anywhere, a byte
 * flipped, a chunk missing, repeated or out of order, trailing bytes, another
 * model) is refused with a message and nothing returned; version-2 files
 * still load (session_file.c tells the two apart). In memory (what `lizard
 * serve` keeps): the same bytes as the file, through the session store's
 * spill and take unchanged; under 2 GiB a version-2 message as before. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, free, mkstemp, mkdtemp, setenv
#include <string.h> // memcmp, memcpy, strstr
#include <unistd.h> // close, unlink, rmdir

#include "knobs.h"          // lz_knobs_load (LIZARD_SESSION_CHUNK_BYTES)
#include "serve_sessions.h" // serve_sessions
#include "session_chunks.h" // lz_session_write_chunked, lz_session_pack_chunked
#include "session_file.h"   // lz_session_load_file, lz_session_parse
#include "state_io.h"       // lz_state_io_save, lz_state_io_restore
#include "test_util.h"      // CHECK

#include "session_fixture.h" // fixture, open_fixture, close_fixture

/* LIZARD_SESSION_CHUNK_BYTES set to value (NULL: unset), read as the program reads it at start. */
static void set_chunk_knob(const char *value) {
    if (value)
        setenv("LIZARD_SESSION_CHUNK_BYTES", value, 1);
    else
        unsetenv("LIZARD_SESSION_CHUNK_BYTES");
    CHECK_MSG(lz_knobs_load() == LZ_OK, "%s", lz_error_message());
}

enum { CHUNK = 100 }; // bytes per chunk: the tiny state in many chunks

static uint8_t FP[LZ_FINGERPRINT_BYTES] = {1, 2, 3};

/* Slot 0's state as a message of two stages (as a 2-rank pipeline writes it). */
static void save_msg(fixture *f, Lizard__StageState *stage, Lizard__StageState parts[2], Lizard__StageState *ptrs[2],
                     int32_t *tokens, Lizard__SequenceState *msg) {
    static uint8_t sampler[8] = {9, 8, 7};
    CHECK(lz_state_io_save(&f->m, &f->st, 0, false, stage) == LZ_OK);
    parts[0] = (Lizard__StageState)LIZARD__STAGE_STATE__INIT;
    parts[1] = (Lizard__StageState)LIZARD__STAGE_STATE__INIT;
    parts[0].layers = stage->layers, parts[0].n_layers = 1;
    parts[1].layers = stage->layers + 1, parts[1].n_layers = stage->n_layers - 1;
    ptrs[0] = &parts[0], ptrs[1] = &parts[1];
    for (int i = 0; i <= POS; i++)
        tokens[i] = i * 3;
    *msg = (Lizard__SequenceState)LIZARD__SEQUENCE_STATE__INIT;
    msg->fingerprint = (ProtobufCBinaryData){sizeof FP, FP};
    msg->position = POS;
    msg->tokens = tokens;
    msg->n_tokens = POS + 1;
    msg->has_pending = true;
    msg->sampler = (ProtobufCBinaryData){sizeof sampler, sampler};
    msg->stages = ptrs;
    msg->n_stages = 2;
}

static bool same_layers(const Lizard__SequenceState *a, const Lizard__SequenceState *b) {
    bool same = a->n_stages == b->n_stages && a->position == b->position && a->n_tokens == b->n_tokens &&
                a->has_pending == b->has_pending && memcmp(a->tokens, b->tokens, 4 * a->n_tokens) == 0;
    for (size_t i = 0; same && i < a->n_stages; i++) {
        same = a->stages[i]->n_layers == b->stages[i]->n_layers;
        for (size_t j = 0; same && j < a->stages[i]->n_layers; j++) {
            const Lizard__LayerState *x = a->stages[i]->layers[j], *y = b->stages[i]->layers[j];
            const ProtobufCBinaryData *px[4] = {&x->k, &x->v, &x->s, &x->z}, *py[4] = {&y->k, &y->v, &y->s, &y->z};
            same = x->layer == y->layer && x->kind == y->kind && x->rows == y->rows && x->elem_bytes == y->elem_bytes;
            for (int t = 0; same && t < 4; t++)
                same = px[t]->len == py[t]->len && (!px[t]->len || memcmp(px[t]->data, py[t]->data, px[t]->len) == 0);
        }
    }
    return same;
}

/* Slot 1 restored from msg equals slot 0 in every byte a message carries. */
static bool restores_exactly(fixture *f, const Lizard__SequenceState *msg) {
    Lizard__LayerState *all[64];
    size_t n = 0;
    for (size_t r = 0; r < msg->n_stages; r++)
        for (size_t j = 0; j < msg->stages[r]->n_layers && n < 64; j++)
            all[n++] = msg->stages[r]->layers[j];
    if (lz_state_reset_slot(&f->st, &f->m, 1) != LZ_OK ||
        lz_state_io_restore(&f->m, &f->st, 1, msg->position, all, n) != LZ_OK)
        return false;
    Lizard__StageState a, b;
    CHECK(lz_state_io_save(&f->m, &f->st, 0, false, &a) == LZ_OK);
    CHECK(lz_state_io_save(&f->m, &f->st, 1, false, &b) == LZ_OK);
    Lizard__StageState *pa = &a, *pb = &b;
    Lizard__SequenceState ma = *msg, mb = *msg;
    ma.stages = &pa, mb.stages = &pb, ma.n_stages = mb.n_stages = 1;
    const bool same = same_layers(&ma, &mb);
    lz_state_io_free(&a), lz_state_io_free(&b);
    return same;
}

static uint8_t *read_all(const char *path, size_t *len) {
    uint8_t *buf = NULL;
    CHECK(lz_session_read_file(path, &buf, len) == LZ_OK);
    return buf;
}

/* The file's length-delimited messages: start and end of each (header first). */
static size_t split(const uint8_t *b, size_t len, size_t *start, size_t *end, size_t max) {
    size_t n = 0;
    for (size_t p = 0; p < len && n < max; n++) {
        start[n] = p;
        uint64_t v = 0;
        for (int i = 0; p < len; i++) {
            v |= (uint64_t)(b[p] & 0x7f) << (7 * i);
            if (!(b[p++] & 0x80))
                break;
        }
        end[n] = p + v;
        p = end[n];
    }
    return n;
}

/* The file made of messages idx[0..n) of the original, then `extra` bytes. */
static void rebuild(const uint8_t *b, const size_t *start, const size_t *end, const int *idx, int n, uint8_t *out,
                    size_t *len) {
    *len = 0;
    for (int i = 0; i < n; i++) {
        memcpy(out + *len, b + start[idx[i]], end[idx[i]] - start[idx[i]]);
        *len += end[idx[i]] - start[idx[i]];
    }
}

static void refused(const uint8_t *buf, size_t len, const char *needle, const char *what) {
    lz_session_loaded l;
    lz_error_clear();
    const lz_status s = lz_session_parse(buf, len, "bad.lzs", FP, &l);
    CHECK_MSG(s == LZ_ERR_INPUT && !l.msg && strstr(lz_error_message(), "bad.lzs") &&
                  (!needle || strstr(lz_error_message(), needle)),
              "%s: status %d, '%s'", what, (int)s, lz_error_message());
    if (s == LZ_OK)
        lz_session_loaded_free(&l);
}

static bool same_bytes(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    return a && b && na == nb && memcmp(a, b, na) == 0;
}

/* A stored chunked buffer spilled to DIR and taken back: the file is exactly
 * the buffer, and what comes back restores the state. */
static void store_round_trip(fixture *f, const Lizard__SequenceState *msg, const uint8_t *mem, size_t len) {
    char dir[] = "/tmp/lz_test_chunked_store_XXXXXX", path[4096];
    CHECK(mkdtemp(dir) != NULL);
    serve_sessions s;
    CHECK(serve_sessions_init(&s, 1, dir) == LZ_OK);
    uint8_t *copy = malloc(len), *back = NULL, *file;
    memcpy(copy, mem, len);
    CHECK(serve_sessions_put(&s, "big", copy, len) == LZ_OK && s.n == 0 && s.on_disk == 1); // over budget: spilled
    snprintf(path, sizeof path, "%s/big.lzs", dir);
    size_t flen = 0, blen = 0;
    file = read_all(path, &flen);
    CHECK(same_bytes(file, flen, mem, len));
    CHECK(serve_sessions_take(&s, "big", &back, &blen) == LZ_OK && same_bytes(back, blen, mem, len));
    lz_session_loaded l;
    CHECK_MSG(back && lz_session_parse(back, blen, "big", FP, &l) == LZ_OK, "%s", lz_error_message());
    if (back && l.msg) {
        CHECK(!l.view && same_layers(msg, l.msg) && restores_exactly(f, l.msg));
        lz_session_loaded_free(&l);
    }
    free(back), free(file);
    serve_sessions_free(&s);
    // the store keeps a spilled file (sessions are durable): the test removes it, and nothing else is left
    CHECK_MSG(unlink(path) == 0 && rmdir(dir) == 0, "%s: not removed", dir);
}

/* What the serve store keeps: the file's bytes in one buffer (path is scratch). */
static void in_memory(fixture *f, Lizard__SequenceState *msg, const char *path) {
    // the buffer holds the file's bytes
    uint8_t *mem = NULL, *file, *any = NULL, *v2 = NULL;
    size_t len = 0, flen = 0, alen = 0, v2_len = 0;
    CHECK_MSG(lz_session_pack_chunked(msg, CHUNK, &mem, &len) == LZ_OK, "%s", lz_error_message());
    CHECK(lz_session_write_chunked(path, msg, CHUNK) == LZ_OK);
    file = read_all(path, &flen);
    CHECK(same_bytes(mem, len, file, flen));
    store_round_trip(f, msg, mem, len);
    mem[len / 2] ^= 0x10; // damaged in memory: refused with the session's name, nothing returned
    refused(mem, len, NULL, "flip in memory");
    refused(mem, len - 7, NULL, "cut in memory");

    // lz_session_pack_any: a version-2 message as lz_session_pack writes it, chunked when forced
    set_chunk_knob(NULL);
    CHECK(lz_session_pack(msg, &v2, &v2_len) == LZ_OK);
    CHECK(lz_session_pack_any(msg, &any, &alen) == LZ_OK && same_bytes(any, alen, v2, v2_len));
    free(any);
    set_chunk_knob("100");
    CHECK(lz_session_pack_any(msg, &any, &alen) == LZ_OK && same_bytes(any, alen, file, flen));
    set_chunk_knob(NULL);
    free(any), free(v2), free(mem), free(file);
}

static void test_chunks(void) {
    fixture f;
    CHECK_MSG(open_fixture(&f, "tiny-hybrid"), "%s", lz_error_message());
    Lizard__StageState stage, parts[2], *ptrs[2];
    int32_t tokens[POS + 1];
    Lizard__SequenceState msg;
    save_msg(&f, &stage, parts, ptrs, tokens, &msg);
    char path[] = "/tmp/test-session-chunks-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);

    // round trip: many chunks, the same records, the same state
    CHECK_MSG(lz_session_write_chunked(path, &msg, CHUNK) == LZ_OK, "%s", lz_error_message());
    lz_session_loaded l;
    CHECK_MSG(lz_session_load_file(path, FP, &l) == LZ_OK, "%s", lz_error_message());
    CHECK(!l.view && l.msg && l.msg->version == LZ_SESSION_VERSION_CHUNKED && l.msg->n_chunks > 20);
    if (l.msg) {
        CHECK(same_layers(&msg, l.msg));
        CHECK(restores_exactly(&f, l.msg));
    }
    lz_session_loaded_free(&l);

    size_t len;
    uint8_t *file = read_all(path, &len), *bad = malloc(2 * len); // room for a chunk written twice
    size_t start[4096], end[4096];
    const size_t n = split(file, len, start, end, 4096);
    CHECK_MSG(n > 20 && end[n - 1] == len, "%zu messages", n);
    for (size_t cut = 0; cut < len; cut += cut < 400 ? 1 : 37) // cut anywhere: refused
        refused(file, cut, NULL, "cut");
    for (size_t at = 0; at < len; at += at < 400 ? 1 : 53) { // a byte flipped anywhere: never a wrong state
        memcpy(bad, file, len);
        bad[at] ^= 0x10;
        lz_error_clear();
        if (lz_session_parse(bad, len, "bad.lzs", FP, &l) != LZ_OK) {
            CHECK_MSG(!l.msg && strstr(lz_error_message(), "bad.lzs"), "flip at %zu: %s", at, lz_error_message());
            continue;
        }
        CHECK_MSG(same_layers(&msg, l.msg), "flip at %zu: accepted as another state", at); // a bool's 1 -> 0x11
        lz_session_loaded_free(&l);
    }
    memcpy(bad, file, len);
    bad[end[n / 2] - 3] ^= 1; // a payload byte
    refused(bad, len, "checksum mismatch", "payload flip");

    static int idx[4096];
    for (size_t i = 0; i < n; i++)
        idx[i] = (int)i;
    size_t blen;
    rebuild(file, start, end, idx, (int)n - 1, bad, &blen);
    refused(bad, blen, "chunk", "last chunk missing");
    static int drop[4096];
    int k = 0; // chunk 5 missing
    for (size_t i = 0; i < n; i++)
        if (i != 5)
            drop[k++] = (int)i;
    rebuild(file, start, end, drop, k, bad, &blen);
    refused(bad, blen, "missing, repeated or out of order", "chunk missing");
    memcpy(drop, idx, sizeof(int) * n); // chunks 5 and 6 swapped
    drop[5] = 6, drop[6] = 5;
    rebuild(file, start, end, drop, (int)n, bad, &blen);
    refused(bad, blen, "missing, repeated or out of order", "out of order");
    memcpy(drop, idx, sizeof(int) * n); // chunk 5 twice (in place of 6)
    drop[6] = 5;
    rebuild(file, start, end, drop, (int)n, bad, &blen);
    refused(bad, blen, "missing, repeated or out of order", "duplicate");
    memcpy(drop, idx, sizeof(int) * n); // the last chunk again, after the end
    drop[n] = (int)n - 1;
    rebuild(file, start, end, drop, (int)n + 1, bad, &blen);
    refused(bad, blen, "trailing bytes", "extra chunk");
    memcpy(bad, file, len);
    bad[len] = 0;
    refused(bad, len + 1, "trailing bytes", "one byte more");
    const uint8_t other[LZ_FINGERPRINT_BYTES] = {7};
    lz_error_clear();
    CHECK_FAILS_WITH(lz_session_parse(file, len, "bad.lzs", other, &l), LZ_ERR_INPUT, "another model");
    CHECK_FAILS_WITH(lz_session_load_file(path, other, &l), LZ_ERR_INPUT, "another model");
    memcpy(bad, file, len); // a truncated file on disk
    FILE *t = fopen(path, "wb");
    CHECK(t && fwrite(bad, 1, len - 10, t) == len - 10);
    fclose(t);
    lz_error_clear();
    CHECK_FAILS_WITH(lz_session_load_file(path, FP, &l), LZ_ERR_INPUT, "truncated");

    // version 2 still: one message, read in place
    uint8_t *v2 = NULL;
    size_t v2_len = 0;
    CHECK(lz_session_pack(&msg, &v2, &v2_len) == LZ_OK);
    CHECK(lz_session_write_file(path, v2, v2_len) == LZ_OK);
    lz_error_clear();
    CHECK_MSG(lz_session_load_file(path, FP, &l) == LZ_OK, "%s", lz_error_message());
    CHECK(l.view && l.msg && l.msg->version == LZ_SESSION_VERSION && same_layers(&msg, l.msg));
    lz_session_loaded_free(&l);
    free(v2), free(bad), free(file);
    in_memory(&f, &msg, path);
    unlink(path);
    lz_state_io_free(&stage);
    close_fixture(&f);
}

/* The version-2 seed of the fuzz corpus (an earlier build's file) loads. */
static void test_old_file(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/../fuzz/corpus/session/tiny-hybrid-v2.lzs", fixtures ? fixtures : "tests/fixtures");
    lz_session_loaded l;
    lz_error_clear();
    CHECK_MSG(lz_session_load_file(path, NULL, &l) == LZ_OK, "%s", lz_error_message());
    CHECK(l.view && l.msg && l.msg->n_stages >= 1);
    lz_session_loaded_free(&l);
}

static void test_knob(void) {
    set_chunk_knob(NULL);
    CHECK(lz_session_chunk_bytes() == (size_t)256 << 20 && !lz_session_chunks_forced());
    set_chunk_knob("4096");
    CHECK(lz_session_chunk_bytes() == 4096 && lz_session_chunks_forced());
    setenv("LIZARD_SESSION_CHUNK_BYTES", "junk", 1); // refused when the knobs are read, the value kept
    CHECK(lz_knobs_load() == LZ_ERR_INPUT && strstr(lz_error_message(), "LIZARD_SESSION_CHUNK_BYTES=junk"));
    CHECK(lz_session_chunk_bytes() == 4096);
    set_chunk_knob(NULL);
}

int main(void) {
    test_chunks();
    test_old_file();
    test_knob();
    return lz_test_finish("test_session_chunks");
}
