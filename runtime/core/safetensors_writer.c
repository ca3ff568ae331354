/* safetensors_writer.c - streaming safetensors writer (see safetensors_writer.h).
 *
 * Layout written: u64 little-endian N, N bytes of JSON header padded with
 * spaces so that the data section starts at a multiple of 8, then the
 * tensors back to back in declaration order. */
#include "safetensors_writer.h"

#include <errno.h>    // errno, EINTR, ENOENT, EINVAL
#include <fcntl.h>    // open, O_* flags
#include <inttypes.h> // PRIu64
#include <stdbool.h>  // bool
#include <stdio.h>    // snprintf
#include <stdlib.h>   // malloc, calloc, free
#include <string.h>   // strerror, strrchr, strdup, strlen, strcmp
#include <unistd.h>   // write, fsync, close, unlink

#include <jansson.h>  // json_t, json_dumps

/* Size of the bounded buffer that fill callbacks write into; a multiple of
 * every element size, so chunks are always whole elements. */
enum { LZ_STW_CHUNK = 64 << 20 };

struct lz_st_writer {
    char *path;                   /* final name */
    char *tmp_path;               /* where the bytes go until commit */
    int fd;                       /* -1 once closed */
    const lz_stw_tensor *tensors; /* the caller's declarations */
    size_t n;
    uint64_t *sizes;              /* bytes per tensor */
    size_t current;               /* tensor being written; n when all are done */
    uint64_t written;             /* bytes of the current tensor so far */
    uint64_t header_bytes;        /* 8 + padded JSON */
    bool finished;
    uint8_t *buf;                 /* fill buffer, allocated on first use */
};

/* ---- small helpers --------------------------------------------------------- */

uint64_t lz_stw_tensor_numel(const lz_stw_tensor *t) {
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++)
        numel *= (uint64_t)t->shape[d];
    return numel;
}

uint64_t lz_stw_tensor_bytes(const lz_stw_tensor *t) { return lz_stw_tensor_numel(t) * lz_dtype_size(t->dtype); }

/* "a/b" from two parts; NULL when out of memory. */
static char *join_path(const char *dir, const char *name) {
    size_t len = strlen(dir) + strlen(name) + 2;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "%s/%s", dir, name);
    return s;
}

/* "dir/name" -> "dir/.name.tmp": hidden, in the same folder (so rename is
 * atomic), and never matched by a reader looking for model*.safetensors. */
static char *temp_path_for(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dir_len = slash ? (int)(slash - path) + 1 : 0; /* keeps the slash */
    size_t len = strlen(path) + 6;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "%.*s.%s.tmp", dir_len, path, base);
    return s;
}

/* write(2) until everything went out; errors name the file. */
static lz_status write_all(int fd, const void *data, size_t len, const char *path) {
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return lz_fail(LZ_ERR_IO, "write %s: %s", path, k < 0 ? strerror(errno) : "no progress (disk full?)");
        p += k;
        len -= (size_t)k;
    }
    return LZ_OK;
}

static lz_status sync_and_close(int fd, const char *path) {
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return lz_fail(LZ_ERR_IO, "fsync %s: %s", path, strerror(e));
    }
    if (close(fd) != 0)
        return lz_fail(LZ_ERR_IO, "close %s: %s", path, strerror(errno));
    return LZ_OK;
}

/* After a rename the folder entry itself must reach the disk too. Some file
 * systems refuse fsync on a folder (EINVAL): nothing more can be done there. */
static lz_status sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return lz_fail(LZ_ERR_IO, "open folder %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL)
        return lz_fail(LZ_ERR_IO, "fsync folder %s: %s", dir, strerror(e));
    return LZ_OK;
}

static lz_status rename_into_place(const char *tmp, const char *path) {
    if (rename(tmp, path) != 0)
        return lz_fail(LZ_ERR_IO, "rename %s -> %s: %s", tmp, path, strerror(errno));
    return sync_parent_dir(path);
}

