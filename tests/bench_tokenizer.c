/* bench_tokenizer.c - load, encode and decode speed of runtime/tokenizer*.c
 * (a benchmark, not a ctest: numbers depend on the machine).
 *
 *   bench_tokenizer TOKENIZER TEXT [REPEAT]
 *     TOKENIZER: a model folder (tokenizer.json inside) or a tokenizer.json path
 *     TEXT: a text file to encode (e.g. English prose), REPEAT passes (default 3)
 *
 * Prints the load time, then per pass the encode throughput in MB/s of text
 * (one core; the first pass fills the word cache), and the decode throughput. */
#include <stdio.h>  // printf, fopen
#include <stdlib.h> // malloc, free, atoi
#include <string.h> // strlen, strcmp
#include <time.h>   // clock_gettime

#include "tokenizer.h" // lz_tokenizer

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[size] = '\0';
        *len = (size_t)size;
    }
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR_OR_JSON TEXT_FILE [REPEAT]\n", argv[0]);
        return 2;
    }
    const int repeat = argc > 3 ? atoi(argv[3]) : 3;
    const char *src = argv[1];
    size_t n = strlen(src);
    lz_tokenizer *tok = NULL;
    lz_status st;
    double t0 = now(), t_read = 0;
    if (n > 5 && strcmp(src + n - 5, ".json") == 0) {
        size_t len;
        char *json = slurp(src, &len);
        if (!json) {
            fprintf(stderr, "cannot read %s\n", src);
            return 2;
        }
        t_read = now() - t0;
        st = lz_tokenizer_load_json(json, len, NULL, 0, &tok);
        printf("tokenizer.json: %.1f MB\n", (double)len / 1e6);
        free(json);
    } else {
        st = lz_tokenizer_load(src, &tok);
    }
    double t_load = now() - t0;
    if (st != LZ_OK) {
        fprintf(stderr, "load: %s\n", lz_error_message());
        return 1;
    }
    printf("load: %.1f ms (of which reading the file %.1f ms), vocabulary %d\n", t_load * 1e3, t_read * 1e3,
           lz_tokenizer_vocab_size(tok));

    size_t len;
    char *text = slurp(argv[2], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 2;
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    for (int r = 0; r < repeat; r++) {
        free(ids);
        double t = now();
        st = lz_tokenizer_encode(tok, text, len, false, &ids, &n_ids);
        double dt = now() - t;
        if (st != LZ_OK) {
            fprintf(stderr, "encode: %s\n", lz_error_message());
            return 1;
        }
        printf("encode pass %d: %.2f MB in %.3f s = %.1f MB/s, %d tokens (%.2f bytes/token)\n", r + 1,
               (double)len / 1e6, dt, (double)len / 1e6 / dt, n_ids, (double)len / (n_ids ? n_ids : 1));
    }
    char *back = NULL;
    size_t back_len = 0;
    double t = now();
    st = lz_tokenizer_decode(tok, ids, n_ids, false, &back, &back_len);
    double dt = now() - t;
    if (st != LZ_OK) {
        fprintf(stderr, "decode: %s\n", lz_error_message());
        return 1;
    }
    printf("decode: %.1f MB/s, round trip %s\n", (double)back_len / 1e6 / dt,
           back_len == len && memcmp(back, text, len) == 0 ? "exact" : "DIFFERS");
    free(back);
    free(ids);
    free(text);
    lz_tokenizer_free(tok);
    return 0;
}
