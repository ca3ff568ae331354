/* test_config.c - config.json parsing: defaults, both RoPE spellings, GQA, eos forms, lizard block, errors. */
#include <stdio.h>  // snprintf, fopen
#include <stdlib.h> // mkdtemp
#include <string.h> // strlen, strcmp
#include <unistd.h> // unlink, rmdir

#include "config.h"    // the code under test
#include "test_util.h" // CHECK, CHECK_FAILS_WITH, lz_test_finish

static lz_config cfg;

/* A minimal valid LLaMA config with `extra` (", \"key\": value ...") appended. */
static lz_status parse_with(const char *extra) {
    char text[4096];
    snprintf(text, sizeof text,
             "{\"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 128,"
             " \"num_hidden_layers\": 4, \"num_attention_heads\": 4%s}",
             extra);
    return lz_config_parse(text, strlen(text), "config.json", &cfg);
}

static lz_status parse_text(const char *text) { return lz_config_parse(text, strlen(text), "config.json", &cfg); }

#define CHECK_OK(call)                                                         \
    do {                                                                       \
        lz_error_clear();                                                      \
        lz_status ok_st_ = (call);                                             \
        CHECK_MSG(ok_st_ == LZ_OK, "status %d: %s", ok_st_, lz_error_message()); \
    } while (0)

static void test_defaults(void) {
    CHECK_OK(parse_with(""));
    CHECK(cfg.vocab_size == 100 && cfg.hidden_size == 64 && cfg.intermediate_size == 128);
    CHECK(cfg.num_hidden_layers == 4 && cfg.num_attention_heads == 4);
    CHECK(cfg.num_key_value_heads == 4); /* defaults to num_attention_heads */
    CHECK(cfg.head_dim == 16);           /* hidden_size / num_attention_heads */
    CHECK(cfg.rms_norm_eps == 1e-6 && cfg.max_position_embeddings == 2048);
    CHECK(!cfg.tie_word_embeddings && !cfg.attention_bias && !cfg.mlp_bias);
    CHECK(cfg.sliding_window == 0 && cfg.bos_token_id == -1 && cfg.n_eos == 0);
    CHECK(cfg.rope.type == LZ_ROPE_DEFAULT && cfg.rope.theta == 10000.0);
    CHECK(cfg.model_type[0] == '\0');
    CHECK(!cfg.has_lizard && lz_config_count_softmax(&cfg) == 4);
    for (int i = 0; i < 4; i++)
        CHECK(cfg.softmax_layer[i]);
    CHECK(!cfg.softmax_layer[4]);
}

/* A real-looking LLaMA-3 (transformers 4) file, with keys we do not read. */
static void test_llama3_file(void) {
    CHECK_OK(parse_text("{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
                        " \"attention_dropout\": 0.0, \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009],"
                        " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02,"
                        " \"intermediate_size\": 8192, \"max_position_embeddings\": 131072, \"mlp_bias\": false,"
                        " \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 16,"
                        " \"num_key_value_heads\": 8, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
                        " \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
                        " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
                        " \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
                        " \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}"));
    CHECK(strcmp(cfg.model_type, "llama") == 0);
    CHECK(cfg.num_key_value_heads == 8 && cfg.head_dim == 64 && cfg.num_hidden_layers == 16);
    CHECK(cfg.tie_word_embeddings && cfg.rms_norm_eps == 1e-5 && cfg.max_position_embeddings == 131072);
    CHECK(cfg.bos_token_id == 128000);
    CHECK(cfg.n_eos == 3 && cfg.eos_token_ids[0] == 128001 && cfg.eos_token_ids[2] == 128009);
    CHECK(cfg.rope.type == LZ_ROPE_LLAMA3 && cfg.rope.theta == 500000.0 && cfg.rope.factor == 32.0);
    CHECK(cfg.rope.low_freq_factor == 1.0 && cfg.rope.high_freq_factor == 4.0);
    CHECK(cfg.rope.original_max_position_embeddings == 8192);
}

static int rope_equal(const lz_rope_config *a, const lz_rope_config *b) {
    return a->type == b->type && a->theta == b->theta && a->factor == b->factor &&
           a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
           a->original_max_position_embeddings == b->original_max_position_embeddings;
}

