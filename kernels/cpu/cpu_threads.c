/* cpu_threads.c - cpu_threads.h. */
#include <pthread.h>   // pthread_*
#include <stdatomic.h> // atomic_*
#include <stdbool.h>   // bool
#include <stdlib.h>    // getenv, atoi
#include <unistd.h>    // sysconf

#include <cblas.h> // openblas_set_num_threads

#include "cpu_threads.h"
#include "knobs.h" // lz_knobs_get: the launcher's processes on this host

enum { MAX_WORKERS = 255, SPINS = 1 << 12 }; /* SPINS: about 10-50 us of polling before sleeping */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int threads = 1;

static void decide(void) {
    openblas_set_num_threads(1); // every product on its caller's thread: the tiles are ours to share
    const char *env = getenv("OMP_NUM_THREADS");
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int ranks = lz_knobs_get()->local_size;
    int n = env && atoi(env) > 0 ? atoi(env) : (int)(cores / ranks);
    n = n < 1 ? 1 : n > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : n;
    atomic_store(&threads, n);
}

int lz_cpu_threads(void) {
    pthread_once(&once, decide);
    return atomic_load(&threads);
}

void lz_cpu_set_threads(int n) {
    pthread_once(&once, decide);
    atomic_store(&threads, n < 1 ? 1 : n > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : n);
}

int lz_cpu_threads_for(size_t items, size_t work, size_t grain) {
    size_t n = (size_t)lz_cpu_threads();
    const size_t shares = grain ? work / grain : work;
    n = shares < n ? shares : n;
    n = items < n ? items : n;
    return n < 1 ? 1 : (int)n;
}

/* ---- the pool --------------------------------------------------------------------------------- */

static struct {
    pthread_mutex_t job_lock;  /* held by the thread whose loop runs on the pool */
    pthread_mutex_t lock;      /* with the two conditions: the sleeping side of generation and busy */
    pthread_cond_t wake, done; /* a new loop; the last worker out of one */
    atomic_uint generation;    /* counts the loops: a worker starts one when it changes */
    atomic_int busy;           /* workers not yet out of the current loop */
    int n_workers;             /* started (they never end) */
    unsigned born;             /* the generation a worker started now has seen */
    bool broken;               /* in a child after fork(): the workers are not there */
    /* the current loop */
    lz_cpu_task task;
    void *ctx;
    size_t n, piece;
    atomic_size_t next;
    int helpers; /* workers 1 .. helpers take part; the others only check in */
} pool = {.job_lock = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static _Thread_local bool in_task; /* nested loops run on their caller */

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void take_pieces(int worker) {
    for (;;) {
        const size_t begin = atomic_fetch_add(&pool.next, pool.piece);
        if (begin >= pool.n)
            return;
        pool.task(pool.ctx, begin, begin + pool.piece < pool.n ? begin + pool.piece : pool.n, worker);
    }
}

static void *worker_main(void *arg) {
    const int me = (int)(size_t)arg;
    unsigned seen = pool.born; // (no loop starts before this worker has checked in for the one it was made for)
    in_task = true;
    for (;;) {
        for (int i = 0; i < SPINS && atomic_load_explicit(&pool.generation, memory_order_acquire) == seen; i++)
            relax();
        if (atomic_load_explicit(&pool.generation, memory_order_acquire) == seen) {
            pthread_mutex_lock(&pool.lock);
            while (atomic_load(&pool.generation) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = atomic_load(&pool.generation);
        if (me <= pool.helpers)
            take_pieces(me);
        if (atomic_fetch_sub(&pool.busy, 1) == 1) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

static void after_fork_in_child(void) { pool.broken = true; }
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void watch_fork(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

// workers up to `want` (under job_lock, between loops); false if none could start
static bool grow(int want) {
    pthread_once(&fork_once, watch_fork);
    pool.born = atomic_load(&pool.generation);
    while (pool.n_workers < want && pool.n_workers < MAX_WORKERS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const bool started = pthread_create(&t, &attr, worker_main, (void *)(size_t)(pool.n_workers + 1)) == 0;
        pthread_attr_destroy(&attr);
        if (!started)
            break;
        pool.n_workers++;
    }
    return pool.n_workers > 0;
}

void lz_cpu_parallel(size_t n, int threads_wanted, lz_cpu_task task, void *ctx) {
    if (threads_wanted <= 1 || n <= 1 || in_task || pool.broken || pthread_mutex_trylock(&pool.job_lock) != 0) {
        task(ctx, 0, n, 0);
        return;
    }
    if (!grow(threads_wanted - 1)) {
        pthread_mutex_unlock(&pool.job_lock);
        task(ctx, 0, n, 0);
        return;
    }
    const int helpers = threads_wanted - 1 < pool.n_workers ? threads_wanted - 1 : pool.n_workers;
    const size_t pieces = (size_t)(helpers + 1) * 4; // a few a thread: one held up costs less
    pool.task = task, pool.ctx = ctx, pool.n = n, pool.helpers = helpers;
    pool.piece = (n + pieces - 1) / pieces;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.busy, pool.n_workers);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    in_task = true;
    take_pieces(0);
    in_task = false;
    for (int i = 0; i < SPINS && atomic_load(&pool.busy) > 0; i++)
        relax();
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.busy) > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.job_lock);
}
