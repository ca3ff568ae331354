/* test_safetensors.c - safetensors parsing and validation (files built in memory), sharded folders, expect(). */
#include <stdint.h>   // uint8_t, int64_t
#include <stdio.h>    // fopen, fwrite, snprintf
#include <stdlib.h>   // calloc, free, mkdtemp
#include <string.h>   // memcpy, memset, strlen, strstr
#include <sys/stat.h> // mkdir
#include <unistd.h>   // unlink, rmdir

#include "safetensors.h" // the code under test
#include "test_util.h"   // CHECK, CHECK_FAILS_WITH, lz_test_finish

enum { BUF_CAP = 1 << 16 };
static uint8_t file_buf[BUF_CAP];

/* Lays out a file image: 8-byte LE header length, header, data. Returns its size. */
static size_t make_st(uint8_t *buf, const char *header, const void *data, size_t data_len) {
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    if (data_len)
        memcpy(buf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

/* Parses `header` followed by `data_len` zero bytes as "t.safetensors". */
static lz_status parse_zeros(const char *header, size_t data_len) {
    static uint8_t zeros[4096];
    lz_st_file f;
    size_t size = make_st(file_buf, header, zeros, data_len);
    lz_status st = lz_st_parse(file_buf, size, "t.safetensors", &f);
    lz_st_close(&f);
    return st;
}

/* The data of a small valid file: b = F32 [2,2], a = BF16 [3], c = I64 scalar. */
static const char valid_header[] =
    "{\"__metadata__\": {\"format\": \"pt\"},"
    " \"b\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]},"
    " \"a\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [16, 22]},"
    " \"c\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [22, 30]}}   ";

static size_t valid_data(uint8_t *d) {
    const float b[4] = {1.0f, -2.5f, 3.0f, 0.125f};
    const uint16_t a[3] = {0x3f80, 0xc000, 0x3f00}; /* 1, -2, 0.5 */
    memcpy(d, b, 16); /* the host is little-endian, as the format */
    memcpy(d + 16, a, 6);
    const int64_t c = 42;
    memcpy(d + 22, &c, 8);
    return 30;
}

static void test_valid(void) {
    uint8_t data[64];
    size_t dlen = valid_data(data);
    size_t size = make_st(file_buf, valid_header, data, dlen);
    lz_st_file f;
    lz_error_clear();
    CHECK_MSG(lz_st_parse(file_buf, size, "t.safetensors", &f) == LZ_OK, "%s", lz_error_message());
    CHECK(f.n_tensors == 3);
    if (f.n_tensors != 3)
        return;
    CHECK(strcmp(f.tensors[0].name, "a") == 0 && strcmp(f.tensors[1].name, "b") == 0 &&
          strcmp(f.tensors[2].name, "c") == 0);
    const uint8_t *data_start = file_buf + 8 + strlen(valid_header);
    const lz_st_tensor *a = lz_st_find(&f, "a"), *b = lz_st_find(&f, "b"), *c = lz_st_find(&f, "c");
    CHECK(a && b && c && !lz_st_find(&f, "d") && !lz_st_find(&f, "__metadata__"));
    if (!a || !b || !c)
        return;
    CHECK(b->dtype == LZ_DTYPE_F32 && b->ndim == 2 && b->shape[0] == 2 && b->shape[1] == 2 && b->numel == 4);
    CHECK(b->data == data_start && b->nbytes == 16);
    CHECK(a->dtype == LZ_DTYPE_BF16 && a->numel == 3 && a->data == data_start + 16 && a->nbytes == 6);
    CHECK(c->dtype == LZ_DTYPE_I64 && c->ndim == 0 && c->numel == 1 && c->nbytes == 8);
    CHECK(strcmp(a->file, "t.safetensors") == 0);
    float out[4];
    lz_convert_to_f32(out, b->data, b->dtype, 4);
    CHECK(out[0] == 1.0f && out[1] == -2.5f && out[2] == 3.0f && out[3] == 0.125f);
    lz_convert_to_f32(out, a->data, a->dtype, 3); /* a starts at an even but not 4-aligned offset */
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f);
    int64_t cv;
    memcpy(&cv, c->data, 8);
    CHECK(cv == 42);
    lz_st_close(&f);
    CHECK(f.tensors == NULL && f.n_tensors == 0);
}

/* Zero-sized tensors share no bytes with anything; an empty header is a file with no tensors. */
static void test_edge_valid(void) {
    lz_error_clear();
    CHECK(parse_zeros("{\"e\": {\"dtype\": \"F16\", \"shape\": [0, 5], \"data_offsets\": [4, 4]},"
                      " \"x\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]}}",
                      8) == LZ_OK);
    CHECK(parse_zeros("{}", 0) == LZ_OK);
    CHECK(parse_zeros("{\"__metadata__\": {}}", 3) == LZ_OK);
    CHECK(parse_zeros("{\"x\": {\"dtype\": \"F8_E4M3\", \"shape\": [1,1,1,1,1,1,1,8], \"data_offsets\": [0, 8]}}",
                      8) == LZ_OK);
}

static void test_truncated(void) {
    lz_st_file f;
    CHECK_FAILS_WITH(lz_st_parse(file_buf, 0, "t.safetensors", &f), LZ_ERR_INPUT, "t.safetensors: file is 0 bytes");
    CHECK_FAILS_WITH(lz_st_parse((const uint8_t *)"\x10\0\0\0\0", 5, "t.safetensors", &f), LZ_ERR_INPUT,
                     "too short");
    /* a header length past the end of the file */
    size_t size = make_st(file_buf, "{}", NULL, 0);
    file_buf[0] = 200;
    CHECK_FAILS_WITH(lz_st_parse(file_buf, size, "t.safetensors", &f), LZ_ERR_INPUT,
                     "header length 200 past end of file (10 bytes)");
    file_buf[0] = 0, file_buf[7] = 0x80; /* 2^63: no overflow in the check */
    CHECK_FAILS_WITH(lz_st_parse(file_buf, size, "t.safetensors", &f), LZ_ERR_INPUT, "past end of file");
    /* the data section cut short: a valid header whose tensors need 30 bytes */
    uint8_t data[64];
    size = make_st(file_buf, valid_header, data, valid_data(data));
    CHECK_FAILS_WITH(lz_st_parse(file_buf, size - 1, "t.safetensors", &f), LZ_ERR_INPUT,
                     "tensor 'c': data_offsets [22, 30] past end of data (29 bytes)");
    /* the header itself cut short */
    CHECK_FAILS_WITH(lz_st_parse(file_buf, 20, "t.safetensors", &f), LZ_ERR_INPUT, "past end of file");
}

/* A header length over 100 MB is refused before the JSON is read. */
static void test_header_limit(void) {
    size_t size = 100000000 + 64;
    uint8_t *big = calloc(size, 1); /* zero pages: not touched */
    if (!big)
        return;
    uint64_t n = 100000001;
    for (int i = 0; i < 8; i++)
        big[i] = (uint8_t)(n >> (8 * i));
    lz_st_file f;
    CHECK_FAILS_WITH(lz_st_parse(big, size, "big.safetensors", &f), LZ_ERR_INPUT, "100 MB");
    free(big);
}

static void test_bad_json(void) {
    CHECK_FAILS_WITH(parse_zeros("{\"a\": ", 0), LZ_ERR_INPUT, "t.safetensors: header is not valid JSON");
    CHECK_FAILS_WITH(parse_zeros("[1, 2]", 0), LZ_ERR_INPUT, "header is not a JSON object");
    CHECK_FAILS_WITH(parse_zeros("{} x", 0), LZ_ERR_INPUT, "not valid JSON");
    CHECK_FAILS_WITH(parse_zeros("{\"a\": 5}", 0), LZ_ERR_INPUT, "tensor 'a': entry is not a JSON object");
    CHECK_FAILS_WITH(parse_zeros("{\"__metadata__\": [1]}", 0), LZ_ERR_INPUT, "__metadata__");
    CHECK_FAILS_WITH(parse_zeros("{\"__metadata__\": {\"k\": 1}}", 0), LZ_ERR_INPUT, "'k' is not a string");
    /* duplicate names: refused, and the message shows which */
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
                                 " \"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}",
                                 2),
                     LZ_ERR_INPUT, "duplicate tensor name or key (duplicate object key near '\"w\"'");
}

