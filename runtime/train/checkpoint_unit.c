/* checkpoint_unit.c - see checkpoint_unit.h. */
#include "checkpoint_unit.h"

#include <ctype.h>    // isdigit, isxdigit
#include <dirent.h>   // opendir, readdir
#include <errno.h>    // errno, ENOENT, EINVAL, EINTR
#include <fcntl.h>    // open, O_*
#include <inttypes.h> // PRIx64, PRId64
#include <signal.h>   // kill, raise, SIGKILL
#include <stdio.h>    // snprintf, rename
#include <stdlib.h>   // malloc, free, strtoull
#include <string.h>   // strcmp, strlen, strerror, memcpy
#include <sys/stat.h> // mkdir, stat, lstat
#include <unistd.h>   // getpid, write, fsync, close, unlink, rmdir

#include "hash.h"        // lz_fnv1a, lz_hash_wide, LZ_FNV1A_INIT
#include "json_read.h"   // lz_json_loadb
#include "knobs.h"       // lz_knobs_get: LIZARD_CHECKPOINT_KILL
#include "safetensors.h" // lz_st_parse, lz_st_find
#include "text_file.h"   // lz_read_text_file

#define FORMAT "lizard-checkpoint-1"
static const char TENSORS_FILE[] = "tensors.safetensors", STATE_FILE[] = "state.json";

enum { PATH_CAP = 4096 };

/* ---- the crash tests' kill points ------------------------------------------------------------ */

static int points_passed; /* of this process's checkpoint writes */

/* After each write, sync, rename and removal: LIZARD_CHECKPOINT_KILL=N ends the process at the Nth. */
static void kill_point(void) {
    const int at = lz_knobs_get()->checkpoint_kill;
    if (at > 0 && ++points_passed == at)
        raise(SIGKILL);
}

/* ---- the checksum --------------------------------------------------------------------------- */