/* transformers 4 ("rope_type" or "type") and transformers 5 spellings give the same RoPE. */
static void test_rope_spellings(void) {
    lz_rope_config v4, v4_type, v5;
    CHECK_OK(parse_with(", \"rope_theta\": 500000, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8,"
                        " \"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}"));
    v4 = cfg.rope;
    CHECK_OK(parse_with(", \"rope_theta\": 500000.0, \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8.0,"
                        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"));
    v4_type = cfg.rope;
    CHECK_OK(parse_with(", \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0,"
                        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"));
    v5 = cfg.rope;
    CHECK(v4.type == LZ_ROPE_LLAMA3 && v4.theta == 500000.0 && v4.factor == 8.0);
    CHECK(rope_equal(&v4, &v4_type));
    CHECK(rope_equal(&v4, &v5));

    /* default type: both spellings, and rope_scaling null */
    CHECK_OK(parse_with(", \"rope_theta\": 1000000.0, \"rope_scaling\": null"));
    v4 = cfg.rope;
    CHECK_OK(parse_with(", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}"));
    CHECK(rope_equal(&v4, &cfg.rope) && cfg.rope.type == LZ_ROPE_DEFAULT && cfg.rope.theta == 1e6);
    CHECK_OK(parse_with(", \"rope_scaling\": {\"type\": \"default\"}"));
    CHECK(cfg.rope.type == LZ_ROPE_DEFAULT && cfg.rope.theta == 10000.0);
    /* rope_parameters without its own theta falls back to rope_theta */
    CHECK_OK(parse_with(", \"rope_theta\": 250000, \"rope_parameters\": {\"rope_type\": \"default\"}"));
    CHECK(cfg.rope.theta == 250000.0);
    /* both present: rope_parameters wins (rope_scaling here would be refused) */
    CHECK_OK(parse_with(", \"rope_theta\": 10000, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0},"
                        " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}"));
    CHECK(cfg.rope.type == LZ_ROPE_DEFAULT && cfg.rope.theta == 1e6);
}

static void test_rope_errors(void) {
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}"), LZ_ERR_INPUT,
                     "config.json: unsupported RoPE type 'yarn' (supported: default, llama3)");
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}"), LZ_ERR_INPUT,
                     "unsupported RoPE type 'linear'");
    CHECK_FAILS_WITH(parse_with(", \"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}"),
                     LZ_ERR_INPUT, "unsupported RoPE type 'dynamic'");
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": {\"factor\": 2.0}"), LZ_ERR_INPUT,
                     "key 'rope_scaling' has no 'rope_type'");
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": \"llama3\""), LZ_ERR_INPUT,
                     "key 'rope_scaling' must be an object or null");
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": {\"rope_type\": 3}"), LZ_ERR_INPUT,
                     "key 'rope_scaling.rope_type' must be a string");
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 1,"
                                " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}"),
                     LZ_ERR_INPUT, "config.json: missing key 'rope_scaling.factor'");
    CHECK_FAILS_WITH(parse_with(", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8,"
                                " \"low_freq_factor\": 1, \"high_freq_factor\": 4}"),
                     LZ_ERR_INPUT, "missing key 'rope_parameters.original_max_position_embeddings'");
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4,"
                                " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}"),
                     LZ_ERR_INPUT, "high_freq_factor (4) must be greater than low_freq_factor (4)");
    CHECK_FAILS_WITH(parse_with(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": \"8\", \"low_freq_factor\": 1,"
                                " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}"),
                     LZ_ERR_INPUT, "key 'rope_scaling.factor' must be a number");
    CHECK_FAILS_WITH(parse_with(", \"rope_theta\": \"big\""), LZ_ERR_INPUT, "key 'rope_theta' must be a number");
    CHECK_FAILS_WITH(parse_with(", \"rope_theta\": -1"), LZ_ERR_INPUT, "rope_theta (-1) must be positive");
}

static void test_heads(void) {
    CHECK_OK(parse_with(", \"num_key_value_heads\": 2"));
    CHECK(cfg.num_key_value_heads == 2 && cfg.head_dim == 16);
    CHECK_OK(parse_with(", \"num_key_value_heads\": 1, \"head_dim\": 32"));
    CHECK(cfg.num_key_value_heads == 1 && cfg.head_dim == 32); /* explicit head_dim wins */
    CHECK_OK(parse_with(", \"head_dim\": null"));
    CHECK(cfg.head_dim == 16);
    CHECK_FAILS_WITH(parse_with(", \"num_key_value_heads\": 3"), LZ_ERR_INPUT,
                     "num_attention_heads (4) is not a multiple of num_key_value_heads (3)");
    CHECK_FAILS_WITH(parse_with(", \"num_key_value_heads\": 0"), LZ_ERR_INPUT, "'num_key_value_heads' = 0 must be positive");
    CHECK_FAILS_WITH(parse_with(", \"head_dim\": 15"), LZ_ERR_INPUT, "head_dim = 15 must be even");
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 100, \"hidden_size\": 60, \"intermediate_size\": 128,"
                                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4}"),
                     LZ_ERR_INPUT, "head_dim = 15 must be even");
    CHECK_FAILS_WITH(parse_with(", \"head_dim\": 0"), LZ_ERR_INPUT, "'head_dim' = 0 must be positive");
}

