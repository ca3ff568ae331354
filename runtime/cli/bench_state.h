/* bench_state.h - one sequence's state as a session message: its size by
 * layer kind and the save / restore rates (lizard bench --state). */
#ifndef LZ_BENCH_STATE_H
#define LZ_BENCH_STATE_H

#include <stdio.h> // FILE

#include "model.h" // lz_model

lz_status lz_bench_state(const lz_model *m, int context, FILE *json);

#endif
