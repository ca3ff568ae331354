/* atomic_file.c - temp file + fsync + rename + fsync of the folder. */
#include <ctype.h>  // isdigit
#include <dirent.h> // opendir, readdir
#include <errno.h>  // errno
#include <fcntl.h>  // open, O_RDONLY, O_DIRECTORY
#include <signal.h> // kill
#include <stdio.h>  // fopen, fclose, rename, snprintf
#include <stdlib.h> // strtol
#include <string.h> // strerror, strlen, strrchr
#include <sys/stat.h> // lstat, S_ISREG
#include <unistd.h> // fsync, unlink, getpid

#include "atomic_file.h"

lz_status lz_atomic_open(lz_atomic_file *f, const char *path) {
    if (strlen(path) >= sizeof f->path)
        return lz_fail(LZ_ERR_INPUT, "%.64s...: path too long", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%ld", path, (long)getpid());
    f->fp = fopen(f->tmp, "wb");
    if (!f->fp)
        return lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    return LZ_OK;
}

/* The folder of `path` into dir ("." for a bare name); returns the name in it. */
static const char *folder_of(const char *path, char dir[4096]) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, 4096, ".");
    else
        snprintf(dir, 4096, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return slash ? slash + 1 : path;
}

/* The folder whose entry the rename changed. */
static int fsync_folder(const char *path) {
    char dir[4096];
    folder_of(path, dir);
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return errno;
    const int err = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return err == EINVAL ? 0 : err; // a file system that cannot sync folders has nothing to sync
}

lz_status lz_atomic_commit(lz_atomic_file *f, bool ok) {
    int err = ok ? 0 : EIO;
    if (ok && fflush(f->fp) != 0)
        err = errno;
    if (!err && fsync(fileno(f->fp)) != 0)
        err = errno;
    if (fclose(f->fp) != 0 && !err)
        err = errno;
    f->fp = NULL;
    if (!err && rename(f->tmp, f->path) != 0)
        err = errno;
    if (err) {
        unlink(f->tmp);
        return lz_fail(LZ_ERR_IO, "%s: write failed: %s", f->path, strerror(err));
    }
    if ((err = fsync_folder(f->path)) != 0) // renamed, but the rename may not survive a crash yet
        return lz_fail(LZ_ERR_IO, "%s: written, but its folder cannot be synced: %s", f->path, strerror(err));
    return LZ_OK;
}

/* The writer's pid of "<stem>.tmp.<pid>", where stem is name or ends in
 * ending; 0 when `entry` is no such temp file. */
static long temp_writer(const char *entry, const char *name, const char *ending) {
    const char *mark = strstr(entry, ".tmp."), *next;
    while (mark && (next = strstr(mark + 1, ".tmp.")) != NULL) // the last ".tmp."
        mark = next;
    if (!mark || !isdigit((unsigned char)mark[5]) || strlen(mark + 5) > 9) // pids have at most 7 digits
        return 0;
    for (const char *p = mark + 5; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    const size_t stem = (size_t)(mark - entry);
    if (name && (strlen(name) != stem || strncmp(entry, name, stem) != 0))
        return 0;
    if (!name && (stem <= strlen(ending) || strncmp(entry + stem - strlen(ending), ending, strlen(ending)) != 0))
        return 0;
    const long pid = strtol(mark + 5, NULL, 10);
    return pid > 0 ? pid : 0;
}

static bool writer_alive(long pid) {
    if (pid == (long)getpid())
        return false; // this process: its writes begin after this call
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

lz_status lz_atomic_remove_stale(const char *dir, const char *name, const char *ending, int *removed) {
    if (removed)
        *removed = 0;
    DIR *d = opendir(dir);
    if (!d)
        return lz_fail(LZ_ERR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
    lz_status s = LZ_OK;
    for (struct dirent *e; s == LZ_OK && (e = readdir(d)) != NULL;) {
        const long pid = temp_writer(e->d_name, name, ending ? ending : "");
        if (pid == 0 || writer_alive(pid))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue; // a folder or link that only looks like a temp file is not one of ours: left alone
        if (unlink(path) != 0 && errno != ENOENT)
            s = lz_fail(LZ_ERR_IO, "%s: cannot remove a stale temp file: %s", path, strerror(errno));
        else if (removed)
            (*removed)++;
    }
    closedir(d);
    return s;
}

lz_status lz_atomic_remove_stale_of(const char *path, int *removed) {
    char dir[4096];
    const char *name = folder_of(path, dir);
    return lz_atomic_remove_stale(dir, name, NULL, removed);
}
