/* test_init.c - `lizard init`: the tiny-hybrid folder read back through the
 * project's own readers (config.c, safetensors.c), determinism of the random
 * weights, the streaming/sharded safetensors writer, the BPE tokenizer file,
 * the big presets' sizes, and flag errors. */
#include <ftw.h>      // nftw, FTW_DEPTH, FTW_PHYS
#include <stdarg.h>   // va_list
#include <stdint.h>   // uint8_t, int64_t
#include <stdio.h>    // fopen, fread, snprintf
#include <stdlib.h>   // malloc, free, mkdtemp
#include <string.h>   // memcmp, strcmp, strlen
#include <sys/stat.h> // stat, mkdir
#include <unistd.h>   // access, rmdir, unlink

#include <jansson.h>  // json_load_file

#include "bpe_builder.h"        // lz_bpe_byte_to_codepoint
#include "commands.h"           // lz_cmd_init (the code under test)
#include "config.h"             // lz_config_load
#include "model_presets.h"      // lz_preset_find, lz_preset_tensors
#include "safetensors.h"        // lz_weights_open, lz_weights_expect
#include "safetensors_writer.h" // lz_stw_* (the code under test)
#include "test_util.h"          // CHECK, CHECK_FAILS_WITH, lz_test_finish

static char root[] = "/tmp/lizard_test_init_XXXXXX";

/* root/name into a static buffer (one use at a time per slot). */
static const char *path_in(int slot, const char *name) {
    static char buf[4][512];
    snprintf(buf[slot], sizeof buf[slot], "%s/%s", root, name);
    return buf[slot];
}

/* lz_cmd_init("init", args..., NULL). */
static lz_status run_init(const char *first, ...) {
    char *argv[32] = {"init"};
    int argc = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    lz_error_clear();
    lz_status st = lz_cmd_init(argc, argv);
    if (st != LZ_OK)
        fprintf(stderr, "(lz_cmd_init said: %s)\n", lz_error_message());
    return st;
}

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*size ? *size : 1);
    if (buf && fread(buf, 1, *size, f) != *size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* 1 equal, 0 different, -1 unreadable. */
static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    uint8_t *x = read_all(a, &na), *y = read_all(b, &nb);
    int r = (!x || !y) ? -1 : (na == nb && memcmp(x, y, na) == 0);
    free(x);
    free(y);
    return r;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* dir/name into buf; a path that does not fit fails the check. */
static const char *join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    CHECK(n > 0 && (size_t)n < cap);
    return buf;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* ---- tiny-hybrid, read back ------------------------------------------------------ */

static void check_config(const char *dir) {
    lz_config c;
    lz_error_clear();
    lz_status st = lz_config_load(dir, &c);
    CHECK_MSG(st == LZ_OK, "%s", lz_error_message());
    if (st != LZ_OK)
        return;
    CHECK(c.vocab_size == 512 && c.hidden_size == 128 && c.intermediate_size == 344);
    CHECK(c.num_hidden_layers == 4 && c.num_attention_heads == 4 && c.num_key_value_heads == 2);
    CHECK(c.head_dim == 32 && c.max_position_embeddings == 4096 && !c.tie_word_embeddings);
    CHECK_NEAR(c.rms_norm_eps, 1e-5, 1e-12);
    CHECK(c.rope.type == LZ_ROPE_DEFAULT);
    CHECK_NEAR(c.rope.theta, 10000.0, 0);
    CHECK(c.bos_token_id == 510 && c.n_eos == 1 && c.eos_token_ids[0] == 511);
    CHECK(c.has_lizard);
    CHECK(c.lizard.feature_dim == 16 && c.lizard.feature_map == LZ_FMAP_SOFTMAX);
    CHECK(c.lizard.window_size == 16 && c.lizard.num_meta_tokens == 4 && c.lizard.gla_normalize);
    CHECK(c.softmax_layer[0] && !c.softmax_layer[1] && c.softmax_layer[2] && !c.softmax_layer[3]);
    CHECK(lz_config_count_softmax(&c) == 2);
}

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[3];
} expected_tensor;

/* The tiny-hybrid list written out by hand from docs/model-format.md: 9 teacher
 * tensors per layer, 5 Lizard tensors in every layer (tiny-hybrid keeps them
 * in its softmax layers too), embed, final norm, lm_head. */
