/* session_file.c - either session format, told apart by its first bytes. */
#include <errno.h>    // errno
#include <stdio.h>    // FILE, fopen, fread
#include <stdlib.h>   // free
#include <string.h>   // memcpy, strerror
#include <sys/stat.h> // fstat

#include "session_chunks.h" // lz_session_read_chunked
#include "session_file.h"

/* Version 2 (and 1) begins with the magic field: tag 0x0D, then "LZSS"; a
 * version-3 file begins with the header's length, then that same tag. */
static bool one_message(const uint8_t *b, size_t n) {
    static const uint8_t head[5] = {0x0D, 'L', 'Z', 'S', 'S'};
    return n >= sizeof head && memcmp(b, head, sizeof head) == 0;
}

typedef struct {
    const uint8_t *p;
    size_t left;
} mem_source;

static size_t mem_read(void *ctx, uint8_t *dst, size_t n) {
    mem_source *m = ctx;
    n = n < m->left ? n : m->left;
    memcpy(dst, m->p, n);
    m->p += n, m->left -= n;
    return n;
}

static size_t file_read(void *ctx, uint8_t *dst, size_t n) {
    return fread(dst, 1, n, (FILE *)ctx);
}

lz_status lz_session_parse(const uint8_t *buf, size_t len, const char *what,
                           const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], lz_session_loaded *out) {
    *out = (lz_session_loaded){NULL, NULL, false};
    if (one_message(buf, len)) {
        LZ_TRY(lz_session_view(buf, len, what, fingerprint, &out->msg));
        out->view = true;
        return LZ_OK;
    }
    mem_source m = {buf, len};
    lz_byte_source src = {mem_read, &m, len};
    return lz_session_read_chunked(&src, what, fingerprint, &out->msg);
}

lz_status lz_session_load_file(const char *path, const uint8_t fingerprint[LZ_FINGERPRINT_BYTES],
                               lz_session_loaded *out) {
    *out = (lz_session_loaded){NULL, NULL, false};
    FILE *f = fopen(path, "rb");
    if (!f)
        return lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    uint8_t head[5];
    const size_t n = fread(head, 1, sizeof head, f);
    lz_status s = fstat(fileno(f), &sb) == 0 ? LZ_OK : lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    if (s == LZ_OK && (one_message(head, n) || sb.st_size <= 0)) { // read whole, viewed in place
        fclose(f);
        size_t len;
        LZ_TRY(lz_session_read_file(path, &out->bytes, &len));
        s = lz_session_view(out->bytes, len, path, fingerprint, &out->msg);
        out->view = s == LZ_OK;
        if (s != LZ_OK)
            free(out->bytes), out->bytes = NULL;
        return s;
    }
    if (s == LZ_OK) {
        rewind(f);
        lz_byte_source src = {file_read, f, (uint64_t)sb.st_size};
        s = lz_session_read_chunked(&src, path, fingerprint, &out->msg);
    }
    fclose(f);
    return s;
}

void lz_session_loaded_free(lz_session_loaded *l) {
    if (l->view)
        lz_session_view_free(l->msg);
    else if (l->msg)
        lizard__sequence_state__free_unpacked(l->msg, NULL);
    free(l->bytes);
    *l = (lz_session_loaded){NULL, NULL, false};
}
