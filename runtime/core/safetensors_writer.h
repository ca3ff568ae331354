/* safetensors_writer.h - streaming safetensors writer, one file or sharded.
 *
 * The caller declares every tensor (name, dtype, shape) up front; the writer
 * lays out the data section, writes the 8-byte header length and the JSON
 * header, then takes each tensor's bytes in declaration order, either as
 * chunks (lz_stw_write) or from a fill callback through a bounded buffer
 * (lz_stw_write_filled). So a 141 GB checkpoint is written with a few MB of
 * memory. Byte counts are checked per tensor.
 *
 * Files are written under a temporary name in the destination folder and
 * renamed only once complete (and fsynced): a failure never leaves a
 * half-written model.safetensors behind. */
#ifndef LZ_SAFETENSORS_WRITER_H
#define LZ_SAFETENSORS_WRITER_H

#include <stddef.h> // size_t
#include <stdint.h> // int64_t, uint64_t

#include "dtype.h"  // lz_dtype
#include "error.h"  // lz_status

enum { LZ_STW_MAX_DIMS = 8 };

/* A declared tensor. `name` is not copied: it must outlive the writer. */
typedef struct {
    const char *name;
    lz_dtype dtype;
    int ndim;
    int64_t shape[LZ_STW_MAX_DIMS];
} lz_stw_tensor;

/* Elements and bytes of a declared tensor (shape product; 1 for ndim 0). */
uint64_t lz_stw_tensor_numel(const lz_stw_tensor *t);
uint64_t lz_stw_tensor_bytes(const lz_stw_tensor *t);

/* Fills `buf` with `nbytes` bytes of tensor `t` starting at byte `offset`
 * of that tensor. Calls for one tensor come in order, offset 0 first, and
 * offsets and lengths are whole elements. */
typedef lz_status (*lz_stw_fill_fn)(void *ctx, const lz_stw_tensor *t, uint64_t offset, void *buf, size_t nbytes);

/* ---- one file ------------------------------------------------------------ */

typedef struct lz_st_writer lz_st_writer;

/* Validates the declarations (names unique and non-empty, dims >= 0, a
 * weight-capable or known dtype), creates the temporary file next to `path`
 * and writes the header. */
lz_status lz_stw_create(const char *path, const lz_stw_tensor *tensors, size_t n, lz_st_writer **out);

/* Appends `nbytes` bytes of the current tensor; moves on to the next tensor
 * when this one is complete. A chunk may not run past the current tensor. */
lz_status lz_stw_write(lz_st_writer *w, const void *data, size_t nbytes);

/* Writes the whole current tensor from `fill`, a few MB at a time. */
lz_status lz_stw_write_filled(lz_st_writer *w, lz_stw_fill_fn fill, void *ctx);

/* Checks that every tensor got all its bytes, fsyncs and closes the
 * temporary file. The file keeps its temporary name until lz_stw_commit. */
lz_status lz_stw_finish(lz_st_writer *w);

/* Renames the finished temporary file to its final name, syncs the folder and
 * frees the writer (also on failure, after removing the temporary file). */
lz_status lz_stw_commit(lz_st_writer *w);

/* Removes the temporary file (if not committed) and frees. NULL is fine. */
void lz_stw_abort(lz_st_writer *w);

/* Bytes in front of the data section (8 + padded JSON header). */
uint64_t lz_stw_header_bytes(const lz_st_writer *w);

/* ---- a model folder ------------------------------------------------------ */

/* A run of consecutive declared tensors that go to one file. */
typedef struct {
    size_t first, count;
    uint64_t bytes; /* data bytes (sum of the tensors' sizes) */
} lz_stw_shard;

/* Splits tensors, in declaration order, into shards of at most `max_bytes`
 * data bytes each (a tensor larger than that gets a shard of its own).
 * max_bytes == 0 means no limit: one shard. *out is malloc'ed. */
lz_status lz_stw_plan_shards(const lz_stw_tensor *tensors, size_t n, uint64_t max_bytes, lz_stw_shard **out,
                             size_t *n_out);

/* Writes the weights of a model folder: DIR/model.safetensors when one shard
 * holds everything, else DIR/model-0000K-of-0000M.safetensors plus
 * DIR/model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}).
 * Every file is written under a temporary name and all are renamed at the
 * end, the index last. `fill` provides every tensor's bytes. */
lz_status lz_stw_write_model(const char *dir, const lz_stw_tensor *tensors, size_t n, uint64_t max_shard_bytes,
                             lz_stw_fill_fn fill, void *ctx);

/* ---- small files ----------------------------------------------------------- */

/* Writes `len` bytes to `path` atomically: a temporary file in the same folder,
 * fsync, rename, folder sync. Used for config.json, tokenizer.json, ... */
lz_status lz_write_file_atomic(const char *path, const void *data, size_t len);

#endif
