/* cmd_bench.c - `lizard bench`: prompt and decode throughput of a model shape
 * (random weights made on the device: no files) or of a model folder, each
 * figure beside its ceiling:
 *   decode bound = batch / ((weight bytes + state bytes read per step) / copy rate)
 *   prompt bound = GEMM rate / (2 x matmul params + attention FLOPs per token)
 * where the copy rate and the GEMM rate are measured on this device now. */
#include <stdio.h>    // printf, fprintf
#include <stdlib.h>   // malloc, free
#include <string.h>   // strcmp
#include "clock.h"    // lz_now_seconds
#include "median.h"   // lz_median

#include "cli_options.h"   // lz_parse_options
#include "commands.h"      // lz_cmd_bench
#include "id_list.h"       // lz_parse_id_list
#include "model_presets.h" // lz_preset_find
#include "state.h"         // lz_state
#include "step.h"          // lz_step
#include "engine.h"        // lz_open_backend
#include "bench_pipeline.h" // lz_bench_pipeline
#include "bench_state.h"    // lz_bench_state
#include "bench_train.h"    // lz_bench_train
#include "mpi_world.h"      // lz_world_get

typedef struct {
    const char *shape, *model, *device, *dtype, *prompts, *batches, *contexts, *json, *placement, *plan_file;
    long steps, chunk, seed, train_seq, train_batch;
    bool no_ceilings, linear_shapes, state, train;
} bench_args;

typedef struct {
    const lz_ops *ops;
    lz_backend *be;
    lz_model model;
    double copy_bps, gemm_flops; /* 0: not measured */
    FILE *json;
} bench;

/* An FP8 weight's parameters and its bytes (1 a weight, 4 a row for the scales); nothing for others. */
static void count_fp8(const lz_weight *w, size_t *params, size_t *bytes) {
    if (w->dtype != LZ_DTYPE_F8_E4M3 || !w->data)
        return;
    *params += (size_t)(w->rows * w->cols);
    *bytes += (size_t)(w->rows * w->cols) + sizeof(float) * (size_t)w->rows;
}

/* The bytes a decode step reads of the weights: every parameter in the activation type, but FP8 linear
 * weights (--dtype fp8) as they are held. */
