/* distill_data.c - loading, packing and shuffling the distillation data. */
#include "distill_data.h"

#include "npy.h" // lz_npy_read_i32

#include <dirent.h>   // opendir, readdir, closedir
#include <errno.h>    // errno
#include <stdbool.h>  // bool
#include <stdio.h>    // FILE, fopen, fread, snprintf
#include <stdlib.h>   // malloc, realloc, free, qsort, strtoull
#include <string.h>   // strcmp, strlen, strstr, strerror, memcpy
#include <sys/stat.h> // stat, S_ISDIR, S_ISREG

#include "distill_params.h" // lz_mix64
#include "text_file.h"      // lz_read_text_file
#include "tokenizer.h"      // lz_tokenizer_load, lz_tokenizer_encode

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Appends the tokens of one text file to the stream. */
static lz_status append_text(lz_distill_data *d, const char *path, lz_tokenizer *tok) {
    char *text = NULL;
    size_t len = 0;
    LZ_TRY(lz_read_text_file("--data", path, &text, &len));
    int32_t *ids = NULL;
    int n = 0;
    lz_status s = len ? lz_tokenizer_encode(tok, text, len, true, &ids, &n) : LZ_OK;
    free(text);
    int32_t *grown = s == LZ_OK && n > 0 ? realloc(d->ids, sizeof(int32_t) * (d->n_ids + (size_t)n)) : d->ids;
    if (s == LZ_OK && n > 0 && !grown)
        s = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    if (s == LZ_OK && n > 0) {
        d->ids = grown;
        memcpy(d->ids + d->n_ids, ids, sizeof(int32_t) * (size_t)n);
        d->n_ids += (size_t)n;
    }
    free(ids);
    return s;
}

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every *.txt of a folder, in name order. */
static lz_status append_folder(lz_distill_data *d, const char *dir, lz_tokenizer *tok) {
    DIR *dp = opendir(dir);
    if (!dp)
        return lz_fail(LZ_ERR_IO, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    lz_status s = LZ_OK;
    for (struct dirent *e; s == LZ_OK && (e = readdir(dp));) {
        if (!ends_with(e->d_name, ".txt"))
            continue;
        char **grown = realloc(names, sizeof(char *) * (n + 1));
        if (!grown || !(grown[n] = strdup(e->d_name)))
            s = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", dir);
        names = grown ? grown : names;
        n += s == LZ_OK;
    }
    closedir(dp);
    if (s == LZ_OK && n == 0)
        s = lz_fail(LZ_ERR_INPUT, "%s: no *.txt files in the folder", dir);
    if (s == LZ_OK)
        qsort(names, n, sizeof(char *), compare_names);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (s == LZ_OK)
            s = append_text(d, path, tok);
        free(names[i]);
    }
    free(names);
    return s;
}

static void shuffle_epoch(lz_distill_data *d, uint64_t epoch);

static lz_status load_stream(lz_distill_data *d, const char *path, const char *model_dir) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lz_fail(LZ_ERR_IO, "--data %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode) && ends_with(path, ".npy"))
        return lz_npy_read_i32(path, &d->ids, &d->n_ids);
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
        return lz_fail(LZ_ERR_INPUT, "--data %s: not a file or a folder", path);
    lz_tokenizer *tok;
    LZ_TRY(lz_tokenizer_load(model_dir, &tok));
    lz_status s = S_ISDIR(sb.st_mode) ? append_folder(d, path, tok) : append_text(d, path, tok);
    lz_tokenizer_free(tok);
    return s;
}

lz_status lz_distill_data_load(lz_distill_data *d, const char *path, const char *model_dir, int vocab, int seq_len,
                               uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->seq_len = seq_len;
    d->seed = seed;
    lz_status s = load_stream(d, path, model_dir);
    for (size_t i = 0; s == LZ_OK && i < d->n_ids; i++)
        if (d->ids[i] < 0 || d->ids[i] >= vocab)
            s = lz_fail(LZ_ERR_INPUT, "--data %s: token %zu is %d, outside the vocabulary [0, %d)", path, i,
                        d->ids[i], vocab);
    if (s == LZ_OK && d->n_ids == 0)
        s = lz_fail(LZ_ERR_INPUT, "--data %s: no tokens", path);
    d->n_seqs = d->n_ids / (size_t)seq_len;
    if (s == LZ_OK && d->n_seqs == 0)
        s = lz_fail(LZ_ERR_INPUT, "--data %s: %zu tokens, fewer than one sequence of --seq-len %d", path, d->n_ids,
                    seq_len);
    if (s == LZ_OK && !(d->order = malloc(sizeof(size_t) * d->n_seqs)))
        s = lz_fail(LZ_ERR_NOMEM, "--data %s: out of memory", path);
    if (s == LZ_OK)
        shuffle_epoch(d, 0);
    if (s != LZ_OK)
        lz_distill_data_free(d);
    return s;
}

void lz_distill_data_free(lz_distill_data *d) {
    free(d->ids);
    free(d->order);
    memset(d, 0, sizeof *d);
}

/* The order of epoch `epoch`: Fisher-Yates driven by splitmix64 of
 * (seed, epoch), so it depends on nothing else. */
static void shuffle_epoch(lz_distill_data *d, uint64_t epoch) {
    for (size_t i = 0; i < d->n_seqs; i++)
        d->order[i] = i;
    uint64_t state = lz_mix64(d->seed ^ lz_mix64(epoch + 0x9E3779B97F4A7C15ULL));
    for (size_t i = d->n_seqs; i > 1; i--) {
        state += 0x9E3779B97F4A7C15ULL;
        size_t j = (size_t)(lz_mix64(state) % i);
        size_t t = d->order[i - 1];
        d->order[i - 1] = d->order[j];
        d->order[j] = t;
    }
    d->order_epoch = epoch;
}

void lz_distill_data_batch(lz_distill_data *d, uint64_t step, int batch, int32_t *ids) {
    for (int b = 0; b < batch; b++) {
        const uint64_t g = step * (uint64_t)batch + (uint64_t)b, epoch = g / d->n_seqs;
        if (epoch != d->order_epoch)
            shuffle_epoch(d, epoch);
        const size_t seq = d->order[g % d->n_seqs];
        memcpy(ids + (size_t)b * d->seq_len, d->ids + seq * (size_t)d->seq_len, sizeof(int32_t) * d->seq_len);
    }
}
