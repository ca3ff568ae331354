/* train_kernels_f64.c - the training kernels in double: what the gradient
 * checks run against finite differences (tests/unit/test_train_kernels.c). */
#define LZ_TRAIN_F64
#include <math.h>   // INFINITY, cos, sin
#include <stdlib.h> // malloc, calloc, free, abort
#include <string.h> // memset, memcpy

#include "train_kernels.h"

#include "real.h"         // real = double, LZ_R(name) = name##_f64
#include "backward/feature_map_backward.inc"
#include "backward/gate_backward.inc"
#include "backward/gla_backward.inc"
#include "backward/window_backward.inc"
#include "backward/layer_train.inc"
#include "backward/norm_mlp_backward.inc"
#include "backward/attention_backward.inc"
#include "backward/linear_backward.inc"