static void test_bad_entries(void) {
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4),
                     LZ_ERR_INPUT, "t.safetensors: tensor 'w': unknown dtype 'F33'");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4), LZ_ERR_INPUT,
                     "tensor 'w': missing or non-string \"dtype\"");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 4]}}", 4),
                     LZ_ERR_INPUT, "tensor 'w': \"shape\" is missing or not an array");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4),
                     LZ_ERR_INPUT, "tensor 'w': shape[0] is not a non-negative integer");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [1, 2.0], \"data_offsets\": [0, 8]}}", 8),
                     LZ_ERR_INPUT, "shape[1]");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], "
                                 "\"data_offsets\": [0, 1]}}",
                                 1),
                     LZ_ERR_INPUT, "tensor 'w': shape has 9 dims (at most 8)");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"U8\", \"shape\": [4294967296, 4294967296], "
                                 "\"data_offsets\": [0, 1]}}",
                                 1),
                     LZ_ERR_INPUT, "tensor 'w': shape overflows");
    /* numel fits in 64 bits, bytes do not */
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F64\", \"shape\": [4611686018427387904], "
                                 "\"data_offsets\": [0, 0]}}",
                                 0),
                     LZ_ERR_INPUT, "tensor 'w': data_offsets [0, 0] hold 0 bytes");
}