/* ---- declarations and header -------------------------------------------- */

static lz_status check_tensor(const lz_stw_tensor *t, const char *path) {
    if (!t->name || !t->name[0])
        return lz_fail(LZ_ERR_INTERNAL, "%s: a tensor has no name", path);
    if (strcmp(t->name, "__metadata__") == 0)
        return lz_fail(LZ_ERR_INTERNAL, "%s: '__metadata__' is not a tensor name", path);
    if ((int)t->dtype < 0 || t->dtype >= LZ_DTYPE_COUNT)
        return lz_fail(LZ_ERR_INTERNAL, "%s: tensor %s: bad dtype %d", path, t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > LZ_STW_MAX_DIMS)
        return lz_fail(LZ_ERR_INTERNAL, "%s: tensor %s: %d dims (at most %d)", path, t->name, t->ndim,
                       LZ_STW_MAX_DIMS);
    /* The byte size must fit in 63 bits so that offsets stay JSON integers. */
    uint64_t limit = (uint64_t)INT64_MAX / 8, numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return lz_fail(LZ_ERR_INTERNAL, "%s: tensor %s: negative dim %" PRId64, path, t->name, t->shape[d]);
        if (t->shape[d] > 0 && numel > limit / (uint64_t)t->shape[d])
            return lz_fail(LZ_ERR_INTERNAL, "%s: tensor %s: too large", path, t->name);
        numel *= (uint64_t)t->shape[d];
    }
    return LZ_OK;
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} */
static json_t *tensor_entry(const lz_stw_tensor *t, uint64_t begin, uint64_t end) {
    json_t *shape = json_array();
    for (int d = 0; shape && d < t->ndim; d++)
        if (json_array_append_new(shape, json_integer(t->shape[d])) != 0) {
            json_decref(shape);
            return NULL;
        }
    if (!shape)
        return NULL;
    return json_pack("{s:s, s:o, s:[I,I]}", "dtype", lz_dtype_name(t->dtype), "shape", shape, "data_offsets",
                     (json_int_t)begin, (json_int_t)end);
}

/* Builds the header JSON; fills w->sizes. Errors name the file and tensor. */
static lz_status build_header(lz_st_writer *w, char **out) {
    json_t *root = json_object();
    if (!root || json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt")) != 0) {
        json_decref(root);
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory building the header", w->path);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n; i++) {
        const lz_stw_tensor *t = &w->tensors[i];
        lz_status st = check_tensor(t, w->path);
        if (st == LZ_OK && json_object_get(root, t->name))
            st = lz_fail(LZ_ERR_INTERNAL, "%s: tensor %s declared twice", w->path, t->name);
        if (st != LZ_OK) {
            json_decref(root);
            return st;
        }
        w->sizes[i] = lz_stw_tensor_bytes(t);
        json_t *entry = tensor_entry(t, offset, offset + w->sizes[i]);
        /* json_object_set_new also refuses names that are not UTF-8. */
        if (!entry || json_object_set_new(root, t->name, entry) != 0) {
            json_decref(root);
            return lz_fail(LZ_ERR_INTERNAL, "%s: cannot add tensor '%s' to the header (not UTF-8?)", w->path,
                           t->name);
        }
        offset += w->sizes[i];
    }
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!*out)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory building the header", w->path);
    return LZ_OK;
}

/* u64 length + JSON + spaces up to a multiple of 8. */
static lz_status write_header(lz_st_writer *w, const char *json) {
    size_t len = strlen(json);
    size_t padded = (len + 7) / 8 * 8;
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    LZ_TRY(write_all(w->fd, prefix, sizeof prefix, w->tmp_path));
    LZ_TRY(write_all(w->fd, json, len, w->tmp_path));
    LZ_TRY(write_all(w->fd, "       ", padded - len, w->tmp_path));
    w->header_bytes = 8 + padded;
    return LZ_OK;
}

