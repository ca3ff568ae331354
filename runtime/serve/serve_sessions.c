/* serve_sessions.c - the session store (see serve_sessions.h). */
#include "serve_sessions.h"

#include <dirent.h> // opendir, readdir
#include <stdio.h>  // snprintf, fprintf
#include <stdlib.h> // realloc, free
#include <string.h> // strcmp, strdup, strlen
#include <unistd.h> // access, unlink

#include "session.h" // lz_session_read_file, lz_session_write_file

lz_status serve_sessions_init(serve_sessions *s, size_t budget, const char *dir) {
    *s = (serve_sessions){.budget = budget, .dir = dir};
    if (!dir)
        return LZ_OK;
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

static void file_path(const serve_sessions *s, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s.lzs", s->dir, name);
}

static void remove_entry(serve_sessions *s, int i) {
    s->bytes -= s->entries[i].len;
    free(s->entries[i].name);
    s->entries[i] = s->entries[--s->n];
}

lz_status serve_sessions_take(serve_sessions *s, const char *name, uint8_t **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->entries[i].name, name) == 0) {
            *buf = s->entries[i].buf;
            *len = s->entries[i].len;
            remove_entry(s, i);
            return LZ_OK;
        }
    if (!s->dir)
        return LZ_OK;
    char path[4096];
    file_path(s, name, path, sizeof path);
    if (access(path, F_OK) != 0)
        return LZ_OK;
    LZ_TRY(lz_session_read_file(path, buf, len));
    if (unlink(path) != 0) { // it lives in memory now; a stale file would come back after a restart
        free(*buf);
        *buf = NULL;
        return lz_fail(LZ_ERR_IO, "session %s: cannot remove %s", name, path);
    }
    s->on_disk--;
    return LZ_OK;
}

/* The least recently used entry leaves memory: to DIR, or gone. */
static lz_status spill_one(serve_sessions *s) {
    int lru = 0;
    for (int i = 1; i < s->n; i++)
        if (s->entries[i].used < s->entries[lru].used)
            lru = i;
    serve_session_entry *e = &s->entries[lru];
    if (s->dir) {
        char path[4096];
        file_path(s, e->name, path, sizeof path);
        LZ_TRY(lz_session_write_file(path, e->buf, e->len));
        s->on_disk++;
    } else {
        fprintf(stderr, "lizard serve: session '%s' dropped: --session-memory is full and there is no --session-dir\n",
                e->name);
    }
    free(e->buf);
    remove_entry(s, lru);
    return LZ_OK;
}

lz_status serve_sessions_put(serve_sessions *s, const char *name, uint8_t *buf, size_t len) {
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 16;
        serve_session_entry *grown = realloc(s->entries, sizeof *grown * (size_t)cap);
        if (!grown) {
            free(buf);
            return lz_fail(LZ_ERR_NOMEM, "session %s: out of memory", name);
        }
        s->entries = grown, s->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        free(buf);
        return lz_fail(LZ_ERR_NOMEM, "session %s: out of memory", name);
    }
    s->entries[s->n++] = (serve_session_entry){copy, buf, len, ++s->clock};
    s->bytes += len;
    while (s->bytes > s->budget && s->n > 0)
        LZ_TRY(spill_one(s));
    return LZ_OK;
}

lz_status serve_sessions_flush(serve_sessions *s) {
    while (s->dir && s->n > 0)
        LZ_TRY(spill_one(s));
    return LZ_OK;
}