static void test_bad_offsets(void) {
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [500], \"data_offsets\": [10, 2010]}}",
                                 1500),
                     LZ_ERR_INPUT, "t.safetensors: tensor 'w': data_offsets [10, 2010] past end of data (1500 bytes)");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8),
                     LZ_ERR_INPUT, "tensor 'w': data_offsets [8, 4] end before begin");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 8),
                     LZ_ERR_INPUT, "tensor 'w': \"data_offsets\" must be [begin, end]");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 8),
                     LZ_ERR_INPUT, "\"data_offsets\" must be");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [\"0\", 4]}}", 8),
                     LZ_ERR_INPUT, "\"data_offsets\" must be");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 8), LZ_ERR_INPUT,
                     "\"data_offsets\" must be");
    /* size mismatch with the shape */
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 12]}}", 16),
                     LZ_ERR_INPUT, "tensor 'w': data_offsets [0, 12] hold 12 bytes, but F32 [2, 2] needs 4 elements x 4 bytes");
    CHECK_FAILS_WITH(parse_zeros("{\"w\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 16),
                     LZ_ERR_INPUT, "hold 8 bytes");
    /* overlapping ranges, in either order in the header */
    CHECK_FAILS_WITH(parse_zeros("{\"p\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                                 " \"q\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                                 12),
                     LZ_ERR_INPUT, "tensors 'p' [0, 8] and 'q' [4, 12] overlap");
    CHECK_FAILS_WITH(parse_zeros("{\"q\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [6, 8]},"
                                 " \"r\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [8, 10]},"
                                 " \"p\": {\"dtype\": \"U8\", \"shape\": [10], \"data_offsets\": [0, 10]}}",
                                 10),
                     LZ_ERR_INPUT, "overlap");
    CHECK_FAILS_WITH(parse_zeros("{\"p\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
                                 " \"q\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}",
                                 4),
                     LZ_ERR_INPUT, "overlap");
}

/* ---- files and folders ------------------------------------------------------------------- */

static char tmp_root[64];

static void write_file(const char *dir, const char *name, const void *bytes, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) {
        CHECK(fwrite(bytes, 1, len, f) == len);
        fclose(f);
    }
}

static void write_text(const char *dir, const char *name, const char *text) {
    write_file(dir, name, text, strlen(text));
}

/* A safetensors file of U8/F32 tensors: names[i] has shape [4] F32, zeros. */
static void write_shard(const char *dir, const char *file, const char *const *names, int n) {
    char header[1024];
    size_t len = (size_t)snprintf(header, sizeof header, "{");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(header + len, sizeof header - len,
                                "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [%d, %d]}",
                                i ? ", " : "", names[i], 16 * i, 16 * (i + 1));
    snprintf(header + len, sizeof header - len, "}");
    static uint8_t zeros[1024], img[4096];
    size_t size = make_st(img, header, zeros, 16 * (size_t)n);
    write_file(dir, file, img, size);
}

