/* test_generate_batch.c - batched generation (mixed prompt lengths, slots in
 * use together, sequences finishing at different times) gives every sequence
 * exactly the ids it gets alone, greedy and sampled, on a hybrid and a pure
 * Lizard fixture. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // getenv, free
#include <string.h> // memcmp

#include "generate_batch.h" // lz_generate_batch
#include "test_util.h"      // CHECK

static int32_t prompt_ids[] = {305, 265, 245, 226, 40, 81, 264, 106, 271, 56, 111, 312, 163, 267, 192, 21, 108, 160};

static lz_status run(const char *dir, const lz_prompt *prompts, int n, int max_tokens, double temperature,
                     lz_completion *out) {
    lz_engine e;
    lz_engine_options o = {.model_dir = dir, .device = "cpu", .n_slots = n, .max_context = 64, .prefill_chunk = 7};
    LZ_TRY(lz_engine_open(&e, &o));
    lz_generation_config gen = {0};
    lz_sampler_params p = {temperature, 0, 1.0, 11};
    lz_batch_timing t;
    lz_status s = lz_generate_batch(&e, prompts, n, max_tokens, &p, &gen, true, out, &t);
    lz_engine_close(&e);
    return s;
}

static void check_model(const char *fixtures, const char *name, double temperature) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s/model", fixtures, name);
    enum { N = 4, MAX = 9 };
    const int lens[N] = {18, 3, 11, 1};
    lz_prompt prompts[N];
    for (int i = 0; i < N; i++)
        prompts[i] = (lz_prompt){prompt_ids + (18 - lens[i]), lens[i]};
    lz_completion together[N] = {0};
    CHECK_MSG(run(dir, prompts, N, MAX, temperature, together) == LZ_OK, "%s: %s", name, lz_error_message());
    for (int i = 0; i < N; i++) {
        lz_completion alone = {0};
        // alone, sequence i must sample with seed 11 + i as it did in the batch
        lz_engine e;
        lz_engine_options o = {.model_dir = dir, .device = "cpu", .n_slots = 1, .max_context = 64, .prefill_chunk = 7};
        CHECK(lz_engine_open(&e, &o) == LZ_OK);
        lz_generation_config gen = {0};
        lz_sampler_params p = {temperature, 0, 1.0, 11 + (uint64_t)i};
        lz_batch_timing t;
        CHECK(lz_generate_batch(&e, &prompts[i], 1, MAX, &p, &gen, true, &alone, &t) == LZ_OK);
        lz_engine_close(&e);
        CHECK_MSG(together[i].n == MAX && alone.n == MAX, "%s seq %d: %d and %d tokens", name, i, together[i].n,
                  alone.n);
        CHECK_MSG(memcmp(together[i].ids, alone.ids, sizeof(int32_t) * MAX) == 0,
                  "%s seq %d (prompt %d tokens, temperature %g): batched ids differ from alone", name, i, lens[i],
                  temperature);
        free(alone.ids);
        free(together[i].ids);
    }
}

int main(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    CHECK(fixtures != NULL);
    if (!fixtures)
        return lz_test_finish("test_generate_batch");
    check_model(fixtures, "hybrid50", 0.0);
    check_model(fixtures, "lizard_perhead", 0.0);
    check_model(fixtures, "hybrid50", 0.8);
    return lz_test_finish("test_generate_batch");
}