/* Zero-byte tensors are complete as soon as they become current. */
static void skip_complete(lz_st_writer *w) {
    while (w->current < w->n && w->written == w->sizes[w->current]) {
        w->current++;
        w->written = 0;
    }
}

lz_status lz_stw_create(const char *path, const lz_stw_tensor *tensors, size_t n, lz_st_writer **out) {
    *out = NULL;
    lz_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    w->fd = -1;
    w->tensors = tensors;
    w->n = n;
    w->path = strdup(path);
    w->tmp_path = temp_path_for(path);
    w->sizes = calloc(n ? n : 1, sizeof *w->sizes);
    if (!w->path || !w->tmp_path || !w->sizes) {
        lz_stw_abort(w);
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    }
    char *json = NULL;
    lz_status st = build_header(w, &json);
    if (st == LZ_OK) {
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (w->fd < 0)
            st = lz_fail(LZ_ERR_IO, "create %s: %s", w->tmp_path, strerror(errno));
    }
    if (st == LZ_OK)
        st = write_header(w, json);
    free(json);
    if (st != LZ_OK) {
        lz_stw_abort(w);
        return st;
    }
    skip_complete(w);
    *out = w;
    return LZ_OK;
}

/* ---- data -------------------------------------------------------------------- */

lz_status lz_stw_write(lz_st_writer *w, const void *data, size_t nbytes) {
    if (w->finished || w->fd < 0)
        return lz_fail(LZ_ERR_INTERNAL, "%s: write after finish", w->path);
    if (nbytes == 0)
        return LZ_OK;
    if (w->current >= w->n)
        return lz_fail(LZ_ERR_INTERNAL, "%s: %zu bytes written past the last tensor", w->path, nbytes);
    const lz_stw_tensor *t = &w->tensors[w->current];
    uint64_t left = w->sizes[w->current] - w->written;
    if (nbytes > left)
        return lz_fail(LZ_ERR_INTERNAL, "%s: tensor %s: chunk of %zu bytes but only %" PRIu64 " bytes left", w->path,
                       t->name, nbytes, left);
    LZ_TRY(write_all(w->fd, data, nbytes, w->tmp_path));
    w->written += nbytes;
    skip_complete(w);
    return LZ_OK;
}

lz_status lz_stw_write_filled(lz_st_writer *w, lz_stw_fill_fn fill, void *ctx) {
    if (w->current >= w->n)
        return lz_fail(LZ_ERR_INTERNAL, "%s: every tensor is already written", w->path);
    if (!w->buf && !(w->buf = malloc(LZ_STW_CHUNK)))
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory for the write buffer", w->path);
    size_t index = w->current;
    const lz_stw_tensor *t = &w->tensors[index];
    while (w->current == index) {
        uint64_t left = w->sizes[index] - w->written;
        size_t chunk = left < LZ_STW_CHUNK ? (size_t)left : LZ_STW_CHUNK;
        lz_status st = fill(ctx, t, w->written, w->buf, chunk);
        if (st != LZ_OK) {
            lz_error_prefix("%s: tensor %s: ", w->path, t->name);
            return st;
        }
        LZ_TRY(lz_stw_write(w, w->buf, chunk));
    }
    return LZ_OK;
}

lz_status lz_stw_finish(lz_st_writer *w) {
    if (w->finished)
        return LZ_OK;
    if (w->current < w->n)
        return lz_fail(LZ_ERR_INTERNAL, "%s: tensor %s got %" PRIu64 " of %" PRIu64 " bytes", w->path,
                       w->tensors[w->current].name, w->written, w->sizes[w->current]);
    free(w->buf);
    w->buf = NULL;
    int fd = w->fd;
    w->fd = -1;
    LZ_TRY(sync_and_close(fd, w->tmp_path));
    w->finished = true;
    return LZ_OK;
}

