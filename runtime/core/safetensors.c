/* safetensors.c - validate and mmap safetensors files; a model folder's weights, one file or sharded. */
#include "safetensors.h"
#include "json_read.h" // lz_json_loadb, lz_json_load_file: integers of any size

#include <errno.h>    // errno
#include <fcntl.h>    // open, O_RDONLY, O_CLOEXEC
#include <jansson.h>  // json_t
#include <stdio.h>    // snprintf
#include <stdlib.h>   // calloc, malloc, free, qsort, bsearch
#include <string.h>   // memset, strcmp, strchr, strdup, strerror, strlen
#include <sys/mman.h> // mmap, munmap
#include <sys/stat.h> // fstat, stat
#include <unistd.h>   // close

/* The reference implementation refuses headers above 100 MB: a bigger one is
 * a corrupt length, and it would be parsed into memory in full. */
#define ST_MAX_HEADER 100000000ull

/* A tensor's byte range in the data section, kept apart from the tensor so
 * that no pointer is formed until every range has been validated. */
typedef struct {
    uint64_t begin, end;
    size_t tensor; /* index into lz_st_file.tensors */
} st_range;

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* "[64, 32]" into buf. */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

static lz_status parse_dtype(const char *path, const char *name, json_t *entry, lz_st_tensor *t) {
    json_t *v = json_object_get(entry, "dtype");
    if (!json_is_string(v))
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    int d = lz_dtype_from_name(json_string_value(v));
    if (d < 0)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': unknown dtype '%s'", path, name,
                       json_string_value(v));
    t->dtype = (lz_dtype)d;
    return LZ_OK;
}

static lz_status parse_shape(const char *path, const char *name, json_t *entry, lz_st_tensor *t) {
    json_t *v = json_object_get(entry, "shape");
    if (!json_is_array(v))
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': \"shape\" is missing or not an array", path, name);
    size_t nd = json_array_size(v);
    if (nd > LZ_MAX_DIMS)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': shape has %zu dims (at most %d)", path, name, nd,
                       LZ_MAX_DIMS);
    int64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                           path, name, i);
        int64_t dim = (int64_t)json_integer_value(d);
        if (dim != 0 && numel > INT64_MAX / dim)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': shape overflows 64 bits", path, name);
        numel *= dim;
        t->shape[i] = dim;
    }
    t->ndim = (int)nd;
    t->numel = numel;
    return LZ_OK;
}

/* data_offsets: [begin, end] within the data section, matching the shape's size. */
static lz_status parse_offsets(const char *path, const char *name, json_t *entry, uint64_t data_size,
                               const lz_st_tensor *t, st_range *r) {
    json_t *v = json_object_get(entry, "data_offsets");
    json_t *b = json_array_get(v, 0), *e = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < 0)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': \"data_offsets\" must be [begin, end], two "
                       "non-negative integers", path, name);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (begin > end)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", path,
                       name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': data_offsets [%llu, %llu] past end of data (%llu bytes)",
                       path, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_size);
    uint64_t dsize = lz_dtype_size(t->dtype);
    if ((uint64_t)t->numel > UINT64_MAX / dsize || (uint64_t)t->numel * dsize != end - begin) {
        char shape[256];
        format_shape(shape, sizeof shape, t->ndim, t->shape);
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but %s %s "
                       "needs %lld elements x %llu bytes", path, name, (unsigned long long)begin,
                       (unsigned long long)end, (unsigned long long)(end - begin), lz_dtype_name(t->dtype),
                       shape, (long long)t->numel, (unsigned long long)dsize);
    }
    r->begin = begin;
    r->end = end;
    return LZ_OK;
}

static lz_status parse_entry(const char *path, const char *name, json_t *entry, uint64_t data_size,
                             lz_st_tensor *t, st_range *r) {
    if (!json_is_object(entry))
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': entry is not a JSON object", path, name);
    LZ_TRY(parse_dtype(path, name, entry, t));
    LZ_TRY(parse_shape(path, name, entry, t));
    return parse_offsets(path, name, entry, data_size, t, r);
}

/* "__metadata__" is free-form text for the writer; we only check its type. */
static lz_status check_metadata(const char *path, json_t *meta) {
    const char *key;
    json_t *v;
    if (!json_is_object(meta))
        return lz_fail(LZ_ERR_INPUT, "%s: \"__metadata__\" is not a JSON object", path);
    json_object_foreach(meta, key, v) {
        if (!json_is_string(v))
            return lz_fail(LZ_ERR_INPUT, "%s: \"__metadata__\" key '%s' is not a string", path, key);
    }
    return LZ_OK;
}