/* Over the state's step, signature and fields, then each tensor's name and bytes (checkpoint_unit.h). */
static lz_status checksum_of(long step, const char *signature, const json_t *fields, const lz_ckpt_tensor *tensors,
                             const void *const *data, size_t n, uint64_t *out) {
    char *text = json_dumps(fields, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        return lz_fail(LZ_ERR_NOMEM, "checkpoint: out of memory");
    char head[64];
    snprintf(head, sizeof head, "step=%ld\nsignature=", step);
    uint64_t h = lz_fnv1a(LZ_FNV1A_INIT, head, strlen(head));
    h = lz_fnv1a(h, signature, strlen(signature));
    h = lz_fnv1a(h, "\nfields=", 8);
    h = lz_fnv1a(h, text, strlen(text));
    h = lz_fnv1a(h, "\n", 1);
    free(text);
    for (size_t i = 0; i < n; i++) {
        h = lz_fnv1a(h, tensors[i].decl.name, strlen(tensors[i].decl.name) + 1);
        h = lz_hash_wide(h, data[i], (size_t)lz_stw_tensor_bytes(&tensors[i].decl));
    }
    *out = h;
    return LZ_OK;
}

/* ---- folders -------------------------------------------------------------------------------- */

static lz_status sync_folder(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return lz_fail(LZ_ERR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
    const int rc = fsync(fd), e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) // a file system that cannot sync folders has nothing to sync
        return lz_fail(LZ_ERR_IO, "%s: cannot sync the folder: %s", dir, strerror(e));
    return LZ_OK;
}

/* A unit's folder and what is in it (plain files only: a unit holds nothing else). */
static lz_status remove_unit_folder(const char *path) {
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? LZ_OK : lz_fail(LZ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    lz_status s = LZ_OK;
    for (struct dirent *e; s == LZ_OK && (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char file[PATH_CAP];
        struct stat sb;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        if (lstat(file, &sb) != 0 || !S_ISREG(sb.st_mode))
            s = lz_fail(LZ_ERR_IO, "%s: holds '%s', which no checkpoint writes: left as it is", path, e->d_name);
        else if (unlink(file) != 0)
            s = lz_fail(LZ_ERR_IO, "%s: cannot remove: %s", file, strerror(errno));
        else
            kill_point();
    }
    closedir(d);
    if (s == LZ_OK && rmdir(path) != 0)
        s = lz_fail(LZ_ERR_IO, "%s: cannot remove the folder: %s", path, strerror(errno));
    return s;
}

/* The pid of "NAME<mark><pid>" (mark ".tmp." or ".old."), or 0 when `entry` is not that. */
static long marked_pid(const char *entry, const char *name, const char *mark) {
    const size_t n = strlen(name), m = strlen(mark);
    if (strncmp(entry, name, n) != 0 || strncmp(entry + n, mark, m) != 0)
        return 0;
    const char *digits = entry + n + m;
    if (!*digits || strlen(digits) > 9)
        return 0;
    for (const char *p = digits; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    return strtol(digits, NULL, 10);
}

static bool alive(long pid) { return pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

/* Folders a writer left that are no longer needed: NAME.tmp.<pid> and (only
 * when DIR/NAME exists) NAME.old.<pid>, of writers no longer alive or of this one. */
static lz_status remove_leftovers(const char *dir, const char *name, bool current_exists) {
    DIR *d = opendir(dir);
    if (!d)
        return lz_fail(LZ_ERR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
    lz_status s = LZ_OK;
    for (struct dirent *e; s == LZ_OK && (e = readdir(d)) != NULL;) {
        long pid = marked_pid(e->d_name, name, ".tmp.");
        if (pid == 0 && current_exists)
            pid = marked_pid(e->d_name, name, ".old.");
        if (pid <= 0 || alive(pid))
            continue;
        char path[PATH_CAP];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            s = remove_unit_folder(path);
    }
    closedir(d);
    return s;
}

/* DIR/NAME, or else the one DIR/NAME.old.<pid> a writer killed between its renames left: into out. */
static bool find_unit(const char *dir, const char *name, char *out, size_t cap) {
    struct stat sb;
    snprintf(out, cap, "%s/%s", dir, name);
    if (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode))
        return true;
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d)) != NULL;)
        if (marked_pid(e->d_name, name, ".old.") > 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            found = stat(out, &sb) == 0 && S_ISDIR(sb.st_mode);
        }
    if (d)
        closedir(d);
    return found;
}

bool lz_ckpt_exists(const char *dir, const char *name) {
    char path[PATH_CAP];
    return find_unit(dir, name, path, sizeof path);
}

/* ---- writing -------------------------------------------------------------------------------- */

static lz_status write_tensors(const char *folder, const lz_ckpt_tensor *tensors, size_t n) {
    char path[PATH_CAP + 32];
    snprintf(path, sizeof path, "%s/%s", folder, TENSORS_FILE);
    lz_stw_tensor *decl = malloc((n ? n : 1) * sizeof *decl);
    if (!decl)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        decl[i] = tensors[i].decl;
    lz_st_writer *w = NULL;
    lz_status s = lz_stw_create(path, decl, n, &w);
    if (s == LZ_OK)
        kill_point();
    for (size_t i = 0; s == LZ_OK && i < n; i++) {
        s = lz_stw_write(w, tensors[i].data, (size_t)lz_stw_tensor_bytes(&decl[i]));
        if (s == LZ_OK)
            kill_point();
    }
    if (s == LZ_OK && (s = lz_stw_finish(w)) == LZ_OK)
        kill_point();
    if (s == LZ_OK) {
        s = lz_stw_commit(w); // frees w
        if (s == LZ_OK)
            kill_point();
    } else {
        lz_stw_abort(w);
    }
    free(decl);
    return s;
}

static lz_status write_state(const char *folder, const char *text) {
    char path[PATH_CAP + 32];
    snprintf(path, sizeof path, "%s/%s", folder, STATE_FILE);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return lz_fail(LZ_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    for (size_t at = 0, len = strlen(text); at < len;) {
        const ssize_t k = write(fd, text + at, len - at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            const int e = errno;
            close(fd);
            return lz_fail(LZ_ERR_IO, "%s: write failed: %s", path, k < 0 ? strerror(e) : "no progress (disk full?)");
        }
        at += (size_t)k;
    }
    kill_point();
    const int rc = fsync(fd), e = errno;
    close(fd);
    if (rc != 0)
        return lz_fail(LZ_ERR_IO, "%s: cannot sync: %s", path, strerror(e));
    kill_point();
    return LZ_OK;
}

/* state.json's text, checksum included. */
static lz_status state_text(const lz_ckpt_state *st, const lz_ckpt_tensor *tensors, size_t n, char **out) {
    json_t *fields = st->fields ? json_incref(st->fields) : json_object();
    const void **data = malloc((n ? n : 1) * sizeof *data);
    lz_status s = fields && data && json_is_object(fields) ? LZ_OK : lz_fail(LZ_ERR_INTERNAL, "checkpoint fields");
    for (size_t i = 0; s == LZ_OK && i < n; i++)
        data[i] = tensors[i].data;
    uint64_t sum = 0;
    if (s == LZ_OK)
        s = checksum_of(st->step, st->signature, fields, tensors, data, n, &sum);
    free(data);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, sum);
    json_t *root = s == LZ_OK ? json_pack("{s:s, s:I, s:s, s:O, s:s}", "format", FORMAT, "step", (json_int_t)st->step,
                                          "signature", st->signature, "fields", fields, "checksum", hex)
                              : NULL;
    json_decref(fields);
    *out = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (s == LZ_OK && !*out)
        s = lz_fail(LZ_ERR_NOMEM, "checkpoint state: out of memory");
    return s;
}

lz_status lz_ckpt_write(const char *dir, const char *name, const lz_ckpt_state *st, const lz_ckpt_tensor *tensors,
                        size_t n) {
    if (!name[0] || strchr(name, '/') || strlen(dir) + strlen(name) + 32 > PATH_CAP)
        return lz_fail(LZ_ERR_INTERNAL, "checkpoint %s/%s: bad name", dir, name);
    char *text = NULL;
    LZ_TRY(state_text(st, tensors, n, &text));
    const long pid = (long)getpid();
    char tmp[PATH_CAP], cur[PATH_CAP], aside[PATH_CAP];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp.%ld", dir, name, pid);
    snprintf(cur, sizeof cur, "%s/%s", dir, name);
    snprintf(aside, sizeof aside, "%s/%s.old.%ld", dir, name, pid);
    struct stat sb;
    lz_status s = remove_unit_folder(tmp); // this process's own, from a write that failed
    if (s == LZ_OK && mkdir(tmp, 0755) != 0)
        s = lz_fail(LZ_ERR_IO, "%s: cannot make the folder: %s", tmp, strerror(errno));
    if (s == LZ_OK) {
        kill_point();
        s = write_tensors(tmp, tensors, n);
    }
    if (s == LZ_OK)
        s = write_state(tmp, text);
    free(text);
    if (s == LZ_OK && (s = sync_folder(tmp)) == LZ_OK)
        kill_point();
    const bool had = s == LZ_OK && stat(cur, &sb) == 0;
    if (had && rename(cur, aside) != 0)
        s = lz_fail(LZ_ERR_IO, "%s: cannot move aside: %s", cur, strerror(errno));
    else if (had)
        kill_point();
    if (s == LZ_OK && rename(tmp, cur) != 0) {
        s = lz_fail(LZ_ERR_IO, "%s: cannot rename to %s: %s", tmp, cur, strerror(errno));
        if (had && rename(aside, cur) != 0) // the previous unit back in its place
            lz_error_prefix("(the previous checkpoint is in %s) ", aside);
    } else if (s == LZ_OK) {
        kill_point();
    }
    if (s == LZ_OK && (s = sync_folder(dir)) == LZ_OK)
        kill_point();
    if (s != LZ_OK) {
        lz_status ignored = remove_unit_folder(tmp);
        (void)ignored;
        return s;
    }
    if (had)
        LZ_TRY(remove_unit_folder(aside));
    return remove_leftovers(dir, name, true);
}

/* ---- reading -------------------------------------------------------------------------------- */

static lz_status load_state(const char *where, const char *text, size_t len, json_t **root) {
    json_error_t err;
    *root = lz_json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!*root)
        return lz_fail(LZ_ERR_INPUT, "%s/%s: line %d: %s", where, STATE_FILE, err.line, err.text);
    if (!json_is_object(*root))
        return lz_fail(LZ_ERR_INPUT, "%s/%s: not a JSON object", where, STATE_FILE);
    static const char *const known[] = {"format", "step", "signature", "fields", "checksum"};
    const char *key;
    json_t *v;
    json_object_foreach(*root, key, v) {
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= strcmp(key, known[i]) == 0;
        if (!ok)
            return lz_fail(LZ_ERR_INPUT, "%s/%s: \"%.64s\" is not a field of a checkpoint", where, STATE_FILE, key);
    }
    const char *format = json_string_value(json_object_get(*root, "format"));
    if (!format || strcmp(format, FORMAT) != 0)
        return lz_fail(LZ_ERR_INPUT, "%s/%s: \"format\" must be \"%s\"", where, STATE_FILE, FORMAT);
    if (!json_is_integer(json_object_get(*root, "step")))
        return lz_fail(LZ_ERR_INPUT, "%s/%s: \"step\" must be an integer", where, STATE_FILE);
    if (!json_is_string(json_object_get(*root, "signature")))
        return lz_fail(LZ_ERR_INPUT, "%s/%s: \"signature\" must be a string", where, STATE_FILE);
    if (!json_is_object(json_object_get(*root, "fields")))
        return lz_fail(LZ_ERR_INPUT, "%s/%s: \"fields\" must be an object", where, STATE_FILE);
    const char *sum = json_string_value(json_object_get(*root, "checksum"));
    bool hex = sum && strlen(sum) == 16;
    for (int i = 0; hex && i < 16; i++)
        hex = isxdigit((unsigned char)sum[i]) && !isupper((unsigned char)sum[i]);
    if (!hex)
        return lz_fail(LZ_ERR_INPUT, "%s/%s: \"checksum\" must be 16 lowercase hex digits", where, STATE_FILE);
    return LZ_OK;
}

static const char *dims_text(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

/* Every expected tensor present with its dtype and shape, no other, every float finite. */
static lz_status check_tensors(const char *path, const lz_st_file *f, const lz_ckpt_expect *e, const void **data) {
    if (f->n_tensors != e->n_tensors) {
        for (size_t i = 0; i < f->n_tensors; i++) { // name the one this run has no place for
            bool expected = false;
            for (size_t j = 0; j < e->n_tensors && !expected; j++)
                expected = strcmp(f->tensors[i].name, e->tensors[j].decl.name) == 0;
            if (!expected)
                return lz_fail(LZ_ERR_INPUT, "%s: tensor '%.96s' is not one of this run's", path, f->tensors[i].name);
        }
    }
    for (size_t i = 0; i < e->n_tensors; i++) {
        const lz_stw_tensor *want = &e->tensors[i].decl;
        const lz_st_tensor *t = lz_st_find(f, want->name);
        char a[160], b[160];
        if (!t)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is missing", path, want->name);
        bool same = t->dtype == want->dtype && t->ndim == want->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == want->shape[d];
        if (!same)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' is %s %s; this run has %s %s", path, want->name,
                           lz_dtype_name(t->dtype), dims_text(t->shape, t->ndim, a, sizeof a),
                           lz_dtype_name(want->dtype), dims_text(want->shape, want->ndim, b, sizeof b));
        const size_t numel = (size_t)t->numel, bad = lz_first_nonfinite(t->data, t->dtype, numel);
        if (bad < numel)
            return lz_fail(LZ_ERR_INPUT, "%s: tensor '%s' holds a NaN or infinity (element %zu)", path, want->name,
                           bad);
        data[i] = t->data;
    }
    return LZ_OK;
}

lz_status lz_ckpt_check(const char *where, const char *state_text, size_t state_len, const uint8_t *tensors_file,
                        size_t tensors_len, const lz_ckpt_expect *e, long *step) {
    json_t *root = NULL;
    lz_status s = load_state(where, state_text, state_len, &root);
    const char *signature = s == LZ_OK ? json_string_value(json_object_get(root, "signature")) : NULL;
    const json_int_t at = s == LZ_OK ? json_integer_value(json_object_get(root, "step")) : 0;
    json_t *fields = s == LZ_OK ? json_object_get(root, "fields") : NULL;
    char state_path[PATH_CAP + 32], tensors_path[PATH_CAP + 32];
    snprintf(state_path, sizeof state_path, "%s/%s", where, STATE_FILE);
    snprintf(tensors_path, sizeof tensors_path, "%s/%s", where, TENSORS_FILE);
    if (s == LZ_OK && strcmp(signature, e->signature) != 0) {
        char what[256];
        lz_signature_first_difference(signature, e->signature, what, sizeof what);
        s = lz_fail(LZ_ERR_INPUT, "%s was made with different %s", state_path, what);
    }
    if (s == LZ_OK && (at < 1 || at > e->max_step))
        s = lz_fail(LZ_ERR_INPUT, "%s: step %lld is outside this run's 1..%ld", state_path, (long long)at, e->max_step);
    if (s == LZ_OK && e->check_fields)
        s = e->check_fields(e->ctx, fields, (long)at, state_path);
    else if (s == LZ_OK && json_object_size(fields) != 0)
        s = lz_fail(LZ_ERR_INPUT, "%s: \"fields\" must be {} for this run", state_path);
    lz_st_file f = {0};
    bool parsed = false;
    const void **data = s == LZ_OK ? malloc((e->n_tensors ? e->n_tensors : 1) * sizeof *data) : NULL;
    if (s == LZ_OK && !data)
        s = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", tensors_path);
    if (s == LZ_OK && (s = lz_st_parse(tensors_file, tensors_len, tensors_path, &f)) == LZ_OK)
        parsed = true;
    if (s == LZ_OK)
        s = check_tensors(tensors_path, &f, e, data);
    uint64_t sum = 0;
    if (s == LZ_OK)
        s = checksum_of((long)at, signature, fields, e->tensors, data, e->n_tensors, &sum);
    if (s == LZ_OK) {
        const uint64_t saved = strtoull(json_string_value(json_object_get(root, "checksum")), NULL, 16);
        if (saved != sum)
            s = lz_fail(LZ_ERR_INPUT, "%s: the checksum does not match the step, signature, fields and tensors (the "
                        "unit was edited or damaged)", state_path);
    }
    for (size_t i = 0; s == LZ_OK && i < e->n_tensors; i++)
        memcpy(e->tensors[i].data, data[i], (size_t)lz_stw_tensor_bytes(&e->tensors[i].decl));
    if (s == LZ_OK)
        *step = (long)at;
    if (parsed)
        lz_st_close(&f);
    free(data);
    json_decref(root);
    return s;
}

lz_status lz_ckpt_read(const char *dir, const char *name, const lz_ckpt_expect *e, long *step) {
    char unit[PATH_CAP], path[PATH_CAP + 32];
    if (!find_unit(dir, name, unit, sizeof unit))
        return lz_fail(LZ_ERR_INPUT, "%s/%s: no checkpoint there", dir, name);
    char *state = NULL;
    size_t state_len = 0;
    snprintf(path, sizeof path, "%s/%s", unit, STATE_FILE);
    LZ_TRY(lz_read_text_file("checkpoint", path, &state, &state_len));
    snprintf(path, sizeof path, "%s/%s", unit, TENSORS_FILE);
    lz_st_file mapped; // the file's bytes through lz_st_open's mapping
    lz_status s = lz_st_open(path, &mapped);
    if (s == LZ_OK) {
        s = lz_ckpt_check(unit, state, state_len, mapped.map, mapped.map_size, e, step);
        lz_st_close(&mapped);
    }
    free(state);
    return s;
}

void lz_signature_first_difference(const char *saved, const char *now, char *out, size_t cap) {
    snprintf(out, cap, "settings");
    for (const char *p = saved; *p;) {
        const char *end = strchr(p, ';');
        const size_t len = end ? (size_t)(end - p) + 1 : strlen(p);
        char item[512];
        snprintf(item, sizeof item, "%.*s", (int)len, p);
        if (!strstr(now, item)) {
            const char *eq = strchr(item, '=');
            snprintf(out, cap, "%.*s", (int)(eq ? (size_t)(eq - item) : strlen(item)), item);
            return;
        }
        p += len;
    }
}
