/* tokenizer_internal.h - what the tokenizer*.c files share: buffers, UTF-8,
 * hash maps, the JSON reader, PCRE2 patterns, and the lz_tokenizer struct.
 * Not part of the API (tokenizer.h is). */
#ifndef LZ_TOKENIZER_INTERNAL_H
#define LZ_TOKENIZER_INTERNAL_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t, uint32_t, uint64_t

#include "error.h"     // lz_status
#include "tokenizer.h" // lz_tokenizer

/* ---- growable buffers (tokenizer_util.c) ------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} tk_buf;

typedef struct {
    int32_t *p;
    size_t n, cap;
} tk_ids;

/* A piece of a string: [start, end), and whether a pattern matched it. */
typedef struct {
    size_t start, end;
    bool match;
} tk_span;

typedef struct {
    tk_span *p;
    size_t n, cap;
} tk_spans;

lz_status tk_buf_reserve(tk_buf *b, size_t extra);
lz_status tk_buf_append(tk_buf *b, const void *s, size_t n);
void tk_buf_free(tk_buf *b);
lz_status tk_ids_push(tk_ids *v, int32_t id);
lz_status tk_ids_append(tk_ids *v, const int32_t *ids, size_t n);
lz_status tk_spans_push(tk_spans *v, size_t start, size_t end, bool match);

/* ---- UTF-8 (tokenizer_util.c) ----------------------------------------------------------------------- */

enum { TK_INVALID_CP = 0xFFFFFFFFu };

/* Length of the character at s (n > 0 bytes): a valid UTF-8 sequence (RFC 3629:
 * no overlongs, no surrogates, at most U+10FFFF) or, for anything else, the
 * single byte (*cp = TK_INVALID_CP). */
size_t tk_utf8_next(const char *s, size_t n, uint32_t *cp);
/* Writes cp's UTF-8 encoding (1-4 bytes) to out; returns its length. */
size_t tk_utf8_put(uint32_t cp, char *out);
/* Length of the longest prefix of s that does not end inside a character
 * whose remaining bytes may still come (a valid but incomplete last sequence). */
size_t tk_utf8_complete_prefix(const char *s, size_t n);
/* Rust's char::is_whitespace (Unicode White_Space). */
bool tk_is_whitespace(uint32_t cp);
uint64_t tk_hash(const void *p, size_t n);

/* ---- hash maps (tokenizer_util.c) ------------------------------------------------------------------- */

/* string -> int32; keys are copied into the map's pool. */
typedef struct {
    struct tk_str_slot {
        uint32_t hash;           /* low bits of tk_hash (the high bits pick the slot) */
        uint32_t off, len_plus1; /* key in pool; len_plus1 == 0: an empty slot */
        int32_t val;
    } * slots;
    size_t mask, n;
    tk_buf pool;
} tk_strmap;

lz_status tk_strmap_init(tk_strmap *m, size_t expected);
/* Inserts or overwrites. */
lz_status tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t val);
int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n); /* -1 when absent */
/* The same with the key's tk_hash given; and a prefetch of the slot a hash starts at
 * (loading issues many lookups ahead of use, so that cache misses overlap). */
int32_t tk_strmap_get_hashed(const tk_strmap *m, const char *k, size_t n, uint64_t h);
void tk_strmap_prefetch(const tk_strmap *m, uint64_t h);
void tk_strmap_free(tk_strmap *m);

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    struct tk_pair_slot {
        uint64_t key;
        uint32_t rank;
        int32_t id;
    } * slots;
    size_t mask, n;
} tk_pairmap;

