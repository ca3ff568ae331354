/* tokenizer.h - HF tokenizer.json in C: text -> ids and ids -> text, exactly as
 * HF `tokenizers` does, for the two families LLaMA and Mistral models use:
 *   - byte-level BPE (GPT-2 / LLaMA-3): Split pre-tokenizer regex (PCRE2, JIT),
 *     ByteLevel byte-to-unicode map, merges by rank, ignore_merges;
 *   - SentencePiece-style BPE (LLaMA-2 / Mistral): Prepend("▁") + Replace(" ", "▁")
 *     normalizer or Metaspace pre-tokenizer, byte_fallback to <0xNN>, fuse_unk.
 * Added/special tokens are matched before the model; the post-processor (or
 * tokenizer_config.json's add_bos_token / add_eos_token) adds BOS/EOS.
 * Anything else in tokenizer.json (another model type, pre-tokenizer,
 * normalizer, decoder) fails to load with LZ_ERR_INPUT naming the part.
 *
 * Text is bytes: invalid UTF-8 never fails; each invalid byte is encoded as a
 * byte (byte-level: its byte token; SentencePiece: <0xNN>) and decodes back to
 * itself. Decoding returns bytes; where HF would print U+FFFD for an invalid
 * sequence, these functions return the raw bytes (docs/tokenizer.md).
 *
 * A tokenizer is not thread-safe (encode keeps a word cache and scratch
 * buffers); use one per thread. Decoders (lz_detok) only read it. */
#ifndef LZ_TOKENIZER_H
#define LZ_TOKENIZER_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t

#include "error.h" // lz_status

typedef struct lz_tokenizer lz_tokenizer;

/* Loads DIR/tokenizer.json and, where present, DIR/tokenizer_config.json. */
lz_status lz_tokenizer_load(const char *dir, lz_tokenizer **out);

/* The same from memory: `json` is tokenizer.json's text; `config` is
 * tokenizer_config.json's text or NULL. Neither needs a terminating NUL. */
lz_status lz_tokenizer_load_json(const char *json, size_t json_len, const char *config, size_t config_len,
                                 lz_tokenizer **out);

void lz_tokenizer_free(lz_tokenizer *tok);

/* Encodes len bytes of text. add_special: add BOS/EOS as the post-processor
 * says (HF's add_special_tokens=True). *ids is malloc'd (free it), even when
 * *n is 0. */
lz_status lz_tokenizer_encode(lz_tokenizer *tok, const char *text, size_t len, bool add_special, int32_t **ids, int *n);

/* A byte range [start, end) of a text. */
typedef struct {
    size_t start, end;
} lz_text_span;

/* lz_tokenizer_encode, except that inside the n_plain ranges `plain` special
 * tokens are ordinary text (HF's split_special_tokens=True there): a chat
 * template's own markers stay special while the same text in a message's
 * content does not. Added tokens that are not special still match. */
lz_status lz_tokenizer_encode_plain(lz_tokenizer *tok, const char *text, size_t len, bool add_special,
                                    const lz_text_span *plain, int n_plain, int32_t **ids, int *n);

/* Decodes ids to text in one go (the same bytes as feeding an lz_detok and
 * flushing it). *text is malloc'd and NUL-terminated; *len excludes the NUL.
 * skip_special drops special tokens (HF's skip_special_tokens). Ids the
 * tokenizer does not know are skipped, as HF does. */
lz_status lz_tokenizer_decode(const lz_tokenizer *tok, const int32_t *ids, int n, bool skip_special, char **text,
                              size_t *len);

/* 1 + the largest id (model vocabulary and added tokens). */
int32_t lz_tokenizer_vocab_size(const lz_tokenizer *tok);
/* Ids from this tokenizer must also be ids of the model: fails (LZ_ERR_INPUT)
 * naming the first id >= model_vocab and its token; `what` names the input
 * ("--prompt", "messages"). */
lz_status lz_tokenizer_check_ids(const lz_tokenizer *tok, const int32_t *ids, int n, int model_vocab,
                                 const char *what);
/* A warning on stderr when tokenizer.json (in dir) has ids the model's
 * vocabulary lacks; text that becomes such an id is then refused. */
void lz_tokenizer_warn_vocab(const lz_tokenizer *tok, int model_vocab, const char *dir);
/* Id of a token string (added tokens first, then the model), or -1. */
int32_t lz_tokenizer_token_to_id(const lz_tokenizer *tok, const char *token, size_t len);
/* The token string of an id as tokenizer.json spells it, or NULL. */
const char *lz_tokenizer_id_to_token(const lz_tokenizer *tok, int32_t id, size_t *len);
bool lz_tokenizer_is_special(const lz_tokenizer *tok, int32_t id);
/* bos_token / eos_token of tokenizer_config.json (else the post-processor's
 * first added special token for BOS), or -1. */
int32_t lz_tokenizer_bos_id(const lz_tokenizer *tok);
int32_t lz_tokenizer_eos_id(const lz_tokenizer *tok);

/* Streaming decoder: push ids one at a time as they are generated; each push
 * returns the bytes now ready to print. A UTF-8 character split across tokens
 * is held until it is complete, and so is whatever the decoder may still strip;
 * flush returns the rest. The concatenation of everything returned equals
 * lz_tokenizer_decode() of the same ids. The fields are private. */
typedef struct {
    const lz_tokenizer *tok;
    bool skip_special;
    int n_tokens;   /* tokens handed to the decoder so far */
    int strip_left; /* leading characters the decoder may still strip */
    char *pending;  /* decoded bytes not yet returned */
    size_t n_pending, cap_pending;
    char *out, *work, *work2;
    size_t cap_out, cap_work, cap_work2;
} lz_detok;

void lz_detok_init(lz_detok *d, const lz_tokenizer *tok, bool skip_special);
/* *text (valid until the next call on d) and *len: the bytes ready now (maybe none). */
lz_status lz_detok_push(lz_detok *d, int32_t id, const char **text, size_t *len);
lz_status lz_detok_flush(lz_detok *d, const char **text, size_t *len);
void lz_detok_free(lz_detok *d);

#endif
