/* fp8_weights.c - FP8 weights between a checkpoint and a backend (fp8_weights.h). */
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, free
#include <string.h> // strlen, memcmp

#include "fp8_rule.h" // lz_fp8_quantize_row, lz_e4m3_to_float
#include "fp8_weights.h"

/* "P.weight" -> "P.weight<suffix>" in buf; false when the name does not end in ".weight". */
static bool sibling_name(const char *name, const char *suffix, char *buf, size_t cap) {
    const size_t n = strlen(name);
    if (n < 7 || memcmp(name + n - 7, ".weight", 7) != 0)
        return false;
    return (size_t)snprintf(buf, cap, "%s%s", name, suffix) < cap;
}

static void shape_text(const lz_st_tensor *t, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

lz_status lz_fp8_read_scales(const lz_weights *ck, const lz_st_tensor *t, int64_t rows, float **scales) {
    char name[512];
    *scales = NULL;
    if (!sibling_name(t->name, "_scale", name, sizeof name))
        return lz_fail(LZ_ERR_INPUT, "%s: FP8 tensor '%s' is not a '.weight': no scale to read it with", t->file,
                       t->name);
    const lz_st_tensor *s = lz_weights_find(ck, name);
    if (!s) {
        char inv[512];
        if (sibling_name(t->name, "_scale_inv", inv, sizeof inv) && lz_weights_find(ck, inv))
            return lz_fail(LZ_ERR_INPUT,
                           "%s: FP8 tensor '%s' comes with block-wise scales '%s' (DeepSeek-style weight_scale_inv), "
                           "which lizard does not read: it reads one scale per output channel or per tensor",
                           t->file, t->name, inv);
        return lz_fail(LZ_ERR_INPUT, "%s: FP8 tensor '%s' has no scale tensor '%s' beside it", t->file, t->name, name);
    }
    if (!lz_dtype_is_float_weight(s->dtype))
        return lz_fail(LZ_ERR_INPUT, "%s: scale tensor '%s' has dtype %s, expected F32, F16 or BF16", s->file, name,
                       lz_dtype_name(s->dtype));
    const bool per_row = s->numel == rows && (s->ndim == 1 || (s->ndim == 2 && s->shape[1] == 1));
    const bool per_tensor = !per_row && s->numel == 1 && s->ndim <= 2; // [], [1] (or one block of [1, 1])
    if (!per_tensor && !per_row) {
        char have[128];
        shape_text(s, have, sizeof have);
        return lz_fail(LZ_ERR_INPUT,
                       "%s: scale tensor '%s' has shape %s: lizard reads one scale per output channel ([%lld, 1] or "
                       "[%lld]) or per tensor ([] or [1]), not block-wise scales",
                       s->file, name, have, (long long)rows, (long long)rows);
    }
    float *out = malloc(sizeof(float) * (size_t)(rows > 0 ? rows : 1));
    if (!out)
        return lz_fail(LZ_ERR_NOMEM, "out of memory for the scales of '%s'", t->name);
    lz_convert_to_f32(out, s->data, s->dtype, (size_t)s->numel);
    for (int64_t r = 1; per_tensor && r < rows; r++)
        out[r] = out[0];
    for (int64_t r = 0; r < (per_tensor ? 1 : rows); r++)
        if (!(out[r] >= 0.0f && out[r] <= 3.4028235e38f)) {
            const double v = out[r];
            free(out);
            return lz_fail(LZ_ERR_INPUT, "%s: scale tensor '%s': element %lld is %g (finite and >= 0 expected)",
                           s->file, name, (long long)r, v);
        }
    *scales = out;
    return LZ_OK;
}

lz_status lz_fp8_quantize(const char *name, const float *w, int64_t rows, int64_t cols, uint8_t **codes,
                          float **scales) {
    *codes = malloc((size_t)(rows * cols > 0 ? rows * cols : 1));
    *scales = malloc(sizeof(float) * (size_t)(rows > 0 ? rows : 1));
    if (!*codes || !*scales) {
        free(*codes), free(*scales);
        *codes = NULL, *scales = NULL;
        return lz_fail(LZ_ERR_NOMEM, "out of memory quantizing '%s' to FP8", name);
    }
    for (int64_t r = 0; r < rows; r++)
        (*scales)[r] = lz_fp8_quantize_row(w + r * cols, cols, *codes + r * cols);
    return LZ_OK;
}

void lz_fp8_dequantize(const uint8_t *codes, const float *scales, int64_t rows, int64_t cols, float *w) {
    float value[256];
    for (int c = 0; c < 256; c++)
        value[c] = lz_e4m3_to_float((uint8_t)c);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < cols; i++)
            w[r * cols + i] = scales[r] * value[codes[r * cols + i]];
}
