/* train_step.h - a training step (stage 2) over the parts of a model a
 * process holds, built from the inference step's pieces: the same embedding,
 * the same layers (run by lz_decoder_layer_train_forward) and the same final
 * norm, then the backward of each layer in reverse, each recomputed from its
 * saved input just before (activation recomputation per layer).
 *
 * A micro-batch is an lz_batch of sequences that each start at position 0,
 * in slots 0 .. n_seqs - 1 of an lz_state. Per micro-batch in flight the
 * caller keeps saves[l]: the input of every layer l of its part ([N, C] in
 * the activation type), written by lz_train_forward and read back by
 * lz_train_backward. */
#ifndef LZ_TRAIN_STEP_H
#define LZ_TRAIN_STEP_H

#include "train_layer.h" // lz_layer_train, lz_layer_tape, lz_layer_grads

typedef struct {
    int max_tokens;
    lz_layer_train *layers; /* [num_hidden_layers]: what each layer trains (the caller's) */
    lz_layer_tape tape;     /* the layer being run */
    lz_layer_grads grads;
    float *dx;              /* [max_tokens, C]: the gradient flowing between layers and parts */
    void *h;                /* [max_tokens, C]: the final norm's output */
    float *dh;              /* [max_tokens, C]: its gradient */
} lz_train_work;

lz_status lz_train_work_create(lz_train_work *w, const lz_model *m, int max_tokens, int lora_rank,
                               lz_layer_train *layers);
/* The same for forwards alone (a teacher's activations): the tape, no gradients. */
lz_status lz_train_work_create_forward(lz_train_work *w, const lz_model *m, int max_tokens, lz_layer_train *layers);
void lz_train_work_free(lz_train_work *w, const lz_model *m);

/* Checks the micro-batch (shape, positions 0, slots, ids when given) and hands it to the backend:
 * before lz_train_forward and before lz_train_backward of that micro-batch. */
lz_status lz_train_begin(lz_model *m, const lz_state *st, const lz_workspace *ws, const lz_train_work *w,
                         const int32_t *ids, const lz_batch *b);

/* Called after each layer of lz_train_forward with what its forward kept. */
typedef lz_status (*lz_layer_hook)(void *ctx, int layer, const lz_layer_tape *tape);

/* The part's forward: the embedding of ids when part->embed (else ws->x holds the part's input),
 * then its layers, saves[l] = each layer's input (saves NULL: none kept), hook (or NULL) after each;
 * ws->x holds the part's output. */
lz_status lz_train_forward(lz_model *m, lz_state *st, lz_workspace *ws, lz_train_work *w, const int32_t *ids,
                           const lz_batch *b, const lz_step_part *part, void *const *saves, lz_layer_hook hook,
                           void *hook_ctx);

/* The head on ws->x (the last layer's output): *loss = the sum of the next-token cross-entropies of
 * the rows with targets[t] >= 0 (host); with learn, w->dx = grad_scale * d(loss)/d(ws->x). */
lz_status lz_train_head(lz_model *m, lz_workspace *ws, lz_train_work *w, const lz_batch *b, const int32_t *targets,
                        float grad_scale, bool learn, double *loss);

/* The part's backward: w->dx holds d/d(the part's output) on entry and d/d(its input) on return;
 * every trained tensor's gradient is added to. */
lz_status lz_train_backward(lz_model *m, lz_state *st, lz_workspace *ws, lz_train_work *w, const lz_batch *b,
                            const lz_step_part *part, void *const *saves);

#endif
