/* cmd_init.c - `lizard init`: writes a random-weight model folder in the
 * checkpoint format (docs/model-format.md) from a named preset.
 *
 *   lizard init --config PRESET --out DIR [--seed N] [--dtype f32|bf16|f16|fp8] [--force]
 *
 * Weights are streamed to disk through a bounded buffer (the 70B presets are
 * ~141 GB), each tensor drawn from its own generator seeded by (seed, tensor
 * name): a tensor's values depend on neither the write order nor the preset,
 * so tiny-teacher and tiny-hybrid with one seed share their teacher weights.
 * config.json is written last: a folder without it is visibly unfinished. */
#include "commands.h"

#include <dirent.h>             // opendir, readdir, closedir
#include <errno.h>              // errno, ENOENT, EEXIST
#include <inttypes.h>           // PRIu64
#include <math.h>               // sqrt
#include <stdbool.h>            // bool
#include <stdio.h>              // fprintf, snprintf
#include <stdlib.h>             // malloc, free, abort
#include <string.h>             // strcmp, strlen, strncmp, strerror, memcpy
#include <strings.h>            // strcasecmp
#include <sys/stat.h>           // stat, mkdir
#include <sys/statvfs.h>        // statvfs
#include "clock.h"              // lz_now_seconds
#include "hash.h"               // lz_fnv1a
#include <unistd.h>             // unlink, sysconf
#include "thread_slices.h"      // lz_run_slices, LZ_MAX_SLICES

#include "bpe_builder.h"        // lz_bpe_train, lz_bpe_write_files
#include "cli_options.h"        // lz_option, lz_parse_options, lz_print_usage
#include "dtype.h"              // lz_f32_to_bf16, lz_f32_to_f16
#include "fp8_rule.h"           // lz_fp8_quantize_row
#include "model_presets.h"      // lz_model_preset, lz_preset_tensors, lz_preset_write_config
#include "safetensors_writer.h" // lz_stw_write_model

/* ---- flags ------------------------------------------------------------------------ */

typedef struct {
    const char *preset;
    const char *out;
    const char *dtype;
    long seed;
    bool force;
} init_args;

static lz_status find_preset(const char *name, const lz_model_preset **out) {
    *out = lz_preset_find(name);
    if (*out)
        return LZ_OK;
    char names[512];
    lz_preset_names(names, sizeof names);
    return lz_fail(LZ_ERR_INPUT, "lizard init: --config: unknown preset '%s' (presets: %s)", name, names);
}

static lz_status parse_dtype(const char *name, lz_dtype fallback, lz_dtype *out) {
    *out = fallback;
    if (!name)
        return LZ_OK;
    if (strcasecmp(name, "f32") == 0)
        *out = LZ_DTYPE_F32;
    else if (strcasecmp(name, "bf16") == 0)
        *out = LZ_DTYPE_BF16;
    else if (strcasecmp(name, "f16") == 0)
        *out = LZ_DTYPE_F16;
    else if (strcasecmp(name, "fp8") == 0)
        *out = LZ_DTYPE_F8_E4M3;
    else
        return lz_fail(LZ_ERR_INPUT, "lizard init: --dtype: '%s' is not one of f32, bf16, f16, fp8", name);
    return LZ_OK;
}

static void print_presets(FILE *out) {
    fprintf(out, "\npresets:\n");
    for (size_t i = 0; i < lz_preset_count(); i++)
        fprintf(out, "  %-28s %s\n", lz_preset_at(i)->name, lz_preset_at(i)->summary);
}

/* ---- the output folder ------------------------------------------------------------ */

/* mkdir -p */
static lz_status make_dirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return lz_fail(LZ_ERR_INPUT, "lizard init: --out: path too long");
    for (char *p = buf + 1; ; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return lz_fail(LZ_ERR_IO, "lizard init: --out: mkdir %s: %s", buf, strerror(errno));
        *p = saved;
        if (saved == '\0')
            return LZ_OK;
    }
}

/* The files a model folder may hold that this command writes: with --force
 * they go first, so that no stale file (an old index, old shards, a
 * tokenizer of another vocabulary) sits beside the new model. */
