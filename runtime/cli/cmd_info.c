/* cmd_info.c - `lizard info`: what a model folder holds: shape, layer kinds,
 * parameter counts, and the state one sequence needs at a few context lengths. */
#include <stdbool.h> // bool
#include <stdio.h>   // printf
#include <string.h>  // strlen, strcmp

#include "cli_options.h" // lz_parse_options
#include "commands.h"    // lz_cmd_info
#include "model_load.h"  // lz_model_describe
#include "safetensors.h" // lz_weights
#include "state.h"       // lz_state_bytes_at

static void print_layers(const lz_model *m) {
    printf("layers         ");
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        printf("%c", m->layers[i].run_softmax ? 'S' : 'L');
    printf("   (S = softmax attention, L = Lizard)\n");
    int with_lizard = 0;
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        with_lizard += m->layers[i].has_lizard;
    printf("lizard tensors in %d of %d layers\n", with_lizard, m->cfg.num_hidden_layers);
}

/* A tensor docs/model-format.md adds to a teacher's layer. */
static bool is_lizard_tensor(const char *name) {
    static const char *const suffixes[] = {".self_attn.feature_map_q.weight", ".self_attn.feature_map_k.weight",
                                           ".self_attn.gate.weight", ".self_attn.meta_logits",
                                           ".self_attn.window_alpha"};
    const size_t len = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        const size_t n = strlen(suffixes[i]);
        if (len > n && strcmp(name + len - n, suffixes[i]) == 0)
            return true;
    }
    return false;
}

static void print_model(const lz_model *m, const char *dir) {
    const lz_config *c = &m->cfg;
    printf("model          %s (%s)\n", dir, c->model_type[0] ? c->model_type : "?");
    printf("shape          vocab %d, hidden %d, intermediate %d, %d layers, %d heads / %d kv heads, head_dim %d\n",
           c->vocab_size, c->hidden_size, c->intermediate_size, c->num_hidden_layers, c->num_attention_heads,
           c->num_key_value_heads, c->head_dim);
    printf("rope           %s, theta %g%s\n", c->rope.type == LZ_ROPE_LLAMA3 ? "llama3" : "default", c->rope.theta,
           c->tie_word_embeddings ? ", tied embeddings" : "");
    if (c->has_lizard)
        printf("lizard         feature_dim %d (%s map), window %d, %d meta tokens, gla_normalize %s\n",
               c->lizard.feature_dim, c->lizard.feature_map == LZ_FMAP_EXP ? "exp" : "softmax", c->lizard.window_size,
               c->lizard.num_meta_tokens, c->lizard.gla_normalize ? "true" : "false");
    print_layers(m);
    // every tensor of the files, as `lizard init` counts what it writes (layers run as softmax use
    // none of their Lizard tensors)
    size_t total = 0, lizard = 0;
    for (size_t i = 0; i < m->ckpt->n_tensors; i++) {
        total += (size_t)m->ckpt->index[i]->numel;
        lizard += is_lizard_tensor(m->ckpt->index[i]->name) ? (size_t)m->ckpt->index[i]->numel : 0;
    }
    printf("parameters     %zu = %zu teacher + %zu lizard", total, total - lizard, lizard);
    if (m->n_params_lizard < lizard)
        printf(" (%zu of them in layers run as softmax, unused)", lizard - m->n_params_lizard);
    printf("\n");
    // KV caches and the window ring hold activations (fp32 on the CPU, bf16 on the GPU by default);
    // the GLA state is fp32 everywhere.
    const int ctx[] = {1024, 32768, 131072}, limit = c->max_position_embeddings;
    int past = 0;
    for (int i = 0; i < 3; i++) {
        lz_state_bytes b = lz_state_bytes_at(m, ctx[i]); // fp32 activations
        printf("state @ %6d  softmax KV %zu + lizard %zu = %zu bytes/sequence fp32 (%zu bf16)%s\n", ctx[i],
               b.softmax_kv, b.lizard_gla + b.lizard_window, b.softmax_kv + b.lizard_gla + b.lizard_window,
               b.softmax_kv / 2 + b.lizard_gla + b.lizard_window / 2, ctx[i] > limit ? "  *" : "");
        past += ctx[i] > limit;
    }
    if (past) {
        int softmax = 0;
        for (int i = 0; i < c->num_hidden_layers; i++)
            softmax += m->layers[i].run_softmax;
        printf("  * past max_position_embeddings (%d): what such a context would hold, though the model was not\n"
               "    trained on it%s",
               limit, softmax ? "; generate, forward and eval refuse it without --allow-long-context" : "");
        if (softmax)
            printf(" (%d softmax layer%s)", softmax, softmax > 1 ? "s" : "");
        printf("\n");
    }
}

lz_status lz_cmd_info(int argc, char **argv) {
    const char *model = NULL, *softmax = NULL;
    const lz_option options[] = {
        {"--model", LZ_OPT_DIR, "DIR", "model folder", &model, true, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &softmax, false, 0, 0},
    };
    const lz_command_spec spec = {"info", "describe a model folder", options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    // Describe, do not load: an 8B or 70B checkpoint is checked and counted without reading its weights.
    lz_config cfg;
    LZ_TRY(lz_config_load(model, &cfg));
    if (softmax)
        LZ_TRY(lz_config_set_softmax_layers(&cfg, softmax));
    lz_backend *be;
    const lz_ops *ops;
    LZ_TRY(lz_cpu_backend_create(&be, &ops));
    lz_model m;
    lz_status s = lz_model_describe(&m, model, &cfg, ops);
    if (s == LZ_OK)
        print_model(&m, model);
    lz_model_free(&m);
    ops->destroy(be);
    return s;
}
