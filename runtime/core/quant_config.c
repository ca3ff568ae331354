/* quant_config.c - the quantization_config block of config.json, as the hub's
 * FP8 checkpoints write it (docs/model-format.md, "FP8 checkpoints"):
 *   fbgemm_fp8          per output channel: weight_scale [out, 1]
 *   compressed-tensors  format float-quantized (or naive-quantized), weights of
 *                       8-bit floats, strategy "channel" ([out, 1]) or "tensor" ([] / [1])
 *   fp8                 without weight_block_size: one scale per tensor (weight_scale [])
 * Block-wise scales (fp8 with weight_block_size: weight_scale_inv; compressed-
 * tensors strategy "block" or "group") and every other method are refused by
 * name: per-row scales cannot hold them without quantizing again. */
#include <stdio.h>  // snprintf
#include <string.h> // strcmp

#include "quant_config.h"

static const char *string_of(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* One config group's "weights": 8-bit floats, one scale per channel or per tensor. */
static lz_status check_ct_weights(const char *path, const char *group, json_t *w) {
    if (!json_is_object(w))
        return lz_fail(LZ_ERR_INPUT, "%s: quantization_config.config_groups.%s has no \"weights\" object", path, group);
    const char *type = string_of(w, "type"), *strategy = string_of(w, "strategy");
    json_t *bits = json_object_get(w, "num_bits");
    if (!type || strcmp(type, "float") != 0 || !json_is_integer(bits) || json_integer_value(bits) != 8)
        return lz_fail(LZ_ERR_INPUT,
                       "%s: quantization_config.config_groups.%s.weights: %s %lld-bit weights are not read "
                       "(lizard reads 8-bit float weights: FP8 E4M3)",
                       path, group, type ? type : "(no type)",
                       json_is_integer(bits) ? (long long)json_integer_value(bits) : -1LL);
    if (!strategy || (strcmp(strategy, "channel") != 0 && strcmp(strategy, "tensor") != 0))
        return lz_fail(LZ_ERR_INPUT,
                       "%s: quantization_config.config_groups.%s.weights: strategy '%s' is not read (lizard reads "
                       "FP8 with one scale per output channel or per tensor: 'channel' or 'tensor')",
                       path, group, strategy ? strategy : "(none)");
    return LZ_OK;
}

static lz_status check_compressed_tensors(const char *path, json_t *q) {
    const char *format = string_of(q, "format");
    if (format && strcmp(format, "float-quantized") != 0 && strcmp(format, "naive-quantized") != 0)
        return lz_fail(LZ_ERR_INPUT,
                       "%s: quantization_config: compressed-tensors format '%s' is not read (lizard reads "
                       "'float-quantized' FP8)",
                       path, format);
    json_t *groups = json_object_get(q, "config_groups");
    if (!json_is_object(groups) || json_object_size(groups) == 0)
        return lz_fail(LZ_ERR_INPUT, "%s: quantization_config (compressed-tensors) has no config_groups", path);
    const char *name;
    json_t *g;
    json_object_foreach(groups, name, g) LZ_TRY(check_ct_weights(path, name, json_object_get(g, "weights")));
    return LZ_OK;
}

static lz_status check_fp8(const char *path, json_t *q) {
    json_t *block = json_object_get(q, "weight_block_size");
    if (block && !json_is_null(block))
        return lz_fail(LZ_ERR_INPUT,
                       "%s: quantization_config: block-wise FP8 (quant_method 'fp8' with weight_block_size, "
                       "scales 'weight_scale_inv' per block) is not read; lizard reads FP8 with one scale per "
                       "output channel or per tensor",
                       path);
    const char *fmt = string_of(q, "fmt");
    if (fmt && strcmp(fmt, "e4m3") != 0)
        return lz_fail(LZ_ERR_INPUT, "%s: quantization_config: FP8 format '%s' is not read (E4M3 only)", path, fmt);
    return LZ_OK;
}

lz_status lz_quant_config_parse(const char *path, json_t *root, lz_config *c) {
    json_t *q = json_object_get(root, "quantization_config");
    c->quant_method[0] = '\0';
    if (!q || json_is_null(q))
        return LZ_OK;
    if (!json_is_object(q))
        return lz_fail(LZ_ERR_INPUT, "%s: key 'quantization_config' must be an object", path);
    const char *method = string_of(q, "quant_method");
    if (!method)
        return lz_fail(LZ_ERR_INPUT, "%s: quantization_config has no quant_method", path);
    if (strcmp(method, "compressed-tensors") == 0)
        LZ_TRY(check_compressed_tensors(path, q));
    else if (strcmp(method, "fp8") == 0)
        LZ_TRY(check_fp8(path, q));
    else if (strcmp(method, "fbgemm_fp8") != 0)
        return lz_fail(LZ_ERR_INPUT,
                       "%s: quantization_config: quant_method '%s' is not read (lizard reads FP8 E4M3 checkpoints: "
                       "fbgemm_fp8, compressed-tensors float-quantized, fp8 without blocks)",
                       path, method);
    snprintf(c->quant_method, sizeof c->quant_method, "%s", method);
    return LZ_OK;
}