static size_t weight_bytes(const bench *b) {
    size_t fp8_params = 0, fp8_bytes = 0;
    for (int i = 0; b->model.layers && i < b->model.cfg.num_hidden_layers; i++) {
        const lz_layer *ly = &b->model.layers[i];
        const lz_weight *w[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
            count_fp8(w[k], &fp8_params, &fp8_bytes);
    }
    count_fp8(&b->model.lm_head, &fp8_params, &fp8_bytes);
    return (b->model.n_params_teacher + b->model.n_params_lizard - fp8_params) * b->ops->act_size + fp8_bytes;
}

/* Bytes of state one sequence reads per decode step at `context` positions. */
static size_t state_read_bytes(const bench *b, int context) {
    lz_state_bytes s = lz_state_bytes_at(&b->model, context);
    return s.softmax_kv + 2 * s.lizard_gla + s.lizard_window; // S and z are read and written
}

/* A result line; bound 0 (no ceilings measured) and mem_used 0 (a backend that cannot say: the CPU)
 * print "-" (null in JSON). */
static void report(bench *b, const char *kind, int prompt, int batch, int context, double tok_s, double bound,
                   size_t mem_used) {
    char bound_text[48] = "    -", share[16] = "    -", mem[16] = "     -", bound_json[32] = "null", mem_json[32] = "null";
    if (bound > 0) {
        snprintf(bound_text, sizeof bound_text, "%10.1f", bound);
        snprintf(share, sizeof share, "%5.1f%%", 100.0 * tok_s / bound);
        snprintf(bound_json, sizeof bound_json, "%.2f", bound);
    }
    if (mem_used > 0) {
        snprintf(mem, sizeof mem, "%6.2f", mem_used / 1e9);
        snprintf(mem_json, sizeof mem_json, "%zu", mem_used);
    }
    printf("%-7s prompt %7d  batch %4d  context %7d  %10.1f tok/s  bound %10s tok/s (%s)  mem %s GB\n", kind, prompt,
           batch, context, tok_s, bound_text, share, mem);
    if (b->json) {
        fprintf(b->json,
                "{\"kind\": \"%s\", \"prompt\": %d, \"batch\": %d, \"context\": %d, \"tok_s\": %.2f, "
                "\"bound_tok_s\": %s, \"mem_bytes\": %s}\n",
                kind, prompt, batch, context, tok_s, bound_json, mem_json);
        fflush(b->json);
    }
}

/* Device memory in use, 0 where the backend cannot say. */
static size_t mem_used(const bench *b) {
    size_t free_b = 0, total = 0;
    if (b->ops->memory_info && b->ops->memory_info(b->be, &free_b, &total) == LZ_OK)
        return total - free_b;
    return 0;
}

/* One sequence of P tokens through prefill steps of `chunk` tokens. */
static lz_status bench_prompt(bench *b, int P, int chunk) {
    lz_state st;
    lz_workspace ws;
    const int step = P < chunk ? P : chunk;
    LZ_TRY(lz_state_create(&st, &b->model, 1, P + 1));
    lz_status s = lz_workspace_create(&ws, &b->model, step, 1);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)step), *tpos = malloc(sizeof(int32_t) * (size_t)step);
    float *logits = malloc(sizeof(float) * (size_t)b->model.cfg.vocab_size);
    if (s == LZ_OK && (!ids || !tpos || !logits))
        s = lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
    for (int i = 0; s == LZ_OK && i < step; i++)
        ids[i] = (int32_t)((i * 7919) % b->model.cfg.vocab_size);
    if (s == LZ_OK) { // warm-up: kernels load lazily on first use; that is not prompt time
        int len = step, slot = 0, start = 0, pos = 0, last = step - 1;
        for (int i = 0; i < len; i++)
            tpos[i] = i;
        lz_batch warm = {1, len, &slot, &start, &len, &pos, tpos};
        s = lz_step(&b->model, &st, &ws, ids, &warm, &last, 1, (lz_head_out){.logits = logits});
        if (s == LZ_OK)
            s = lz_state_reset_slot(&st, &b->model, 0);
    }
    double t0 = lz_now_seconds();
    for (int c0 = 0; s == LZ_OK && c0 < P; c0 += step) {
        int len = P - c0 < step ? P - c0 : step, slot = 0, start = 0, pos = c0, last = len - 1;
        for (int i = 0; i < len; i++)
            tpos[i] = c0 + i;
        lz_batch batch = {1, len, &slot, &start, &len, &pos, tpos};
        s = lz_step(&b->model, &st, &ws, ids, &batch, &last, c0 + len == P ? 1 : 0, (lz_head_out){.logits = logits});
    }
    if (s == LZ_OK)
        s = b->ops->sync(b->be);
    const double dt = lz_now_seconds() - t0;
    const size_t used = mem_used(b);
    if (s == LZ_OK) {
        const lz_config *c = &b->model.cfg;
        double flops = 2.0 * (double)(b->model.n_params_teacher + b->model.n_params_lizard) -
                       2.0 * c->vocab_size * c->hidden_size; // the embedding is a lookup
        for (int i = 0; i < c->num_hidden_layers; i++) // causal attention: P/2 keys on average
            if (b->model.layers[i].run_softmax)
                flops += 4.0 * (P / 2.0) * c->num_attention_heads * c->head_dim;
        report(b, "prompt", P, 1, P, P / dt, b->gemm_flops > 0 ? b->gemm_flops / flops : 0, used);
    }
    free(ids), free(tpos), free(logits);
    lz_workspace_free(&ws, &b->model);
    lz_state_free(&st, &b->model);
    return s;
}

/* B sequences at `context` positions each, `steps` greedy decode steps timed after 2 warm-ups. */
static lz_status bench_decode(bench *b, int B, int context, int steps) {
    lz_state st;
    lz_workspace ws;
    lz_status s = lz_state_create(&st, &b->model, B, context + steps + 3);
    if (s != LZ_OK) {
        printf("decode  batch %4d  context %7d  does not fit: %s\n", B, context, lz_error_message());
        lz_error_clear();
        return LZ_OK;
    }
    s = lz_workspace_create(&ws, &b->model, B, B);
    int32_t *buf = malloc(sizeof(int32_t) * 6 * (size_t)B);
    if (s == LZ_OK && !buf)
        s = lz_fail(LZ_ERR_NOMEM, "bench: out of memory");
    int32_t *slot = buf, *start = buf + B, *len = buf + 2 * B, *pos = buf + 3 * B, *ids = buf + 4 * B, *next = buf + 5 * B;
    for (int i = 0; s == LZ_OK && i < B; i++) {
        slot[i] = start[i] = i;
        len[i] = 1;
        ids[i] = (int32_t)((i * 31) % b->model.cfg.vocab_size);
        st.slot_pos[i] = context; // as if `context` tokens were prefilled: the cost per step is the same
    }
    double t0 = 0;
    for (int it = 0; s == LZ_OK && it < steps + 2; it++) {
        if (it == 2) {
            s = b->ops->sync(b->be);
            t0 = lz_now_seconds();
        }
        for (int i = 0; i < B; i++)
            pos[i] = st.slot_pos[i];
        lz_batch batch = {B, B, slot, start, len, pos, pos};
        if (s == LZ_OK) // greedy, as generation runs it: the argmax on the device, the ids fed back
            s = lz_step(&b->model, &st, &ws, ids, &batch, start, B, (lz_head_out){.ids = next});
        if (s == LZ_OK)
            memcpy(ids, next, sizeof(int32_t) * (size_t)B);
    }
    if (s == LZ_OK)
        s = b->ops->sync(b->be);
    const double dt = lz_now_seconds() - t0;
    if (s == LZ_OK) {
        const double bytes = (double)weight_bytes(b) + (double)B * state_read_bytes(b, context);
        report(b, "decode", 0, B, context, (double)B * steps / dt, b->copy_bps > 0 ? B * b->copy_bps / bytes : 0,
               mem_used(b));
    }
    free(buf);
    lz_workspace_free(&ws, &b->model);
    lz_state_free(&st, &b->model);
    return s;
}