static void test_tokens_and_flags(void) {
    CHECK_OK(parse_with(", \"bos_token_id\": 1, \"eos_token_id\": 2"));
    CHECK(cfg.bos_token_id == 1 && cfg.n_eos == 1 && cfg.eos_token_ids[0] == 2);
    CHECK_OK(parse_with(", \"bos_token_id\": null, \"eos_token_id\": [5, 6]"));
    CHECK(cfg.bos_token_id == -1 && cfg.n_eos == 2 && cfg.eos_token_ids[1] == 6);
    CHECK_OK(parse_with(", \"eos_token_id\": null"));
    CHECK(cfg.n_eos == 0);
    CHECK_FAILS_WITH(parse_with(", \"eos_token_id\": \"</s>\""), LZ_ERR_INPUT, "key 'eos_token_id' must be");
    CHECK_FAILS_WITH(parse_with(", \"eos_token_id\": [1, -2]"), LZ_ERR_INPUT, "key 'eos_token_id' must be");
    CHECK_FAILS_WITH(parse_with(", \"eos_token_id\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]"), LZ_ERR_INPUT,
                     "key 'eos_token_id' lists 17 ids (at most 16)");
    CHECK_FAILS_WITH(parse_with(", \"bos_token_id\": 1.5"), LZ_ERR_INPUT, "key 'bos_token_id' must be");
    CHECK_OK(parse_with(", \"tie_word_embeddings\": true, \"attention_bias\": true, \"mlp_bias\": true"));
    CHECK(cfg.tie_word_embeddings && cfg.attention_bias && cfg.mlp_bias);
    CHECK_FAILS_WITH(parse_with(", \"tie_word_embeddings\": \"yes\""), LZ_ERR_INPUT,
                     "key 'tie_word_embeddings' must be true or false");
    CHECK_OK(parse_with(", \"sliding_window\": 4096, \"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-5"));
    CHECK(cfg.sliding_window == 4096 && cfg.max_position_embeddings == 32768 && cfg.rms_norm_eps == 1e-5);
    CHECK_OK(parse_with(", \"sliding_window\": null, \"model_type\": \"mistral\", \"hidden_act\": \"silu\""));
    CHECK(cfg.sliding_window == 0 && strcmp(cfg.model_type, "mistral") == 0);
    CHECK_FAILS_WITH(parse_with(", \"hidden_act\": \"gelu\""), LZ_ERR_INPUT,
                     "config.json: key 'hidden_act' is 'gelu', only 'silu' is supported");
    CHECK_FAILS_WITH(parse_with(", \"rms_norm_eps\": 0"), LZ_ERR_INPUT, "key 'rms_norm_eps' must be positive");
}

