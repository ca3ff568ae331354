/* rope_freq.c - RoPE inverse frequencies, "default" and "llama3" scaling,
 * following HF transformers' _compute_default_rope_parameters and
 * _compute_llama3_parameters (fp32, as there). */
#include <math.h> // powf, M_PI

#include "model.h"

void lz_rope_inv_freq(const lz_config *cfg, float *out) {
    const int d = cfg->head_dim, half = d / 2;
    const lz_rope_config *r = &cfg->rope;
    for (int j = 0; j < half; j++)
        out[j] = 1.0f / powf((float)r->theta, (float)(2 * j) / (float)d);
    if (r->type != LZ_ROPE_LLAMA3)
        return;
    const float old_ctx = (float)r->original_max_position_embeddings;
    const float low_wavelen = old_ctx / (float)r->low_freq_factor;
    const float high_wavelen = old_ctx / (float)r->high_freq_factor;
    const float factor = (float)r->factor;
    for (int j = 0; j < half; j++) {
        const float wavelen = 2.0f * (float)M_PI / out[j];
        if (wavelen > low_wavelen) { // low frequencies: scaled down by the factor
            out[j] = out[j] / factor;
        } else if (wavelen >= high_wavelen) { // the band between: smooth blend
            const float smooth = (old_ctx / wavelen - (float)r->low_freq_factor) /
                                 ((float)r->high_freq_factor - (float)r->low_freq_factor);
            out[j] = (1.0f - smooth) * out[j] / factor + smooth * out[j];
        } // high frequencies: unchanged
    }
}
