// tensor_map.cu - the driver's tensor-map encoder (see tensor_map.cuh).
#include "tensor_map.cuh"

// The driver's encoder, looked up once; NULL where unavailable.
static PFN_cuTensorMapEncodeTiled_v12000 driver_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    static bool looked;
    if (!looked) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult found;
        // a driver without it leaves no error behind: the kernels that need it are not taken
        if (!lz_gpu_error_cleared(
                cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found)) &&
            found == cudaDriverEntryPointSuccess)
            encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
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

bool lz_tensor_map_head_rows(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap *map, const void *p, int rank,
                             const cuuint64_t *dims, const cuuint64_t *strides, int rows) {
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1}, elem[4] = {1, 1, 1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, (void *)p, dims, strides, box, elem,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