static void test_required_and_types(void) {
    static const char *const keys[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads"};
    for (int drop = 0; drop < 5; drop++) { /* each required key left out in turn */
        char text[512], want[64];
        int len = snprintf(text, sizeof text, "{");
        for (int k = 0; k < 5; k++)
            if (k != drop)
                len += snprintf(text + len, sizeof text - (size_t)len, "%s\"%s\": 4", len > 1 ? ", " : "", keys[k]);
        snprintf(text + len, sizeof text - (size_t)len, "}");
        snprintf(want, sizeof want, "config.json: missing key '%s'", keys[drop]);
        CHECK_FAILS_WITH(parse_text(text), LZ_ERR_INPUT, want);
    }
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 100, \"hidden_size\": \"64\", \"intermediate_size\": 128,"
                                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4}"),
                     LZ_ERR_INPUT, "config.json: key 'hidden_size' must be an integer");
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 100, \"hidden_size\": 64.0, \"intermediate_size\": 128,"
                                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4}"),
                     LZ_ERR_INPUT, "key 'hidden_size' must be an integer");
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": null, \"hidden_size\": 64, \"intermediate_size\": 128,"
                                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4}"),
                     LZ_ERR_INPUT, "key 'vocab_size' must be an integer");
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 0, \"hidden_size\": 64, \"intermediate_size\": 128,"
                                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4}"),
                     LZ_ERR_INPUT, "key 'vocab_size' = 0 must be positive");
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 3000000000, \"hidden_size\": 64, \"intermediate_size\": 128,"
                                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4}"),
                     LZ_ERR_INPUT, "key 'vocab_size' = 3000000000 is out of range");
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 10, \"hidden_size\": 64, \"intermediate_size\": 128,"
                                " \"num_hidden_layers\": 1025, \"num_attention_heads\": 4}"),
                     LZ_ERR_INPUT, "key 'num_hidden_layers' = 1025 is over the limit of 1024");
    CHECK_FAILS_WITH(parse_with(", \"max_position_embeddings\": -5"), LZ_ERR_INPUT,
                     "key 'max_position_embeddings' = -5 must be positive");
    /* malformed JSON: jansson's line and column */
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 100,\n \"hidden_size\": }"), LZ_ERR_INPUT,
                     "config.json: invalid JSON: ");
    CHECK_FAILS_WITH(parse_text("{\"vocab_size\": 100,\n \"hidden_size\": }"), LZ_ERR_INPUT, "(line 2, column");
    CHECK_FAILS_WITH(parse_text(""), LZ_ERR_INPUT, "invalid JSON");
    CHECK_FAILS_WITH(parse_text("[1, 2]"), LZ_ERR_INPUT, "config.json: top level is not a JSON object");
}

static const char lizard_base[] = ", \"lizard\": {\"softmax_layers\": [0, 2], \"feature_dim\": 16, \"window_size\": 8,"
                                  " \"num_meta_tokens\": 2";

/* `lizard_base` + `more` + "}" */
static lz_status parse_lizard(const char *more) {
    char extra[1024];
    snprintf(extra, sizeof extra, "%s%s}", lizard_base, more);
    return parse_with(extra);
}

static void test_lizard_block(void) {
    CHECK_OK(parse_lizard(""));
    CHECK(cfg.has_lizard && cfg.lizard.feature_dim == 16 && cfg.lizard.window_size == 8);
    CHECK(cfg.lizard.num_meta_tokens == 2 && cfg.lizard.feature_map == LZ_FMAP_SOFTMAX && cfg.lizard.gla_normalize);
    CHECK(cfg.softmax_layer[0] && !cfg.softmax_layer[1] && cfg.softmax_layer[2] && !cfg.softmax_layer[3]);
    CHECK(lz_config_count_softmax(&cfg) == 2);
    CHECK_OK(parse_lizard(", \"feature_map\": \"exp\", \"gla_normalize\": false"));
    CHECK(cfg.lizard.feature_map == LZ_FMAP_EXP && !cfg.lizard.gla_normalize);
    CHECK_OK(parse_with(", \"lizard\": {\"softmax_layers\": [], \"feature_dim\": 4, \"window_size\": 1,"
                        " \"num_meta_tokens\": 0}"));
    CHECK(cfg.has_lizard && lz_config_count_softmax(&cfg) == 0);
    CHECK_OK(parse_with(", \"lizard\": null"));
    CHECK(!cfg.has_lizard && lz_config_count_softmax(&cfg) == 4);

    CHECK_FAILS_WITH(parse_lizard(", \"feature_map\": \"relu\""), LZ_ERR_INPUT,
                     "key 'lizard.feature_map' is 'relu' (supported: softmax, exp)");
    CHECK_FAILS_WITH(parse_lizard(", \"feature_dim\": 0"), LZ_ERR_INPUT, "key 'lizard.feature_dim' = 0 must be positive");
    CHECK_FAILS_WITH(parse_lizard(", \"window_size\": -1"), LZ_ERR_INPUT, "'lizard.window_size' = -1 must be positive");
    CHECK_FAILS_WITH(parse_lizard(", \"num_meta_tokens\": -1"), LZ_ERR_INPUT,
                     "'lizard.num_meta_tokens' = -1 must be non-negative");
    CHECK_FAILS_WITH(parse_lizard(", \"gla_normalize\": 1"), LZ_ERR_INPUT, "'lizard.gla_normalize' must be true or false");
    CHECK_FAILS_WITH(parse_with(", \"lizard\": {\"softmax_layers\": [0, 4], \"feature_dim\": 16, \"window_size\": 8,"
                                " \"num_meta_tokens\": 2}"),
                     LZ_ERR_INPUT, "lizard.softmax_layers: layer 4 out of range (model has 4 layers)");
    CHECK_FAILS_WITH(parse_with(", \"lizard\": {\"softmax_layers\": [1, 1], \"feature_dim\": 16, \"window_size\": 8,"
                                " \"num_meta_tokens\": 2}"),
                     LZ_ERR_INPUT, "lizard.softmax_layers: layer 1 listed twice");
    CHECK_FAILS_WITH(parse_with(", \"lizard\": {\"softmax_layers\": [\"0\"], \"feature_dim\": 16, \"window_size\": 8,"
                                " \"num_meta_tokens\": 2}"),
                     LZ_ERR_INPUT, "lizard.softmax_layers[0] is not an integer");
    CHECK_FAILS_WITH(parse_with(", \"lizard\": {\"feature_dim\": 16, \"window_size\": 8, \"num_meta_tokens\": 2}"),
                     LZ_ERR_INPUT, "missing key 'lizard.softmax_layers'");
    CHECK_FAILS_WITH(parse_with(", \"lizard\": {\"softmax_layers\": [0], \"feature_dim\": 16, \"num_meta_tokens\": 2}"),
                     LZ_ERR_INPUT, "missing key 'lizard.window_size'");
    CHECK_FAILS_WITH(parse_with(", \"lizard\": [0, 2]"), LZ_ERR_INPUT, "key 'lizard' must be an object");
}

