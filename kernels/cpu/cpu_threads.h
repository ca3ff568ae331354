/* cpu_threads.h - the threads of the CPU backend. Its loops are split over the cores with OpenMP;
 * OpenBLAS computes each product on the thread that calls it (its own threads are turned off), the
 * products being cut into tiles that these threads share (cpu_gemm.h). Work is only ever split
 * over outputs that do not sum into each other, so a result is the same bits whatever the number
 * of threads. Without OpenMP (the fuzz build) the loops run on one thread. */
#ifndef LZ_CPU_THREADS_H
#define LZ_CPU_THREADS_H

#include <stddef.h> // size_t

/* The threads the kernels use: OMP_NUM_THREADS when it is set, else the cores shared among the
 * processes a launcher (mpirun, srun, torchrun) started on this host (at least 1). Also turns
 * OpenBLAS's own threads off, on the first call. */
int lz_cpu_threads(void);
/* From now on, n threads (n >= 1) instead: the tests check that results are the same bits. */
void lz_cpu_set_threads(int n);
/* Threads for a loop of `items` iterations doing `work` (multiply-adds, elements) in all: as many of
 * those as have an iteration and at least `grain` of the work each (at least 1). A loop too short
 * to pay for waking a thread stays on the calling one. */
int lz_cpu_threads_for(size_t items, size_t work, size_t grain);
/* The OpenMP thread number of the caller inside a parallel loop (0 outside, or without OpenMP). */
int lz_cpu_thread_index(void);

#define LZ_CPU_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
/* The `for` loop that follows runs on `threads` threads, its iterations in equal static shares. */
#define LZ_PARALLEL_FOR(threads) LZ_CPU_PRAGMA(omp parallel for num_threads(threads) schedule(static))
/* The same over the two nested loops that follow, taken as one. */
#define LZ_PARALLEL_FOR2(threads) LZ_CPU_PRAGMA(omp parallel for collapse(2) num_threads(threads) schedule(static))
#else
#define LZ_PARALLEL_FOR(threads) (void)(threads);
#define LZ_PARALLEL_FOR2(threads) (void)(threads);
#endif

#endif
