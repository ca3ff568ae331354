/* backward_dense.h - the bound on the CUDA cross-entropy's logits (backward_dense.cu): the op makes
 * the fp32 logits of as many rows at a time as fit this many bytes (at least one row). Tests lower
 * it so that a small vocabulary still takes several slices. */
#ifndef LZ_BACKWARD_DENSE_H
#define LZ_BACKWARD_DENSE_H

#include <stddef.h> // size_t

#ifdef __cplusplus
extern "C" {
#endif

enum { LZ_CE_SLICE_BYTES = 64 << 20 }; /* the default: 64 MiB */

/* Sets the bound for every later call (0: back to LZ_CE_SLICE_BYTES). */
void lz_cuda_ce_set_slice_bytes(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
