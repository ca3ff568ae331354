/* serve_sessions.c - the session store (see serve_sessions.h). */
#include "serve_sessions.h"

#include <dirent.h>        // opendir, readdir
#include <errno.h>         // errno
#include <nettle/sha2.h>   // sha256_digest
#include <stdio.h>         // snprintf, fprintf
#include <stdlib.h>        // realloc, free
#include <string.h>        // strcmp, strdup, strlen, strchr
#include <unistd.h>        // access

#include "atomic_file.h" // lz_atomic_remove_stale
#include "session.h"     // lz_session_read_file, lz_session_write_file

enum { KEY_HASH_HEX = 32 }; /* 128 of SHA-256's bits name a key's sessions */

lz_status serve_sessions_init(serve_sessions *s, size_t budget, const char *dir) {
    *s = (serve_sessions){.budget = budget, .dir = dir};
    if (!dir)
        return LZ_OK;
    int stale = 0;
    if (lz_atomic_remove_stale(dir, NULL, ".lzs", &stale) != LZ_OK) {
        lz_error_prefix("--session-dir: ");
        return LZ_ERR_IO;
    }
    if (stale > 0)
        fprintf(stderr, "lizard serve: removed %d temp file%s that killed saves left in %s\n", stale,
                stale == 1 ? "" : "s", dir);
    DIR *d = opendir(dir);
    if (!d)
        return lz_fail(LZ_ERR_IO, "--session-dir: %s: cannot open the folder", dir);
    for (struct dirent *f; (f = readdir(d)) != NULL;) {
        const size_t n = strlen(f->d_name);
        s->on_disk += n > 4 && strcmp(f->d_name + n - 4, ".lzs") == 0;
    }
    closedir(d);
    return LZ_OK;
}

void serve_sessions_free(serve_sessions *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->entries[i].name);
        free(s->entries[i].buf);
    }
    free(s->entries);
    *s = (serve_sessions){0};
}

const char *serve_session_shown(const char *name) {
    const char *plus = strchr(name, '+'); // never in a client's name (serve_api.c)
    return plus ? plus + 1 : name;
}

lz_status serve_session_keyed_name(const char *key, const char *name, char **out) {
    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(key), (const uint8_t *)key);
    sha256_digest(&ctx, sizeof digest, digest);
    const size_t len = KEY_HASH_HEX + 1 + strlen(name) + 1;
    if (!(*out = malloc(len)))
        return lz_fail(LZ_ERR_NOMEM, "session %s: out of memory", name);
    for (int i = 0; i < KEY_HASH_HEX / 2; i++)
        snprintf(*out + 2 * i, 3, "%02x", digest[i]);
    snprintf(*out + KEY_HASH_HEX, len - KEY_HASH_HEX, "+%s", name);
    return LZ_OK;
}

static void file_path(const serve_sessions *s, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s.lzs", s->dir, name);
}

static int find(const serve_sessions *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->entries[i].name, name) == 0)
            return i;
    return -1;
}

/* Drops entry i (its bytes are the caller's, or freed with `free_buf`). */
static void remove_entry(serve_sessions *s, int i, bool free_buf) {
    s->bytes -= s->entries[i].len;
    free(s->entries[i].name);
    if (free_buf)
        free(s->entries[i].buf);
    s->entries[i] = s->entries[--s->n];
}

lz_status serve_sessions_take(serve_sessions *s, const char *name, uint8_t **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    const int i = find(s, name);
    if (i >= 0) {
        *buf = s->entries[i].buf;
        *len = s->entries[i].len;
        remove_entry(s, i, false);
        return LZ_OK;
    }
    if (!s->dir)
        return LZ_OK;
    char path[4096];
    file_path(s, name, path, sizeof path);
    if (access(path, F_OK) != 0)
        return LZ_OK;
    if (lz_session_read_file(path, buf, len) != LZ_OK) { // stays on disk, as it is, for the operator
        fprintf(stderr, "lizard serve: session '%s': %s\n", name, lz_error_message());
        lz_error_clear();
        return lz_fail(LZ_ERR_IO, "session %s: cannot be read from the session folder", serve_session_shown(name));
    }
    return LZ_OK;
}

