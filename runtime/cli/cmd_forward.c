/* cmd_forward.c - `lizard forward`: the logits of every position of a prompt,
 * written as a float32 [T, vocab] .npy file. */
#include <stdio.h>  // fprintf
#include <stdlib.h> // malloc, free

#include "cli_options.h" // lz_parse_options
#include "commands.h"    // lz_cmd_forward
#include "context_limit.h" // lz_check_context
#include "engine.h"      // lz_engine
#include "id_list.h"     // lz_parse_id_list
#include "npy.h"         // lz_npy_write_f32

lz_status lz_cmd_forward(int argc, char **argv) {
    const char *model = NULL, *ids_text = NULL, *out_path = NULL, *device = "cpu", *dtype = "bf16", *softmax = NULL, *placement = NULL,
               *plan = NULL, *adapter = NULL;
    long chunk = 512;
    bool allow_long = false;
    const lz_option options[] = {
        {"--model", LZ_OPT_DIR, "DIR", "model folder (config.json + safetensors)", &model, true, 0, 0},
        {"--adapter", LZ_OPT_DIR, "DIR", "a PEFT LoRA adapter folder (finetune --adapter-out) merged in at load",
         &adapter, false, 0, 0},
        {"--ids", LZ_OPT_STRING, "1,2,3", "prompt token ids", &ids_text, true, 0, 0},
        {"--logits-out", LZ_OPT_STRING, "FILE.npy", "where to write float32 logits [T, vocab]", &out_path, true, 0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32|fp8", "CUDA weights and activations (default bf16); fp8: the linear "
         "layers' weights in FP8 E4M3 with a scale per row", &dtype, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &softmax, false, 0, 0},
        {"--prefill-chunk", LZ_OPT_INT, "N", "tokens per prefill step (default 512)", &chunk, false, 1, 1 << 20},
        {"--placement", LZ_OPT_STRING, "balanced|by-type", "under mpirun: how layers are spread over the ranks",
         &placement, false, 0, 0},
        {"--plan", LZ_OPT_STRING, "FILE", "under mpirun: a hand-written placement plan", &plan, false, 0, 0},
        {"--allow-long-context", LZ_OPT_FLAG, "", "let softmax layers run past max_position_embeddings",
         &allow_long, false, 0, 0},
    };
    const lz_command_spec spec = {"forward", "run a prompt and write the logits of every position",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    int32_t *ids;
    int n;
    LZ_TRY(lz_parse_id_list("--ids", ids_text, &ids, &n));
    lz_status limit = lz_check_context(model, softmax, n, allow_long);
    if (limit != LZ_OK) {
        free(ids);
        return limit;
    }
    lz_engine e;
    lz_engine_options eo = {.model_dir = model, .adapter_dir = adapter, .device = device, .dtype = dtype, .softmax_layers = softmax,
                           .n_slots = 1, .max_context = n, .prefill_chunk = (int)chunk,
                           .placement = placement, .plan_file = plan};
    lz_status s = lz_engine_open(&e, &eo);
    float *logits = NULL;
    if (s == LZ_OK && !e.worker) { // under mpirun only rank 0 writes the file
        const size_t V = (size_t)e.model.cfg.vocab_size;
        logits = malloc(sizeof(float) * (size_t)n * V);
        s = logits ? lz_engine_prefill(&e, 0, ids, n, logits, (lz_step_out){0}) : lz_fail(LZ_ERR_NOMEM, "logits: out of memory");
        if (s == LZ_OK)
            s = lz_npy_write_f32(out_path, logits, (size_t)n, V);
        if (s == LZ_OK)
            fprintf(stderr, "lizard forward: %d tokens x %zu logits -> %s\n", n, V, out_path);
    }
    free(logits);
    free(ids);
    lz_engine_close(&e);
    return s;
}
