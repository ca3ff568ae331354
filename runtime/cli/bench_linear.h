/* bench_linear.h - `lizard bench --linear-shapes`: every distinct linear shape of a model's layer 0 and
 * its LM head at a few token counts (time, weight bandwidth, FLOP rate), to see where steps go. */
#ifndef LZ_BENCH_LINEAR_H
#define LZ_BENCH_LINEAR_H

#include "model.h" // lz_model

/* m: a model that holds layer 0 and the LM head (a process of one rank holds every layer). */
lz_status lz_bench_linear_shapes(const lz_model *m);

#endif
