/* npy.h - 2-D float32 and 1-D int32 .npy files (NumPy format 1.0, little-endian, C order). */
#ifndef LZ_NPY_H
#define LZ_NPY_H

#include <stddef.h> // size_t
#include <stdint.h> // int32_t

#include "error.h" // lz_status

/* Writes atomically: a temp file beside `path`, then rename; on any failure
 * nothing is left at `path`. */
lz_status lz_npy_write_f32(const char *path, const float *data, size_t rows, size_t cols);
/* Reads a '<f4' C-order 2-D array; *data is malloc'd. */
lz_status lz_npy_read_f32(const char *path, float **data, size_t *rows, size_t *cols);
/* Reads a '<i4' C-order 1-D array of token ids; *ids is malloc'd. */
lz_status lz_npy_read_i32(const char *path, int32_t **ids, size_t *n);

#endif
