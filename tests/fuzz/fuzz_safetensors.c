/* fuzz_safetensors.c - libFuzzer target: lz_st_parse on arbitrary bytes, then touch what it returns. */
#include <stddef.h> // size_t
#include <stdint.h> // uint8_t, uintptr_t
#include <stdlib.h> // abort
#include <string.h> // strcmp

#include "safetensors.h" // lz_st_parse, lz_st_find, lz_st_close

/* Every tensor of an accepted file must lie inside the input: read its first
 * and last byte (ASan checks the bounds) and convert a few float elements. */
static void touch_tensors(const lz_st_file *f, const uint8_t *data, size_t size) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const lz_st_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        uintptr_t begin = (uintptr_t)p, base = (uintptr_t)data; /* integers: no out-of-range pointer math */
        if (begin < base || begin - base > size || t->nbytes > size - (begin - base))
            abort();
        if (t->nbytes) {
            sink ^= p[0];
            sink ^= p[t->nbytes - 1];
        }
        if (lz_dtype_is_float_weight(t->dtype)) {
            float out[16];
            size_t n = (size_t)t->numel < 16 ? (size_t)t->numel : 16;
            lz_convert_to_f32(out, t->data, t->dtype, n);
        }
        if (i > 0 && strcmp(f->tensors[i - 1].name, t->name) >= 0)
            abort(); /* sorted, no duplicates */
        if (lz_st_find(f, t->name) != t)
            abort();
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lz_st_file f;
    lz_error_clear(); /* the first message wins: clear so each input sets its own */
    if (lz_st_parse(data, size, "fuzz.safetensors", &f) == LZ_OK)
        touch_tensors(&f, data, size);
    else if (lz_error_message()[0] == '\0')
        abort(); /* a failure must say why */
    lz_st_close(&f);
    return 0;
}
