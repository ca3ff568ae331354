/* cmd_generate.c - `lizard generate`: prefill a prompt, then sample tokens one
 * at a time until --max-tokens or an eos id. --stats reports the state a
 * sequence holds, by layer kind, as the context grows. */
#include <stdio.h>  // printf, fprintf, fflush
#include <stdlib.h> // malloc, free
#include <string.h> // strcmp

#include "cli_options.h"       // lz_parse_options
#include "commands.h"          // lz_cmd_generate
#include "engine.h"            // lz_engine
#include "generation_config.h" // lz_generation_config
#include "id_list.h"           // lz_parse_id_list
#include "sampler.h"           // lz_sampler

typedef struct {
    const char *model, *ids, *device, *dtype, *softmax, *format;
    long max_tokens, top_k, seed, chunk;
    double temperature, top_p;
    bool stats, ignore_eos;
} generate_args;

static void print_stats(const lz_engine *e, int positions) {
    const lz_state_bytes b = lz_state_bytes_at(&e->model, positions);
    fprintf(stderr,
            "lizard stats: position %7d | softmax KV %10zu bytes (%d layers) | lizard GLA %zu + window %zu bytes "
            "(%d layers) | total %zu bytes/sequence\n",
            positions, b.softmax_kv, b.n_softmax, b.lizard_gla, b.lizard_window, b.n_lizard,
            b.softmax_kv + b.lizard_gla + b.lizard_window);
}

static bool is_eos(const lz_generation_config *g, int32_t id) {
    for (int i = 0; i < g->n_eos; i++)
        if (g->eos_token_ids[i] == id)
            return true;
    return false;
}

static lz_status run(lz_engine *e, const generate_args *a, const int32_t *prompt, int n_prompt,
                     const lz_generation_config *gen, lz_sampler *sampler, int32_t *out, int *n_out) {
    const bool json = strcmp(a->format, "json") == 0;
    float *logits = malloc(sizeof(float) * (size_t)e->model.cfg.vocab_size);
    if (!logits)
        return lz_fail(LZ_ERR_NOMEM, "logits: out of memory");
    lz_status s = lz_engine_prefill(e, 0, prompt, n_prompt, NULL, logits);
    if (s == LZ_OK && a->stats)
        print_stats(e, n_prompt);
    *n_out = 0;
    const int32_t slot = 0;
    while (s == LZ_OK && *n_out < a->max_tokens) {
        int32_t id = lz_sampler_next(sampler, logits);
        out[(*n_out)++] = id;
        if (!json) {
            printf("%s%d", *n_out > 1 ? " " : "", id);
            fflush(stdout);
        }
        if ((!a->ignore_eos && is_eos(gen, id)) || *n_out == a->max_tokens)
            break;
        s = lz_engine_decode(e, 1, &slot, &id, logits);
        int held = e->state.slot_pos[0];
        if (s == LZ_OK && a->stats && (held & (held - 1)) == 0) // at powers of two
            print_stats(e, held);
    }
    if (s == LZ_OK && a->stats)
        print_stats(e, e->state.slot_pos[0]);
    free(logits);
    return s;
}

static void print_json(const int32_t *ids, int n) {
    printf("{\"ids\": [");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]}\n");
}

static lz_status generate(const generate_args *a, const int32_t *prompt, int n_prompt) {
    lz_engine e;
    lz_engine_options eo = {.model_dir = a->model, .device = a->device, .dtype = a->dtype, .softmax_layers = a->softmax,
                           .n_slots = 1, .max_context = n_prompt + (int)a->max_tokens, .prefill_chunk = (int)a->chunk};
    LZ_TRY(lz_engine_open(&e, &eo));
    lz_generation_config gen;
    lz_sampler sampler = {0};
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(a->max_tokens > 0 ? a->max_tokens : 1));
    int n_out = 0;
    lz_status s = out ? lz_generation_config_load(a->model, &e.model.cfg, &gen) : lz_fail(LZ_ERR_NOMEM, "out of memory");
    if (s == LZ_OK) {
        lz_sampler_params p = gen.defaults; // flags given on the command line win
        p.temperature = a->temperature >= 0 ? a->temperature : p.temperature;
        p.top_k = a->top_k >= 0 ? (int)a->top_k : p.top_k;
        p.top_p = a->top_p >= 0 ? a->top_p : p.top_p;
        p.seed = (uint64_t)a->seed;
        s = lz_sampler_init(&sampler, &p, e.model.cfg.vocab_size);
    }
    if (s == LZ_OK)
        s = run(&e, a, prompt, n_prompt, &gen, &sampler, out, &n_out);
    if (s == LZ_OK && strcmp(a->format, "json") == 0)
        print_json(out, n_out);
    else if (s == LZ_OK)
        printf("\n");
    lz_sampler_free(&sampler);
    free(out);
    lz_engine_close(&e);
    return s;
}

lz_status lz_cmd_generate(int argc, char **argv) {
    generate_args a = {NULL, NULL, "cpu", "bf16", NULL, "text", 16, -1, 0, 512, -1.0, -1.0, false, false};
    const lz_option options[] = {
        {"--model", LZ_OPT_STRING, "DIR", "model folder (config.json + safetensors)", &a.model, true, 0, 0},
        {"--ids", LZ_OPT_STRING, "1,2,3", "prompt token ids", &a.ids, true, 0, 0},
        {"--max-tokens", LZ_OPT_INT, "N", "tokens to generate (default 16)", &a.max_tokens, false, 1, 1 << 24},
        {"--temperature", LZ_OPT_FLOAT, "T", "0 = greedy (default: generation_config.json, else greedy)",
         &a.temperature, false, 0, 100},
        {"--top-k", LZ_OPT_INT, "K", "keep the K most likely tokens (0 = off)", &a.top_k, false, 0, 1 << 30},
        {"--top-p", LZ_OPT_FLOAT, "P", "keep the smallest set with probability >= P (1 = off)", &a.top_p, false,
         1e-9, 1},
        {"--seed", LZ_OPT_INT, "S", "sampling seed (default 0)", &a.seed, false, 0, 9e15},
        {"--format", LZ_OPT_STRING, "text|json", "text: ids as they come; json: {\"ids\": [...]}", &a.format, false,
         0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &a.device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32", "CUDA weights and activations (default bf16)", &a.dtype, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &a.softmax, false, 0, 0},
        {"--prefill-chunk", LZ_OPT_INT, "N", "tokens per prefill step (default 512)", &a.chunk, false, 1, 1 << 20},
        {"--ignore-eos", LZ_OPT_FLAG, "", "do not stop at eos ids", &a.ignore_eos, false, 0, 0},
        {"--stats", LZ_OPT_FLAG, "", "print state bytes per sequence by layer kind (stderr)", &a.stats, false, 0, 0},
    };
    const lz_command_spec spec = {"generate", "continue a prompt, token by token", options,
                                  (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_options(&spec, argc, argv, &help));
    if (help) {
        lz_print_usage(stdout, &spec);
        return LZ_OK;
    }
    if (strcmp(a.format, "text") != 0 && strcmp(a.format, "json") != 0)
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --format: expected text or json, got '%s'", a.format);
    int32_t *prompt;
    int n_prompt;
    LZ_TRY(lz_parse_id_list("--ids", a.ids, &prompt, &n_prompt));
    lz_status s = generate(&a, prompt, n_prompt);
    free(prompt);
    return s;
}