static int tiny_hybrid_expected(expected_tensor *e) {
    int n = 0;
    e[n++] = (expected_tensor){"model.embed_tokens.weight", 2, {512, 128}};
    for (int l = 0; l < 4; l++) {
        static const struct {
            const char *suffix;
            int ndim;
            int64_t shape[3];
        } per_layer[] = {
            {"input_layernorm.weight", 1, {128}},
            {"self_attn.q_proj.weight", 2, {128, 128}},
            {"self_attn.k_proj.weight", 2, {64, 128}},
            {"self_attn.v_proj.weight", 2, {64, 128}},
            {"self_attn.o_proj.weight", 2, {128, 128}},
            {"self_attn.feature_map_q.weight", 3, {1, 32, 16}},
            {"self_attn.feature_map_k.weight", 3, {2, 32, 16}},
            {"self_attn.gate.weight", 2, {1, 128}},
            {"self_attn.meta_logits", 1, {4}},
            {"self_attn.window_alpha", 1, {1}},
            {"post_attention_layernorm.weight", 1, {128}},
            {"mlp.gate_proj.weight", 2, {344, 128}},
            {"mlp.up_proj.weight", 2, {344, 128}},
            {"mlp.down_proj.weight", 2, {128, 344}},
        };
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
            snprintf(e[n].name, sizeof e[n].name, "model.layers.%d.%s", l, per_layer[i].suffix);
            e[n].ndim = per_layer[i].ndim;
            memcpy(e[n].shape, per_layer[i].shape, sizeof e[n].shape);
            n++;
        }
    }
    e[n++] = (expected_tensor){"model.norm.weight", 1, {128}};
    e[n++] = (expected_tensor){"lm_head.weight", 2, {512, 128}};
    return n;
}

static float f32_at(const lz_st_tensor *t, size_t i) {
    float v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, sizeof v);
    return v;
}

static void check_values(const lz_weights *w) {
    const lz_st_tensor *alpha = lz_weights_find(w, "model.layers.1.self_attn.window_alpha");
    const lz_st_tensor *norm = lz_weights_find(w, "model.layers.3.input_layernorm.weight");
    const lz_st_tensor *q = lz_weights_find(w, "model.layers.0.self_attn.q_proj.weight");
    CHECK(alpha && alpha->dtype == LZ_DTYPE_F32 && f32_at(alpha, 0) == 1.0f);
    if (norm)
        for (size_t i = 0; i < 128; i++)
            CHECK_MSG(f32_at(norm, i) > 0.9f && f32_at(norm, i) < 1.1f, "norm[%zu] = %g", i, f32_at(norm, i));
    if (q) { /* uniform, std 1/sqrt(128): |v| <= sqrt(3)/sqrt(128) ~ 0.153, variance ~ 1/128 */
        double sum2 = 0;
        for (size_t i = 0; i < (size_t)q->numel; i++) {
            float v = f32_at(q, i);
            CHECK_MSG(v > -0.16f && v < 0.16f, "q[%zu] = %g", i, v);
            sum2 += (double)v * v;
        }
        CHECK_NEAR(sum2 / (double)q->numel, 1.0 / 128, 0.1 / 128);
    }
}

static void check_tensors(const char *dir) {
    static expected_tensor e[128];
    int n = tiny_hybrid_expected(e);
    lz_weights w;
    lz_error_clear();
    lz_status st = lz_weights_open(dir, &w);
    CHECK_MSG(st == LZ_OK, "%s", lz_error_message());
    if (st != LZ_OK)
        return;
    CHECK_MSG(w.n_tensors == (size_t)n, "%zu tensors, expected %d", w.n_tensors, n);
    for (int i = 0; i < n; i++) {
        const lz_st_tensor *t = NULL;
        lz_error_clear();
        CHECK_MSG(lz_weights_expect(&w, e[i].name, e[i].ndim, e[i].shape, &t) == LZ_OK, "%s: %s", e[i].name,
                  lz_error_message());
    }
    check_values(&w);
    lz_weights_close(&w);
}

