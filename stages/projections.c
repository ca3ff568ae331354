/* projections.c - see projections.h. */
#include "projections.h"

const char *const lz_lin_module[LZ_LIN_COUNT] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
const char *const lz_lin_parent[LZ_LIN_COUNT] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                                 "mlp", "mlp", "mlp"};

void lz_lin_shape(const lz_config *c, int j, int *out, int *in) {
    const int C = c->hidden_size, I = c->intermediate_size;
    const int qd = c->num_attention_heads * c->head_dim, kd = c->num_key_value_heads * c->head_dim;
    const int ins[LZ_LIN_COUNT] = {C, C, C, qd, C, C, I}, outs[LZ_LIN_COUNT] = {qd, kd, kd, C, I, I, C};
    *out = outs[j], *in = ins[j];
}
