// weight_check.cuh - a weight checked where it lies: the index of its first NaN or infinity on
// the device, after the upload (a pass at HBM speed, instead of a host pass over the mapping).
#ifndef LZ_WEIGHT_CHECK_CUH
#define LZ_WEIGHT_CHECK_CUH

#include "cuda_kernels.cuh" // lz_cuda_ctx

// *first = the index of the first element of w [n] (bf16 or fp32, as `dtype`) that is not finite, or n.
lz_status lz_first_nonfinite_device(lz_cuda_ctx *c, const void *w, size_t n, lz_dtype dtype, size_t *first);

#endif