static bool is_model_file(const char *name) {
    /* Our temporary names, ".<model file>.tmp", as a killed run leaves them. */
    char base[256];
    size_t tlen = strlen(name);
    if (name[0] == '.' && tlen > 5 && tlen - 5 < sizeof base && strcmp(name + tlen - 4, ".tmp") == 0) {
        memcpy(base, name + 1, tlen - 5);
        base[tlen - 5] = '\0';
        name = base;
    }
    static const char *const fixed[] = {"config.json", "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (strcmp(name, fixed[i]) == 0)
            return true;
    size_t len = strlen(name), suffix = strlen(".safetensors");
    return strncmp(name, "model-", 6) == 0 && len > 6 + suffix && strcmp(name + len - suffix, ".safetensors") == 0;
}

/* Counts the entries of `dir` and, if `remove` is set, deletes its model files. */
static lz_status scan_out_dir(const char *dir, bool remove, int *n_entries) {
    DIR *d = opendir(dir);
    if (!d)
        return lz_fail(LZ_ERR_IO, "lizard init: --out: open %s: %s", dir, strerror(errno));
    *n_entries = 0;
    lz_status st = LZ_OK;
    for (struct dirent *e; st == LZ_OK && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        (*n_entries)++;
        if (!remove || !is_model_file(e->d_name))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0)
            st = lz_fail(LZ_ERR_IO, "lizard init: --force: remove %s: %s", path, strerror(errno));
    }
    closedir(d);
    return st;
}

/* Creates DIR, or accepts an empty one; a non-empty one only with --force. */
static lz_status prepare_out_dir(const char *dir, bool force) {
    if (!dir[0])
        return lz_fail(LZ_ERR_INPUT, "lizard init: --out: empty path");
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno != ENOENT)
            return lz_fail(LZ_ERR_IO, "lizard init: --out: stat %s: %s", dir, strerror(errno));
        return make_dirs(dir);
    }
    if (!S_ISDIR(sb.st_mode))
        return lz_fail(LZ_ERR_INPUT, "lizard init: --out: %s exists and is not a folder", dir);
    int n = 0;
    LZ_TRY(scan_out_dir(dir, false, &n));
    if (n > 0 && !force)
        return lz_fail(LZ_ERR_INPUT, "lizard init: --out: %s is not empty (--force replaces its model files)", dir);
    return n > 0 ? scan_out_dir(dir, true, &n) : LZ_OK;
}

/* A 141 GB write should fail at once, not after an hour. */
static lz_status check_free_space(const char *dir, uint64_t bytes) {
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0)
        return LZ_OK; /* unknown: the writes themselves will tell */
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (avail < bytes + (1u << 20))
        return lz_fail(LZ_ERR_IO, "lizard init: --out %s: needs %.2f GB, only %.2f GB free", dir, bytes / 1e9,
                       avail / 1e9);
    return LZ_OK;
}

/* ---- random weights ------------------------------------------------------------- */

/* splitmix64's output function. Element i of a tensor is mix64(stream +
 * (i + 1) * golden), i.e. the i-th splitmix64 output: any chunk can be made
 * without the ones before it, and the loop below vectorises. */
static const uint64_t golden = 0x9E3779B97F4A7C15ULL;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* One tensor's stream: a function of (seed, name) only. */
static uint64_t tensor_stream(uint64_t seed, const char *name) { return mix64(mix64(seed + golden) ^ lz_fnv1a(LZ_FNV1A_INIT, name, strlen(name))); }

/* Values are uniform on [mean - w, mean + w] with w = std * sqrt(3): the
 * wanted standard deviation at a fraction of a Gaussian's cost. */
typedef struct {
    float mean, std;
} init_dist;

