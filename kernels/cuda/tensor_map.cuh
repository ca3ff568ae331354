// tensor_map.cuh - the copy engine's tensor maps (cuTensorMapEncodeTiled) for the persistent decode
// kernels (window_decode_ring.cu, gla_decode_ring.cu). The runtime links no libcuda, so the encoder
// comes from the driver at run time; where the driver lacks it, those kernels are not used.
#ifndef LZ_TENSOR_MAP_CUH
#define LZ_TENSOR_MAP_CUH

#include <cuda.h>         // CUtensorMap (the types only)
#include <cudaTypedefs.h> // PFN_cuTensorMapEncodeTiled

#include "cuda_kernels.cuh"

// The encoder for a kernel that takes tensor maps: the driver's (looked up once), or NULL where the
// driver lacks it or the kernel's code was built for a target before sm_90 (there the copy engine's
// instructions compile to traps), so that its launcher falls back.
lz_status lz_tensor_map_encoder_for(const void *kernel, PFN_cuTensorMapEncodeTiled_v12000 *encode);

#endif
