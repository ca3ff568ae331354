/* fuzz_adapter.c - libFuzzer target: a PEFT adapter folder (lora_adapter.c, peft_targets.c) from any
 * bytes, held as adapter_config.json, a NUL byte, then adapter_model.safetensors (no NUL: the config
 * alone). It must refuse with a message or accept; what it accepts is merged into every projection
 * of a tiny model that it covers (ASan checks every factor read). */
#include <stdint.h> // uint8_t
#include <stdio.h>  // snprintf
#include <stdlib.h> // abort, calloc, free
#include <string.h> // memchr

#include "config.h"       // lz_config_parse
#include "lora_adapter.h" // lz_lora_adapter_parse
#include "projections.h"  // lz_lin_module, lz_lin_parent, lz_lin_shape

static const char model_config[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 16,"
    " \"intermediate_size\": 24, \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 8, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lz_config cfg;
    static bool ready;
    if (!ready && lz_config_parse(model_config, sizeof model_config - 1, "config.json", &cfg) != LZ_OK)
        abort();
    ready = true;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t config_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *tensors = nul ? nul + 1 : data + size;
    const size_t tensors_len = nul ? size - config_len - 1 : 0;
    lz_error_clear();
    lz_lora_adapter ad;
    if (lz_lora_adapter_parse("fuzz", (const char *)data, config_len, tensors, tensors_len, &cfg, &ad) != LZ_OK) {
        if (lz_error_message()[0] == '\0')
            abort(); // a refusal says why
        return 0;
    }
    for (int layer = 0; layer < cfg.num_hidden_layers; layer++)
        for (int j = 0; j < LZ_LIN_COUNT; j++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", layer, lz_lin_parent[j], lz_lin_module[j]);
            if (!lz_lora_adapter_covers(&ad, name))
                continue;
            int out, in;
            lz_lin_shape(&cfg, j, &out, &in);
            float *w = calloc((size_t)out * (size_t)in, sizeof *w);
            if (!w || lz_lora_adapter_apply(&ad, name, w, out, in) != LZ_OK)
                abort();
            free(w);
        }
    lz_lora_adapter_close(&ad);
    return 0;
}
