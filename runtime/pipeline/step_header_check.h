/* step_header_check.h - the consistency checks a received StepHeader
 * (proto/lizard.proto) passes before its arrays index anything: one count,
 * position and slot per sequence, counts that add up to the tokens sent,
 * token ids inside the vocabulary, slots inside the state, logit rows inside
 * the step, and positions whose last token fits an int32. */
#ifndef LZ_STEP_HEADER_CHECK_H
#define LZ_STEP_HEADER_CHECK_H

#include "error.h" // lz_status

/* header: a const Lizard__StepHeader * (void here so that this header does
 * not need the generated lizard.pb-c.h). n_slots: sequences the state holds;
 * vocab_size: the model's vocabulary. Returns LZ_OK, or LZ_ERR_INTERNAL (rank
 * 0 built the header: a mismatch is a bug or a corrupted transfer) with a
 * message that names the field and index at fault ("StepHeader: token_ids[3]
 * = 70000, out of range (vocab 32000)"). Checks, in order:
 *   n_positions == n_token_counts == n_seq_ids, and the sizes fit an int;
 *   per sequence: token_counts[q] >= 1, seq_ids[q] in [0, n_slots),
 *     positions[q] >= 0 and positions[q] + token_counts[q] without overflow;
 *   sum of token_counts <= max_tokens (the receiver's workspace), and
 *     == n_token_ids, or n_token_ids == 0 (the ids stay on rank 0, which
 *     embeds them);
 *   token_ids[t] in [0, vocab_size);
 *   logit_rows[k] in [0, sum of token_counts);
 *   with the SAMPLE flag, temperatures, top_ks, top_ps, seeds and draws one
 *     entry per logit row (none without it): temperatures finite and >= 0,
 *     top_ks >= 0, top_ps in (0, 1]. */
lz_status lz_step_header_check(const void *header, int n_slots, int vocab_size, int max_tokens);

#endif
