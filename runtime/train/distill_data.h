/* distill_data.h - the token stream that distillation trains on, packed into
 * sequences of seq_len tokens and visited in a shuffled order.
 *
 * Sources: a 1-D int32 .npy file of token ids, a UTF-8 text file, or a
 * folder of *.txt files (sorted by name); text is tokenized with the
 * teacher's tokenizer, each file with its BOS. The batch of a step depends
 * only on (seed, step): resuming needs no data cursor. */
#ifndef LZ_DISTILL_DATA_H
#define LZ_DISTILL_DATA_H

#include <stddef.h> // size_t
#include <stdint.h> // int32_t, uint64_t

#include "error.h" // lz_status

typedef struct {
    int32_t *ids;   /* the whole stream */
    size_t n_ids;
    int seq_len;
    size_t n_seqs;  /* whole sequences in the stream (the tail is dropped) */
    uint64_t seed;
    size_t *order;        /* the shuffled order of the current epoch */
    uint64_t order_epoch;
} lz_distill_data;

/* Loads `path` (see above) for a model of `vocab` tokens; `model_dir` gives
 * the tokenizer for text. Errors name the path: missing, empty, ids out of
 * range, fewer tokens than one sequence. */
lz_status lz_distill_data_load(lz_distill_data *d, const char *path, const char *model_dir, int vocab, int seq_len,
                               uint64_t seed);
void lz_distill_data_free(lz_distill_data *d);

/* ids [batch, seq_len] of training step `step`: sequences step*batch ..
 * (step+1)*batch - 1 of an endless walk through shuffled epochs. */
void lz_distill_data_batch(lz_distill_data *d, uint64_t step, int batch, int32_t *ids);


#endif
