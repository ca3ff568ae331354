/* tokenizer_regex.c - the patterns of Split pre-tokenizers and Replace
 * normalizers: PCRE2 (UTF + Unicode properties, JIT) standing in for the
 * Oniguruma regexes of HF tokenizers, and literal strings.
 *
 * Two differences between the engines matter for tokenizer patterns and are
 * bridged here: Oniguruma's \s is Unicode White_Space while PCRE2's also
 * matches U+180E, so \s is rewritten to an explicit class; and find_matches
 * follows Oniguruma's iterator (an empty match right after the previous match
 * is skipped by advancing one character). Invalid UTF-8 in the subject never
 * matches (PCRE2_MATCH_INVALID_UTF), so such bytes fall between matches. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>  // pcre2_compile, pcre2_jit_compile, pcre2_match
#include <stdlib.h> // malloc, free
#include <string.h> // memmem, memcpy

#include "tokenizer_internal.h"

const char tk_gpt2_regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Rust regex's \w (Unicode): what HF's single_word test calls a word character. */
const char tk_word_char_regex[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";

struct tk_pattern {
    pcre2_code *re; /* NULL: a literal */
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    bool jit;
    char *lit;
    size_t lit_len;
};

/* White_Space, as Oniguruma's \s (PCRE2's \s adds U+180E). */
static const char ws_class[] =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/* Copies the pattern, spelling \s (and \S outside a class) as White_Space classes. */
static lz_status rewrite_spaces(const char *re, size_t len, tk_buf *out) {
    bool in_class = false;
    for (size_t i = 0; i < len; i++) {
        char c = re[i];
        if (c == '\\' && i + 1 < len) {
            char e = re[i + 1];
            i++;
            if (e == 's') {
                if (!in_class)
                    LZ_TRY(tk_buf_append(out, "[", 1));
                LZ_TRY(tk_buf_append(out, ws_class, sizeof ws_class - 1));
                if (!in_class)
                    LZ_TRY(tk_buf_append(out, "]", 1));
            } else if (e == 'S' && !in_class) {
                LZ_TRY(tk_buf_append(out, "[^", 2));
                LZ_TRY(tk_buf_append(out, ws_class, sizeof ws_class - 1));
                LZ_TRY(tk_buf_append(out, "]", 1));
            } else {
                char pair[2] = {c, e};
                LZ_TRY(tk_buf_append(out, pair, 2));
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            LZ_TRY(tk_buf_append(out, "[", 1));
            /* a ']' right after '[' or '[^' is a member, not the end */
            if (i + 1 < len && re[i + 1] == '^') {
                LZ_TRY(tk_buf_append(out, "^", 1));
                i++;
            }
            if (i + 1 < len && re[i + 1] == ']') {
                LZ_TRY(tk_buf_append(out, "]", 1));
                i++;
            }
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && re[i + 1] == ':') { /* [:alpha:] */
            const char *end = memmem(re + i + 2, len - i - 2, ":]", 2);
            size_t stop = end ? (size_t)(end - re) + 2 : len;
            LZ_TRY(tk_buf_append(out, re + i, stop - i));
            i = stop - 1;
            continue;
        }
        if (in_class && c == ']')
            in_class = false;
        LZ_TRY(tk_buf_append(out, &c, 1));
    }
    return LZ_OK;
}

lz_status tk_pattern_regex(const char *re, size_t len, const char *what, tk_pattern **out) {
    *out = NULL;
    tk_buf pat = {0};
    lz_status st = rewrite_spaces(re, len, &pat);
    if (st != LZ_OK) {
        tk_buf_free(&pat);
        return st;
    }
    tk_pattern *p = calloc(1, sizeof *p);
    if (!p) {
        tk_buf_free(&pat);
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    int err;
    PCRE2_SIZE err_off;
    p->re = pcre2_compile((PCRE2_SPTR)(pat.p ? pat.p : ""), pat.n, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                          &err, &err_off, NULL);
    tk_buf_free(&pat);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        free(p);
        return lz_fail(LZ_ERR_INPUT, "%s: regex '%.*s' does not compile: %s", what, (int)(len > 200 ? 200 : len), re,
                       (const char *)msg);
    }
    p->jit = pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0;
    p->md = pcre2_match_data_create_from_pattern(p->re, NULL);
    p->mctx = pcre2_match_context_create(NULL);
    if (p->jit)
        p->stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!p->md || !p->mctx || (p->jit && !p->stack)) {
        tk_pattern_free(p);
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    if (p->jit)
        pcre2_jit_stack_assign(p->mctx, NULL, p->stack);
    /* tokenizer patterns need little backtracking; a pathological one fails instead of running for minutes */
    pcre2_set_match_limit(p->mctx, 1000000);
    *out = p;
    return LZ_OK;
}

lz_status tk_pattern_literal(const char *s, size_t len, tk_pattern **out) {
    tk_pattern *p = calloc(1, sizeof *p);
    if (!p || !(p->lit = tk_strndup(s, len))) {
        free(p);
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    p->lit_len = len;
    *out = p;
    return LZ_OK;
}

void tk_pattern_free(tk_pattern *p) {
    if (!p)
        return;
    pcre2_match_data_free(p->md);
    pcre2_match_context_free(p->mctx);
    pcre2_jit_stack_free(p->stack);
    pcre2_code_free(p->re);
    free(p->lit);
    free(p);
}

static int match_from(tk_pattern *p, const char *s, size_t n, size_t from) {
    if (p->jit)
        return pcre2_jit_match(p->re, (PCRE2_SPTR)s, n, from, 0, p->md, p->mctx);
    return pcre2_match(p->re, (PCRE2_SPTR)s, n, from, 0, p->md, p->mctx);
}

lz_status tk_pattern_find(tk_pattern *p, const char *s, size_t n, tk_spans *out) {
    out->n = 0;
    if (n == 0)
        return LZ_OK;
    size_t prev = 0; /* end of the spans so far */
    if (!p->re) {
        for (size_t pos = 0; p->lit_len && pos + p->lit_len <= n;) {
            const char *m = memmem(s + pos, n - pos, p->lit, p->lit_len);
            if (!m)
                break;
            size_t start = (size_t)(m - s);
            if (start > prev)
                LZ_TRY(tk_spans_push(out, prev, start, false));
            LZ_TRY(tk_spans_push(out, start, start + p->lit_len, true));
            prev = pos = start + p->lit_len;
        }
    } else {
        size_t last_end = 0, last_match_end = 0;
        bool have_last = false;
        while (last_end <= n) {
            int rc = match_from(p, s, n, last_end);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return lz_fail(LZ_ERR_INTERNAL, "tokenizer: regex match failed: %s", (const char *)msg);
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
            size_t start = ov[0], end = ov[1];
            if (end < start) /* \K tricks: treat as empty */
                end = start;
            if (start == end && have_last && last_match_end == end) {
                if (last_end >= n)
                    break;
                uint32_t cp;
                last_end += tk_utf8_next(s + last_end, n - last_end, &cp);
                continue;
            }
            last_end = end;
            last_match_end = end;
            have_last = true;
            if (start > prev)
                LZ_TRY(tk_spans_push(out, prev, start, false));
            LZ_TRY(tk_spans_push(out, start, end, true));
            if (end > prev)
                prev = end;
        }
    }
    if (prev < n)
        LZ_TRY(tk_spans_push(out, prev, n, false));
    return LZ_OK;
}

bool tk_pattern_matches_all(tk_pattern *p, const char *s, size_t n) {
    if (!p->re)
        return n == p->lit_len && memcmp(s, p->lit, n) == 0;
    /* pcre2_match, not the JIT entry: match-time anchoring needs the interpreter */
    return pcre2_match(p->re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, p->md, p->mctx) >= 0;
}