/* The header: its length a multiple of 8, JSON first, spaces after. */
static void check_header(const char *file) {
    size_t size = 0;
    uint8_t *b = read_all(file, &size);
    CHECK(b && size > 8);
    if (!b || size <= 8)
        return;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | b[i];
    CHECK(n % 8 == 0 && n + 8 <= size && b[8] == '{');
    CHECK(memmem(b + 8, n, "\"__metadata__\":{\"format\":\"pt\"}", 30) != NULL);
    free(b);
}

/* ---- tokenizer files ------------------------------------------------------------------ */

static void check_byte_map(void) {
    CHECK(lz_bpe_byte_to_codepoint('A') == 'A' && lz_bpe_byte_to_codepoint(255) == 255);
    CHECK(lz_bpe_byte_to_codepoint(0) == 256 && lz_bpe_byte_to_codepoint(' ') == 0x120);
    CHECK(lz_bpe_byte_to_codepoint(127) == 289 && lz_bpe_byte_to_codepoint(173) == 323);
}

/* Every merge's parts and its result are in the vocabulary, as HF tokenizers requires. */
static void check_merges(json_t *vocab, json_t *merges) {
    CHECK(json_array_size(merges) >= 254);
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
        CHECK_MSG(json_array_size(m) == 2 && a && b, "merge %zu is not a pair of strings", i);
        if (!a || !b)
            continue;
        char joined[1024];
        if (snprintf(joined, sizeof joined, "%s%s", a, b) >= (int)sizeof joined)
            continue; /* no token is that long: the vocab check below would fail anyway */
        CHECK_MSG(json_object_get(vocab, a) && json_object_get(vocab, b) && json_object_get(vocab, joined),
                  "merge %zu (%s, %s) outside the vocab", i, a, b);
    }
}

static void check_tokenizer(const char *dir) {
    char path[1024];
    json_error_t err;
    json_t *tok = json_load_file(join(path, sizeof path, dir, "tokenizer.json"), 0, &err);
    CHECK_MSG(tok != NULL, "%s: %s", path, err.text);
    if (!tok)
        return;
    json_t *model = json_object_get(tok, "model"), *added = json_object_get(tok, "added_tokens");
    json_t *vocab = json_object_get(model, "vocab");
    CHECK(strcmp(json_string_value(json_object_get(model, "type")), "BPE") == 0);
    CHECK_MSG(json_object_size(vocab) + json_array_size(added) == 512, "%zu + %zu", json_object_size(vocab),
              json_array_size(added));
    /* ids 0..509 each used once; byte tokens at id = byte value */
    static char seen[512];
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        json_int_t id = json_integer_value(v);
        CHECK_MSG(id >= 0 && id < 510 && !seen[id], "token %s has id %lld", key, (long long)id);
        if (id >= 0 && id < 510)
            seen[id] = 1;
    }
    CHECK(json_integer_value(json_object_get(vocab, "A")) == 'A');
    CHECK(json_integer_value(json_object_get(vocab, "\xC4\xA0")) == ' '); /* "Ġ" */
    json_t *bos = json_array_get(added, 0), *eos = json_array_get(added, 1);
    CHECK(json_integer_value(json_object_get(bos, "id")) == 510 && json_is_true(json_object_get(bos, "special")));
    CHECK(strcmp(json_string_value(json_object_get(bos, "content")), "<|begin_of_text|>") == 0);
    CHECK(json_integer_value(json_object_get(eos, "id")) == 511);
    CHECK(strcmp(json_string_value(json_object_get(eos, "content")), "<|end_of_text|>") == 0);
    CHECK(json_is_true(json_object_get(model, "ignore_merges")));
    check_merges(vocab, json_object_get(model, "merges"));
    json_decref(tok);

    json_t *cfg = json_load_file(join(path, sizeof path, dir, "tokenizer_config.json"), 0, &err);
    CHECK(cfg && strcmp(json_string_value(json_object_get(cfg, "eos_token")), "<|end_of_text|>") == 0);
    json_decref(cfg);
    json_t *gen = json_load_file(join(path, sizeof path, dir, "generation_config.json"), 0, &err);
    CHECK(gen && json_integer_value(json_object_get(gen, "bos_token_id")) == 510);
    CHECK(gen && json_integer_value(json_object_get(gen, "eos_token_id")) == 511);
    json_decref(gen);
}

/* ---- determinism, dtypes, other tiny presets ----------------------------------------- */

