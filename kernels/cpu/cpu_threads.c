/* cpu_threads.c - cpu_threads.h. */
#include <pthread.h> // pthread_once
#include <stdlib.h>  // getenv, atoi

#include <cblas.h> // openblas_set_num_threads
#ifdef _OPENMP
#include <omp.h> // omp_get_num_procs, omp_get_thread_num
#endif

#include "cpu_threads.h"
#include "knobs.h" // lz_knobs_get: the launcher's processes on this host

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int threads = 1;

static void decide(void) {
    openblas_set_num_threads(1); // every product on its caller's thread: the tiles are ours to share
#ifdef _OPENMP
    const char *env = getenv("OMP_NUM_THREADS");
    const int cores = omp_get_num_procs(), ranks = lz_knobs_get()->local_size;
    if (env && atoi(env) > 0)
        threads = atoi(env);
    else
        threads = cores / ranks > 1 ? cores / ranks : 1;
#endif
}

int lz_cpu_threads(void) {
    pthread_once(&once, decide);
    return threads;
}

void lz_cpu_set_threads(int n) {
    pthread_once(&once, decide);
    threads = n > 1 ? n : 1;
}

int lz_cpu_threads_for(size_t items, size_t work, size_t grain) {
    size_t n = (size_t)lz_cpu_threads();
    const size_t shares = grain ? work / grain : work;
    n = shares < n ? shares : n;
    n = items < n ? items : n;
    return n < 1 ? 1 : (int)n;
}

int lz_cpu_thread_index(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
