/* decoder_layer.h - one decoder layer (softmax or Lizard attention + SwiGLU MLP). */
#ifndef LZ_DECODER_LAYER_H
#define LZ_DECODER_LAYER_H

#include "step.h" // lz_model, lz_workspace, lz_batch

/* ws->x [T, hidden] is updated in place. */
lz_status lz_decoder_layer_forward(lz_model *m, lz_layer *ly, lz_layer_state *ls, lz_workspace *ws, const lz_batch *b,
                              int kv_capacity);

#endif
