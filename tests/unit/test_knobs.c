/* test_knobs.c - lz_knobs_load: defaults when unset or empty, each kind of knob parsed, and one error
 * naming the variable for a value out of range, a value of the wrong kind or an unknown LIZARD_* name
 * (the earlier knobs kept). */
#include <stdlib.h> // setenv, unsetenv

#include "knobs.h"     // the code under test
#include "test_util.h" // CHECK, CHECK_FAILS_WITH, lz_test_finish

static void refused(const char *name, const char *value, const char *needle) {
    setenv(name, value, 1);
    CHECK_FAILS_WITH(lz_knobs_load(), LZ_ERR_INPUT, needle);
    unsetenv(name);
}

int main(void) {
    CHECK(lz_knobs_load() == LZ_OK);
    const lz_knobs *k = lz_knobs_get();
    CHECK(!k->profile && k->wgmma && k->step_timeout == 30.0 && k->gemv_tokens == 1 && k->stream_tokens == 7);
    CHECK(k->join_tokens == 256 && k->decode_attn == -1 && k->session_chunk_bytes == 0 && !k->trace && !k->train_gla_bf16);
    setenv("LIZARD_PROFILE", "1", 1);
    setenv("LIZARD_WGMMA", "0", 1);
    setenv("LIZARD_STEP_TIMEOUT", "2.5", 1);
    setenv("LIZARD_STREAM_TOKENS", "64", 1);
    setenv("LIZARD_SESSION_CHUNK_BYTES", "100", 1);
    setenv("LIZARD_TRAIN_GLA", "bf16", 1);
    setenv("LIZARD_TRACE", "/tmp/t", 1);
    setenv("LIZARD_DECODE_ATTN", "", 1); // empty: the default
    CHECK(lz_knobs_load() == LZ_OK);
    CHECK(k->profile && !k->wgmma && k->step_timeout == 2.5 && k->stream_tokens == 64);
    CHECK(k->session_chunk_bytes == 100 && k->train_gla_bf16 && k->trace && k->decode_attn == -1);
    // bad values: the variable named, what it takes, the knobs as they were
    refused("LIZARD_PROFILE", "yes", "LIZARD_PROFILE=yes: expected 0 or 1");
    refused("LIZARD_STREAM_TOKENS", "65", "LIZARD_STREAM_TOKENS=65: expected a whole number from 0 to 64");
    refused("LIZARD_GEMV_TOKENS", "2x", "LIZARD_GEMV_TOKENS=2x");
    refused("LIZARD_STEP_TIMEOUT", "-1", "LIZARD_STEP_TIMEOUT=-1: expected seconds");
    refused("LIZARD_SESSION_CHUNK_BYTES", "-5", "LIZARD_SESSION_CHUNK_BYTES=-5");
    refused("LIZARD_SESSION_CHUNK_BYTES", "0", "LIZARD_SESSION_CHUNK_BYTES=0");
    refused("LIZARD_TRAIN_GLA", "fp16", "LIZARD_TRAIN_GLA=fp16: expected fp32 or bf16");
    refused("LIZARD_DECODE_ATTN", "99999999999999999999", "LIZARD_DECODE_ATTN=");
    refused("LIZARD_FUSE", "0", "LIZARD_FUSE: not a variable lizard reads");
    CHECK(k->profile && k->stream_tokens == 64 && k->session_chunk_bytes == 100);
    // lz_knobs_print names every knob, marking those the last good load left unset
    FILE *f = tmpfile();
    lz_knobs_print(f);
    rewind(f);
    char line[128];
    int lines = 0, defaults = 0;
    while (fgets(line, sizeof line, f))
        lines++, defaults += strstr(line, "(default)") != NULL;
    fclose(f);
    CHECK_MSG(lines >= 20 && defaults == lines - 7, "%d lines, %d defaults", lines, defaults);
    return lz_test_finish("test_knobs");
}