static int cmp_range_begin(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* Sorts by begin and refuses any two ranges sharing a byte (empty ranges share none). */
static lz_status check_overlaps(const char *path, const lz_st_file *f, st_range *ranges, size_t n) {
    if (n > 1)
        qsort(ranges, n, sizeof *ranges, cmp_range_begin);
    const st_range *prev = NULL; /* the non-empty range that ends last so far */
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].begin == ranges[i].end)
            continue;
        if (prev && ranges[i].begin < prev->end)
            return lz_fail(LZ_ERR_INPUT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
                           path, f->tensors[prev->tensor].name, (unsigned long long)prev->begin,
                           (unsigned long long)prev->end, f->tensors[ranges[i].tensor].name,
                           (unsigned long long)ranges[i].begin, (unsigned long long)ranges[i].end);
        if (!prev || ranges[i].end > prev->end)
            prev = &ranges[i];
    }
    return LZ_OK;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const lz_st_tensor *)a)->name, ((const lz_st_tensor *)b)->name);
}

/* Fills out->tensors from the header object; pointers formed last. */
static lz_status build_tensors(json_t *root, const uint8_t *data, uint64_t data_size, const char *path,
                               lz_st_file *out, st_range *ranges) {
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            LZ_TRY(check_metadata(path, v));
            continue;
        }
        lz_st_tensor *t = &out->tensors[out->n_tensors];
        st_range *r = &ranges[out->n_tensors];
        LZ_TRY(parse_entry(path, key, v, data_size, t, r));
        if (!(t->name = strdup(key)))
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
        t->file = out->path;
        r->tensor = out->n_tensors++;
    }
    LZ_TRY(check_overlaps(path, out, ranges, out->n_tensors));
    for (size_t i = 0; i < out->n_tensors; i++) {
        lz_st_tensor *t = &out->tensors[ranges[i].tensor];
        t->data = data + ranges[i].begin;
        t->nbytes = (size_t)(ranges[i].end - ranges[i].begin);
    }
    if (out->n_tensors > 1)
        qsort(out->tensors, out->n_tensors, sizeof *out->tensors, cmp_tensor_name);
    for (size_t i = 1; i < out->n_tensors; i++) /* the JSON parser already refuses these */
        if (strcmp(out->tensors[i - 1].name, out->tensors[i].name) == 0)
            return lz_fail(LZ_ERR_INPUT, "%s: duplicate tensor '%s'", path, out->tensors[i].name);
    return LZ_OK;
}

/* The 8-byte length and the JSON header it announces. */
static lz_status parse_header(const uint8_t *buf, size_t size, const char *path, json_t **root,
                              uint64_t *header_len) {
    if (size < 8)
        return lz_fail(LZ_ERR_INPUT, "%s: file is %zu bytes, too short for the 8-byte header length",
                       path, size);
    uint64_t n = load_le64(buf);
    if (n > size - 8)
        return lz_fail(LZ_ERR_INPUT, "%s: header length %llu past end of file (%zu bytes)", path,
                       (unsigned long long)n, size);
    if (n > ST_MAX_HEADER)
        return lz_fail(LZ_ERR_INPUT, "%s: header length %llu over the 100 MB limit", path,
                       (unsigned long long)n);
    json_error_t err;
    *root = lz_json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!*root) {
        if (json_error_code(&err) == json_error_duplicate_key)
            return lz_fail(LZ_ERR_INPUT, "%s: header has a duplicate tensor name or key (%s, line %d, "
                           "column %d)", path, err.text, err.line, err.column);
        return lz_fail(LZ_ERR_INPUT, "%s: header is not valid JSON: %s (line %d, column %d)", path,
                       err.text, err.line, err.column);
    }
    if (!json_is_object(*root)) {
        json_decref(*root);
        return lz_fail(LZ_ERR_INPUT, "%s: header is not a JSON object", path);
    }
    *header_len = n;
    return LZ_OK;
}