static void check_determinism(void) {
    CHECK(run_init("--config", "tiny-hybrid", "--out", path_in(1, "b"), NULL) == LZ_OK);
    CHECK(run_init("--config", "tiny-hybrid", "--out", path_in(2, "c"), "--seed", "1", NULL) == LZ_OK);
    CHECK(same_file(path_in(0, "a/model.safetensors"), path_in(1, "b/model.safetensors")) == 1);
    CHECK(same_file(path_in(0, "a/tokenizer.json"), path_in(1, "b/tokenizer.json")) == 1);
    CHECK(same_file(path_in(0, "a/config.json"), path_in(1, "b/config.json")) == 1);
    CHECK(same_file(path_in(0, "a/model.safetensors"), path_in(2, "c/model.safetensors")) == 0);
}

/* A tensor's values depend on (seed, name) only: the teacher's projections
 * equal the hybrid's, and bf16 is the f32 values rounded. */
static void check_presets_share_weights(void) {
    CHECK(run_init("--config", "tiny-teacher", "--out", path_in(1, "teacher"), NULL) == LZ_OK);
    CHECK(run_init("--config", "tiny-lizard", "--out", path_in(2, "lizard"), "--dtype", "bf16", NULL) == LZ_OK);
    lz_weights h, t, z;
    CHECK(lz_weights_open(path_in(0, "a"), &h) == LZ_OK);
    CHECK(lz_weights_open(path_in(1, "teacher"), &t) == LZ_OK);
    CHECK(lz_weights_open(path_in(2, "lizard"), &z) == LZ_OK);
    CHECK(t.n_tensors == 59 - 20 && z.n_tensors == 59);
    CHECK(lz_weights_find(&t, "model.layers.1.self_attn.gate.weight") == NULL);
    const lz_st_tensor *hq = lz_weights_find(&h, "model.layers.2.mlp.up_proj.weight");
    const lz_st_tensor *tq = lz_weights_find(&t, "model.layers.2.mlp.up_proj.weight");
    const lz_st_tensor *zq = lz_weights_find(&z, "model.layers.2.mlp.up_proj.weight");
    CHECK(hq && tq && zq && hq->nbytes == tq->nbytes && memcmp(hq->data, tq->data, hq->nbytes) == 0);
    CHECK(zq && zq->dtype == LZ_DTYPE_BF16);
    if (hq && zq && zq->dtype == LZ_DTYPE_BF16) {
        float got[8];
        lz_convert_to_f32(got, zq->data, LZ_DTYPE_BF16, 8);
        for (int i = 0; i < 8; i++)
            CHECK_NEAR(got[i], f32_at(hq, (size_t)i), 0.004 * fabs(f32_at(hq, (size_t)i)) + 1e-6);
    }
    lz_config c;
    CHECK(lz_config_load(path_in(2, "lizard"), &c) == LZ_OK && c.has_lizard && lz_config_count_softmax(&c) == 0);
    CHECK(lz_config_load(path_in(1, "teacher"), &c) == LZ_OK && !c.has_lizard);
    lz_weights_close(&h);
    lz_weights_close(&t);
    lz_weights_close(&z);
}

/* ---- flags ----------------------------------------------------------------------------- */

static void check_bad_flags(void) {
    CHECK_FAILS_WITH(run_init("--config", "tiny-nope", "--out", path_in(1, "x"), NULL), LZ_ERR_INPUT, "--config");
    CHECK_FAILS_WITH(run_init("--config", "tiny-nope", "--out", path_in(1, "x"), NULL), LZ_ERR_INPUT, "tiny-hybrid");
    CHECK(!exists(path_in(1, "x")));
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", "--out", path_in(0, "a"), NULL), LZ_ERR_INPUT, "--out");
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", NULL), LZ_ERR_INPUT, "--out");
    CHECK_FAILS_WITH(run_init("--out", path_in(1, "x"), NULL), LZ_ERR_INPUT, "--config");
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", "--out", path_in(1, "x"), "--dtype", "f8", NULL),
                     LZ_ERR_INPUT, "--dtype");
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", "--out", path_in(1, "x"), "--seed", "-1", NULL),
                     LZ_ERR_INPUT, "--seed");
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", "--out", path_in(1, "x"), "--bogus", NULL), LZ_ERR_INPUT,
                     "--bogus");
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", "--out", "", NULL), LZ_ERR_INPUT, "--out");
    /* a file where the folder should be */
    FILE *f = fopen(path_in(1, "plain_file"), "w");
    if (f)
        fclose(f);
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", "--out", path_in(1, "plain_file"), NULL), LZ_ERR_INPUT,
                     "--out");
    CHECK(run_init("--help", NULL) == LZ_OK);
}

