// backward_ops_cuda.cu - the CUDA backend's backward op table (kernels/backward_ops.h): one table for
// both activation types, each entry dispatching on be->dtype.
#include "backward_cuda.cuh"

static lz_backward_ops make_backward_ops() {
    lz_backward_ops o = {};
    o.rmsnorm = lz_cuda_bw_rmsnorm;
    o.swiglu = lz_cuda_bw_swiglu;
    o.linear = lz_cuda_bw_linear;
    o.rope = lz_cuda_bw_rope;
    o.attention = lz_cuda_bw_attention;
    o.lizard_scratch_create = lz_cuda_bw_lizard_scratch_create;
    o.lizard_scratch_free = lz_cuda_bw_lizard_scratch_free;
    o.lizard = lz_cuda_bw_lizard;
    o.lora_sync = lz_cuda_bw_lora_sync;
    o.lora_release = lz_cuda_bw_lora_release;
    o.lora_forward = lz_cuda_bw_lora_forward;
    o.lora_backward = lz_cuda_bw_lora_backward;
    o.cross_entropy = lz_cuda_bw_cross_entropy;
    o.copy = lz_cuda_bw_copy;
    o.to_f32 = lz_cuda_bw_to_f32;
    o.add = lz_cuda_bw_add;
    o.sum_squares = lz_cuda_bw_sum_squares;
    o.adamw = lz_cuda_bw_adamw;
    o.weight_set = lz_cuda_bw_weight_set;
    return o;
}

// Built on the first call (the inference tables of cuda_backend.cu take its address while they are
// made, so it must not depend on the order in which files' statics are initialised).
const lz_backward_ops *lz_cuda_backward_ops(void) {
    static const lz_backward_ops table = make_backward_ops();
    return &table;
}
