/* cpu_threads.h - the threads of the CPU backend: a pool of its own (pthreads) that its loops are
 * shared among, and the count it uses.
 *
 * A loop is given as a task over items [0, n) (tiles of a product, rows, sequences); the calling
 * thread and the pool's workers take pieces of it until none are left. Every task writes outputs of
 * its own items only, so a result is the same bits whatever the number of threads and whoever took
 * which piece. OpenBLAS computes each product on the thread that calls it: its own threads are
 * turned off, the products being cut into tiles that these threads share (cpu_gemm.h).
 *
 * An idle worker spins a few microseconds for the next loop, then sleeps: on a host whose cores are
 * busy with other processes, workers that kept spinning would take their time (an OpenMP runtime's
 * default; GCC's cannot be told otherwise but by the environment before the program starts). */
#ifndef LZ_CPU_THREADS_H
#define LZ_CPU_THREADS_H

#include <stddef.h> // size_t

/* The threads the kernels use: OMP_NUM_THREADS when it is set (the usual name for it), else the
 * cores shared among the processes a launcher (mpirun, srun, torchrun) started on this host (at
 * least 1). Also turns OpenBLAS's own threads off, on the first call. */
int lz_cpu_threads(void);
/* From now on, n threads (n >= 1) instead: the tests check that results are the same bits. */
void lz_cpu_set_threads(int n);

/* Work worth a thread, about 0.1 ms of it, by kind (the `grain` of lz_cpu_threads_for). Waking a
 * thread costs microseconds; only work of this size pays for it. */
enum {
    LZ_GRAIN_GEMM = 1 << 22,  /* multiply-adds of sgemm tiles (padded rows counted) */
    LZ_GRAIN_LOOP = 1 << 18,  /* multiply-adds of plain C loops */
    LZ_GRAIN_LIGHT = 1 << 17, /* elements of an elementwise op of a few flops (add, norm, rotation) */
    LZ_GRAIN_EXP = 1 << 15,   /* elements that each take an exponential, a hash or a square root */
};

/* Threads for a loop of `items` items doing `work` (multiply-adds, elements) in all: as many of
 * lz_cpu_threads() as have an item and at least `grain` of the work each (at least 1). */
int lz_cpu_threads_for(size_t items, size_t work, size_t grain);

/* task(ctx, begin, end, worker) computes items [begin, end); worker (0 .. threads - 1) tells apart
 * the threads that run at once, for scratch of their own. */
typedef void (*lz_cpu_task)(void *ctx, size_t begin, size_t end, int worker);

/* Runs task over items [0, n) on up to `threads` threads (the caller one of them) and returns when
 * all are done. On one thread, inside another task, or while another thread's loop holds the pool,
 * the caller runs them all itself (worker 0). */
void lz_cpu_parallel(size_t n, int threads, lz_cpu_task task, void *ctx);

#endif
