/* backward_dense.h - the bound on the CUDA cross-entropy's logits (backward_dense.cu): the op makes
 * the fp32 logits of as many rows at a time as fit this many bytes (at least one row). Tests lower
 * it so that a small vocabulary still takes several slices. */
#ifndef LZ_BACKWARD_DENSE_H
#define LZ_BACKWARD_DENSE_H

#include <stddef.h> // size_t

#ifdef __cplusplus
extern "C" {
#endif

/* the default: 256 MiB, 512 rows of a 128K vocabulary (products big enough for the tensor cores) */
enum { LZ_CE_SLICE_BYTES = 256 << 20 };

/* Sets the bound for every later call (0: back to LZ_CE_SLICE_BYTES). */
void lz_cuda_ce_set_slice_bytes(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
