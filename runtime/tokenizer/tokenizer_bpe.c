/* tokenizer_bpe.c - the BPE model on one pre-tokenized word, as HF's
 * BPE::tokenize: ignore_merges (a word in the vocabulary is one token), the
 * word cache, then one symbol per character (byte_fallback to <0xNN> tokens,
 * else the unk token, fused when fuse_unk), then merges applied lowest rank
 * first (ties: leftmost) with a binary heap over a linked list of symbols, so
 * long words cost O(n log n), not O(n^2). */
#include <stdlib.h> // realloc
#include <string.h> // memcpy

#include "tokenizer_internal.h"

enum { CACHE_MAX_WORD = 256 }; /* bytes; longer words are not cached (HF: the same) */

static lz_status add_symbol(lz_tokenizer *tok, size_t *n, int32_t id, size_t len) {
    if (*n == tok->cap_syms) {
        size_t cap = tok->cap_syms ? tok->cap_syms * 2 : 64;
        tk_symbol *p = realloc(tok->syms, cap * sizeof *p);
        if (!p)
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        tok->syms = p;
        tok->cap_syms = cap;
    }
    tk_symbol *s = &tok->syms[*n];
    s->id = id;
    s->prev = *n ? (int32_t)*n - 1 : -1;
    s->next = -1;
    s->len = (uint32_t)len;
    if (*n)
        tok->syms[*n - 1].next = (int32_t)*n;
    (*n)++;
    return LZ_OK;
}

/* ---- the merge heap: lowest rank first, then leftmost position ---------------------------------------- */

