/* test_eval_rows.c - lizard eval's threaded pieces: lz_run_slices runs every slice once, whatever k;
 * lz_rows_nll gives each row's -log softmax at its next id, the same figures as a plain loop. */
#include <math.h>   // exp, log
#include <stdint.h> // int32_t
#include <stdlib.h> // malloc, free

#include "eval_nll.h"      // lz_rows_nll
#include "test_util.h"     // CHECK, CHECK_MSG
#include "thread_slices.h" // lz_run_slices, LZ_MAX_SLICES

typedef struct {
    int index, runs;
} counter;

static void *count_run(void *arg) {
    ((counter *)arg)->runs++;
    return NULL;
}

static void check_slices(void) {
    const int ks[] = {1, 2, 7, LZ_MAX_SLICES};
    for (int j = 0; j < 4; j++) {
        counter c[LZ_MAX_SLICES] = {{0}};
        lz_run_slices(count_run, c, sizeof c[0], ks[j]);
        for (int i = 0; i < LZ_MAX_SLICES; i++)
            CHECK_MSG(c[i].runs == (i < ks[j]), "k %d: slice %d ran %d times", ks[j], i, c[i].runs);
    }
}

static void check_rows_nll(void) {
    enum { V = 301 };
    const int ns[] = {0, 1, 9, 200};
    for (int j = 0; j < 4; j++) {
        const int n = ns[j];
        float *logits = malloc(sizeof(float) * (size_t)(n + 1) * V);
        int32_t *next = malloc(sizeof(int32_t) * (size_t)(n + 1));
        double *nll = malloc(sizeof(double) * (size_t)(n + 1));
        uint32_t x = 12345u + (uint32_t)n;
        for (int i = 0; i < n * V; i++) {
            x = x * 1664525u + 1013904223u;
            logits[i] = (float)((double)(x >> 8) / (1 << 24) * 20.0 - 10.0);
        }
        for (int i = 0; i < n; i++)
            next[i] = (i * 37) % V;
        lz_rows_nll(logits, n, V, next, nll);
        for (int i = 0; i < n; i++) {
            const float *row = logits + (size_t)i * V;
            double mx = row[0], sum = 0;
            for (int v = 1; v < V; v++)
                mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < V; v++)
                sum += exp((double)row[v] - mx);
            const double want = -((double)row[next[i]] - mx - log(sum));
            CHECK_MSG(nll[i] == want, "n %d row %d: %.17g, want %.17g", n, i, nll[i], want);
        }
        free(logits), free(next), free(nll);
    }
}

int main(void) {
    check_slices();
    check_rows_nll();
    return lz_test_finish("test_eval_rows");
}
