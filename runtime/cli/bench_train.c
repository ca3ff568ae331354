/* bench_train.c - `lizard bench --train` (bench_train.h). */
#include "bench_train.h"

#include <stdlib.h> // malloc, free

#include "clock.h"        // lz_now_seconds
#include "finetune_run.h" // lz_finetune_setup_random, lz_finetune_step
#include "median.h"       // lz_median

lz_status lz_bench_train(const lz_bench_train_args *a, const lz_config *cfg) {
    lz_finetune_run r = {.a = {.device = a->device, .dtype = a->dtype, .targets = "q,k,v,o", .tokens = 1,
                               .seq_len = a->seq_len, .batch = a->batch, .warmup = 0, .lora_rank = 8,
                               .lora_alpha = 16, .seed = a->seed, .lr = 1e-5, .min_lr = -1, .clip = 1.0}};
    lz_status s = lz_finetune_setup_random(&r, cfg);
    const size_t n = (size_t)a->batch * a->seq_len;
    int32_t *ids = malloc(sizeof(int32_t) * n);
    double *secs = malloc(sizeof(double) * (size_t)(a->steps + 1));
    if (s == LZ_OK && (!ids || !secs))
        s = lz_fail(LZ_ERR_NOMEM, "lizard bench --train: out of memory");
    uint64_t state = (uint64_t)a->seed * 2654435761u + 1;
    for (size_t i = 0; s == LZ_OK && i < n; i++) { // any ids: the weights are random too
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((state >> 33) % (uint64_t)cfg->vocab_size);
    }
    double loss = 0, norm = 0;
    for (int i = 0; s == LZ_OK && i <= a->steps; i++) { // step 0 warms the backend up
        const double t0 = lz_now_seconds();
        s = lz_finetune_step(&r, ids, &loss, &norm);
        secs[i] = lz_now_seconds() - t0;
    }
    if (s == LZ_OK) {
        const double t = lz_median(secs + 1, (size_t)a->steps), tok_s = (double)n / t;
        const double flops = r.m.flops_per_token, bound = r.m.gemm_rate > 0 ? r.m.gemm_rate / flops : 0;
        size_t free_b = 0, total = 0;
        const bool mem = r.m.ops->memory_info && r.m.ops->memory_info(r.m.be, &free_b, &total) == LZ_OK;
        printf("lizard bench --train: %s on %s, %d x %d tokens a step, LoRA r 8 on q,k,v,o + the Lizard tensors\n",
               a->shape, r.m.ops->name, a->batch, a->seq_len);
        printf("train  %8.1f tok/s (median of %d steps, %.1f ms each)  bound %8.1f tok/s  %5.1f%%  "
               "(%.2f GFLOP/token, GEMM %.1f TFLOP/s)  loss %.3f  memory %.1f GB\n",
               tok_s, a->steps, 1e3 * t, bound, bound > 0 ? 100 * tok_s / bound : 0, flops / 1e9,
               r.m.gemm_rate / 1e12, loss, mem ? (total - free_b) / 1e9 : 0);
        if (a->json)
            fprintf(a->json,
                    "{\"kind\": \"train\", \"shape\": \"%s\", \"device\": \"%s\", \"seq_len\": %d, \"batch\": %d, "
                    "\"tok_s\": %.2f, \"bound_tok_s\": %.2f, \"flops_per_token\": %.4g, \"gemm_flops\": %.4g, "
                    "\"step_ms\": %.3f, \"memory_bytes\": %zu}\n",
                    a->shape, r.m.ops->name, a->seq_len, a->batch, tok_s, bound, flops, r.m.gemm_rate, 1e3 * t,
                    mem ? total - free_b : 0);
    }
    free(ids), free(secs);
    lz_finetune_teardown(&r);
    return s;
}
