/* thread_slices.c - thread_slices.h. */
#include <pthread.h> // pthread_create, pthread_join
#include <stdbool.h> // bool

#include "thread_slices.h"

void lz_run_slices(void *(*run)(void *), void *slices, size_t slice_size, int k) {
    pthread_t threads[LZ_MAX_SLICES];
    bool started[LZ_MAX_SLICES] = {false};
    for (int i = 0; i < k && i < LZ_MAX_SLICES; i++) {
        void *slice = (char *)slices + (size_t)i * slice_size;
        started[i] = i > 0 && pthread_create(&threads[i], NULL, run, slice) == 0;
        if (!started[i])
            run(slice);
    }
    for (int i = 1; i < k && i < LZ_MAX_SLICES; i++)
        if (started[i])
            pthread_join(threads[i], NULL);
}
