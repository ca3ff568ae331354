/* atomic_file.h - write a file so that it appears whole or not at all:
 * write to "<path>.tmp.<pid>" in the same folder, fsync, rename over path. */
#ifndef LZ_ATOMIC_FILE_H
#define LZ_ATOMIC_FILE_H

#include <stdbool.h> // bool
#include <stdio.h>   // FILE

#include "error.h" // lz_status

typedef struct {
    FILE *fp;
    char path[4096];
    char tmp[4200];
} lz_atomic_file;

lz_status lz_atomic_open(lz_atomic_file *f, const char *path);
/* ok = every write succeeded. Flushes, fsyncs and renames when ok; otherwise
 * (or if any of that fails) removes the temp file and returns an error. */
lz_status lz_atomic_commit(lz_atomic_file *f, bool ok);

#endif
