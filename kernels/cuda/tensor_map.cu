// tensor_map.cu - the driver's tensor-map encoder (see tensor_map.cuh).
#include "tensor_map.cuh"

PFN_cuTensorMapEncodeTiled_v12000 lz_tensor_map_encoder(void) {
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

lz_status lz_kernel_is_sm90(const void *kernel, bool *yes) {
    cudaFuncAttributes fa;
    LZ_CUDA_TRY(cudaFuncGetAttributes(&fa, kernel));
    *yes = fa.binaryVersion >= 90;
    return LZ_OK;
}
