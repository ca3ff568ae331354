/* model_load.h - a model's weights onto a backend: from a checkpoint folder
 * (safetensors, config already parsed), or made at random for benchmarks.
 * The stages only run what is loaded; this is where files meet the backend. */
#ifndef LZ_MODEL_LOAD_H
#define LZ_MODEL_LOAD_H

#include <stdint.h> // uint64_t

#include "model.h" // lz_model, lz_stage_parts

/* Loads DIR's weights for `cfg` (already parsed, overrides applied). */
lz_status lz_model_load(lz_model *m, const char *dir, const lz_config *cfg, const lz_ops *ops, lz_backend *be);
/* Loads only `parts` (a pipeline stage); the other layers keep their kind
 * and geometry but no weights. adapter_dir (or NULL): a PEFT LoRA adapter
 * folder merged into the weights it covers (lora_adapter.h). */
lz_status lz_model_load_stage(lz_model *m, const char *dir, const lz_config *cfg, const lz_ops *ops, lz_backend *be,
                              const lz_stage_parts *parts, const char *adapter_dir);
/* Every part of a model with `n_layers` layers. */
void lz_stage_parts_all(lz_stage_parts *parts, int n_layers);
/* The same model with random weights made on the backend (no files): for
 * benchmarks. Feature maps: phi_q shared, phi_k per key/value head. */
lz_status lz_model_init_random(lz_model *m, const lz_config *cfg, const lz_ops *ops, lz_backend *be, uint64_t seed);
/* Only `parts` of it (a pipeline stage); each tensor's values depend on the
 * seed and its name, so the stages of N ranks hold one process's weights. */
lz_status lz_model_init_random_stage(lz_model *m, const lz_config *cfg, const lz_ops *ops, lz_backend *be,
                                     const lz_stage_parts *parts, uint64_t seed);
/* Checks every tensor of DIR against `cfg` (names, dtypes, shapes) and fills
 * the layer geometry and parameter counts, without uploading any weight:
 * what `lizard info` needs, for a model of any size. `ops` only sizes state.
 * dir NULL: the tensors lz_model_init_random makes of `cfg` (a shape, no
 * files), counted alike; their dtype says F32 (nothing is held). */
lz_status lz_model_describe(lz_model *m, const char *dir, const lz_config *cfg, const lz_ops *ops);
void lz_model_free(lz_model *m);

#endif