static init_dist dist_for(const lz_model_preset *p, lz_tensor_role role, const lz_stw_tensor *t) {
    double fan_in = t->ndim >= 2 ? (double)t->shape[1] : 1.0;
    switch (role) {
    case LZ_ROLE_EMBED: return (init_dist){0.0f, (float)p->embed_std};
    case LZ_ROLE_LINEAR: return (init_dist){0.0f, (float)(p->linear_std > 0 ? p->linear_std : 1.0 / sqrt(fan_in))};
    case LZ_ROLE_NORM: return (init_dist){1.0f, 0.02f}; /* jitter: a swapped norm shows up in tests */
    /* u = q.W over head_dim inputs of size ~1: std 1/sqrt(head_dim) keeps u ~ 1,
     * so the softmax feature maps are neither flat nor one-hot. */
    case LZ_ROLE_FMAP: return (init_dist){0.0f, (float)(1.0 / sqrt(fan_in))};
    /* W_gamma . x ~ N(0, 1): gammas spread over (0, 1). */
    case LZ_ROLE_GATE: return (init_dist){0.0f, (float)(1.0 / sqrt(fan_in))};
    case LZ_ROLE_META: return (init_dist){0.0f, 1.0f};
    case LZ_ROLE_ALPHA: return (init_dist){1.0f, 0.0f};
    case LZ_ROLE_FP8_SCALE: return (init_dist){0.0f, 0.0f}; /* made from its weight's rows */
    }
    return (init_dist){0.0f, 0.0f};
}

/* Elements first .. first+n-1 of a tensor's stream, as floats. */
static void generate(float *out, size_t n, uint64_t stream, uint64_t first, init_dist d) {
    float half_width = d.std * 1.7320508f; /* sqrt(3) */
    for (size_t i = 0; i < n; i++) {
        float u = (float)(mix64(stream + (first + i + 1) * golden) >> 40) * 0x1p-24f; /* [0, 1) */
        out[i] = d.mean + half_width * (2.0f * u - 1.0f);
    }
}