/* Entry i to DIR/NAME.lzs, replacing the file only once the new one is
 * durable; it leaves memory when written. */
static lz_status write_entry(serve_sessions *s, int i) {
    const serve_session_entry *e = &s->entries[i];
    char path[4096];
    file_path(s, e->name, path, sizeof path);
    const bool existed = access(path, F_OK) == 0;
    const lz_status st = lz_session_write_file(path, e->buf, e->len);
    s->on_disk += !existed && access(path, F_OK) == 0; // renamed in, even if its folder's sync then failed
    if (st != LZ_OK) {
        fprintf(stderr, "lizard serve: session '%s' not written: %s\n", e->name, lz_error_message());
        lz_error_clear();
        return lz_fail(LZ_ERR_IO, "session %s: the session folder cannot be written", serve_session_shown(e->name));
    }
    remove_entry(s, i, true);
    return LZ_OK;
}

static int least_recent(const serve_sessions *s) {
    int lru = 0;
    for (int i = 1; i < s->n; i++)
        if (s->entries[i].used < s->entries[lru].used)
            lru = i;
    return lru;
}

/* Inserts or replaces `name` (owning buf); -1 when memory ran out (buf freed). */
static int insert(serve_sessions *s, const char *name, uint8_t *buf, size_t len) {
    int i = find(s, name);
    if (i >= 0) {
        s->bytes -= s->entries[i].len;
        free(s->entries[i].buf);
    } else {
        char *copy = strdup(name);
        if (s->n == s->cap && copy) {
            const int cap = s->cap ? 2 * s->cap : 16;
            serve_session_entry *grown = realloc(s->entries, sizeof *grown * (size_t)cap);
            if (grown)
                s->entries = grown, s->cap = cap;
        }
        if (!copy || s->n == s->cap) {
            free(copy);
            free(buf);
            return -1;
        }
        i = s->n++;
        s->entries[i].name = copy;
    }
    s->entries[i].buf = buf;
    s->entries[i].len = len;
    s->entries[i].used = ++s->clock;
    s->bytes += len;
    return i;
}

lz_status serve_sessions_put(serve_sessions *s, const char *name, uint8_t *buf, size_t len) {
    if (insert(s, name, buf, len) < 0)
        return lz_fail(LZ_ERR_NOMEM, "session %s: out of memory", serve_session_shown(name));
    while (s->bytes > s->budget && s->n > 0) {
        const int lru = least_recent(s);
        if (!s->dir) {
            fprintf(stderr, "lizard serve: session '%s' dropped: --session-memory is full and there is no "
                            "--session-dir\n", s->entries[lru].name);
            remove_entry(s, lru, true);
        } else if (write_entry(s, lru) != LZ_OK) { // the folder fails: keep the budget by refusing this one
            const int mine = find(s, name);
            if (mine >= 0)
                remove_entry(s, mine, true);
            lz_error_clear(); // the message names this session only
            return lz_fail(LZ_ERR_IO, "session %s: not saved: the session memory is full and the session folder "
                           "cannot be written", serve_session_shown(name));
        }
    }
    return LZ_OK;
}

void serve_sessions_put_back(serve_sessions *s, const char *name, uint8_t *buf, size_t len) {
    if (insert(s, name, buf, len) < 0)
        fprintf(stderr, "lizard serve: session '%s' dropped: out of memory\n", name);
}

lz_status serve_sessions_flush(serve_sessions *s) {
    int failed = 0;
    for (int i = 0; s->dir && i < s->n;) // a written entry leaves, another takes its index
        if (write_entry(s, i) != LZ_OK)
            failed++, i++;
    lz_error_clear();
    if (failed)
        return lz_fail(LZ_ERR_IO, "lizard serve: %d session%s not written to --session-dir (named above)", failed,
                       failed == 1 ? "" : "s");
    return LZ_OK;
}
