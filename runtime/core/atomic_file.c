/* atomic_file.c - temp file + fsync + rename. */
#include <errno.h>  // errno
#include <stdio.h>  // fopen, fclose, rename, snprintf
#include <string.h> // strerror, strlen
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
    return LZ_OK;
}