/* Median seconds of 5 timed calls of the linear op (after one warm-up). */
static lz_status time_linear(bench *b, void *out, const void *x, const lz_weight *w, int n, double *secs) {
    double t[5];
    LZ_TRY(b->ops->linear(b->be, out, x, w, NULL, n));
    for (int r = 0; r < 5; r++) {
        LZ_TRY(b->ops->sync(b->be));
        const double t0 = lz_now_seconds();
        LZ_TRY(b->ops->linear(b->be, out, x, w, NULL, n));
        LZ_TRY(b->ops->sync(b->be));
        t[r] = lz_now_seconds() - t0;
    }
    *secs = lz_median(t, 5);
    return LZ_OK;
}

/* Every distinct linear shape of layer 0 and the LM head at a few token
 * counts: time, weight bandwidth and FLOP rate, to see where steps go. */
static lz_status bench_linear_shapes(bench *b) {
    const lz_layer *ly = &b->model.layers[0], *lizard = ly;
    for (int i = 0; i < b->model.cfg.num_hidden_layers && lizard->run_softmax; i++)
        lizard = &b->model.layers[i];
    const lz_weight *shapes[] = {&ly->wq, &ly->wk, &ly->wo, &ly->w_up, &ly->w_down, &lizard->gate, &b->model.lm_head};
    const char *names[] = {"q_proj", "k_proj", "o_proj", "up_proj", "down_proj", "lizard gate", "lm_head"};
    const int tokens[] = {1, 4, 8, 16, 64, 256, 2048};
    void *x = NULL, *out = NULL;
    const size_t cap = 2048 * (size_t)b->model.cfg.vocab_size;
    lz_status s = b->ops->alloc(b->be, cap * b->ops->act_size, &out);
    if (s == LZ_OK)
        s = b->ops->alloc(b->be, 2048 * (size_t)b->model.cfg.intermediate_size * b->ops->act_size, &x);
    if (s == LZ_OK)
        s = b->ops->zero(b->be, x, 2048 * (size_t)b->model.cfg.intermediate_size * b->ops->act_size);
    for (size_t i = 0; s == LZ_OK && i < sizeof shapes / sizeof shapes[0]; i++) {
        const lz_weight *w = shapes[i];
        if (!w->data)
            continue;
        for (size_t j = 0; s == LZ_OK && j < sizeof tokens / sizeof tokens[0]; j++) {
            if ((size_t)tokens[j] * w->rows > cap)
                continue;
            double secs = 0;
            s = time_linear(b, out, x, w, tokens[j], &secs);
            const double bytes = w->dtype == LZ_DTYPE_F8_E4M3 ? (double)w->rows * (w->cols + sizeof(float))
                                                              : (double)w->rows * w->cols * b->ops->act_size;
            if (s == LZ_OK)
                printf("linear  %-12s [%6lld x %5lld]  tokens %5d  %9.1f us  %7.0f GB/s  %6.1f TFLOP/s\n", names[i],
                       (long long)w->rows, (long long)w->cols, tokens[j], secs * 1e6, bytes / secs / 1e9,
                       2.0 * tokens[j] * w->rows * w->cols / secs / 1e12);
        }
    }
    if (x)
        b->ops->free(b->be, x);
    if (out)
        b->ops->free(b->be, out);
    return s;
}

