/* distill_checkpoint.h - what `lizard distill --resume` continues from, kept
 * beside the model folder it writes:
 *   distill_state.safetensors  every trained layer's tensors and AdamW moments (F32)
 *   distill_state.json         {"step", "signature", "softmax_layers" (null until chosen)}
 * The signature is the run's settings that must not change on resume; the
 * data order depends only on (seed, step), so no data cursor is stored. */
#ifndef LZ_DISTILL_CHECKPOINT_H
#define LZ_DISTILL_CHECKPOINT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "config.h"         // LZ_MAX_LAYERS
#include "distill_params.h" // lz_distill_layer
#include "error.h"          // lz_status

typedef struct {
    long step;              /* steps done */
    bool chosen;            /* softmax layers decided (after calibration, or given) */
    bool softmax[LZ_MAX_LAYERS];
} lz_distill_progress;

/* layers[i] is saved where trained[i]. */
lz_status lz_distill_checkpoint_save(const char *dir, const char *signature, const lz_distill_progress *p,
                                     const lz_distill_layer *layers, const bool *trained, int n_layers);
/* Restores into layers that are already initialised with the same shapes;
 * fails (LZ_ERR_INPUT) when the signature differs, naming the first setting that does. */
lz_status lz_distill_checkpoint_load(const char *dir, const char *signature, lz_distill_progress *p,
                                     lz_distill_layer *layers, const bool *trained, int n_layers);

/* The key of the first "key=value;" item of the saved signature that the
 * new one lacks (the setting that changed) into out. */
void lz_signature_first_difference(const char *saved, const char *now, char *out, size_t cap);

#endif
