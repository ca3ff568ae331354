/* distill_checkpoint.h - what `lizard distill --resume` continues from, kept
 * beside the model folder it writes as one checkpoint unit (checkpoint_unit.h):
 *   distill_state/tensors.safetensors  every trained layer's tensors and AdamW
 *                                      moments, "layers.L.NAME[.adam_m|.adam_v]" (F32 [numel])
 *   distill_state/state.json           the step, the run's signature, the checksum and
 *                                      the field "softmax_layers" (null until chosen)
 * The signature is the run's settings that must not change on resume; the
 * data order depends only on (seed, step), so no data cursor is stored.
 * A state is refused (one line, LZ_ERR_INPUT) unless it is this run's whole:
 * its signature, a step in 1..total, softmax layers equal to --softmax-layers
 * (or, with --retain-fraction, null before the choice and that many layers
 * after it), every trained layer's tensors at their shapes, finite, and the
 * checksum over all of it. */
#ifndef LZ_DISTILL_CHECKPOINT_H
#define LZ_DISTILL_CHECKPOINT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t

#include "checkpoint_unit.h" // lz_signature_first_difference
#include "config.h"          // LZ_MAX_LAYERS
#include "distill_params.h"  // lz_distill_layer
#include "error.h"           // lz_status

/* The unit's name in --out. */
#define LZ_DISTILL_STATE "distill_state"

typedef struct {
    long step;              /* steps done */
    bool chosen;            /* softmax layers decided (after calibration, or given) */
    bool softmax[LZ_MAX_LAYERS];
} lz_distill_progress;

/* What a run's state must hold to be continued. */
typedef struct {
    const char *signature;
    long total_steps;
    int n_layers;
    const bool *trained;       /* [n_layers]: the layers whose tensors the state holds */
    const bool *given_softmax; /* [n_layers]: the run's --softmax-layers, or NULL with --retain-fraction */
    int retain_count;          /* with --retain-fraction: the layers the choice keeps as softmax */
    long calibration_steps;    /* with --retain-fraction: the choice comes before this step (0-based) runs */
} lz_distill_resume_rules;

/* layers[i] is saved where trained[i]. */
lz_status lz_distill_checkpoint_save(const char *dir, const char *signature, const lz_distill_progress *p,
                                     const lz_distill_layer *layers, const bool *trained, int n_layers);
/* Restores into layers that are already initialised with the run's shapes
 * and into *p; both are left as they were when the state is refused. */
lz_status lz_distill_checkpoint_load(const char *dir, const lz_distill_resume_rules *rules, lz_distill_progress *p,
                                     lz_distill_layer *layers);
/* The same checks on the unit's two files held in memory (`where` names the unit): the fuzzer's entry. */
lz_status lz_distill_checkpoint_check(const char *where, const char *state_text, size_t state_len,
                                      const uint8_t *tensors_file, size_t tensors_len,
                                      const lz_distill_resume_rules *rules, lz_distill_progress *p,
                                      lz_distill_layer *layers);

#endif
