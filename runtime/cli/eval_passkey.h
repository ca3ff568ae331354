/* eval_passkey.h - the passkey retrieval test of `lizard eval --passkey`.
 *
 * A 5-digit number hidden at a random depth in repeated filler text of about
 * `context` tokens, asked for at the end; a trial is correct when the greedy
 * continuation of 8 tokens contains the number. */
#ifndef LZ_EVAL_PASSKEY_H
#define LZ_EVAL_PASSKEY_H

#include <stdint.h> // uint64_t

#include "engine.h"    // lz_engine
#include "tokenizer.h" // lz_tokenizer

/* Shortest context a passkey prompt fits in (checked by the command). */
enum { LZ_PASSKEY_MIN_CONTEXT = 64 };

/* `trials` trials at `context` tokens in slot 0 of e; trial t's number and
 * depth depend only on (seed, t). *correct = how many were found. */
lz_status lz_passkey_run(lz_engine *e, lz_tokenizer *tok, int context, long trials, uint64_t seed, int *correct);

#endif
