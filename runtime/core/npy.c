/* npy.c - writing and reading 2-D float32 .npy files. */
#include <stdbool.h>  // bool
#include <stdio.h>    // FILE, fopen, snprintf
#include <stdlib.h>   // malloc, free, strtoull
#include <string.h>   // strstr, memcmp, strerror
#include <errno.h>    // errno

#include "npy.h"
#include "atomic_file.h" // lz_atomic_file

lz_status lz_npy_write_f32(const char *path, const float *data, size_t rows, size_t cols) {
    char header[128];
    int n = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", rows,
                     cols);
    // magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64, ending in '\n'
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    lz_atomic_file f;
    LZ_TRY(lz_atomic_open(&f, path));
    unsigned short hlen = (unsigned short)(n + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    bool ok = fwrite(pre, 1, 10, f.fp) == 10 && fwrite(header, 1, (size_t)n, f.fp) == (size_t)n;
    for (int i = 0; ok && i < pad; i++)
        ok = fputc(' ', f.fp) != EOF;
    ok = ok && fputc('\n', f.fp) != EOF && fwrite(data, sizeof(float), rows * cols, f.fp) == rows * cols;
    return lz_atomic_commit(&f, ok);
}

static lz_status parse_shape(const char *path, const char *hdr, size_t *rows, size_t *cols) {
    if (!strstr(hdr, "'descr': '<f4'") || !strstr(hdr, "'fortran_order': False"))
        return lz_fail(LZ_ERR_INPUT, "%s: not a little-endian float32 C-order array", path);
    const char *shape = strstr(hdr, "'shape': (");
    if (!shape)
        return lz_fail(LZ_ERR_INPUT, "%s: npy header has no shape", path);
    char *end;
    *rows = strtoull(shape + 10, &end, 10);
    if (*end != ',')
        return lz_fail(LZ_ERR_INPUT, "%s: npy shape is not 2-D", path);
    *cols = strtoull(end + 1, &end, 10);
    if (*end != ')')
        return lz_fail(LZ_ERR_INPUT, "%s: npy shape is not 2-D", path);
    return LZ_OK;
}

/* The preamble and header dict of a version 1 .npy file (NUL-terminated in hdr[cap]). */
static lz_status read_header(FILE *fp, const char *path, char *hdr, size_t cap) {
    unsigned char pre[10];
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1)
        return lz_fail(LZ_ERR_INPUT, "%s: not a version 1 .npy file", path);
    const size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    if (hlen >= cap || fread(hdr, 1, hlen, fp) != hlen)
        return lz_fail(LZ_ERR_INPUT, "%s: truncated .npy header", path);
    hdr[hlen] = '\0';
    return LZ_OK;
}

lz_status lz_npy_read_f32(const char *path, float **data, size_t *rows, size_t *cols) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    char hdr[1024];
    *data = NULL;
    lz_status s = read_header(fp, path, hdr, sizeof hdr);
    if (s == LZ_OK)
        s = parse_shape(path, hdr, rows, cols);
    if (s == LZ_OK && (*rows == 0 || *cols == 0 || *rows > ((size_t)1 << 40) / *cols))
        s = lz_fail(LZ_ERR_INPUT, "%s: npy shape (%zu, %zu) out of range", path, *rows, *cols);
    if (s == LZ_OK && !(*data = malloc(sizeof(float) * *rows * *cols)))
        s = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    if (s == LZ_OK && fread(*data, sizeof(float), *rows * *cols, fp) != *rows * *cols)
        s = lz_fail(LZ_ERR_INPUT, "%s: truncated .npy data", path);
    fclose(fp);
    if (s != LZ_OK) {
        free(*data);
        *data = NULL;
    }
    return s;
}

lz_status lz_npy_read_i32(const char *path, int32_t **ids, size_t *n) {
    *ids = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    char hdr[1024];
    lz_status s = read_header(fp, path, hdr, sizeof hdr);
    const char *shape = NULL;
    if (s == LZ_OK) {
        if (!strstr(hdr, "'descr': '<i4'") || !strstr(hdr, "'fortran_order': False"))
            s = lz_fail(LZ_ERR_INPUT, "%s: expected a little-endian int32 C-order array of token ids", path);
        else if (!(shape = strstr(hdr, "'shape': (")))
            s = lz_fail(LZ_ERR_INPUT, "%s: npy header has no shape", path);
    }
    if (s == LZ_OK) {
        char *end;
        *n = strtoull(shape + 10, &end, 10);
        if (end[0] != ',' || end[strspn(end + 1, " ") + 1] != ')')
            s = lz_fail(LZ_ERR_INPUT, "%s: expected a 1-D array of token ids", path);
        else if (*n > ((size_t)1 << 36))
            s = lz_fail(LZ_ERR_INPUT, "%s: %zu ids is too many", path, *n);
    }
    if (s == LZ_OK && !(*ids = malloc(sizeof(int32_t) * (*n ? *n : 1))))
        s = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    if (s == LZ_OK && fread(*ids, sizeof(int32_t), *n, fp) != *n)
        s = lz_fail(LZ_ERR_INPUT, "%s: truncated .npy data", path);
    fclose(fp);
    if (s != LZ_OK) {
        free(*ids);
        *ids = NULL;
    }
    return s;
}
