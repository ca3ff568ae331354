/* distill_teacher.h - the teacher's activations that stage-1 distillation
 * trains on: for every layer of a batch of sequences, the layer input after
 * input_layernorm x, the projections q, k (before RoPE: a Lizard layer has
 * none) and v, and the target = the teacher's softmax attention output
 * (RoPE applied, before o_proj). Layers then continue as the teacher's, so
 * each layer learns from the teacher's own hidden states.
 *
 * On the CPU backend the arrays are host fp32 (what the CPU training kernels
 * read); a teacher opened on "cuda" runs the CUDA backend in fp32 and hands
 * over device arrays (on_device), which the GPU training kernels read in place.
 *
 * Under mpirun the teacher is split by a placement plan (plan.h): each rank
 * loads and runs only its layers, and the hidden states travel between the
 * ranks in the plan's visit order (handoff.h; from a GPU teacher through a
 * host buffer), so each rank sees the activations of exactly the layers it
 * owns. */
#ifndef LZ_DISTILL_TEACHER_H
#define LZ_DISTILL_TEACHER_H

#include <stdbool.h> // bool
#include <stdint.h>  // int32_t, uint64_t

#include "model.h"      // lz_model
#include "plan.h"       // lz_plan
#include "state.h"      // lz_state
#include "step.h"       // lz_workspace
#include "train_step.h" // lz_train_work: the layers run as training runs them, keeping their activations

/* One layer's activations: rows [batch * seq_len], sequence b in rows
 * b*seq_len .. (b+1)*seq_len - 1. */
typedef struct {
    int layer;
    const float *x;      /* [T, hidden] */
    const float *q;      /* [T, Hq, head_dim] */
    const float *k, *v;  /* [T, Hkv, head_dim] */
    const float *target; /* [T, Hq, head_dim] */
    bool on_device;      /* CUDA device memory (a teacher on the GPU) */
    bool bf16;           /* on the device, in bf16 (a teacher run in bf16); else fp32 */
} lz_teacher_acts;

typedef lz_status (*lz_teacher_layer_fn)(void *ctx, const lz_teacher_acts *acts);

typedef struct {
    lz_backend *be;
    const lz_ops *ops;
    lz_model model;
    lz_state state;
    lz_workspace ws;
    int batch, seq_len;
    lz_train_work work;          /* the layer's tape: what the teacher hands over */
    lz_layer_train *layers;      /* [n_layers]: nothing trained (no LoRA) */
    void *q_raw, *k_raw;         /* q and k before RoPE, kept by the tape */
    int32_t *slot, *start, *len, *pos, *token_pos;
    const lz_plan *plan;         /* NULL: one process holds every layer */
    int rank;
    bool on_device;              /* the CUDA backend: x, q, k and the workspace are device memory */
    bool bf16;                   /* ... with bf16 activations */
    float *hidden_host;          /* [T, hidden]: a GPU teacher's hidden states on their way between ranks */
} lz_teacher;

/* Loads DIR as a teacher (every layer softmax) for batches of `batch`
 * sequences of `seq_len` tokens; seq_len is checked against the model's
 * max_position_embeddings. With a plan, only the layers of `rank` (and the
 * embedding if it owns it); the plan must outlive the teacher. */
lz_status lz_teacher_open(lz_teacher *t, const char *dir, int batch, int seq_len, const lz_plan *plan, int rank);
/* The same on `device` "cpu" or "cuda" with activations of `dtype` "fp32" or
 * "bf16" (cuda only). */
lz_status lz_teacher_open_on(lz_teacher *t, const char *dir, int batch, int seq_len, const lz_plan *plan, int rank,
                             const char *device, const char *dtype);
void lz_teacher_close(lz_teacher *t);

/* Runs ids [batch, seq_len] through layers 0 .. n_layers-1, calling
 * fn(ctx, acts) for every layer (of this rank) before the next one runs.
 * Under a plan every rank calls it with the same ids, n_layers and step
 * (which names the batch in the watchdog's messages). */
lz_status lz_teacher_run(lz_teacher *t, const int32_t *ids, int n_layers, uint64_t step, lz_teacher_layer_fn fn,
                         void *ctx);

#endif
