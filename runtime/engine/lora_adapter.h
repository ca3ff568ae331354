/* lora_adapter.h - a PEFT LoRA adapter folder (adapter_config.json +
 * adapter_model.safetensors, as `lizard finetune --adapter-out` and HF PEFT
 * write it) merged into a model's weights as they load: W + scale B A, with
 * scale = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora).
 *
 * Checked whole when opened, against the model it is applied to, so that an
 * adapter either merges exactly as PEFT would merge it or is refused in one
 * line naming the field or tensor (LZ_ERR_INPUT):
 *   - the config: peft_type LORA, r, lora_alpha; target_modules,
 *     exclude_modules, layers_to_transform and layers_pattern decide which
 *     modules may carry factors, as PEFT decides (peft_targets.h); fields that
 *     would change the model in ways this merge does not implement are refused
 *     by name: use_dora, fan_in_fan_out, bias other than "none", a non-empty
 *     modules_to_save, rank_pattern, alpha_pattern or target_parameters,
 *     layer_replication, trainable_token_indices, lora_bias, use_qalora,
 *     alora_invocation_tokens, arrow_config; fields PEFT writes that do not
 *     change the merged weights (task_type, lora_dropout, init_lora_weights,
 *     ...) are read past; any other field is refused unless null, false or
 *     empty (a PEFT newer than this list may mean something by it);
 *   - the tensors: each a LoRA factor of a projection the model has
 *     (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj), of a module the
 *     config targets, A [r, in] and B [out, r] of its shape, A and B paired;
 *     F32, F16 and BF16 convert to F32 exactly; F64 is taken when every
 *     element has an exact F32 value (a float32 adapter saved as float64) and
 *     refused at the first that has not; every other dtype (I64, I32, U8,
 *     BOOL, F8, ...) is refused by name; a NaN or infinity is refused with the
 *     tensor's name and the element's index.
 * A targeted module the file has no factors for merges nothing (PEFT would
 * give it a zero B). */
#ifndef LZ_LORA_ADAPTER_H
#define LZ_LORA_ADAPTER_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int64_t, uint64_t, uint8_t

#include "config.h"      // lz_config
#include "safetensors.h" // lz_st_file

typedef struct {
    char *dir;
    lz_st_file file;
    int rank;
    double scale;  /* lora_alpha / r, or lora_alpha / sqrt(r) */
    uint64_t hash; /* of the config and the tensors: sessions know which adapter made their state */
} lz_lora_adapter;

lz_status lz_lora_adapter_open(const char *dir, const lz_config *cfg, lz_lora_adapter *out);
/* The same checks on the folder's two files held in memory (`dir` names the
 * folder in messages); the tensors point into `tensors_file`, which must
 * outlive the adapter. What the fuzzer feeds. */
lz_status lz_lora_adapter_parse(const char *dir, const char *config_text, size_t config_len,
                                const uint8_t *tensors_file, size_t tensors_len, const lz_config *cfg,
                                lz_lora_adapter *out);
void lz_lora_adapter_close(lz_lora_adapter *ad);
/* True when the adapter changes the weight `name` (e.g. "model.layers.3.self_attn.q_proj.weight"). */
bool lz_lora_adapter_covers(const lz_lora_adapter *ad, const char *name);
/* w [rows, cols] (fp32, row-major) += scale * B A for the weight `name`; nothing when not covered. */
lz_status lz_lora_adapter_apply(const lz_lora_adapter *ad, const char *name, float *w, int64_t rows, int64_t cols);

#endif
