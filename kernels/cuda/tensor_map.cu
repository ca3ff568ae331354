// tensor_map.cu - the driver's tensor-map encoder (see tensor_map.cuh).
#include "tensor_map.cuh"

// The driver's encoder, looked up once; NULL where unavailable.
static PFN_cuTensorMapEncodeTiled_v12000 driver_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    static bool looked;
    if (!looked) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) ==
                cudaSuccess &&
            found == cudaDriverEntryPointSuccess)
            encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
        (void)cudaGetLastError(); // (a missing entry point leaves no error behind)
        looked = true;
    }
    return encode;
}

lz_status lz_tensor_map_encoder_for(const void *kernel, PFN_cuTensorMapEncodeTiled_v12000 *encode) {
    cudaFuncAttributes fa;
    LZ_CUDA_TRY(cudaFuncGetAttributes(&fa, kernel));
    *encode = fa.binaryVersion >= 90 ? driver_encoder() : NULL;
    return LZ_OK;
}
