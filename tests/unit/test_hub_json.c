/* test_hub_json.c - JSON as HF writes it: integers of any size load (as
 * reals) while ordinary integers stay exact, and the hub-shaped model folders
 * (tests/fixtures/hub_*) load through every reader: config.json,
 * generation_config.json, tokenizer.json + tokenizer_config.json and the
 * safetensors index. */
#include <stdint.h> // INT64_MAX
#include <stdio.h>  // snprintf, fopen
#include <stdlib.h> // getenv, free, mkdtemp
#include <string.h> // strlen, strcmp
#include <unistd.h> // symlink

#include "config.h"            // lz_config_parse, lz_config_load
#include "generation_config.h" // lz_generation_config_load
#include "json_read.h"         // lz_json_loadb
#include "safetensors.h"       // lz_weights_open
#include "test_util.h"         // CHECK
#include "tokenizer.h"         // lz_tokenizer_load

static json_t *load(const char *text, json_error_t *err) { return lz_json_loadb(text, strlen(text), 0, err); }

static void big_integers_become_reals(void) {
    json_error_t err;
    json_t *root = load("{\"model_max_length\": 1000000000000000019884624838656, \"neg\": -99999999999999999999,"
                        " \"huge\": 1" "000000000000000000000000000000000000000000000000000000000000000000000000000000"
                        "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                        "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                        "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000,"
                        " \"max\": 9223372036854775807, \"min\": -9223372036854775808, \"exact\": 9007199254740993,"
                        " \"text\": \"99999999999999999999999 \\\" 1e999\", \"real\": 0.6, \"eps\": 1e-05, \"list\": [1,"
                        " 18446744073709551616]}",
                        &err);
    CHECK_MSG(root != NULL, "line %d: %s", err.line, err.text);
    if (!root)
        return;
    json_t *v = json_object_get(root, "model_max_length");
    CHECK(json_is_real(v) && json_real_value(v) == 1e30);
    CHECK(json_is_real(json_object_get(root, "neg")) && json_real_value(json_object_get(root, "neg")) == -1e20);
    CHECK(json_is_real(json_object_get(root, "huge")) && json_real_value(json_object_get(root, "huge")) > 1e307);
    CHECK(json_is_integer(json_object_get(root, "max")) && json_integer_value(json_object_get(root, "max")) == INT64_MAX);
    CHECK(json_is_integer(json_object_get(root, "min")) &&
          json_integer_value(json_object_get(root, "min")) == -INT64_MAX - 1);
    CHECK(json_integer_value(json_object_get(root, "exact")) == 9007199254740993LL); // not rounded to a double
    CHECK(strcmp(json_string_value(json_object_get(root, "text")), "99999999999999999999999 \" 1e999") == 0);
    CHECK(json_real_value(json_object_get(root, "real")) == 0.6 && json_real_value(json_object_get(root, "eps")) == 1e-05);
    json_t *list = json_object_get(root, "list");
    CHECK(json_integer_value(json_array_get(list, 0)) == 1 && json_real_value(json_array_get(list, 1)) == 18446744073709551616.0);
    json_decref(root);
    // faults are still reported, on their own line
    CHECK(load("{\"a\": 1000000000000000019884624838656,\n \"b\": }", &err) == NULL && err.line == 2);
    CHECK(load("{\"a\": 0100000000000000000000000}", &err) == NULL); // a leading zero stays an error
    CHECK(load("{\"a\": 1e999}", &err) == NULL);                     // so does a real beyond the double range
}

static void config_with_big_integers(void) {
    static const char text[] = "{\"vocab_size\": 320, \"hidden_size\": 64, \"intermediate_size\": 160,"
                               " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                               " \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
                               " \"model_max_length\": 1000000000000000019884624838656}";
    lz_config c;
    lz_error_clear();
    CHECK_MSG(lz_config_parse(text, sizeof text - 1, "config.json", &c) == LZ_OK, "%s", lz_error_message());
    CHECK(c.vocab_size == 320 && c.rope.theta == 500000.0);
    // where an integer is required, a huge one is refused by name (it is a real now)
    static const char bad[] = "{\"vocab_size\": 1000000000000000019884624838656, \"hidden_size\": 64}";
    CHECK_FAILS_WITH(lz_config_parse(bad, sizeof bad - 1, "config.json", &c), LZ_ERR_INPUT, "vocab_size");
}

static void hub_folder(const char *fixtures, const char *name, int bos, int n_eos) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, name);
    lz_config cfg;
    lz_error_clear();
    CHECK_MSG(lz_config_load(dir, &cfg) == LZ_OK, "%s: %s", name, lz_error_message());
    lz_generation_config gen;
    CHECK_MSG(lz_generation_config_load(dir, &cfg, &gen) == LZ_OK, "%s: %s", name, lz_error_message());
    CHECK_MSG(gen.n_eos == n_eos, "%s: %d eos ids", name, gen.n_eos);
    lz_tokenizer *tok = NULL;
    CHECK_MSG(lz_tokenizer_load(dir, &tok) == LZ_OK, "%s: %s", name, lz_error_message());
    if (tok) {
        CHECK(lz_tokenizer_bos_id(tok) == bos);
        CHECK(lz_tokenizer_vocab_size(tok) == cfg.vocab_size);
        lz_tokenizer_free(tok);
    }
    lz_weights w;
    CHECK_MSG(lz_weights_open(dir, &w) == LZ_OK, "%s: %s", name, lz_error_message());
    lz_weights_close(&w);
}

/* A sharded folder's index with HF's very large integer in its metadata. */
static void index_with_big_integer(const char *fixtures) {
    char dir[] = "/tmp/lz_hub_json_XXXXXX", path[4096], src[4096];
    CHECK(mkdtemp(dir) != NULL);
    static const char *const shards[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                         "model-00003-of-00003.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, shards[i]);
        snprintf(src, sizeof src, "%s/llama3_bf16_sharded/model/%s", fixtures, shards[i]);
        CHECK(symlink(src, path) == 0);
    }
    snprintf(src, sizeof src, "%s/llama3_bf16_sharded/model/model.safetensors.index.json", fixtures);
    json_error_t err;
    json_t *index = json_load_file(src, 0, &err);
    CHECK(index != NULL);
    json_object_del(index, "metadata");
    char *text = index ? json_dumps(index, 0) : NULL; // {"weight_map": {...}}
    json_decref(index);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f && text);
    if (f && text) {
        fprintf(f, "{\"metadata\": {\"total_size\": 1000000000000000019884624838656}, %s", text + 1);
        fclose(f);
    }
    free(text);
    lz_weights w;
    lz_error_clear();
    CHECK_MSG(lz_weights_open(dir, &w) == LZ_OK, "%s", lz_error_message());
    lz_weights_close(&w);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, shards[i]);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    remove(path);
    remove(dir);
}

int main(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    big_integers_become_reals();
    config_with_big_integers();
    if (fixtures) {
        hub_folder(fixtures, "hub_llama31_instruct", 304, 3);
        hub_folder(fixtures, "hub_mistral7b_instruct", 1, 1);
        index_with_big_integer(fixtures);
    } else {
        CHECK_MSG(0, "LZ_FIXTURES is not set");
    }
    return lz_test_finish("test_hub_json");
}
