/* test_knobs.c - the LIZARD_* knobs: the process's (lz_knobs_load) and the CUDA backend's
 * (lz_cuda_knobs_read, plain C in every build): defaults when unset or empty, each kind of knob parsed,
 * one error naming the variable for a value out of range or of the wrong kind (the earlier values
 * kept); at start (lz_knobs_check) a bad value in either table and an unknown LIZARD_* name refused,
 * and lz_knobs_print listing both tables. */
#include <stdlib.h> // setenv, unsetenv

#include "cuda/cuda_knobs.h" // lz_cuda_knobs_read
#include "knobs.h"           // the code under test
#include "ops.h"             // lz_cuda_knob_table
#include "test_util.h"       // CHECK, CHECK_FAILS_WITH, lz_test_finish

static const lz_knob_table *const backend_knobs[] = {&lz_cuda_knob_table};

static void refused(const char *name, const char *value, const char *needle) {
    setenv(name, value, 1);
    CHECK_FAILS_WITH(lz_knobs_load(), LZ_ERR_INPUT, needle);
    CHECK_FAILS_WITH(lz_knobs_check(backend_knobs, 1), LZ_ERR_INPUT, needle);
    unsetenv(name);
}

/* A CUDA knob refused by the backend's reader (its struct kept) and at start. */
static void cuda_refused(lz_cuda_knobs *k, const char *name, const char *value, const char *needle) {
    const lz_cuda_knobs before = *k;
    setenv(name, value, 1);
    CHECK_FAILS_WITH(lz_cuda_knobs_read(k), LZ_ERR_INPUT, needle);
    CHECK_MSG(memcmp(&before, k, sizeof before) == 0, "%s=%s changed the knobs it was refused for", name, value);
    CHECK_FAILS_WITH(lz_knobs_check(backend_knobs, 1), LZ_ERR_INPUT, needle);
    unsetenv(name);
}

/* lz_knobs_print's lines and those marked "(default)". */
static void printed(int *lines, int *defaults) {
    FILE *f = tmpfile();
    lz_knobs_print(f, backend_knobs, 1);
    rewind(f);
    char line[128];
    *lines = *defaults = 0;
    while (fgets(line, sizeof line, f))
        (*lines)++, *defaults += strstr(line, "(default)") != NULL;
    fclose(f);
}

int main(void) {
    // the process's knobs
    CHECK(lz_knobs_load() == LZ_OK);
    const lz_knobs *k = lz_knobs_get();
    CHECK(!k->profile && !k->no_graphs && k->step_timeout == 30.0 && k->session_chunk_bytes == 0 && !k->train_gla_bf16);
    setenv("LIZARD_PROFILE", "1", 1);
    setenv("LIZARD_STEP_TIMEOUT", "2.5", 1);
    setenv("LIZARD_SESSION_CHUNK_BYTES", "100", 1);
    setenv("LIZARD_TRAIN_GLA", "bf16", 1);
    setenv("LIZARD_NO_GRAPHS", "", 1); // empty: the default
    CHECK(lz_knobs_load() == LZ_OK);
    CHECK(k->profile && !k->no_graphs && k->step_timeout == 2.5 && k->session_chunk_bytes == 100 && k->train_gla_bf16);
    CHECK(lz_knobs_given("LIZARD_PROFILE") && !lz_knobs_given("LIZARD_NO_GRAPHS"));
    refused("LIZARD_PROFILE", "yes", "LIZARD_PROFILE=yes: expected 0 or 1");
    refused("LIZARD_STEP_TIMEOUT", "-1", "LIZARD_STEP_TIMEOUT=-1: expected seconds");
    refused("LIZARD_SESSION_CHUNK_BYTES", "-5", "LIZARD_SESSION_CHUNK_BYTES=-5");
    refused("LIZARD_SESSION_CHUNK_BYTES", "0", "LIZARD_SESSION_CHUNK_BYTES=0");
    refused("LIZARD_TRAIN_GLA", "fp16", "LIZARD_TRAIN_GLA=fp16: expected fp32 or bf16");
    CHECK(k->profile && k->step_timeout == 2.5 && k->session_chunk_bytes == 100); // as the last good load left them

    // the CUDA backend's knobs: their own table, read as the backend reads them when it is created
    lz_cuda_knobs c;
    memset(&c, 0x5a, sizeof c); // every field written by the read
    CHECK(lz_cuda_knobs_read(&c) == LZ_OK);
    CHECK(c.wgmma && c.gemv_tokens == 1 && c.fuse_tokens == 1 && c.stream_tokens == 7 && c.stream_split == 0);
    CHECK(c.join_tokens == 256 && c.fork_tokens == 32 && c.gla_stream_min == 8 && c.gla_spread == 2);
    CHECK(c.gla_ring_blocks == 0 && c.window_ring == 8 && c.window_ring_blocks == 0 && c.window_split_min == 16);
    CHECK(c.decode_attn == -1 && !c.trace && c.trace_us == 10000);
    setenv("LIZARD_WGMMA", "0", 1);
    setenv("LIZARD_STREAM_TOKENS", "64", 1);
    setenv("LIZARD_TRACE", "/tmp/t", 1);
    setenv("LIZARD_DECODE_ATTN", "", 1); // empty: the default
    CHECK(lz_cuda_knobs_read(&c) == LZ_OK);
    CHECK(!c.wgmma && c.stream_tokens == 64 && c.trace && strcmp(c.trace, "/tmp/t") == 0 && c.decode_attn == -1);
    cuda_refused(&c, "LIZARD_STREAM_TOKENS", "65", "LIZARD_STREAM_TOKENS=65: expected a whole number from 0 to 64");
    cuda_refused(&c, "LIZARD_GEMV_TOKENS", "2x", "LIZARD_GEMV_TOKENS=2x");
    cuda_refused(&c, "LIZARD_FORK_TOKENS", "0", "LIZARD_FORK_TOKENS=0");
    cuda_refused(&c, "LIZARD_DECODE_ATTN", "99999999999999999999", "LIZARD_DECODE_ATTN=");
    setenv("LIZARD_STREAM_TOKENS", "64", 1); // (cuda_refused took it away)

    // at start: both tables known, a name neither reads refused; lz_knobs_load alone leaves names to main
    CHECK_MSG(lz_knobs_check(backend_knobs, 1) == LZ_OK, "%s", lz_error_message());
    setenv("LIZARD_FUSE", "0", 1); // a retired knob
    CHECK_FAILS_WITH(lz_knobs_check(backend_knobs, 1), LZ_ERR_INPUT, "LIZARD_FUSE: not a variable lizard reads");
    CHECK(lz_knobs_load() == LZ_OK);
    unsetenv("LIZARD_FUSE");
    CHECK_FAILS_WITH(lz_knobs_check(NULL, 0), LZ_ERR_INPUT, "LIZARD_WGMMA: not a variable"); // without the CUDA table

    // lz_knobs_print names every knob of both tables, marking those unset: LIZARD_PROFILE and three CUDA
    // knobs set (WGMMA, STREAM_TOKENS, TRACE)
    setenv("LIZARD_PROFILE", "1", 1);
    CHECK(lz_knobs_load() == LZ_OK);
    int lines, defaults;
    printed(&lines, &defaults);
    CHECK_MSG(lines == 7 + 16 && defaults == lines - 4, "%d lines, %d defaults", lines, defaults); // process, CUDA
    return lz_test_finish("test_knobs");
}
