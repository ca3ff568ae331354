/* lora_adapter.h - a PEFT LoRA adapter folder (adapter_config.json +
 * adapter_model.safetensors, as `lizard finetune --adapter-out` and HF PEFT
 * write it) merged into a model's weights as they load: W + (alpha / r) B A.
 *
 * Checked whole when opened, against the model it is applied to: the LoRA
 * type and options this merge implements (no DoRA, rsLoRA or fan_in_fan_out),
 * every tensor named after a projection the model has, A [r, in] and B [out, r]
 * of that projection's shape. */
#ifndef LZ_LORA_ADAPTER_H
#define LZ_LORA_ADAPTER_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint64_t

#include "config.h"      // lz_config
#include "safetensors.h" // lz_st_file

typedef struct {
    char *dir;
    lz_st_file file;
    int rank;
    double scale;  /* lora_alpha / r */
    uint64_t hash; /* of the config and the tensors: sessions know which adapter made their state */
} lz_lora_adapter;

lz_status lz_lora_adapter_open(const char *dir, const lz_config *cfg, lz_lora_adapter *out);
void lz_lora_adapter_close(lz_lora_adapter *ad);
/* True when the adapter changes the weight `name` (e.g. "model.layers.3.self_attn.q_proj.weight"). */
bool lz_lora_adapter_covers(const lz_lora_adapter *ad, const char *name);
/* w [rows, cols] (fp32, row-major) += scale * B A for the weight `name`; nothing when not covered. */
lz_status lz_lora_adapter_apply(const lz_lora_adapter *ad, const char *name, float *w, int64_t rows, int64_t cols);

#endif