lz_status lz_st_parse(const uint8_t *buf, size_t size, const char *path, lz_st_file *out) {
    memset(out, 0, sizeof *out);
    json_t *root = NULL;
    uint64_t header_len = 0;
    LZ_TRY(parse_header(buf, size, path, &root, &header_len));
    size_t cap = json_object_size(root) + 1; /* +1: never calloc(0) */
    st_range *ranges = calloc(cap, sizeof *ranges);
    out->tensors = calloc(cap, sizeof *out->tensors);
    out->path = strdup(path);
    lz_status st;
    if (!ranges || !out->tensors || !out->path)
        st = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    else
        st = build_tensors(root, buf + 8 + header_len, size - 8 - header_len, path, out, ranges);
    free(ranges);
    json_decref(root);
    if (st != LZ_OK)
        lz_st_close(out);
    return st;
}

lz_status lz_st_open(const char *path, lz_st_file *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lz_fail(LZ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return lz_fail(LZ_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size == 0) { /* mmap of 0 bytes fails with EINVAL */
        close(fd);
        return lz_fail(LZ_ERR_INPUT, "%s: %s", path, S_ISREG(sb.st_mode) ? "file is empty" : "not a regular file");
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping stays valid */
    if (map == MAP_FAILED)
        return lz_fail(LZ_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
    lz_status st = lz_st_parse(map, size, path, out);
    if (st != LZ_OK) {
        munmap(map, size);
        return st;
    }
    out->map = map;
    out->map_size = size;
    return LZ_OK;
}

void lz_st_close(lz_st_file *f) {
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    if (f->map)
        munmap(f->map, f->map_size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

static int cmp_name_tensor(const void *key, const void *elem) {
    return strcmp(key, ((const lz_st_tensor *)elem)->name);
}

const lz_st_tensor *lz_st_find(const lz_st_file *f, const char *name) {
    if (f->n_tensors == 0)
        return NULL;
    return bsearch(name, f->tensors, f->n_tensors, sizeof *f->tensors, cmp_name_tensor);
}

/* ---- a model folder ---------------------------------------------------------------- */

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int path_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A shard must live in the folder itself: no directories, no way out of it. */
static int is_plain_file_name(const char *s) {
    return s[0] != '\0' && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Index in `names` of `shard`, or -1. */
static long find_shard(const char *const *names, size_t n, const char *shard) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], shard) == 0)
            return (long)i;
    return -1;
}

/* Checks every shard name of the weight map and opens each distinct shard once.
 * `names[i]` (owned by the JSON) is the name of w->files[i]. */
static lz_status open_shards(lz_weights *w, const char *index_path, json_t *wmap, const char **names) {
    const char *tensor;
    json_t *v;
    w->files = calloc(json_object_size(wmap) + 1, sizeof *w->files);
    if (!w->files)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", index_path);
    json_object_foreach(wmap, tensor, v) {
        if (!json_is_string(v))
            return lz_fail(LZ_ERR_INPUT, "%s: weight_map entry for tensor '%s' is not a string", index_path,
                           tensor);
        const char *shard = json_string_value(v);
        if (!is_plain_file_name(shard))
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s': shard name '%s' is not a plain file name",
                           index_path, tensor, shard);
        if (find_shard(names, w->n_files, shard) >= 0)
            continue;
        char *shard_path = join_path(w->dir, shard);
        if (!shard_path)
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", index_path);
        lz_status st = lz_st_open(shard_path, &w->files[w->n_files]);
        free(shard_path);
        LZ_TRY(st);
        names[w->n_files++] = shard;
    }
    return LZ_OK;
}

/* Every tensor of the weight map must be in the shard that it names. */
static lz_status check_weight_map(const lz_weights *w, json_t *wmap, const char *const *names) {
    const char *tensor;
    json_t *v;
    json_object_foreach(wmap, tensor, v) {
        const char *shard = json_string_value(v);
        long i = find_shard(names, w->n_files, shard);
        if (i < 0 || !lz_st_find(&w->files[i], tensor))
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is listed in model.safetensors.index.json but "
                           "missing from shard '%s'", w->dir, tensor, shard);
    }
    return LZ_OK;
}