static void test_set_softmax_layers(void) {
    CHECK_OK(parse_lizard(""));
    CHECK_OK(lz_config_set_softmax_layers(&cfg, "all"));
    CHECK(lz_config_count_softmax(&cfg) == 4);
    CHECK_OK(lz_config_set_softmax_layers(&cfg, "none"));
    CHECK(lz_config_count_softmax(&cfg) == 0);
    CHECK_OK(lz_config_set_softmax_layers(&cfg, "1,3"));
    CHECK(!cfg.softmax_layer[0] && cfg.softmax_layer[1] && !cfg.softmax_layer[2] && cfg.softmax_layer[3]);
    CHECK_OK(lz_config_set_softmax_layers(&cfg, " 0 , 2 "));
    CHECK(cfg.softmax_layer[0] && !cfg.softmax_layer[1] && cfg.softmax_layer[2] && lz_config_count_softmax(&cfg) == 2);
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, "7"), LZ_ERR_INPUT,
                     "--softmax-layers: layer 7 out of range (model has 4 layers)");
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, "1,x"), LZ_ERR_INPUT, "--softmax-layers: 'x' is not a layer index");
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, "1,,2"), LZ_ERR_INPUT, "'' is not a layer index");
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, ""), LZ_ERR_INPUT, "'' is not a layer index");
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, "2a"), LZ_ERR_INPUT, "'2a' is not a layer index");
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, "All"), LZ_ERR_INPUT, "'All' is not a layer index");
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, "-1"), LZ_ERR_INPUT, "layer -1 out of range");
    CHECK_FAILS_WITH(lz_config_set_softmax_layers(&cfg, "99999999999999999999"), LZ_ERR_INPUT, "out of range");
    /* a failed call leaves the previous choice alone */
    CHECK(cfg.softmax_layer[0] && !cfg.softmax_layer[1] && cfg.softmax_layer[2] && lz_config_count_softmax(&cfg) == 2);
}

static void test_load(void) {
    char dir[] = "/tmp/lz_test_config_XXXXXX", path[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_FAILS_WITH(lz_config_load(dir, &cfg), LZ_ERR_IO, "config.json: cannot open: No such file");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    /* longer than the first read buffer, so the reader has to grow */
    fprintf(f, "{\"vocab_size\": 32000, \"hidden_size\": 64, \"intermediate_size\": 128,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"padding\": \"");
    for (int i = 0; i < 10000; i++)
        fputc('x', f);
    fprintf(f, "\"}\n");
    fclose(f);
    CHECK_OK(lz_config_load(dir, &cfg));
    CHECK(cfg.vocab_size == 32000 && cfg.head_dim == 32);
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "{\n  \"vocab_size\": 32000,\n  oops\n}\n");
        fclose(f);
    }
    CHECK_FAILS_WITH(lz_config_load(dir, &cfg), LZ_ERR_INPUT, path); /* the message names the file */
    CHECK_FAILS_WITH(lz_config_load(dir, &cfg), LZ_ERR_INPUT, "line 3");
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_defaults();
    test_llama3_file();
    test_rope_spellings();
    test_rope_errors();
    test_heads();
    test_tokens_and_flags();
    test_required_and_types();
    test_lizard_block();
    test_set_softmax_layers();
    test_load();
    return lz_test_finish("test_config");
}
