/* train_ops.c - picks a training op table by device name (train_ops.h). */
#include "train_ops.h"

#include <string.h> // strcmp

lz_status lz_train_ops_get(const char *device, const lz_train_ops **out) {
    *out = NULL;
    if (strcmp(device, "cpu") == 0)
        *out = lz_train_ops_cpu();
    else if (strcmp(device, "cuda") == 0) {
#ifdef LIZARD_HAVE_CUDA
        *out = lz_train_ops_cuda();
#else
        return lz_fail(LZ_ERR_INPUT, "--device cuda: this build has no CUDA backend (built with LIZARD_CUDA=OFF)");
#endif
    } else
        return lz_fail(LZ_ERR_INPUT, "--device %s: unknown device (cpu or cuda)", device);
    return LZ_OK;
}