/* --force over a folder holding a sharded model and a stray file: the old
 * model files go, the stray file stays, the new model reads back. */
static void check_force(void) {
    const char *dir = path_in(1, "forced");
    mkdir(dir, 0755);
    static const char *const stale[] = {"model-00001-of-00002.safetensors", "model.safetensors.index.json",
                                        ".model-00002-of-00002.safetensors.tmp", "notes.txt"};
    for (int i = 0; i < 4; i++) {
        char p[1024];
        FILE *f = fopen(join(p, sizeof p, dir, stale[i]), "w");
        if (f)
            fclose(f);
    }
    CHECK_FAILS_WITH(run_init("--config", "tiny-hybrid", "--out", dir, NULL), LZ_ERR_INPUT, "--force");
    CHECK(run_init("--config", "tiny-hybrid", "--out", dir, "--force", NULL) == LZ_OK);
    CHECK(!exists(path_in(2, "forced/model-00001-of-00002.safetensors")));
    CHECK(!exists(path_in(2, "forced/model.safetensors.index.json")));
    CHECK(!exists(path_in(2, "forced/.model-00002-of-00002.safetensors.tmp")));
    CHECK(exists(path_in(2, "forced/notes.txt")));
    CHECK(same_file(path_in(0, "a/model.safetensors"), path_in(2, "forced/model.safetensors")) == 1);
}

/* ---- the writer on its own ----------------------------------------------------------- */

static const lz_stw_tensor small[] = {
    {"t0", LZ_DTYPE_F32, 2, {4, 4}},  /* 64 bytes */
    {"t1", LZ_DTYPE_F32, 1, {10}},    /* 40 */
    {"t2", LZ_DTYPE_F32, 2, {3, 5}},  /* 60 */
    {"t3", LZ_DTYPE_BF16, 1, {2}},    /* 4 */
    {"t4", LZ_DTYPE_F32, 2, {1, 1}},  /* 4 */
};
enum { N_SMALL = sizeof small / sizeof small[0] };

/* Byte j of tensor i is (i * 37 + j) mod 251. */
static lz_status fill_pattern(void *ctx, const lz_stw_tensor *t, uint64_t offset, void *buf, size_t nbytes) {
    (void)ctx;
    size_t i = (size_t)(t - small);
    for (size_t j = 0; j < nbytes; j++)
        ((uint8_t *)buf)[j] = (uint8_t)((i * 37 + offset + j) % 251);
    return LZ_OK;
}

static void check_pattern(const lz_weights *w) {
    for (size_t i = 0; i < N_SMALL; i++) {
        const lz_st_tensor *t = lz_weights_find(w, small[i].name);
        CHECK_MSG(t && t->nbytes == lz_stw_tensor_bytes(&small[i]), "%s", small[i].name);
        for (size_t j = 0; t && j < t->nbytes; j++)
            CHECK(((const uint8_t *)t->data)[j] == (uint8_t)((i * 37 + j) % 251));
    }
}

