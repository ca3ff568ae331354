/* fp8_weights.h - a linear layer's weight as FP8 E4M3 codes with one scale
 * per row (kernels/fp8_rule.h) on its way from a checkpoint to a backend: the
 * scales beside an FP8 checkpoint tensor, a float weight quantized at load, an
 * FP8 weight dequantized for a run that does not hold FP8. */
#ifndef LZ_FP8_WEIGHTS_H
#define LZ_FP8_WEIGHTS_H

#include <stdint.h> // int64_t, uint8_t

#include "safetensors.h" // lz_weights, lz_st_tensor

/* The row scales of the F8_E4M3 tensor `t` ("P.weight", viewed as [rows, ...]):
 * "P.weight_scale", F32, BF16 or F16, of shape [rows, 1] or [rows] (one per
 * output channel) or [] or [1] (one per tensor, given to every row), each
 * finite and >= 0 -> scales[rows] (malloc'd). Block-wise scales
 * ("P.weight_scale_inv", or a weight_scale of any other shape) are refused by name. */
lz_status lz_fp8_read_scales(const lz_weights *ck, const lz_st_tensor *t, int64_t rows, float **scales);

/* rows x cols fp32 weights (finite) -> codes [rows * cols] and scales [rows] (both malloc'd). */
lz_status lz_fp8_quantize(const char *name, const float *w, int64_t rows, int64_t cols, uint8_t **codes,
                          float **scales);

/* codes [rows * cols] (E4M3, little matter of alignment) and scales [rows] -> fp32 w = s * q (rounded to fp32). */
void lz_fp8_dequantize(const uint8_t *codes, const float *scales, int64_t rows, int64_t cols, float *w);

#endif