/* A fresh folder under tmp_root; every folder is removed at the end. */
static int n_dirs;
static char dirs[32][128];
static const char *new_dir(const char *name) {
    char *d = dirs[n_dirs++];
    snprintf(d, sizeof dirs[0], "%s/%s", tmp_root, name);
    CHECK(mkdir(d, 0700) == 0);
    return d;
}

static void remove_tree(void) {
    static const char *const files[] = {"model.safetensors", "model.safetensors.index.json",
                                        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                        "empty.safetensors"};
    char path[sizeof dirs + 64]; /* big enough that -Wformat-truncation sees no risk */
    for (int d = 0; d < n_dirs; d++) {
        for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
            snprintf(path, sizeof path, "%s/%s", dirs[d], files[i]);
            unlink(path);
        }
        CHECK_MSG(rmdir(dirs[d]) == 0, "leftover files in %s", dirs[d]);
    }
    rmdir(tmp_root);
}

static const char shard1[] = "model-00001-of-00002.safetensors", shard2[] = "model-00002-of-00002.safetensors";

static void test_open_file(void) {
    const char *d = new_dir("files");
    lz_st_file f;
    char path[512];
    snprintf(path, sizeof path, "%s/nothing.safetensors", d);
    CHECK_FAILS_WITH(lz_st_open(path, &f), LZ_ERR_IO, "nothing.safetensors: cannot open: No such file");
    write_text(d, "empty.safetensors", "");
    snprintf(path, sizeof path, "%s/empty.safetensors", d);
    CHECK_FAILS_WITH(lz_st_open(path, &f), LZ_ERR_INPUT, "empty.safetensors: file is empty");
    CHECK_FAILS_WITH(lz_st_open(d, &f), LZ_ERR_INPUT, "not a regular file");
    const char *names[] = {"x", "y"};
    write_shard(d, "model.safetensors", names, 2);
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    lz_error_clear();
    CHECK_MSG(lz_st_open(path, &f) == LZ_OK, "%s", lz_error_message());
    CHECK(f.n_tensors == 2 && f.map != NULL && lz_st_find(&f, "y") != NULL);
    lz_st_close(&f);
}

static void test_single_folder(void) {
    const char *d = new_dir("single");
    lz_weights w;
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "single: no model.safetensors or model.safetensors.index.json");
    const char *names[] = {"model.norm.weight", "lm_head.weight", "pos"};
    write_shard(d, "model.safetensors", names, 3);
    lz_error_clear();
    CHECK_MSG(lz_weights_open(d, &w) == LZ_OK, "%s", lz_error_message());
    CHECK(w.n_files == 1 && w.n_tensors == 3);
    CHECK(lz_weights_find(&w, "model.norm.weight") && !lz_weights_find(&w, "model.norm"));
    const lz_st_tensor *t = NULL;
    const int64_t four[1] = {4}, wrong[2] = {2, 2}, five[1] = {5};
    CHECK(lz_weights_expect(&w, "lm_head.weight", 1, four, &t) == LZ_OK && t && t->numel == 4);
    CHECK_FAILS_WITH(lz_weights_expect(&w, "lm_head.weight", 2, wrong, &t), LZ_ERR_INPUT,
                     "tensor 'lm_head.weight' has shape [4], expected [2, 2]");
    CHECK_FAILS_WITH(lz_weights_expect(&w, "lm_head.weight", 1, five, &t), LZ_ERR_INPUT,
                     "has shape [4], expected [5]");
    CHECK_FAILS_WITH(lz_weights_expect(&w, "model.layers.0.mlp.up_proj.weight", 1, four, &t), LZ_ERR_INPUT,
                     "single: missing tensor 'model.layers.0.mlp.up_proj.weight'");
    lz_weights_close(&w);
    /* a non-float tensor: opens, but is refused as a weight */
    uint8_t img[256];
    int64_t ids[2] = {1, 2};
    size_t size = make_st(img, "{\"pos\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [0, 16]}}", ids, 16);
    write_file(d, "model.safetensors", img, size);
    const int64_t two[1] = {2};
    lz_error_clear();
    CHECK_MSG(lz_weights_open(d, &w) == LZ_OK, "%s", lz_error_message());
    CHECK_FAILS_WITH(lz_weights_expect(&w, "pos", 1, two, &t), LZ_ERR_INPUT,
                     "tensor 'pos' has dtype I64, expected F32, F16 or BF16");
    lz_weights_close(&w);
}