static void print_header(bench *b, const bench_args *a) {
    const lz_state_bytes at2k = lz_state_bytes_at(&b->model, 2048), at32k = lz_state_bytes_at(&b->model, 32768);
    const size_t per_seq = at32k.softmax_kv + at32k.lizard_gla + at32k.lizard_window;
    printf("lizard bench: %s on %s, %zu parameters (%.2f GB), %d softmax + %d Lizard layers\n",
           a->shape ? a->shape : a->model, b->ops->name, b->model.n_params_teacher + b->model.n_params_lizard,
           weight_bytes(b) / 1e9, at32k.n_softmax, at32k.n_lizard);
    printf("state per sequence: %zu bytes at 2K, %zu bytes at 32K (Lizard part %zu)\n",
           at2k.softmax_kv + at2k.lizard_gla + at2k.lizard_window, per_seq, at32k.lizard_gla + at32k.lizard_window);
    size_t free_b = 0, total = 0;
    if (b->ops->memory_info && b->ops->memory_info(b->be, &free_b, &total) == LZ_OK)
        printf("32K-context sequences that fit in the free %.1f GB: %zu\n", free_b / 1e9, per_seq ? free_b / per_seq : 0);
    if (b->copy_bps > 0)
        printf("ceilings: copy %.2f TB/s (read + write), GEMM %.1f TFLOP/s\n", b->copy_bps / 1e12, b->gemm_flops / 1e12);
}

static lz_status run_bench(bench *b, const bench_args *a) {
    int32_t *prompts = NULL, *batches = NULL, *contexts = NULL;
    int np = 0, nb = 0, nc = 0;
    lz_status s = lz_parse_id_list("--prompt", a->prompts, &prompts, &np);
    if (s == LZ_OK)
        s = lz_parse_id_list("--batch", a->batches, &batches, &nb);
    if (s == LZ_OK)
        s = lz_parse_id_list("--context", a->contexts, &contexts, &nc);
    if (s == LZ_OK && !a->no_ceilings && b->ops->measure_ceilings)
        s = b->ops->measure_ceilings(b->be, &b->copy_bps, &b->gemm_flops);
    if (s == LZ_OK)
        print_header(b, a);
    if (s == LZ_OK && a->linear_shapes)
        s = bench_linear_shapes(b);
    for (int i = 0; s == LZ_OK && i < np; i++)
        if (prompts[i] > 0)
            s = bench_prompt(b, prompts[i], (int)a->chunk);
    for (int j = 0; s == LZ_OK && j < nc; j++)
        for (int i = 0; s == LZ_OK && i < nb; i++)
            if (batches[i] > 0)
                s = bench_decode(b, batches[i], contexts[j], (int)a->steps);
    for (int j = 0; s == LZ_OK && a->state && j < nc; j++)
        s = lz_bench_state(&b->model, contexts[j], b->json);
    free(prompts), free(batches), free(contexts);
    return s;
}

/* Under mpirun -np N: the same figures through the pipeline (bench_pipeline.c). */
static lz_status bench_pipelined(const bench_args *a) {
    int32_t *prompts = NULL, *batches = NULL, *contexts = NULL;
    int np = 0, nb = 0, nc = 0;
    lz_bench_pipeline_args p = {a->shape, a->model, a->device, a->dtype, a->placement, a->plan_file, a->steps,
                                a->chunk, a->seed, a->no_ceilings, NULL};
    lz_status s = lz_parse_id_list("--prompt", a->prompts, &prompts, &np);
    if (s == LZ_OK)
        s = lz_parse_id_list("--batch", a->batches, &batches, &nb);
    if (s == LZ_OK)
        s = lz_parse_id_list("--context", a->contexts, &contexts, &nc);
    if (s == LZ_OK && a->json && lz_world_get()->rank == 0 && !(p.json = fopen(a->json, "w")))
        s = lz_fail(LZ_ERR_IO, "lizard bench: --json: cannot write '%s'", a->json);
    if (s == LZ_OK)
        s = lz_bench_pipeline(&p, prompts, np, batches, nb, contexts, nc);
    if (p.json)
        fclose(p.json);
    free(prompts), free(batches), free(contexts);
    return s;
}