static bool before(tk_merge a, tk_merge b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(tk_merge *h, size_t *n, tk_merge m) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(m, h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = m;
}

static tk_merge heap_pop(tk_merge *h, size_t *n) {
    tk_merge top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(h[c + 1], h[c]))
            c++;
        if (!before(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void push_pair(lz_tokenizer *tok, size_t *n_heap, int32_t pos) {
    uint32_t rank;
    int32_t id;
    const tk_symbol *s = tok->syms;
    if (s[pos].next >= 0 && tk_pairmap_get(&tok->merges, s[pos].id, s[s[pos].next].id, &rank, &id))
        heap_push(tok->heap, n_heap, (tk_merge){rank, pos, id});
}

/* HF's Word::merge_all (without dropout). */
static lz_status merge_all(lz_tokenizer *tok, size_t n) {
    if (n < 2)
        return LZ_OK;
    size_t need = 3 * n; /* n - 1 pairs, then at most two per merge */
    if (tok->cap_heap < need) {
        tk_merge *h = realloc(tok->heap, need * sizeof *h);
        if (!h)
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        tok->heap = h;
        tok->cap_heap = need;
    }
    tk_symbol *s = tok->syms;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(tok, &nh, (int32_t)i);
    while (nh) {
        tk_merge top = heap_pop(tok->heap, &nh);
        tk_symbol *left = &s[top.pos];
        if (left->len == 0 || left->next < 0)
            continue;
        tk_symbol right = s[left->next];
        uint32_t rank;
        int32_t id;
        if (!tk_pairmap_get(&tok->merges, left->id, right.id, &rank, &id) || id != top.id)
            continue; /* stale: one side was merged since */
        s[left->next].len = 0;
        left->id = top.id;
        left->len += right.len;
        left->next = right.next;
        if (right.next >= 0)
            s[right.next].prev = top.pos;
        if (left->prev >= 0)
            push_pair(tok, &nh, left->prev);
        push_pair(tok, &nh, top.pos);
    }
    return LZ_OK;
}

/* ---- characters to symbols ---------------------------------------------------------------------------- */

static int32_t char_id(lz_tokenizer *tok, const char *s, size_t len, uint32_t cp, bool first, bool last,
                       const char **str, size_t *str_len) {
    bool decorated = (!first && tok->prefix_len) || (last && tok->suffix_len);
    *str = s;
    *str_len = len;
    if (!decorated) {
        if (cp < 0x800 && tok->char_ids)
            return tok->char_ids[cp];
        return tk_strmap_get(&tok->vocab, s, len);
    }
    tk_buf *b = &tok->word_buf;
    b->n = 0;
    if ((!first && tok->prefix_len && tk_buf_append(b, tok->prefix, tok->prefix_len) != LZ_OK) ||
        tk_buf_append(b, s, len) != LZ_OK ||
        (last && tok->suffix_len && tk_buf_append(b, tok->suffix, tok->suffix_len) != LZ_OK))
        return -2;
    *str = b->p;
    *str_len = b->n;
    return tk_strmap_get(&tok->vocab, b->p, b->n);
}

static lz_status unk_missing(void) {
    return lz_fail(LZ_ERR_INPUT, "tokenizer.json: the model's unk_token is not in its vocabulary");
}

/* HF's BPE::merge_word. */
static lz_status merge_word(lz_tokenizer *tok, const char *w, size_t n, tk_ids *out) {
    size_t ns = 0;
    bool have_unk = false;
    size_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = tk_utf8_next(w + i, n - i, &cp);
        const char *str;
        size_t str_len;
        int32_t id = char_id(tok, w + i, len, cp, i == 0, i + len == n, &str, &str_len);
        if (id == -2)
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        i += len;
        if (id >= 0) {
            if (have_unk) {
                LZ_TRY(add_symbol(tok, &ns, tok->unk_id, unk_len));
                have_unk = false;
            }
            LZ_TRY(add_symbol(tok, &ns, id, len));
            continue;
        }
        if (tok->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < str_len && all; k++)
                all = tok->byte_ids[(uint8_t)str[k]] >= 0;
            if (all) { /* (HF adds these before a pending unk: kept as is) */
                for (size_t k = 0; k < str_len; k++)
                    LZ_TRY(add_symbol(tok, &ns, tok->byte_ids[(uint8_t)str[k]], 1));
                continue;
            }
        }
        if (tok->unk_id == -1)
            continue; /* no unk token: the character is dropped, as in HF */
        if (tok->unk_id < 0)
            return unk_missing();
        if (have_unk && tok->fuse_unk) {
            unk_len += len;
        } else {
            if (have_unk)
                LZ_TRY(add_symbol(tok, &ns, tok->unk_id, unk_len));
            have_unk = true;
            unk_len = len;
        }
    }
    if (have_unk)
        LZ_TRY(add_symbol(tok, &ns, tok->unk_id, unk_len));
    LZ_TRY(merge_all(tok, ns));
    for (size_t i = 0; i < ns; i++)
        if (tok->syms[i].len)
            LZ_TRY(tk_ids_push(out, tok->syms[i].id));
    return LZ_OK;
}

static lz_status bpe_word(lz_tokenizer *tok, const char *s, size_t n, tk_ids *out);

lz_status tk_bpe_word(lz_tokenizer *tok, const char *s, size_t n, tk_ids *out) {
    if (!tok->split_at_space || n <= 3)
        return bpe_word(tok, s, n, out);
    size_t start = 0;
    for (const char *p = s + 1; (p = memmem(p, n - (size_t)(p - s), "\xe2\x96\x81", 3)) != NULL; p += 3) {
        LZ_TRY(bpe_word(tok, s + start, (size_t)(p - s) - start, out));
        start = (size_t)(p - s);
    }
    return bpe_word(tok, s + start, n - start, out);
}

static lz_status bpe_word(lz_tokenizer *tok, const char *s, size_t n, tk_ids *out) {
    if (n == 0)
        return LZ_OK;
    if (tok->ignore_merges) {
        int32_t id = tk_strmap_get(&tok->vocab, s, n);
        if (id >= 0)
            return tk_ids_push(out, id);
    }
    if (n <= CACHE_MAX_WORD) {
        size_t k;
        const int32_t *hit = tk_cache_get(&tok->cache, s, n, &k);
        if (hit)
            return tk_ids_append(out, hit, k);
    }
    size_t start = out->n;
    LZ_TRY(merge_word(tok, s, n, out));
    if (n <= CACHE_MAX_WORD)
        LZ_TRY(tk_cache_put(&tok->cache, s, n, out->p + start, out->n - start));
    return LZ_OK;
}
