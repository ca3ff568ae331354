// tensor_map.cuh - the copy engine's tensor maps (cuTensorMapEncodeTiled) for the persistent decode
// kernels (window_decode_ring.cu, gla_decode_ring.cu). The runtime links no libcuda, so the encoder
// comes from the driver at run time; where the driver lacks it, those kernels are not used.
#ifndef LZ_TENSOR_MAP_CUH
#define LZ_TENSOR_MAP_CUH

#include <cuda.h>         // CUtensorMap (the types only)
#include <cudaTypedefs.h> // PFN_cuTensorMapEncodeTiled

#include "cuda_kernels.cuh"

// The encoder, looked up once (NULL where unavailable); clears the error a failed lookup leaves.
PFN_cuTensorMapEncodeTiled_v12000 lz_tensor_map_encoder(void);

// Whether kernel's code was built for sm_90 or later (older targets compile the copy engine's
// instructions to traps).
lz_status lz_kernel_is_sm90(const void *kernel, bool *yes);

#endif
