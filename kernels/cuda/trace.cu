// trace.cu - the host side of trace.cuh (cmake -DLIZARD_TRACE=ON): the registry of the translation
// units' trace targets, the device rings, and the dump to the file LIZARD_TRACE names. Without the
// option both entry points do nothing.
#include <stdio.h>
#include <stdlib.h>

#include "cuda_kernels.cuh"
#include "trace.cuh"

#ifdef LIZARD_TRACE
#include <vector>

enum { LZ_TRACE_MAX_TUS = 64 };
static lz_trace_setter tu_setters[LZ_TRACE_MAX_TUS]; // zero before any dynamic initialisation
static const char *tu_files[LZ_TRACE_MAX_TUS];
static int tu_count;
static lz_trace_rec *d_recs;
static unsigned long long *d_count;
static const char *trace_path; // LIZARD_TRACE
static int trace_us;           // LIZARD_TRACE_US

int lz_trace_register(lz_trace_setter set, const char *file) {
    if (tu_count == LZ_TRACE_MAX_TUS)
        return -1; // its stamps stay off (its target's pointer is null)
    tu_setters[tu_count] = set, tu_files[tu_count] = file;
    return tu_count++;
}

lz_status lz_trace_open(const char *path, int us) {
    if (!path || d_recs)
        return LZ_OK;
    trace_path = path, trace_us = us;
    LZ_CUDA_TRY(cudaMalloc(&d_recs, sizeof(lz_trace_rec) * LZ_TRACE_SMS * LZ_TRACE_SM_CAP));
    LZ_CUDA_TRY(cudaMalloc(&d_count, sizeof(unsigned long long) * LZ_TRACE_SMS));
    LZ_CUDA_TRY(cudaMemset(d_count, 0, sizeof(unsigned long long) * LZ_TRACE_SMS));
    for (int i = 0; i < tu_count; i++) {
        lz_trace_target t = {d_recs, d_count, (uint32_t)i};
        LZ_CUDA_TRY(tu_setters[i](t));
    }
    return LZ_OK;
}

// Writes the records of the last LIZARD_TRACE_US microseconds (default 10,000) the rings still hold,
// one a line: grid t0 t1 block n_blocks tu line smid (ns of %globaltimer), after a header that names
// the translation units.
lz_status lz_trace_close(void) {
    if (!d_recs)
        return LZ_OK;
    const char *path = trace_path;
    const unsigned long long span = (unsigned long long)trace_us * 1000ull;
    LZ_CUDA_TRY(cudaDeviceSynchronize());
    std::vector<lz_trace_rec> recs((size_t)LZ_TRACE_SMS * LZ_TRACE_SM_CAP);
    std::vector<unsigned long long> count(LZ_TRACE_SMS);
    LZ_CUDA_TRY(cudaMemcpy(recs.data(), d_recs, recs.size() * sizeof(lz_trace_rec), cudaMemcpyDeviceToHost));
    LZ_CUDA_TRY(cudaMemcpy(count.data(), d_count, count.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    cudaFree(d_recs), cudaFree(d_count);
    d_recs = NULL, d_count = NULL;
    unsigned long long last = 0;
    for (int s = 0; s < LZ_TRACE_SMS; s++)
        for (unsigned long long i = 0; i < count[s] && i < LZ_TRACE_SM_CAP; i++)
            last = recs[(size_t)s * LZ_TRACE_SM_CAP + i].t0 > last ? recs[(size_t)s * LZ_TRACE_SM_CAP + i].t0 : last;
    FILE *f = fopen(path, "w");
    if (!f)
        return lz_fail(LZ_ERR_IO, "LIZARD_TRACE=%s: cannot write the trace", path);
    for (int i = 0; i < tu_count; i++)
        fprintf(f, "# tu %d %s\n", i, tu_files[i]);
    for (int s = 0; s < LZ_TRACE_SMS; s++)
        for (unsigned long long i = 0; i < count[s] && i < LZ_TRACE_SM_CAP; i++) {
            const lz_trace_rec &r = recs[(size_t)s * LZ_TRACE_SM_CAP + i];
            if (r.t0 + span >= last)
                fprintf(f, "%llu %llu %llu %u %u %u %u %u\n", (unsigned long long)r.grid, (unsigned long long)r.t0,
                        (unsigned long long)r.t1, r.block, r.n_blocks, r.tu_line >> 16, r.tu_line & 0xffffu, r.smid);
        }
    if (fclose(f) != 0)
        return lz_fail(LZ_ERR_IO, "LIZARD_TRACE=%s: cannot write the trace", path);
    fprintf(stderr, "lizard: trace of the last %.0f us written to %s\n", span / 1000.0, path);
    return LZ_OK;
}
#else
lz_status lz_trace_open(const char *path, int us) { return LZ_OK; }
lz_status lz_trace_close(void) { return LZ_OK; }
#endif
