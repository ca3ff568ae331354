/* cmd_bench.c - `lizard bench`: prompt and decode throughput of a model shape
 * (random weights made on the device: no files) or of a model folder, each
 * figure beside its ceiling (bench_report.h), through the engine in one
 * process or under mpirun -np N alike (bench_run.c); or with --train the
 * stage-2 training step (bench_train.c). */
#include <stdio.h>  // setvbuf, fopen
#include <stdlib.h> // free
#include <string.h> // strcmp

#include "bench_run.h"     // lz_bench_run
#include "bench_train.h"   // lz_bench_train
#include "cli_options.h"   // lz_parse_options
#include "commands.h"      // lz_cmd_bench
#include "id_list.h"       // lz_parse_id_list
#include "model_presets.h" // lz_preset_config
#include "mpi_world.h"     // lz_world_get

typedef struct {
    lz_bench_args run;
    const char *prompts, *batches, *contexts, *json;
    long train_seq, train_batch;
    bool train;
} bench_args;

/* --train: one process's training step of a shape (bench_train.h). */
static lz_status bench_train(const bench_args *a, bool gpu) {
    if (!a->run.shape)
        return lz_fail(LZ_ERR_INPUT, "lizard bench --train: give --shape PRESET (random weights of a shape)");
    lz_config cfg;
    LZ_TRY(lz_preset_config(a->run.shape, "lizard bench: --shape", &cfg));
    FILE *json = a->json ? fopen(a->json, "w") : NULL;
    if (a->json && !json)
        return lz_fail(LZ_ERR_IO, "lizard bench: --json: cannot write '%s'", a->json);
    const long steps = a->run.steps;
    const lz_bench_train_args t = {a->run.shape, a->run.device, a->run.dtype, (int)a->train_seq, (int)a->train_batch,
                                   (int)(steps > 0 && steps < 64 ? steps : gpu ? 10 : 2), a->run.seed, json};
    const lz_status s = lz_bench_train(&t, &cfg);
    if (json)
        fclose(json);
    return s;
}

/* Every rank: the lists parsed, rank 0's --json opened, the runs (bench_run.c). */
static lz_status bench_layers(bench_args *a) {
    lz_bench_args *r = &a->run;
    int32_t *prompts = NULL, *batches = NULL, *contexts = NULL;
    lz_status s = lz_parse_id_list("--prompt", a->prompts, &prompts, &r->n_prompts);
    if (s == LZ_OK)
        s = lz_parse_id_list("--batch", a->batches, &batches, &r->n_batches);
    if (s == LZ_OK)
        s = lz_parse_id_list("--context", a->contexts, &contexts, &r->n_contexts);
    if (s == LZ_OK && a->json && lz_world_get()->rank == 0 && !(r->json = fopen(a->json, "w")))
        s = lz_fail(LZ_ERR_IO, "lizard bench: --json: cannot write '%s'", a->json);
    r->prompts = prompts, r->batches = batches, r->contexts = contexts;
    if (s == LZ_OK)
        s = lz_bench_run(r);
    if (r->json)
        fclose(r->json);
    free(prompts), free(batches), free(contexts);
    return s;
}