static void writer_free(lz_st_writer *w) {
    free(w->path);
    free(w->tmp_path);
    free(w->sizes);
    free(w->buf);
    free(w);
}

lz_status lz_stw_commit(lz_st_writer *w) {
    if (!w->finished) {
        lz_status st = lz_fail(LZ_ERR_INTERNAL, "%s: commit before finish", w->path);
        lz_stw_abort(w);
        return st;
    }
    lz_status st = rename_into_place(w->tmp_path, w->path);
    if (st != LZ_OK)
        unlink(w->tmp_path);
    writer_free(w);
    return st;
}

void lz_stw_abort(lz_st_writer *w) {
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp_path)
        unlink(w->tmp_path); /* may not exist yet: nothing to report */
    writer_free(w);
}

uint64_t lz_stw_header_bytes(const lz_st_writer *w) { return w->header_bytes; }

/* ---- sharded model folders ------------------------------------------------- */

lz_status lz_stw_plan_shards(const lz_stw_tensor *tensors, size_t n, uint64_t max_bytes, lz_stw_shard **out,
                             size_t *n_out) {
    /* At most one shard per tensor, and one (empty) shard for no tensors. */
    lz_stw_shard *shards = calloc(n ? n : 1, sizeof *shards);
    if (!shards)
        return lz_fail(LZ_ERR_NOMEM, "out of memory planning shards");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = lz_stw_tensor_bytes(&tensors[i]);
        lz_stw_shard *s = &shards[k];
        bool fits = max_bytes == 0 || s->bytes + bytes <= max_bytes;
        if (s->count > 0 && !fits)
            s = &shards[++k];
        if (s->count == 0)
            s->first = i;
        s->count++;
        s->bytes += bytes;
    }
    *out = shards;
    *n_out = k + 1;
    return LZ_OK;
}

static lz_status write_shard(lz_st_writer **w, const char *path, const lz_stw_tensor *tensors,
                             const lz_stw_shard *s, lz_stw_fill_fn fill, void *ctx) {
    LZ_TRY(lz_stw_create(path, tensors + s->first, s->count, w));
    while ((*w)->current < (*w)->n)
        LZ_TRY(lz_stw_write_filled(*w, fill, ctx));
    return lz_stw_finish(*w);
}

/* The index, as HF writes it: total data bytes and tensor -> file. */
static lz_status index_json(const lz_stw_tensor *tensors, const lz_stw_shard *shards, size_t n_shards,
                            char *const *names, char **out) {
    json_t *map = json_object();
    uint64_t total = 0;
    int bad = map == NULL;
    for (size_t k = 0; k < n_shards && !bad; k++) {
        total += shards[k].bytes;
        for (size_t i = shards[k].first; i < shards[k].first + shards[k].count && !bad; i++)
            bad = json_object_set_new(map, tensors[i].name, json_string(names[k])) != 0;
    }
    json_t *root = bad ? NULL : json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                                          "weight_map", map);
    if (bad)
        json_decref(map);
    *out = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return *out ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "out of memory building model.safetensors.index.json");
}

/* Writes data to a temporary file next to path; the caller renames it. */
static lz_status write_temp(const char *tmp, const void *data, size_t len) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return lz_fail(LZ_ERR_IO, "create %s: %s", tmp, strerror(errno));
    lz_status st = write_all(fd, data, len, tmp);
    if (st != LZ_OK) {
        close(fd);
        return st;
    }
    return sync_and_close(fd, tmp);
}

lz_status lz_write_file_atomic(const char *path, const void *data, size_t len) {
    char *tmp = temp_path_for(path);
    if (!tmp)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    lz_status st = write_temp(tmp, data, len);
    if (st == LZ_OK)
        st = rename_into_place(tmp, path);
    if (st != LZ_OK)
        unlink(tmp);
    free(tmp);
    return st;
}

