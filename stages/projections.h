/* projections.h - a decoder layer's seven linear projections as HF and PEFT
 * name them (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj) and their
 * [out, in] in a model: the one table LoRA training and adapter loading use. */
#ifndef LZ_PROJECTIONS_H
#define LZ_PROJECTIONS_H

#include "config.h" // lz_config

enum { LZ_LIN_Q, LZ_LIN_K, LZ_LIN_V, LZ_LIN_O, LZ_LIN_GATE, LZ_LIN_UP, LZ_LIN_DOWN, LZ_LIN_COUNT };
extern const char *const lz_lin_module[LZ_LIN_COUNT]; /* "q_proj", ... */
extern const char *const lz_lin_parent[LZ_LIN_COUNT]; /* "self_attn" or "mlp" */

/* Projection j's weight [out, in] in a model of `cfg`. */
void lz_lin_shape(const lz_config *cfg, int j, int *out, int *in);

#endif
