/* bpe_builder.h - trains the tiny models' byte-level BPE tokenizer at init
 * time on a small embedded English text, and writes it as an HF tokenizers
 * file (tokenizer.json) plus tokenizer_config.json.
 *
 * Token ids 0..255 are the single bytes (id = byte value); each merge adds
 * the concatenation of two tokens; the two special tokens <|begin_of_text|>
 * and <|end_of_text|> follow the model's tokens as added_tokens. In the JSON
 * a token's bytes are spelled with GPT-2's bytes-to-unicode map, as in
 * GPT-2 and LLaMA-3 tokenizer files. */
#ifndef LZ_BPE_BUILDER_H
#define LZ_BPE_BUILDER_H

#include <stddef.h> // size_t
#include <stdint.h> // uint8_t, uint32_t

#include "error.h"  // lz_status

#define LZ_BPE_BOS "<|begin_of_text|>"
#define LZ_BPE_EOS "<|end_of_text|>"
enum { LZ_BPE_N_SPECIAL = 2 };

typedef struct {
    int n_tokens;        /* model vocabulary: 256 bytes + merged tokens */
    uint8_t **bytes;     /* raw bytes of each token */
    size_t *len;
    int n_merges;
    int (*merges)[2];    /* token ids of each merged pair, highest priority first */
} lz_bpe;

/* The embedded training text (a few KB of English, NUL-terminated). */
const char *lz_bpe_corpus(void);

/* Greedy BPE: counts adjacent pairs inside pre-tokenized words, merges the
 * most frequent (ties: the lexicographically smallest pair of byte strings),
 * until the vocabulary holds `n_tokens` tokens (>= 256). Deterministic.
 * Fails if the text runs out of pairs first. */
lz_status lz_bpe_train(const char *text, size_t len, int n_tokens, lz_bpe *out);
void lz_bpe_free(lz_bpe *bpe);

/* GPT-2's bytes-to-unicode map: bytes 33-126, 161-172, 174-255 map to
 * themselves, the other 68 bytes to 256, 257, ... in byte order. */
uint32_t lz_bpe_byte_to_codepoint(uint8_t b);

/* tokenizer.json text (malloc'ed); the special tokens get ids n_tokens and
 * n_tokens + 1, and <|begin_of_text|> is prepended by the post-processor. */
lz_status lz_bpe_tokenizer_json(const lz_bpe *bpe, char **out);

/* Writes DIR/tokenizer.json and DIR/tokenizer_config.json (atomically). */
lz_status lz_bpe_write_files(const char *dir, const lz_bpe *bpe, int model_max_length);

#endif