static lz_status open_sharded(lz_weights *w, const char *index_path) {
    json_error_t err;
    json_t *root = lz_json_load_file(index_path, 0, &err);
    if (!root)
        return lz_fail(LZ_ERR_INPUT, "%s: %s (line %d, column %d)", index_path, err.text, err.line, err.column);
    json_t *wmap = json_object_get(root, "weight_map");
    lz_status st = LZ_OK;
    const char **names = NULL;
    if (!json_is_object(wmap))
        st = lz_fail(LZ_ERR_INPUT, "%s: no \"weight_map\" object", index_path);
    else if (json_object_size(wmap) == 0)
        st = lz_fail(LZ_ERR_INPUT, "%s: \"weight_map\" is empty", index_path);
    else if (!(names = calloc(json_object_size(wmap), sizeof *names)))
        st = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", index_path);
    if (st == LZ_OK)
        st = open_shards(w, index_path, wmap, names);
    if (st == LZ_OK)
        st = check_weight_map(w, wmap, names);
    free(names);
    json_decref(root);
    return st;
}

static lz_status open_single(lz_weights *w, const char *path) {
    w->files = calloc(1, sizeof *w->files);
    if (!w->files)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    LZ_TRY(lz_st_open(path, &w->files[0]));
    w->n_files = 1;
    return LZ_OK;
}

static int cmp_tensor_ptr_name(const void *a, const void *b) {
    return strcmp((*(const lz_st_tensor *const *)a)->name, (*(const lz_st_tensor *const *)b)->name);
}

/* All tensors of all files, sorted by name; a name in two files is refused. */
static lz_status build_index(lz_weights *w) {
    size_t total = 0;
    for (size_t f = 0; f < w->n_files; f++)
        total += w->files[f].n_tensors;
    w->index = calloc(total + 1, sizeof *w->index);
    if (!w->index)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", w->dir);
    for (size_t f = 0; f < w->n_files; f++)
        for (size_t i = 0; i < w->files[f].n_tensors; i++)
            w->index[w->n_tensors++] = &w->files[f].tensors[i];
    if (w->n_tensors > 1)
        qsort(w->index, w->n_tensors, sizeof *w->index, cmp_tensor_ptr_name);
    for (size_t i = 1; i < w->n_tensors; i++)
        if (strcmp(w->index[i - 1]->name, w->index[i]->name) == 0)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is in both %s and %s", w->dir, w->index[i]->name,
                           w->index[i - 1]->file, w->index[i]->file);
    return LZ_OK;
}

lz_status lz_weights_open(const char *dir, lz_weights *out) {
    memset(out, 0, sizeof *out);
    out->dir = strdup(dir);
    char *index_path = join_path(dir, "model.safetensors.index.json");
    char *single_path = join_path(dir, "model.safetensors");
    lz_status st;
    if (!out->dir || !index_path || !single_path)
        st = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", dir);
    else if (path_exists(index_path))
        st = open_sharded(out, index_path);
    else if (path_exists(single_path))
        st = open_single(out, single_path);
    else
        st = lz_fail(LZ_ERR_INPUT, "%s: no model.safetensors or model.safetensors.index.json", dir);
    if (st == LZ_OK)
        st = build_index(out);
    free(index_path);
    free(single_path);
    if (st != LZ_OK)
        lz_weights_close(out);
    return st;
}

void lz_weights_close(lz_weights *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_files; i++)
        lz_st_close(&w->files[i]);
    free(w->files);
    free(w->index);
    free(w->dir);
    memset(w, 0, sizeof *w);
}

static int cmp_name_tensor_ptr(const void *key, const void *elem) {
    return strcmp(key, (*(const lz_st_tensor *const *)elem)->name);
}

const lz_st_tensor *lz_weights_find(const lz_weights *w, const char *name) {
    if (w->n_tensors == 0)
        return NULL;
    const lz_st_tensor *const *hit =
        bsearch(name, w->index, w->n_tensors, sizeof *w->index, cmp_name_tensor_ptr);
    return hit ? *hit : NULL;
}

static int shape_equal(const lz_st_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return 0;
    return 1;
}

lz_status lz_weights_expect(const lz_weights *w, const char *name, int ndim, const int64_t *shape,
                            const lz_st_tensor **out) {
    const lz_st_tensor *t = lz_weights_find(w, name);
    if (!t)
        return lz_fail(LZ_ERR_INPUT, "%s: missing tensor '%s'", w->dir, name);
    if (!lz_dtype_is_float_weight(t->dtype))
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16", t->file, name,
                       lz_dtype_name(t->dtype));
    if (!shape_equal(t, ndim, shape)) {
        char have[256], want[256];
        format_shape(have, sizeof have, t->ndim, t->shape);
        format_shape(want, sizeof want, ndim, shape);
        return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' has shape %s, expected %s", t->file, name, have, want);
    }
    if (out)
        *out = t;
    return LZ_OK;
}
