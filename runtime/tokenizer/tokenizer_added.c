/* tokenizer_added.c - finding added (and special) tokens in text before the
 * model sees it, as HF's AddedVocabulary::find_matches does: leftmost-longest
 * matches over a byte trie (HF: Aho-Corasick, LeftmostLongest), then per
 * token: single_word (no word character on either side), lstrip (the match
 * takes the whitespace before it), rstrip (and the whitespace after it). */
#include <stdlib.h> // realloc, free
#include <string.h> // memset

#include "tokenizer_internal.h"

static lz_status new_node(tk_trie *t, uint8_t byte, int32_t *index) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct tk_trie_node *p = realloc(t->nodes, cap * sizeof *p);
        if (!p)
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        t->nodes = p;
        t->cap = cap;
    }
    if (t->n >= INT32_MAX)
        return lz_fail(LZ_ERR_INPUT, "tokenizer: too many added tokens");
    t->nodes[t->n] = (struct tk_trie_node){-1, -1, -1, byte};
    *index = (int32_t)t->n++;
    return LZ_OK;
}

static int32_t child(const tk_trie *t, int32_t node, uint8_t byte) {
    for (int32_t c = t->nodes[node].child; c >= 0; c = t->nodes[c].sibling)
        if (t->nodes[c].byte == byte)
            return c;
    return -1;
}

lz_status tk_trie_add(tk_trie *t, const char *s, size_t n, int32_t added) {
    if (n == 0)
        return LZ_OK;
    int32_t node = 0;
    if (t->n == 0)
        LZ_TRY(new_node(t, 0, &node));
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = child(t, node, b);
        if (c < 0) {
            LZ_TRY(new_node(t, b, &c));
            t->nodes[c].sibling = t->nodes[node].child;
            t->nodes[node].child = c;
        }
        node = c;
    }
    if (t->nodes[node].added < 0) /* the same pattern twice: the first one wins */
        t->nodes[node].added = added;
    t->first[(uint8_t)s[0]] = true;
    return LZ_OK;
}

void tk_trie_free(tk_trie *t) {
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

/* Rust regex's \w on one character (ASCII without PCRE2). */
static bool word_char(const lz_tokenizer *tok, const char *s, size_t len) {
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    return tok->word_char && tk_pattern_matches_all(tok->word_char, s, len);
}

/* Start of the last character of s[0..n), n > 0. */
static size_t last_char(const char *s, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        if (((unsigned char)s[n - back] & 0xC0) == 0x80)
            continue;
        uint32_t cp;
        return tk_utf8_next(s + n - back, back, &cp) == back ? n - back : n - 1;
    }
    return n - 1;
}

/* Where the whitespace at the end of s[0..n) begins. */
static size_t space_leftmost_at_end(const char *s, size_t n) {
    while (n > 0) {
        size_t at = last_char(s, n);
        uint32_t cp;
        if (tk_utf8_next(s + at, n - at, &cp) != n - at || !tk_is_whitespace(cp))
            break;
        n = at;
    }
    return n;
}

/* Bytes of whitespace at the start of s[0..n). */
static size_t space_rightmost_at_start(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = tk_utf8_next(s + i, n - i, &cp);
        if (!tk_is_whitespace(cp))
            break;
        i += len;
    }
    return i;
}

/* [start, end) overlaps one of the ranges. */
static bool overlaps(const lz_text_span *plain, int n_plain, size_t start, size_t end) {
    for (int k = 0; k < n_plain; k++)
        if (start < plain[k].end && plain[k].start < end)
            return true;
    return false;
}

lz_status tk_added_find(const lz_tokenizer *tok, const tk_trie *t, const char *s, size_t n,
                        const lz_text_span *plain, int n_plain, tk_spans *out, tk_ids *which) {
    out->n = 0;
    which->n = 0;
    if (n == 0)
        return LZ_OK;
    size_t start_offset = 0;
    for (size_t i = 0; t->n && i < n;) {
        if (!t->first[(uint8_t)s[i]]) {
            i++;
            continue;
        }
        int32_t node = 0, best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            node = child(t, node, (uint8_t)s[j]);
            if (node < 0)
                break;
            const int32_t found = t->nodes[node].added;
            if (found >= 0 && !(tok->added[found].special && overlaps(plain, n_plain, i, j + 1))) {
                best = found;
                best_end = j + 1;
            }
        }
        if (best < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = best_end;
        i = best_end; /* the next match starts after this one, kept or not */
        const tk_added *a = &tok->added[best];
        if (a->single_word) {
            bool start_space = start == 0 || !word_char(tok, s + last_char(s, start), start - last_char(s, start));
            uint32_t cp;
            bool stop_space = stop == n || !word_char(tok, s + stop, tk_utf8_next(s + stop, n - stop, &cp));
            if (!start_space || !stop_space)
                continue;
        }
        if (a->lstrip) {
            size_t left = space_leftmost_at_end(s, start);
            start = left > start_offset ? left : start_offset;
        }
        if (a->rstrip)
            stop += space_rightmost_at_start(s + stop, n - stop);
        if (start_offset < start)
            LZ_TRY(tk_spans_push(out, start_offset, start, false));
        LZ_TRY(tk_spans_push(out, start, stop, true));
        LZ_TRY(tk_ids_push(which, best));
        start_offset = stop;
    }
    if (start_offset != n)
        LZ_TRY(tk_spans_push(out, start_offset, n, false));
    return LZ_OK;
}