lz_status lz_cmd_bench(int argc, char **argv) {
    // the sizes' defaults follow the device (below): minutes of work on a GPU, seconds on the CPU
    bench_args a = {.run = {.device = "cpu", .dtype = "bf16", .steps = -1, .chunk = 8192}, .train_seq = 2048,
                    .train_batch = 1};
    lz_bench_args *r = &a.run;
    const lz_option options[] = {
        {"--shape", LZ_OPT_STRING, "PRESET", "random weights of a named shape, made on the device (e.g. "
                                             "llama3-8b-hybrid)", &r->shape, false, 0, 0},
        {"--model", LZ_OPT_DIR, "DIR", "or a model folder", &r->model, false, 0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &r->device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32|fp8", "CUDA weights and activations (default bf16); fp8: the linear "
         "layers' weights in FP8 E4M3 with a scale per row", &r->dtype, false, 0, 0},
        {"--prompt", LZ_OPT_STRING, "N,...", "prompt lengths (default cuda 2048,8192,32768, cpu 128; 0 = none)",
         &a.prompts, false, 0, 0},
        {"--batch", LZ_OPT_STRING, "B,...", "decode batch sizes (default cuda 1,16,64,256, cpu 1,4)", &a.batches,
         false, 0, 0},
        {"--context", LZ_OPT_STRING, "C,...", "decode context lengths (default cuda 2048,32768, cpu 256)", &a.contexts,
         false, 0, 0},
        {"--steps", LZ_OPT_INT, "N", "decode steps timed (default cuda 64, cpu 8)", &r->steps, false, 1, 1 << 20},
        {"--prefill-chunk", LZ_OPT_INT, "N", "tokens per prefill step (default 8192)", &r->chunk, false, 1, 1 << 20},
        {"--seed", LZ_OPT_INT, "S", "random weights seed", &r->seed, false, 0, 9e15},
        {"--json", LZ_OPT_STRING, "FILE", "also write one JSON object per result line", &a.json, false, 0, 0},
        {"--no-ceilings", LZ_OPT_FLAG, "", "skip measuring the copy and GEMM ceilings", &r->no_ceilings, false, 0, 0},
        {"--linear-shapes", LZ_OPT_FLAG, "", "also time every linear shape of the model at 1..2048 tokens",
         &r->linear_shapes, false, 0, 0},
        {"--state", LZ_OPT_FLAG, "", "also one sequence's state as a session message at each --context: bytes by "
                                     "layer kind; serialise, restore, file save and file load GB/s", &r->state,
         false, 0, 0},
        {"--placement", LZ_OPT_STRING, "balanced|by-type", "under mpirun: how layers are placed on the ranks",
         &r->placement, false, 0, 0},
        {"--plan", LZ_OPT_STRING, "FILE", "under mpirun: a hand-written plan", &r->plan_file, false, 0, 0},
        {"--train", LZ_OPT_FLAG, "", "instead: the stage-2 training step of --shape (LoRA r 8 on q,k,v,o, the Lizard "
                                     "tensors trainable) beside its GEMM bound", &a.train, false, 0, 0},
        {"--train-seq", LZ_OPT_INT, "L", "with --train: tokens per sequence (default 2048)", &a.train_seq, false, 2,
         1 << 20},
        {"--train-batch", LZ_OPT_INT, "B", "with --train: sequences per step (default 1)", &a.train_batch, false, 1,
         1 << 16},
    };
    const lz_command_spec spec = {"bench", "prompt and decode throughput beside the device's ceilings", options,
                                  (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    if (!r->shape == !r->model)
        return lz_fail(LZ_ERR_INPUT, "lizard bench: give exactly one of --shape PRESET or --model DIR");
    if (lz_world_get()->size > 1 && (a.train || r->linear_shapes || r->state)) // (they time one process's model)
        return lz_fail(LZ_ERR_INPUT, "lizard bench: --%s runs in one process: run it without mpirun",
                       a.train ? "train" : r->linear_shapes ? "linear-shapes" : "state");
    const bool gpu = strcmp(r->device, "cpu") != 0;
    a.prompts = a.prompts ? a.prompts : gpu ? "2048,8192,32768" : "128";
    a.batches = a.batches ? a.batches : gpu ? "1,16,64,256" : "1,4";
    a.contexts = a.contexts ? a.contexts : gpu ? "2048,32768" : "256";
    r->steps = r->steps > 0 ? r->steps : gpu ? 64 : 8;
    setvbuf(stdout, NULL, _IOLBF, 0); // each result line as it comes, also into a pipe
    return a.train ? bench_train(&a, gpu) : bench_layers(&a);
}
