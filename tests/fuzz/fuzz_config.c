/* fuzz_config.c - libFuzzer target: lz_config_parse on arbitrary text, then a --softmax-layers override. */
#include <stddef.h> // size_t
#include <stdint.h> // uint8_t
#include <stdlib.h> // abort

#include "config.h" // lz_config_parse, lz_config_set_softmax_layers

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lz_config cfg; /* ~1 KB of layer flags: keep it off the stack */
    lz_error_clear();
    if (lz_config_parse((const char *)data, size, "config.json", &cfg) != LZ_OK) {
        if (lz_error_message()[0] == '\0')
            abort(); /* a failure must say why */
        return 0;
    }
    /* invariants the rest of the runtime relies on */
    if (cfg.num_hidden_layers < 1 || cfg.num_hidden_layers > LZ_MAX_LAYERS || cfg.head_dim < 2 ||
        cfg.head_dim % 2 || cfg.num_attention_heads % cfg.num_key_value_heads)
        abort();
    int before = lz_config_count_softmax(&cfg);
    if (before < 0 || before > cfg.num_hidden_layers)
        abort();
    lz_error_clear();
    lz_status st = lz_config_set_softmax_layers(&cfg, "0,2,5");
    if (st != LZ_OK && lz_config_count_softmax(&cfg) != before)
        abort(); /* a refused override changes nothing */
    return 0;
}
