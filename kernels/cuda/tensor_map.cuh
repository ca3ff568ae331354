// tensor_map.cuh - the copy engine's tensor maps (cuTensorMapEncodeTiled) for the persistent decode
// kernels (window_decode_ring.cu, gla_decode_ring.cu) and the prompt attention (attention_wgmma.cu).
// The runtime links no libcuda, so the encoder comes from the driver at run time; where the driver
// lacks it, those kernels are not used.
#ifndef LZ_TENSOR_MAP_CUH
#define LZ_TENSOR_MAP_CUH

#include <cuda.h>         // CUtensorMap (the types only)
#include <cudaTypedefs.h> // PFN_cuTensorMapEncodeTiled

#include "cuda_kernels.cuh"

// The encoder for a kernel that takes tensor maps: the driver's (looked up once), or NULL where the
// driver lacks it or the kernel's code was built for a target before sm_90 (there the copy engine's
// instructions compile to traps), so that its launcher falls back.
lz_status lz_tensor_map_encoder_for(const void *kernel, PFN_cuTensorMapEncodeTiled_v12000 *encode);

// A bf16 tensor of rank 3 or 4 whose innermost dimension is a head's d, in boxes of 64 columns x
// `rows` rows of the third dimension (1 of the others), in the 128-byte swizzle wgmma and mma.sync
// tiles read; dims innermost first, strides in bytes (rank - 1 of them). False where the driver refuses.
bool lz_tensor_map_head_rows(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap *map, const void *p, int rank,
                             const cuuint64_t *dims, const cuuint64_t *strides, int rows);

#endif
