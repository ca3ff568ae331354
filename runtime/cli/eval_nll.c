/* eval_nll.c - eval_nll.h: a V-wide log-softmax costs V exponentials a row, far more than the
 * forward of a small model on the GPU, so the rows are shared among threads. */
#include <math.h>   // exp, log
#include <unistd.h> // sysconf

#include "eval_nll.h"
#include "thread_slices.h" // lz_run_slices

typedef struct {
    const float *logits;
    const int32_t *next;
    double *nll;
    int begin, end, V;
} rows_slice;

// -log softmax(logits[V]) at `id`
static double row_nll(const float *logits, int V, int id) {
    double mx = logits[0], sum = 0;
    for (int v = 1; v < V; v++)
        mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < V; v++)
        sum += exp((double)logits[v] - mx);
    return -((double)logits[id] - mx - log(sum));
}

static void *slice_run(void *arg) {
    const rows_slice *s = arg;
    for (int i = s->begin; i < s->end; i++)
        s->nll[i] = row_nll(s->logits + (size_t)i * s->V, s->V, s->next[i]);
    return NULL;
}

void lz_rows_nll(const float *logits, int n, int V, const int32_t *next, double *nll) {
    enum { MAX_THREADS = 16, MIN_ROWS = 8 }; // fewer rows a thread than MIN_ROWS is not worth a thread
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int k = cores < 2 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores;
    k = n / MIN_ROWS < k ? (n / MIN_ROWS > 1 ? n / MIN_ROWS : 1) : k;
    rows_slice slices[MAX_THREADS];
    for (int i = 0; i < k; i++)
        slices[i] = (rows_slice){logits, next, nll, (int)((long)n * i / k), (int)((long)n * (i + 1) / k), V};
    lz_run_slices(slice_run, slices, sizeof slices[0], k);
}