static void check_sharded_writer(void) {
    lz_stw_shard *shards = NULL;
    size_t n = 0;
    CHECK(lz_stw_plan_shards(small, N_SMALL, 100, &shards, &n) == LZ_OK);
    /* {t0} | {t1, t2} (exactly 100) | {t3, t4} */
    CHECK(n == 3 && shards[0].count == 1 && shards[1].count == 2 && shards[1].bytes == 100 && shards[2].first == 3);
    free(shards);

    const char *dir = path_in(1, "sharded");
    mkdir(dir, 0755);
    CHECK(lz_stw_write_model(dir, small, N_SMALL, 100, fill_pattern, NULL) == LZ_OK);
    CHECK(exists(path_in(2, "sharded/model-00001-of-00003.safetensors")));
    CHECK(exists(path_in(2, "sharded/model-00003-of-00003.safetensors")));
    CHECK(exists(path_in(2, "sharded/model.safetensors.index.json")));
    CHECK(!exists(path_in(2, "sharded/model.safetensors")));
    json_t *index = json_load_file(path_in(2, "sharded/model.safetensors.index.json"), 0, NULL);
    CHECK(index && json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")) == 172);
    CHECK(index && strcmp(json_string_value(json_object_get(json_object_get(index, "weight_map"), "t2")),
                          "model-00002-of-00003.safetensors") == 0);
    json_decref(index);
    lz_weights w;
    lz_error_clear();
    lz_status st = lz_weights_open(dir, &w);
    CHECK_MSG(st == LZ_OK, "%s", lz_error_message());
    if (st == LZ_OK) {
        CHECK(w.n_files == 3 && w.n_tensors == N_SMALL);
        check_pattern(&w);
        lz_weights_close(&w);
    }
    /* Rewritten as one file: the index goes with the old layout. */
    CHECK(lz_stw_write_model(dir, small, N_SMALL, 0, fill_pattern, NULL) == LZ_OK);
    CHECK(exists(path_in(2, "sharded/model.safetensors")));
    CHECK(!exists(path_in(2, "sharded/model.safetensors.index.json")));
    if (lz_weights_open(dir, &w) == LZ_OK) {
        CHECK(w.n_files == 1);
        check_pattern(&w);
        lz_weights_close(&w);
    }
}

/* Byte counts are enforced; an unfinished file never takes its final name. */
static void check_writer_errors(void) {
    const char *path = path_in(1, "partial.safetensors");
    lz_st_writer *w = NULL;
    static uint8_t bytes[128];
    CHECK(lz_stw_create(path, small, 2, &w) == LZ_OK);
    if (!w)
        return;
    CHECK(lz_stw_header_bytes(w) % 8 == 0);
    CHECK_FAILS_WITH(lz_stw_write(w, bytes, 65), LZ_ERR_INTERNAL, "t0");
    CHECK(lz_stw_write(w, bytes, 60) == LZ_OK && lz_stw_write(w, bytes, 4) == LZ_OK); /* t0 done */
    CHECK(lz_stw_write(w, bytes, 8) == LZ_OK);
    CHECK_FAILS_WITH(lz_stw_finish(w), LZ_ERR_INTERNAL, "t1");
    CHECK(!exists(path));
    CHECK(exists(path_in(2, ".partial.safetensors.tmp")));
    lz_stw_abort(w);
    CHECK(!exists(path) && !exists(path_in(2, ".partial.safetensors.tmp")));

    static const lz_stw_tensor dup[] = {{"x", LZ_DTYPE_F32, 1, {1}}, {"x", LZ_DTYPE_F32, 1, {2}}};
    w = NULL;
    CHECK_FAILS_WITH(lz_stw_create(path, dup, 2, &w), LZ_ERR_INTERNAL, "x");
    CHECK(w == NULL && !exists(path));
    /* a folder that does not exist: the error names the file */
    CHECK_FAILS_WITH(lz_stw_create("/nonexistent-lizard-dir/m.safetensors", small, 1, &w), LZ_ERR_IO,
                     "/nonexistent-lizard-dir/.m.safetensors.tmp");
}

/* ---- the big presets, without writing them ------------------------------------------- */

static uint64_t preset_params(const char *name, uint64_t *bytes, size_t *n_shards) {
    const lz_model_preset *p = lz_preset_find(name);
    lz_tensor_list list;
    CHECK_MSG(p && lz_preset_tensors(p, p->dtype, &list) == LZ_OK, "%s", name);
    if (!p)
        return 0;
    uint64_t params = lz_tensor_list_params(&list);
    *bytes = lz_tensor_list_bytes(&list);
    lz_stw_shard *shards = NULL;
    CHECK(lz_stw_plan_shards(list.tensors, list.n, p->max_shard_bytes, &shards, n_shards) == LZ_OK);
    for (size_t k = 0; shards && k < *n_shards; k++)
        CHECK(shards[k].bytes <= p->max_shard_bytes);
    free(shards);
    lz_tensor_list_free(&list);
    return params;
}

static void check_big_presets(void) {
    uint64_t bytes = 0;
    size_t shards = 0;
    /* The published parameter counts of LLaMA-3-8B and -70B. */
    CHECK(preset_params("llama3-8b-teacher", &bytes, &shards) == 8030261248ULL);
    CHECK(bytes == 2 * 8030261248ULL && shards == 4);
    CHECK(preset_params("llama3-70b-teacher", &bytes, &shards) == 70553706496ULL);
    CHECK(bytes == 2 * 70553706496ULL && shards >= 29);
    /* hybrid: Lizard tensors in the odd layers only; [8, 128, 128] per-kv-head phi_k */
    const lz_model_preset *p = lz_preset_find("llama3-8b-hybrid");
    CHECK(p && p->rope.type == LZ_ROPE_LLAMA3 && p->rope.factor == 8.0 && p->n_eos == 2);
    CHECK(p && !lz_preset_has_lizard_tensors(p, 0) && lz_preset_has_lizard_tensors(p, 1));
    CHECK(p && lz_preset_is_softmax_layer(p, 30) && !lz_preset_is_softmax_layer(p, 31));
    const lz_model_preset *z = lz_preset_find("llama3-70b-lizard");
    CHECK(z && z->num_hidden_layers == 80 && lz_preset_has_lizard_tensors(z, 0) && z->feature_map_k_heads == 8);
    const lz_model_preset *t = lz_preset_find("tiny-hybrid");
    CHECK(t && lz_preset_is_softmax_layer(t, 0) && lz_preset_has_lizard_tensors(t, 0));
}

/* The big presets' config.json, read back by config.c (weights not written). */
static void check_big_config(void) {
    const char *dir = path_in(1, "cfg70b");
    mkdir(dir, 0755);
    const lz_model_preset *p = lz_preset_find("llama3-70b-hybrid");
    CHECK(p && lz_preset_write_config(p, p->dtype, dir) == LZ_OK);
    CHECK(p && lz_preset_write_generation_config(p, dir) == LZ_OK);
    lz_config c;
    lz_error_clear();
    lz_status st = lz_config_load(dir, &c);
    CHECK_MSG(st == LZ_OK, "%s", lz_error_message());
    if (st != LZ_OK)
        return;
    CHECK(c.vocab_size == 128256 && c.hidden_size == 8192 && c.intermediate_size == 28672);
    CHECK(c.num_hidden_layers == 80 && c.num_attention_heads == 64 && c.num_key_value_heads == 8);
    CHECK(c.head_dim == 128 && c.max_position_embeddings == 131072 && !c.tie_word_embeddings);
    CHECK(c.rope.type == LZ_ROPE_LLAMA3 && c.rope.theta == 500000.0 && c.rope.factor == 8.0);
    CHECK(c.rope.low_freq_factor == 1.0 && c.rope.high_freq_factor == 4.0);
    CHECK(c.rope.original_max_position_embeddings == 8192);
    CHECK(c.bos_token_id == 128000 && c.n_eos == 2 && c.eos_token_ids[0] == 128001 && c.eos_token_ids[1] == 128009);
    CHECK(c.has_lizard && c.lizard.feature_dim == 128 && c.lizard.window_size == 128);
    CHECK(lz_config_count_softmax(&c) == 40 && c.softmax_layer[78] && !c.softmax_layer[79]);
    json_t *gen = json_load_file(path_in(2, "cfg70b/generation_config.json"), 0, NULL);
    CHECK(gen && json_array_size(json_object_get(gen, "eos_token_id")) == 2);
    json_decref(gen);
}

int main(void) {
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    /* tiny-hybrid into a folder that does not exist yet */
    lz_status st = run_init("--config", "tiny-hybrid", "--out", path_in(0, "a"), NULL);
    CHECK(st == LZ_OK);
    if (st == LZ_OK) {
        check_config(path_in(0, "a"));
        check_tensors(path_in(0, "a"));
        check_header(path_in(0, "a/model.safetensors"));
        check_tokenizer(path_in(0, "a"));
        check_determinism();
        check_presets_share_weights();
        check_force();
    }
    check_byte_map();
    check_bad_flags();
    check_sharded_writer();
    check_writer_errors();
    check_big_presets();
    check_big_config();
    nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return lz_test_finish("test_init");
}
