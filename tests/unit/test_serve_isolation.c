/* test_serve_isolation.c - one request's bad input fails that request alone:
 * a job whose prompt holds an id outside the model's vocabulary and a good
 * job admitted into the same scheduler round; the bad one gets 400 naming the
 * id, the good one its tokens (the scheduler on a random tiny engine, no HTTP). */
#include <signal.h> // sig_atomic_t
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc
#include <string.h> // strstr

#include "engine.h"          // lz_engine_open
#include "serve_job.h"       // serve_job
#include "serve_metrics.h"   // serve_metrics
#include "serve_scheduler.h" // serve_scheduler
#include "test_util.h"       // CHECK

static serve_job *job(const int32_t *ids, int n, int max_tokens) {
    serve_job *j = serve_job_new();
    j->prompt = malloc(sizeof(int32_t) * (size_t)n);
    memcpy(j->prompt, ids, sizeof(int32_t) * (size_t)n);
    j->n_prompt = n;
    j->max_tokens = max_tokens;
    j->ignore_eos = true;
    j->sampling = (lz_sampler_params){.temperature = 0, .top_k = 0, .top_p = 1.0, .seed = 0};
    return j;
}

int main(void) {
    lz_engine e;
    const lz_engine_options eo = {.shape = "tiny-hybrid", .seed = 1, .n_slots = 2, .max_context = 64,
                                  .prefill_chunk = 64};
    lz_error_clear();
    if (lz_engine_open(&e, &eo) != LZ_OK) {
        CHECK_MSG(0, "engine: %s", lz_error_message());
        return lz_test_finish("test_serve_isolation");
    }
    const int V = e.model.cfg.vocab_size;
    lz_generation_config gen = {.defaults = {.temperature = 0, .top_k = 0, .top_p = 1.0}};
    serve_metrics metrics;
    CHECK(serve_metrics_init(&metrics) == 0);
    serve_scheduler s;
    const serve_scheduler_options so = {.max_batch = 2, .queue_size = 4, .session_memory = 1 << 20,
                                        .drain_timeout = 60}; // stop is set: answer what is queued
    CHECK_MSG(serve_scheduler_init(&s, &e, "/nonexistent", &gen, &metrics, &so) == LZ_OK, "%s", lz_error_message());

    const int32_t bad_ids[] = {1, 2, V + 7, 3}, good_ids[] = {1, 2, 3, 4, 5};
    serve_job *bad = job(bad_ids, 4, 4), *good = job(good_ids, 5, 4);
    CHECK(serve_scheduler_submit(&s, bad) == 0 && serve_scheduler_submit(&s, good) == 0); // one round: 2 slots
    volatile sig_atomic_t stop = 1; // answer what is queued, then return
    CHECK_MSG(serve_scheduler_run(&s, &stop) == LZ_OK, "%s", lz_error_message());

    char want[64];
    snprintf(want, sizeof want, "token %d ", V + 7);
    CHECK_MSG(bad->done && bad->failed && bad->http_status == 400 && strstr(bad->error, want),
              "bad job: done %d failed %d status %d '%s'", bad->done, bad->failed, bad->http_status, bad->error);
    CHECK_MSG(good->done && !good->failed && good->n_tokens == 4, "good job: done %d failed %d status %d '%s', %d tokens",
              good->done, good->failed, good->http_status, good->error, good->n_tokens);
    serve_job_release(bad);
    serve_job_release(good);
    serve_scheduler_free(&s);
    serve_metrics_free(&metrics);
    lz_engine_close(&e);
    return lz_test_finish("test_serve_isolation");
}
