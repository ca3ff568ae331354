// bench_check.cuh - the standalone GPU probes' (cublaslt_probe.cu, stream_ceiling.cu) checks: a CUDA or
// cuBLAS call that fails prints the call, the library's message and the line, and exits 1.
#ifndef LZ_BENCH_CHECK_CUH
#define LZ_BENCH_CHECK_CUH

#include <stdio.h>
#include <stdlib.h>

static void bench_fail(const char *call, const char *message, int line) {
    fprintf(stderr, "%s: %s (line %d)\n", call, message, line);
    exit(1);
}

// call's result against its library's success value; message_of names a failure
#define BENCH_CHECK(call, ok, message_of)                                                                 \
    do {                                                                                                  \
        const auto r_ = (call);                                                                           \
        if (r_ != (ok))                                                                                   \
            bench_fail(#call, message_of(r_), __LINE__);                                                  \
    } while (0)
#define CK(call) BENCH_CHECK(call, cudaSuccess, cudaGetErrorString)
#define CB(call) BENCH_CHECK(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString) // (with cublas_v2.h)

#endif
