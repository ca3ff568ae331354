/* step.h - one forward step of a batch of sequences through a stage:
 * embedding -> decoder layers -> final norm + LM head on the requested rows. */
#ifndef LZ_STEP_H
#define LZ_STEP_H

#include "model.h" // lz_model
#include "state.h" // lz_state

/* Scratch activations for up to max_tokens rows per step. */
typedef struct {
    int max_tokens;
    void *x, *xn, *q, *k, *v, *att, *proj, *mlp_gate, *mlp_up, *phi_q, *phi_k, *gate_logit, *log_gamma, *head_in,
        *logits;
    int max_logit_rows;
} lz_workspace;

lz_status lz_workspace_create(lz_workspace *ws, const lz_model *m, int max_tokens, int max_logit_rows);
void lz_workspace_free(lz_workspace *ws, const lz_model *m);

/* Runs ids [batch->n_tokens] through every layer, updating the state of each
 * sequence's slot (batch->pos[s] must equal the slot's position), and writes
 * host fp32 logits [n_logit_rows, vocab] of the rows listed in logit_rows. */
lz_status lz_step(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                  const int32_t *logit_rows, int n_logit_rows, float *logits);
/* The same step, greedy: out_ids[r] = the argmax of logit row r, found where
 * the logits are (the device), so only the ids cross to the host. */
lz_status lz_step_greedy(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                         const int32_t *logit_rows, int n_logit_rows, int32_t *out_ids);
/* The same step, sampled: out_ids[r] = logit row r sampled with sample[r]
 * (sample_rows), on the device too. */
lz_status lz_step_sampled(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                          const int32_t *logit_rows, int n_logit_rows, const lz_sample_row *sample, int32_t *out_ids);

/* The same step in pieces, for a process that owns only some layers (a
 * pipeline stage), in this order: begin (validates, copies the batch to the
 * backend), embed (first stage), layers (the owned layers among
 * [first, last): one run of a stage), head (last stage: logits of the given
 * rows to host fp32, or their greedy or sampled ids), end (advances the slots). ws->x [n_tokens, hidden]
 * holds the activations between them. lz_step = all of them, with decode
 * steps replayed by the backend where it can. */
lz_status lz_step_begin(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                        const int32_t *logit_rows, int n_logit_rows);
lz_status lz_step_embed(lz_model *m, lz_workspace *ws, const int32_t *ids, const lz_batch *batch);
lz_status lz_step_layers(lz_model *m, lz_state *st, lz_workspace *ws, const lz_batch *batch, int first, int last);
/* lz_step_layers, with decode steps recorded and replayed by the backend
 * where it can (a pipeline stage's share of lz_step's graphs). */
lz_status lz_step_layers_replayed(lz_model *m, lz_state *st, lz_workspace *ws, const lz_batch *batch, int first,
                                  int last);
/* out_ids: ids instead of logits, greedy or (sample) sampled */
lz_status lz_step_head(lz_model *m, lz_workspace *ws, const int32_t *logit_rows, int n_logit_rows, float *logits,
                       int32_t *out_ids, const lz_sample_row *sample);
void lz_step_end(lz_state *st, const lz_batch *batch);

#endif
