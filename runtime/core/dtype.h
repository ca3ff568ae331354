/* dtype.h - element types of checkpoint tensors and conversions to fp32. */
#ifndef LZ_DTYPE_H
#define LZ_DTYPE_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint16_t

/* The safetensors dtypes we know by name. Only F32, F16 and BF16 may hold
 * model weights; the others are parsed so that a file carrying them (e.g. an
 * I64 buffer) still opens, and are refused only if a weight uses them. */
typedef enum {
    LZ_DTYPE_F32, LZ_DTYPE_F16, LZ_DTYPE_BF16, LZ_DTYPE_F64,
    LZ_DTYPE_I64, LZ_DTYPE_I32, LZ_DTYPE_I16, LZ_DTYPE_I8,
    LZ_DTYPE_U64, LZ_DTYPE_U32, LZ_DTYPE_U16, LZ_DTYPE_U8,
    LZ_DTYPE_BOOL, LZ_DTYPE_F8_E4M3, LZ_DTYPE_F8_E5M2,
    LZ_DTYPE_COUNT
} lz_dtype;

/* "F32" -> LZ_DTYPE_F32; returns -1 for an unknown name. */
int lz_dtype_from_name(const char *name);
const char *lz_dtype_name(lz_dtype dtype);
size_t lz_dtype_size(lz_dtype dtype);
int lz_dtype_is_float_weight(lz_dtype dtype); /* F32, F16 or BF16 */

float lz_bf16_to_f32(uint16_t h);
uint16_t lz_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
float lz_f16_to_f32(uint16_t h);
uint16_t lz_f32_to_f16(float f);  /* round to nearest even */

/* n elements of `src` (F32/F16/BF16, little-endian, any alignment) -> fp32. */
void lz_convert_to_f32(float *dst, const void *src, lz_dtype dtype, size_t n);

/* The index of the first NaN or infinity among n elements of `src` (F32, F16,
 * BF16, F64, F8_E5M2; little-endian, any alignment), or n when every one is
 * finite (and for the other dtypes, which hold no such values; F8_E4M3 has no
 * infinity and its NaN is S.1111.111). Scans blocks branch-free, so it runs at
 * memory speed. */
size_t lz_first_nonfinite(const void *src, lz_dtype dtype, size_t n);

/* A tensor's elements in host memory, whatever holds them (a checkpoint's
 * mapping, a buffer): what a backend uploads, with no file format in sight. */
typedef struct {
    const char *name; /* for error messages */
    lz_dtype dtype;
    int64_t numel;
    const void *data;
    bool lasting; /* the data outlives the weight (a file's mapping): a backend may point into it */
} lz_host_tensor;

#endif
