/* safetensors.h - memory-mapped safetensors files, one or sharded.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data section; offsets are relative to the data section.
 * Every offset, size and shape is validated before any pointer is formed. */
#ifndef LZ_SAFETENSORS_H
#define LZ_SAFETENSORS_H

#include <stddef.h> // size_t
#include <stdint.h> // int64_t, uint8_t

#include "dtype.h"  // lz_dtype
#include "error.h"  // lz_status

enum { LZ_MAX_DIMS = 8 };

typedef struct {
    char *name;
    lz_dtype dtype;
    int ndim;
    int64_t shape[LZ_MAX_DIMS];
    int64_t numel;
    const void *data; /* inside the mapping of `file` */
    size_t nbytes;
    const char *file; /* path of the file that holds it (owned by the file) */
} lz_st_tensor;

typedef struct {
    char *path;
    void *map;
    size_t map_size;
    size_t n_tensors;
    lz_st_tensor *tensors; /* sorted by name */
} lz_st_file;

/* Parses and validates a whole file image (header + data) held in memory.
 * `path` names the file in error messages. On success `out->tensors` point
 * into `buf`, which must outlive `out`. Used by lz_st_open and the fuzzer. */
lz_status lz_st_parse(const uint8_t *buf, size_t size, const char *path, lz_st_file *out);
/* mmap + lz_st_parse. */
lz_status lz_st_open(const char *path, lz_st_file *out);
void lz_st_close(lz_st_file *f);
/* The tensor called `name` in one file (bsearch), or NULL. */
const lz_st_tensor *lz_st_find(const lz_st_file *f, const char *name);

/* A model folder's weights: model.safetensors, or the shards listed in
 * model.safetensors.index.json ("weight_map": tensor -> file). */
typedef struct lz_weights {
    char *dir;
    size_t n_files;
    lz_st_file *files;
    size_t n_tensors;
    lz_st_tensor **index; /* all tensors of all files, sorted by name */
} lz_weights;

lz_status lz_weights_open(const char *dir, lz_weights *out);
void lz_weights_close(lz_weights *w);
/* NULL when absent. */
const lz_st_tensor *lz_weights_find(const lz_weights *w, const char *name);
/* Finds `name`, checks that it is a float weight of exactly the given shape
 * (ndim entries of `shape`); error names the tensor and what was expected. */
lz_status lz_weights_expect(const lz_weights *w, const char *name, int ndim, const int64_t *shape,
                            const lz_st_tensor **out);

#endif
