/* test_tokenizer_cli.c - `lizard tokenize` (runtime/cli/cmd_tokenize.c) on the
 * tiny-hybrid fixture: --text/--file print the ids lz_tokenizer_encode gives,
 * --ids prints the text back, flags and errors name what is wrong. */
#include <stdio.h>  // tmpfile, fflush
#include <stdlib.h> // getenv, free
#include <string.h> // strstr, strlen
#include <unistd.h> // dup, dup2, close

#include "commands.h" // lz_cmd_tokenize
#include "test_util.h"
#include "tokenizer.h"

static char dir[4096];

/* Runs the command with stdout captured; returns what it printed (static). */
static const char *run(lz_status *st, int argc, const char **argv) {
    static char out[65536];
    fflush(stdout);
    int saved = dup(1);
    FILE *tmp = tmpfile();
    if (saved < 0 || !tmp) {
        *st = LZ_ERR_INTERNAL;
        return "";
    }
    dup2(fileno(tmp), 1);
    lz_error_clear();
    *st = lz_cmd_tokenize(argc, (char **)argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, sizeof out - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return out;
}

static void ids_text(const int32_t *ids, int n, char *buf, size_t cap) {
    size_t at = 0;
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "", ids[i]);
    snprintf(buf + at, at < cap ? cap - at : 0, "\n");
}

int main(void) {
    const char *fixtures = getenv("LZ_FIXTURES");
    snprintf(dir, sizeof dir, "%s/tokenizers/tiny_hybrid", fixtures ? fixtures : "tests/fixtures");
    lz_tokenizer *tok;
    if (lz_tokenizer_load(dir, &tok) != LZ_OK) {
        CHECK_MSG(false, "%s", lz_error_message());
        return lz_test_finish("test_tokenizer_cli");
    }
    const char *text = "Hello world, the lizard\xe2\x80\x99s tail.";
    int32_t *ids, *plain;
    int n, n_plain;
    CHECK(lz_tokenizer_encode(tok, text, strlen(text), true, &ids, &n) == LZ_OK);
    CHECK(lz_tokenizer_encode(tok, text, strlen(text), false, &plain, &n_plain) == LZ_OK);
    char want[4096], list[4096];
    lz_status st;

    ids_text(ids, n, want, sizeof want);
    const char *out = run(&st, 5, (const char *[]){"tokenize", "--model", dir, "--text", text, NULL});
    CHECK_MSG(st == LZ_OK && strcmp(out, want) == 0, "--text printed '%s', want '%s'", out, want);

    ids_text(plain, n_plain, want, sizeof want);
    out = run(&st, 6, (const char *[]){"tokenize", "--model", dir, "--text", text, "--no-special", NULL});
    CHECK_MSG(st == LZ_OK && strcmp(out, want) == 0, "--no-special printed '%s'", out);

    out = run(&st, 7, (const char *[]){"tokenize", "--model", dir, "--text", text, "--format", "json", NULL});
    CHECK_MSG(st == LZ_OK && strstr(out, "{\"ids\": [") == out && strstr(out, "\"<|begin_of_text|>\""), "json: '%s'",
              out);

    ids_text(ids, n, list, sizeof list);
    list[strlen(list) - 1] = '\0';
    snprintf(want, sizeof want, "%s\n", text);
    out = run(&st, 5, (const char *[]){"tokenize", "--model", dir, "--ids", list, NULL});
    CHECK_MSG(st == LZ_OK && strcmp(out, want) == 0, "--ids printed '%s'", out);
    snprintf(want, sizeof want, "<|begin_of_text|>%s\n", text);
    out = run(&st, 6, (const char *[]){"tokenize", "--model", dir, "--ids", list, "--keep-special", NULL});
    CHECK_MSG(st == LZ_OK && strcmp(out, want) == 0, "--keep-special printed '%s'", out);
    out = run(&st, 7, (const char *[]){"tokenize", "--model", dir, "--ids", list, "--format", "json", NULL});
    CHECK_MSG(st == LZ_OK && strncmp(out, "{\"text\": \"Hello world", 20) == 0, "json text: '%s'", out);

    /* --file: bytes, invalid UTF-8 included */
    char path[] = "/tmp/lz_tokenize_XXXXXX";
    int fd = mkstemp(path);
    const char bytes[] = "bytes \xff\xfe and \xe4\xb8 text\n";
    CHECK(fd >= 0 && write(fd, bytes, sizeof bytes - 1) == (ssize_t)(sizeof bytes - 1));
    if (fd >= 0)
        close(fd);
    int32_t *fids;
    int fn;
    CHECK(lz_tokenizer_encode(tok, bytes, sizeof bytes - 1, true, &fids, &fn) == LZ_OK);
    ids_text(fids, fn, want, sizeof want);
    out = run(&st, 5, (const char *[]){"tokenize", "--model", dir, "--file", path, NULL});
    CHECK_MSG(st == LZ_OK && strcmp(out, want) == 0, "--file printed '%s'", out);
    unlink(path);
    free(fids);

    /* errors name the flag */
    run(&st, 3, (const char *[]){"tokenize", "--model", dir, NULL});
    CHECK(st == LZ_ERR_INPUT && strstr(lz_error_message(), "exactly one"));
    run(&st, 7, (const char *[]){"tokenize", "--model", dir, "--text", "a", "--ids", "1", NULL});
    CHECK(st == LZ_ERR_INPUT && strstr(lz_error_message(), "exactly one"));
    run(&st, 5, (const char *[]){"tokenize", "--model", dir, "--ids", "5,99999", NULL});
    CHECK_MSG(st == LZ_ERR_INPUT && strstr(lz_error_message(), "99999"), "%s", lz_error_message());
    run(&st, 5, (const char *[]){"tokenize", "--model", dir, "--ids", "1,x", NULL});
    CHECK(st == LZ_ERR_INPUT && strstr(lz_error_message(), "--ids"));
    run(&st, 7, (const char *[]){"tokenize", "--model", dir, "--text", "a", "--format", "xml", NULL});
    CHECK(st == LZ_ERR_INPUT && strstr(lz_error_message(), "--format"));
    run(&st, 5, (const char *[]){"tokenize", "--model", "/nonexistent", "--text", "a", NULL});
    CHECK_MSG(st == LZ_ERR_INPUT && strstr(lz_error_message(), "--model /nonexistent: no such folder"), "%s",
              lz_error_message()); // the folder named, not the first file in it
    run(&st, 5, (const char *[]){"tokenize", "--model", dir, "--file", "/nonexistent/file", NULL});
    CHECK(st == LZ_ERR_IO && strstr(lz_error_message(), "--file"));
    out = run(&st, 2, (const char *[]){"tokenize", "--help", NULL});
    CHECK(st == LZ_OK && strstr(out, "--keep-special"));

    free(ids);
    free(plain);
    lz_tokenizer_free(tok);
    return lz_test_finish("test_tokenizer_cli");
}
