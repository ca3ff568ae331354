/* eval_nll.h - the log-likelihood of the next tokens under rows of logits, for `lizard eval`'s
 * perplexity: a log-softmax per row in double precision, rows spread over the machine's cores. */
#ifndef LZ_EVAL_NLL_H
#define LZ_EVAL_NLL_H

#include <stdint.h> // int32_t

/* nll[i] = -log softmax(logits[i*V .. i*V+V))[next[i]] for i < n. Each row is computed alone, so
 * the figures are the same with any number of threads. */
void lz_rows_nll(const float *logits, int n, int V, const int32_t *next, double *nll);

#endif
