/* thread_slices.h - a job cut into k slices run at once: slice 0 on the calling thread, the others
 * on threads of their own (a slice whose thread cannot start runs on the caller instead), all done
 * on return. */
#ifndef LZ_THREAD_SLICES_H
#define LZ_THREAD_SLICES_H

#include <stddef.h> // size_t

enum { LZ_MAX_SLICES = 32 };

/* run(&slices[i]) for i < k (k <= LZ_MAX_SLICES); slices is an array of elements of slice_size bytes. */
void lz_run_slices(void *(*run)(void *), void *slices, size_t slice_size, int k);

#endif
