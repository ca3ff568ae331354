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

/* What the head gives back for its rows: host fp32 logits [rows, vocab], or
 * (ids) each row's id chosen where the logits are (the device), so that only
 * ids cross to the host: the argmax, or sampled with sample[row]. */
typedef struct {
    float *logits;
    int32_t *ids;
    const lz_sample_row *sample;
} lz_head_out;

/* One process's share of a step: the embedding (the first stage), the layers
 * it owns among [first, last), the final norm + LM head (the last stage). */
typedef struct {
    bool embed;
    int first, last;
    bool head;
} lz_step_part;

/* Runs ids [batch->n_tokens] through every layer, updating the state of each
 * sequence's slot (batch->pos[s] must equal the slot's position), and gives
 * the head's result for the rows listed in logit_rows. It is the pieces
 * below with one part that holds the whole model; a pipeline stage runs the
 * same pieces with its own parts. */
lz_status lz_step(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                  const int32_t *logit_rows, int n_logit_rows, lz_head_out out);

/* The pieces, in this order: begin (validates, copies the batch to the
 * backend); part_run for each part (ws->x [n_tokens, hidden] holds the
 * activations between parts; decode steps recorded and replayed by the
 * backend where it can); end (advances the slots); result (the head's rows,
 * from the part that ran the head). */
lz_status lz_step_begin(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                        const int32_t *logit_rows, int n_logit_rows);
lz_status lz_step_part_run(lz_model *m, lz_state *st, lz_workspace *ws, const int32_t *ids, const lz_batch *batch,
                           const lz_step_part *part, const int32_t *logit_rows, int n_logit_rows);
void lz_step_end(lz_state *st, const lz_batch *batch);
lz_status lz_step_result(lz_model *m, lz_workspace *ws, int n_logit_rows, lz_head_out out);
/* The embedding alone (the teacher of distillation walks its layers itself). */
lz_status lz_step_embed(lz_model *m, lz_workspace *ws, const int32_t *ids, const lz_batch *batch);

#endif