/* Names of the shard files: model.safetensors alone, else the HF pattern. */
static char **shard_names(const char *dir, size_t n_shards, char ***paths) {
    char **names = calloc(n_shards, sizeof *names);
    *paths = calloc(n_shards, sizeof **paths);
    for (size_t k = 0; names && *paths && k < n_shards; k++) {
        char name[64];
        if (n_shards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n_shards);
        names[k] = strdup(name);
        (*paths)[k] = join_path(dir, name);
    }
    return names;
}

static bool all_set(char **s, size_t n) {
    for (size_t i = 0; s && i < n; i++)
        if (!s[i])
            return false;
    return s != NULL;
}

static void free_strings(char **s, size_t n) {
    for (size_t i = 0; s && i < n; i++)
        free(s[i]);
    free(s);
}

/* A stale file of the other layout would make a reader pick the wrong
 * weights: model.safetensors beside a new index, or an old index beside a
 * new model.safetensors. Old shards that no index names are harmless. */
static lz_status remove_other_layout(const char *dir, bool sharded) {
    char *stale = join_path(dir, sharded ? "model.safetensors" : "model.safetensors.index.json");
    if (!stale)
        return lz_fail(LZ_ERR_NOMEM, "out of memory");
    lz_status st = LZ_OK;
    if (unlink(stale) != 0 && errno != ENOENT)
        st = lz_fail(LZ_ERR_IO, "remove stale %s: %s", stale, strerror(errno));
    free(stale);
    return st;
}

/* Renames every finished shard, then the index: the index appears last, so a
 * reader never sees it name a file that is not there yet. */
static lz_status commit_all(lz_st_writer **writers, size_t n_shards, const char *index_tmp, const char *index_path) {
    lz_status st = LZ_OK;
    for (size_t k = 0; k < n_shards; k++) {
        if (st == LZ_OK)
            st = lz_stw_commit(writers[k]);
        else
            lz_stw_abort(writers[k]);
        writers[k] = NULL;
    }
    if (st == LZ_OK && index_tmp)
        st = rename_into_place(index_tmp, index_path);
    return st;
}

lz_status lz_stw_write_model(const char *dir, const lz_stw_tensor *tensors, size_t n, uint64_t max_shard_bytes,
                             lz_stw_fill_fn fill, void *ctx) {
    lz_stw_shard *shards = NULL;
    size_t n_shards = 0;
    LZ_TRY(lz_stw_plan_shards(tensors, n, max_shard_bytes, &shards, &n_shards));
    char **paths = NULL;
    char **names = shard_names(dir, n_shards, &paths);
    lz_st_writer **writers = calloc(n_shards, sizeof *writers);
    char *index_path = join_path(dir, "model.safetensors.index.json");
    char *index_tmp = index_path ? temp_path_for(index_path) : NULL;
    char *index = NULL;
    lz_status st = LZ_OK;
    if (!all_set(names, n_shards) || !all_set(paths, n_shards) || !writers || !index_tmp)
        st = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", dir);
    for (size_t k = 0; k < n_shards && st == LZ_OK; k++)
        st = write_shard(&writers[k], paths[k], tensors, &shards[k], fill, ctx);
    bool sharded = n_shards > 1;
    if (st == LZ_OK && sharded)
        st = index_json(tensors, shards, n_shards, names, &index);
    if (st == LZ_OK && sharded)
        st = write_temp(index_tmp, index, strlen(index));
    if (st == LZ_OK)
        st = commit_all(writers, n_shards, sharded ? index_tmp : NULL, index_path);
    if (st == LZ_OK)
        st = remove_other_layout(dir, sharded);
    /* On failure: every temporary file goes; committed ones stay. */
    for (size_t k = 0; writers && k < n_shards; k++)
        lz_stw_abort(writers[k]);
    if (st != LZ_OK && index_tmp)
        unlink(index_tmp);
    free(index);
    free(index_tmp);
    free(index_path);
    free(writers);
    free_strings(names, n_shards);
    free_strings(paths, n_shards);
    free(shards);
    return st;
}