static const char index_ok[] =
    "{\"metadata\": {\"total_size\": 48}, \"weight_map\": {"
    "\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\","
    " \"c\": \"model-00002-of-00002.safetensors\"}}";

static void test_sharded(void) {
    const char *d = new_dir("sharded");
    const char *s1[] = {"b", "a"}, *s2[] = {"c"};
    write_shard(d, shard1, s1, 2);
    write_shard(d, shard2, s2, 1);
    write_text(d, "model.safetensors.index.json", index_ok);
    lz_weights w;
    lz_error_clear();
    CHECK_MSG(lz_weights_open(d, &w) == LZ_OK, "%s", lz_error_message());
    CHECK(w.n_files == 2 && w.n_tensors == 3);
    const lz_st_tensor *c = lz_weights_find(&w, "c");
    CHECK(c && strstr(c->file, shard2) != NULL);
    CHECK(lz_weights_find(&w, "a") && strstr(lz_weights_find(&w, "a")->file, shard1));
    CHECK(!lz_weights_find(&w, "d"));
    for (size_t i = 1; i < w.n_tensors; i++)
        CHECK(strcmp(w.index[i - 1]->name, w.index[i]->name) < 0);
    lz_weights_close(&w);
}

static void test_sharded_errors(void) {
    const char *d = new_dir("sharded_bad");
    const char *s1[] = {"a", "b"}, *s2[] = {"c"};
    lz_weights w;
    write_shard(d, shard1, s1, 2);
    /* the second shard is missing */
    write_text(d, "model.safetensors.index.json", index_ok);
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_IO, "model-00002-of-00002.safetensors: cannot open");
    write_shard(d, shard2, s2, 1);
    /* a tensor listed in the index but absent from its shard */
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
               " \"c\": \"model-00001-of-00002.safetensors\"}}");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT,
                     "tensor 'c' is listed in model.safetensors.index.json but missing from shard "
                     "'model-00001-of-00002.safetensors'");
    /* shard names that leave the folder */
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT,
                     "tensor 'a': shard name '../model-00001-of-00002.safetensors' is not a plain file name");
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"sub/x.safetensors\"}}");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "'sub/x.safetensors' is not a plain file name");
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"..\"}}");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "not a plain file name");
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": 3}}");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "tensor 'a' is not a string");
    /* index not JSON, no weight_map, empty weight_map */
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": ");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "model.safetensors.index.json:");
    write_text(d, "model.safetensors.index.json", "{\"metadata\": {}}");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "no \"weight_map\" object");
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": {}}");
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "\"weight_map\" is empty");
    /* one name in two shards */
    const char *dup[] = {"c", "a"};
    write_shard(d, shard2, dup, 2);
    write_text(d, "model.safetensors.index.json", index_ok);
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "tensor 'a' is in both");
    /* a bad shard file: the error names it */
    write_file(d, shard2, "\x02\0\0\0\0\0\0\0{]", 10);
    CHECK_FAILS_WITH(lz_weights_open(d, &w), LZ_ERR_INPUT, "model-00002-of-00002.safetensors: header is not valid JSON");
    CHECK(w.n_files == 0 && w.files == NULL && w.index == NULL); /* closed on failure */
}

int main(void) {
    test_valid();
    test_edge_valid();
    test_truncated();
    test_header_limit();
    test_bad_json();
    test_bad_entries();
    test_bad_offsets();
    snprintf(tmp_root, sizeof tmp_root, "/tmp/lz_test_st_XXXXXX");
    CHECK(mkdtemp(tmp_root) != NULL);
    test_open_file();
    test_single_folder();
    test_sharded();
    test_sharded_errors();
    remove_tree();
    return lz_test_finish("test_safetensors");
}