lz_status tk_pairmap_init(tk_pairmap *m, size_t expected);
lz_status tk_pairmap_put(tk_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
void tk_pairmap_prefetch(const tk_pairmap *m, int32_t a, int32_t b);
bool tk_pairmap_get(const tk_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id);
void tk_pairmap_free(tk_pairmap *m);

/* word -> ids (the BPE cache); cleared whole when full. */
typedef struct {
    struct tk_cache_slot {
        uint64_t hash;
        uint32_t key_off, key_len, ids_off, n_ids;
    } * slots; /* key_len == UINT32_MAX: empty */
    size_t mask, n;
    tk_buf keys;
    tk_ids ids;
} tk_cache;

lz_status tk_cache_init(tk_cache *c, size_t slots);
/* Returns the cached ids of a word, or NULL. */
const int32_t *tk_cache_get(const tk_cache *c, const char *k, size_t n, size_t *n_ids);
lz_status tk_cache_put(tk_cache *c, const char *k, size_t n, const int32_t *ids, size_t n_ids);
void tk_cache_free(tk_cache *c);

/* ---- JSON (tokenizer_json.c): a small reader for tokenizer.json --------------------------------------- */

/* jansson builds a 128K-entry vocabulary in about a second; this reader parses
 * into one arena and points into the input where strings need no unescaping. */
typedef enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_type;

typedef struct tj_val tj_val;
struct tj_val {
    uint8_t type;   /* tj_type */
    uint8_t is_int; /* TJ_NUM: an integer of at most 15 digits (exact in u.num) */
    uint32_t n;     /* TJ_STR: bytes; TJ_ARR/TJ_OBJ: children */
    uint32_t key_len;
    const char *key; /* member name inside an object */
    union {
        const char *s;
        tj_val *kids;
        double num;
    } u;
};

typedef struct tj_doc tj_doc;

/* `what` names the file in errors ("tokenizer.json"). The text must stay
 * alive as long as the document. */
lz_status tj_parse(const char *text, size_t len, const char *what, tj_doc **out, const tj_val **root);
void tj_free(tj_doc *doc);
/* Member of an object (NULL if absent or `o` is not an object). */
const tj_val *tj_get(const tj_val *o, const char *key);
bool tj_is_str(const tj_val *v, const char *s);

/* ---- patterns (tokenizer_regex.c) ------------------------------------------------------------------- */

/* A Split/Replace pattern: a PCRE2 regex (Oniguruma's meaning of \s kept) or a
 * literal string, with HF's find_matches: spans covering the whole input, the
 * matched ones flagged. Invalid UTF-8 input never matches a regex. */
typedef struct tk_pattern tk_pattern;

lz_status tk_pattern_regex(const char *re, size_t len, const char *what, tk_pattern **out);
lz_status tk_pattern_literal(const char *s, size_t len, tk_pattern **out);
void tk_pattern_free(tk_pattern *p);
/* Clears `out` and fills it; an empty input gives no spans. */
lz_status tk_pattern_find(tk_pattern *p, const char *s, size_t n, tk_spans *out);
/* Whether the pattern matches s[0..n) whole (anchored at both ends). */
bool tk_pattern_matches_all(tk_pattern *p, const char *s, size_t n);
/* GPT-2's split regex (the ByteLevel pre-tokenizer's use_regex). */
extern const char tk_gpt2_regex[];
/* Rust regex's \w: a word character for the added tokens' single_word test. */
extern const char tk_word_char_regex[];

/* ---- the tokenizer ---------------------------------------------------------------------------------- */

typedef enum {
    TK_SPLIT_REMOVED,
    TK_SPLIT_ISOLATED,
    TK_SPLIT_MERGED_PREV,
    TK_SPLIT_MERGED_NEXT,
    TK_SPLIT_CONTIGUOUS
} tk_behavior;
typedef enum { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend;

typedef enum { TK_NORM_PREPEND, TK_NORM_REPLACE, TK_NORM_STRIP } tk_norm_kind;
typedef struct {
    tk_norm_kind kind;
    char *text; /* PREPEND: what; REPLACE: the replacement */
    size_t text_len;
    tk_pattern *pattern; /* REPLACE */
    bool left, right;    /* STRIP */
} tk_norm;

typedef enum { TK_PT_SPLIT, TK_PT_BYTELEVEL, TK_PT_METASPACE, TK_PT_DIGITS } tk_pt_kind;
typedef struct {
    tk_pt_kind kind;
    tk_pattern *pattern; /* SPLIT, DIGITS, BYTELEVEL with use_regex */
    tk_behavior behavior;
    bool invert;
    bool add_prefix_space; /* BYTELEVEL */
    char repl[8];          /* METASPACE replacement character, UTF-8 */
    size_t repl_len;
    tk_prepend prepend;
    bool split;
    tk_buf buf, buf2; /* scratch, one stage deep */
    tk_spans spans, kept;
} tk_pretok;

typedef struct {
    char *content; /* as in tokenizer.json */
    size_t len;
    char *pattern; /* what is matched: content, or normalized content */
    size_t pattern_len;
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
} tk_added;

/* Byte trie of the added tokens matched on raw or on normalized text. */
typedef struct {
    struct tk_trie_node {
        int32_t child, sibling; /* -1: none */
        int32_t added;          /* index into added[], -1 if no token ends here */
        uint8_t byte;
    } * nodes;
    size_t n, cap;
    bool first[256]; /* bytes a token can start with */
} tk_trie;

typedef enum {
    TK_DEC_BYTELEVEL,
    TK_DEC_METASPACE,
    TK_DEC_BYTEFALLBACK,
    TK_DEC_FUSE,
    TK_DEC_STRIP,
    TK_DEC_REPLACE
} tk_dec_kind;
typedef struct {
    tk_dec_kind kind;
    char *from, *to; /* REPLACE */
    size_t from_len, to_len;
    uint32_t ch;        /* METASPACE replacement, STRIP content */
    size_t start, stop; /* STRIP */
    tk_prepend prepend; /* METASPACE */
} tk_dec;

typedef struct {
    uint32_t off, len; /* decode string in id_pool */
    int32_t tok_off;   /* token string (tokenizer.json spelling) in id_pool; -1 if the id is unused */
    uint32_t tok_len;
    bool special;
} tk_idinfo;

/* GPT-2's byte <-> unicode map (tokenizer_bytes.c): every code point is below 324. */
enum { TK_BYTEMAP_CPS = 324 };
typedef struct {
    char utf8[256][2]; /* UTF-8 of the character each byte stands for */
    uint8_t len[256];
    int16_t byte_of[TK_BYTEMAP_CPS]; /* the byte a character stands for, or -1 */
} tk_bytemap;
void tk_bytemap_init(tk_bytemap *m);

typedef struct {
    int32_t id, prev, next;
    uint32_t len; /* bytes; 0 = merged away */
} tk_symbol;

typedef struct {
    uint32_t rank;
    int32_t pos, id;
} tk_merge;

struct lz_tokenizer {
    tk_bytemap bytemap;
    /* model: BPE */
    tk_strmap vocab;
    size_t model_size; /* entries in the model vocabulary */
    tk_pairmap merges;
    bool ignore_merges, byte_fallback, fuse_unk;
    bool merge_joins_space; /* some merge's right side starts with "▁" */
    bool split_at_space;    /* words can be cut before each "▁" without changing the result */
    int32_t unk_id;         /* -1: no unk_token */
    char *prefix, *suffix;  /* continuing_subword_prefix, end_of_word_suffix */
    size_t prefix_len, suffix_len;
    int32_t byte_ids[256]; /* <0xNN> ids, -1 when absent */
    int32_t *char_ids;     /* vocab id of each code point below 0x800, -1 when absent */
    /* added tokens */
    tk_added *added;
    int n_added;
    tk_strmap added_map; /* content -> index into added */
    tk_trie trie_raw, trie_norm;
    tk_pattern *word_char; /* for single_word tokens */
    /* pipeline */
    tk_norm *norms;
    int n_norms;
    tk_pretok *pretoks;
    int n_pretoks;
    int32_t *pre_ids, *post_ids; /* what add_special puts around the text */
    int n_pre, n_post;
    tk_dec *decs;
    int n_decs;       /* the steps run per token */
    int n_decs_alloc; /* all loaded steps (those after the fuse are folded into strip_*) */
    bool has_decoder;
    int strip_start, strip_stop; /* a Strip after the tokens are fused */
    uint32_t strip_ch;
    int32_t bos_id, eos_id;
    /* id -> strings */
    tk_idinfo *ids;
    int32_t n_ids;
    tk_buf id_pool;
    /* encode scratch */
    tk_cache cache;
    tk_buf norm_buf[2], word_buf;
    tk_spans raw_spans, norm_spans;
    tk_ids raw_which, norm_which;
    tk_symbol *syms;
    size_t cap_syms;
    tk_merge *heap;
    size_t cap_heap;
};

/* tokenizer_added.c */
lz_status tk_trie_add(tk_trie *t, const char *s, size_t n, int32_t added);
void tk_trie_free(tk_trie *t);
/* HF's AddedVocabulary::find_matches: spans covering s; a span holding an
 * added token has match = true and, in `which`, the token's index. No special
 * token matches where it would overlap one of the n_plain ranges `plain`
 * (offsets into s): there its text is ordinary text. */
lz_status tk_added_find(const lz_tokenizer *tok, const tk_trie *t, const char *s, size_t n,
                        const lz_text_span *plain, int n_plain, tk_spans *out, tk_ids *which);

/* tokenizer_normalize.c */
/* {"String": ...} or {"Regex": ...}; `what` names the part in errors. */
lz_status tk_load_pattern(const tj_val *v, const char *what, tk_pattern **out);
/* Runs the normalizers on s; *out is one of tok->norm_buf (valid until the next call). */
lz_status tk_normalize(lz_tokenizer *tok, const char *s, size_t n, tk_buf **out);
/* tokenizer_pretok.c: Metaspace's replacement and prepend_scheme (the decoder reads them too). */
lz_status tk_load_metaspace(const tj_val *v, const char *what, char repl[8], size_t *repl_len, tk_prepend *prepend);
/* tokenizer_pretok.c: runs pre-tokenizer `stage` and those after it on one piece, then the model. */
lz_status tk_pretokenize(lz_tokenizer *tok, int stage, const char *s, size_t n, bool at_start, tk_ids *out);
/* tokenizer_bpe.c: the model on one pre-tokenized word. */
lz_status tk_bpe_word(lz_tokenizer *tok, const char *s, size_t n, tk_ids *out);

/* Each part's loader lives beside the code that runs it; tokenizer_load.c calls them. */
lz_status tk_load_normalizer(lz_tokenizer *tok, const tj_val *v);
lz_status tk_load_pretokenizer(lz_tokenizer *tok, const tj_val *v);
lz_status tk_load_decoder(lz_tokenizer *tok, const tj_val *v);
lz_status tk_load_post_processor(lz_tokenizer *tok, const tj_val *v);
/* tokenizer_util.c: a NUL-terminated copy, or NULL */
char *tk_strndup(const char *s, size_t n);

#endif