lz_status lz_cmd_bench(int argc, char **argv) {
    // the sizes' defaults follow the device (below): minutes of work on a GPU, seconds on the CPU
    bench_args a = {NULL, NULL, "cpu", "bf16", NULL, NULL, NULL, NULL, NULL, NULL, -1, 8192, 0, 2048, 1,
                    false, false, false, false};
    const lz_option options[] = {
        {"--shape", LZ_OPT_STRING, "PRESET", "random weights of a named shape, made on the device (e.g. "
                                             "llama3-8b-hybrid)", &a.shape, false, 0, 0},
        {"--model", LZ_OPT_DIR, "DIR", "or a model folder", &a.model, false, 0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &a.device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32|fp8", "CUDA weights and activations (default bf16); fp8: the linear "
         "layers' weights in FP8 E4M3 with a scale per row", &a.dtype, false, 0, 0},
        {"--prompt", LZ_OPT_STRING, "N,...", "prompt lengths (default cuda 2048,8192,32768, cpu 128; 0 = none)",
         &a.prompts, false, 0, 0},
        {"--batch", LZ_OPT_STRING, "B,...", "decode batch sizes (default cuda 1,16,64,256, cpu 1,4)", &a.batches,
         false, 0, 0},
        {"--context", LZ_OPT_STRING, "C,...", "decode context lengths (default cuda 2048,32768, cpu 256)", &a.contexts,
         false, 0, 0},
        {"--steps", LZ_OPT_INT, "N", "decode steps timed (default cuda 64, cpu 8)", &a.steps, false, 1, 1 << 20},
        {"--prefill-chunk", LZ_OPT_INT, "N", "tokens per prefill step (default 8192)", &a.chunk, false, 1, 1 << 20},
        {"--seed", LZ_OPT_INT, "S", "random weights seed", &a.seed, false, 0, 9e15},
        {"--json", LZ_OPT_STRING, "FILE", "also write one JSON object per result line", &a.json, false, 0, 0},
        {"--no-ceilings", LZ_OPT_FLAG, "", "skip measuring the copy and GEMM ceilings", &a.no_ceilings, false, 0, 0},
        {"--linear-shapes", LZ_OPT_FLAG, "", "also time every linear shape of the model at 1..2048 tokens",
         &a.linear_shapes, false, 0, 0},
        {"--state", LZ_OPT_FLAG, "", "also one sequence's state as a session message at each --context: bytes by "
                                     "layer kind; serialise, restore, file save and file load GB/s", &a.state,
         false, 0, 0},
        {"--placement", LZ_OPT_STRING, "balanced|by-type", "under mpirun: how layers are placed on the ranks",
         &a.placement, false, 0, 0},
        {"--plan", LZ_OPT_STRING, "FILE", "under mpirun: a hand-written plan", &a.plan_file, false, 0, 0},
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
    if (!a.shape == !a.model)
        return lz_fail(LZ_ERR_INPUT, "lizard bench: give exactly one of --shape PRESET or --model DIR");
    const bool gpu = strcmp(a.device, "cpu") != 0;
    a.prompts = a.prompts ? a.prompts : gpu ? "2048,8192,32768" : "128";
    a.batches = a.batches ? a.batches : gpu ? "1,16,64,256" : "1,4";
    a.contexts = a.contexts ? a.contexts : gpu ? "2048,32768" : "256";
    a.steps = a.steps > 0 ? a.steps : gpu ? 64 : 8;
    setvbuf(stdout, NULL, _IOLBF, 0); // each result line as it comes, also into a pipe
    if (lz_world_get()->size > 1)
        return bench_pipelined(&a);
    lz_config cfg;
    LZ_TRY(a.shape ? lz_preset_config(a.shape, "lizard bench: --shape", &cfg) : lz_config_load(a.model, &cfg));
    if (a.train) {
        if (!a.shape)
            return lz_fail(LZ_ERR_INPUT, "lizard bench --train: give --shape PRESET (random weights of a shape)");
        FILE *json = a.json ? fopen(a.json, "w") : NULL;
        if (a.json && !json)
            return lz_fail(LZ_ERR_IO, "lizard bench: --json: cannot write '%s'", a.json);
        const lz_bench_train_args t = {a.shape, a.device, a.dtype, (int)a.train_seq, (int)a.train_batch,
                                       (int)(a.steps > 0 && a.steps < 64 ? a.steps : gpu ? 10 : 2), a.seed, json};
        const lz_status s = lz_bench_train(&t, &cfg);
        if (json)
            fclose(json);
        return s;
    }
    bench b = {0};
    LZ_TRY(lz_open_inference_backend(a.device, a.dtype, &b.be, &b.ops, &cfg.fp8_weights));
    lz_status s = a.shape ? lz_model_init_random(&b.model, &cfg, b.ops, b.be, (uint64_t)a.seed)
                          : lz_model_load(&b.model, a.model, &cfg, b.ops, b.be);
    if (s == LZ_OK && a.json && !(b.json = fopen(a.json, "w")))
        s = lz_fail(LZ_ERR_IO, "lizard bench: --json: cannot write '%s'", a.json);
    if (s == LZ_OK)
        s = run_bench(&b, &a);
    if (b.json)
        fclose(b.json);
    lz_model_free(&b.model);
    b.ops->destroy(b.be);
    return s;
}