/* n values to little-endian bytes of `dtype` (f32, bf16 or f16). */
static void store(uint8_t *dst, const float *v, size_t n, lz_dtype dtype) {
    if (dtype == LZ_DTYPE_F32) {
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &v[i], sizeof bits);
            for (int k = 0; k < 4; k++)
                dst[4 * i + k] = (uint8_t)(bits >> (8 * k));
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h = dtype == LZ_DTYPE_BF16 ? lz_f32_to_bf16(v[i]) : lz_f32_to_f16(v[i]);
        dst[2 * i] = (uint8_t)h;
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

typedef struct {
    const lz_model_preset *preset;
    const lz_tensor_list *list;
    uint64_t seed;
    /* the tensor being generated */
    const lz_stw_tensor *tensor;
    uint64_t stream;
    init_dist dist;
    int64_t fp8_cols; /* an FP8 weight or its scales: the weight's row length (else 0) */
    /* progress */
    uint64_t done, total;
    double started, last_report;
} fill_ctx;

static void report_progress(fill_ctx *c, bool final) {
    double t = lz_now_seconds();
    if (!final && t - c->last_report < 5.0)
        return;
    c->last_report = t;
    fprintf(stderr, "lizard init: %.2f / %.2f GB (%.0f%%), %.0f s\n", c->done / 1e9, c->total / 1e9,
            c->total ? 100.0 * (double)c->done / (double)c->total : 100.0, t - c->started);
}

/* A slice of a fill: elements [first, first + n) of the tensor into dst. An FP8 weight's codes or its
 * scales (fp8_cols > 0: the weight's row length) come from the weight's rows: the bf16 preset's values,
 * quantized by fp8_rule.h, so that the folder is what --dtype fp8 makes of the bf16 one. */
typedef struct {
    uint8_t *dst;
    size_t n;
    uint64_t stream, first;
    init_dist dist;
    lz_dtype dtype;
    int64_t fp8_cols;
} fill_slice;

/* Row r of an FP8 weight: codes [cols] and the scale. */
static float fp8_row(const fill_slice *f, uint64_t r, float *values, uint8_t *codes) {
    const size_t cols = (size_t)f->fp8_cols;
    generate(values, cols, f->stream, r * cols, f->dist);
    for (size_t i = 0; i < cols; i++)
        values[i] = lz_bf16_to_f32(lz_f32_to_bf16(values[i]));
    return lz_fp8_quantize_row(values, (int64_t)cols, codes);
}

static void fill_fp8(const fill_slice *f) {
    const uint64_t cols = (uint64_t)f->fp8_cols;
    float *values = malloc(sizeof(float) * cols);
    uint8_t *codes = malloc(cols);
    if (!values || !codes) { // (the preset's rows are at most a few hundred KB)
        fprintf(stderr, "lizard init: out of memory for an FP8 row of %llu\n", (unsigned long long)cols);
        abort();
    }
    uint64_t row = UINT64_MAX;
    float scale = 0;
    for (size_t i = 0; i < f->n; i++) {
        const uint64_t e = f->first + i, r = f->dtype == LZ_DTYPE_F8_E4M3 ? e / cols : e;
        if (r != row)
            scale = fp8_row(f, row = r, values, codes);
        if (f->dtype == LZ_DTYPE_F8_E4M3)
            f->dst[i] = codes[e % cols];
        else
            store(f->dst + 4 * i, &scale, 1, LZ_DTYPE_F32);
    }
    free(values);
    free(codes);
}

static void *fill_slice_run(void *arg) {
    const fill_slice *f = arg;
    if (f->fp8_cols > 0) {
        fill_fp8(f);
        return NULL;
    }
    const size_t elem = lz_dtype_size(f->dtype);
    float block[1024];
    for (size_t i = 0; i < f->n; i += 1024) {
        size_t k = f->n - i < 1024 ? f->n - i : 1024;
        generate(block, k, f->stream, f->first + i, f->dist);
        store(f->dst + i * elem, block, k, f->dtype);
    }
    return NULL;
}

/* lz_stw_fill_fn: `nbytes` of tensor t from byte `offset`. Large fills are
 * split over the machine's cores (each element depends only on its index,
 * so the bytes are the same with any number of threads). */
static lz_status fill_random(void *ctx, const lz_stw_tensor *t, uint64_t offset, void *buf, size_t nbytes) {
    fill_ctx *c = ctx;
    if (t != c->tensor) {
        size_t index = (size_t)(t - c->list->tensors);
        if (t < c->list->tensors || index >= c->list->n)
            return lz_fail(LZ_ERR_INTERNAL, "tensor %s is not in the preset's list", t->name);
        c->tensor = t;
        c->fp8_cols = 0;
        const lz_stw_tensor *src = t; // the tensor whose stream this one's values come from
        if (c->list->roles[index] == LZ_ROLE_FP8_SCALE) { // made from the FP8 weight listed before it
            if (index == 0 || t[-1].dtype != LZ_DTYPE_F8_E4M3)
                return lz_fail(LZ_ERR_INTERNAL, "scale tensor %s follows no FP8 weight", t->name);
            src = t - 1, index--;
        }
        c->stream = tensor_stream(c->seed, src->name);
        c->dist = dist_for(c->preset, c->list->roles[index], src);
        if (src->dtype == LZ_DTYPE_F8_E4M3)
            c->fp8_cols = src->shape[1];
    }
    const size_t elem = lz_dtype_size(t->dtype), n = nbytes / elem;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int k = n < (1u << 20) || cores < 2 ? 1 : cores > LZ_MAX_SLICES ? LZ_MAX_SLICES : (int)cores;
    fill_slice slices[LZ_MAX_SLICES];
    for (int i = 0; i < k; i++) {
        const size_t a = n * (size_t)i / (size_t)k, b = n * (size_t)(i + 1) / (size_t)k;
        slices[i] = (fill_slice){(uint8_t *)buf + a * elem, b - a, c->stream, offset / elem + a, c->dist, t->dtype,
                                 c->fp8_cols};
    }
    lz_run_slices(fill_slice_run, slices, sizeof slices[0], k);
    c->done += nbytes;
    report_progress(c, false);
    return LZ_OK;
}

static lz_status write_weights(const lz_model_preset *p, const lz_tensor_list *list, uint64_t seed,
                               const char *dir) {
    fill_ctx c = {.preset = p, .list = list, .seed = seed, .total = lz_tensor_list_bytes(list)};
    c.started = c.last_report = lz_now_seconds();
    LZ_TRY(lz_stw_write_model(dir, list->tensors, list->n, p->max_shard_bytes, fill_random, &c));
    if (c.total >= 1000000000ULL)
        report_progress(&c, true);
    return LZ_OK;
}

/* ---- tokenizer ------------------------------------------------------------------- */

/* Tiny presets: a BPE trained now on the embedded text, with the two
 * specials at the ids that config.json names. Big presets use LLaMA-3's
 * 128256-token vocabulary, which cannot be made here. */
static lz_status write_tokenizer(const lz_model_preset *p, const char *dir) {
    if (!p->builtin_tokenizer) {
        fprintf(stderr,
                "lizard init: no tokenizer written: %s has LLaMA-3's vocabulary (%d tokens); copy tokenizer.json "
                "and tokenizer_config.json from a LLaMA-3 checkpoint\n",
                p->name, p->vocab_size);
        return LZ_OK;
    }
    const char *text = lz_bpe_corpus();
    lz_bpe bpe;
    LZ_TRY(lz_bpe_train(text, strlen(text), p->vocab_size - LZ_BPE_N_SPECIAL, &bpe));
    lz_status st = LZ_OK;
    if (bpe.n_tokens != p->bos_token_id || p->n_eos != 1 || bpe.n_tokens + 1 != p->eos_token_ids[0])
        st = lz_fail(LZ_ERR_INTERNAL, "lizard init: %s: tokenizer specials %d, %d differ from the config's ids",
                     p->name, bpe.n_tokens, bpe.n_tokens + 1);
    if (st == LZ_OK)
        st = lz_bpe_write_files(dir, &bpe, p->max_position_embeddings);
    lz_bpe_free(&bpe);
    return st;
}

/* ---- the command ------------------------------------------------------------------- */

static lz_status write_folder(const lz_model_preset *p, lz_dtype dtype, uint64_t seed, const char *dir) {
    lz_tensor_list list;
    LZ_TRY(lz_preset_tensors(p, dtype, &list));
    uint64_t params = lz_tensor_list_params(&list), bytes = lz_tensor_list_bytes(&list);
    lz_status st = check_free_space(dir, bytes);
    if (st == LZ_OK)
        st = write_tokenizer(p, dir);
    if (st == LZ_OK)
        st = write_weights(p, &list, seed, dir);
    if (st == LZ_OK)
        st = lz_preset_write_generation_config(p, dir);
    if (st == LZ_OK)
        st = lz_preset_write_config(p, dtype, dir);
    if (st == LZ_OK)
        printf("lizard init: wrote %s (preset %s, %" PRIu64 " parameters, %" PRIu64 " bytes %s, %zu tensors, seed %"
               PRIu64 ")\n",
               dir, p->name, params, bytes, dtype == LZ_DTYPE_F8_E4M3 ? "F8_E4M3 + BF16" : lz_dtype_name(dtype),
               list.n, seed);
    lz_tensor_list_free(&list);
    return st;
}

lz_status lz_cmd_init(int argc, char **argv) {
    init_args a = {0};
    const lz_option options[] = {
        {"--config", LZ_OPT_STRING, "PRESET", "model preset (see the list below)", &a.preset, true, 0, 0},
        {"--out", LZ_OPT_STRING, "DIR", "output folder (created if missing; must be empty)", &a.out, true, 0, 0},
        {"--seed", LZ_OPT_INT, "N", "seed of the random weights (default 0)", &a.seed, false, 0,
         9007199254740991.0},
        {"--dtype", LZ_OPT_STRING, "f32|bf16|f16|fp8", "weight dtype (default: the preset's); fp8: the linear layers in "
         "FP8 E4M3 with their scales (fbgemm_fp8's layout), the rest bf16", &a.dtype, false, 0, 0},
        {"--force", LZ_OPT_FLAG, "", "write into a non-empty DIR, replacing its model files", &a.force, false, 0, 0},
    };
    const lz_command_spec spec = {"init", "write a random-weight model folder from a preset", options,
                                  (int)(sizeof options / sizeof options[0])};
    bool help = false;
    LZ_TRY(lz_parse_options(&spec, argc, argv, &help));
    if (help) {
        lz_print_usage(stdout, &spec);
        print_presets(stdout);
        return LZ_OK;
    }
    const lz_model_preset *p;
    lz_dtype dtype;
    LZ_TRY(find_preset(a.preset, &p));
    LZ_TRY(parse_dtype(a.dtype, p->dtype, &dtype));
    LZ_TRY(prepare_out_dir(a.out, a.force));
    return write_folder(p, dtype, (uint64_t)a.seed, a.out);
}
