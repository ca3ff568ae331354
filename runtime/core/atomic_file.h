/* atomic_file.h - write a file so that it appears whole or not at all:
 * write to "<path>.tmp.<pid>" in the same folder, fsync it, rename it over
 * path, fsync the folder (so that the rename itself survives a crash). Until
 * the rename, the file that was at path stays there untouched. */
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

/* Temp files that a writer killed mid-write left in `dir`: every regular file
 * "<name>.tmp.<pid>" whose pid is no live process of this machine (or is this
 * process, which has not begun writing when it calls this) is removed; a
 * folder or link of such a name is not a temp file and stays. With
 * `name`, only that file's temporaries; else those of every name ending in
 * `ending` (e.g. ".lzs"). *removed (may be NULL) counts them. */
lz_status lz_atomic_remove_stale(const char *dir, const char *name, const char *ending, int *removed);
/* The same for the one file at `path` (its folder, its name). */
lz_status lz_atomic_remove_stale_of(const char *path, int *removed);

#endif
