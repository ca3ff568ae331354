/* tokenizer_normalize.c - the normalizers LLaMA/Mistral files use, loaded
 * from tokenizer.json and applied to each piece of text between added
 * tokens: Prepend (LLaMA-2's "▁"), Replace (" " -> "▁"), Strip, and Sequence.
 * Unicode normalization forms, lowercasing, BERT's and SentencePiece's
 * precompiled normalizers are not implemented: loading such a file fails. */
#include <stdlib.h> // realloc, free
#include <string.h> // memcpy

#include "tokenizer_internal.h"

static lz_status add(lz_tokenizer *tok, tk_norm n) {
    tk_norm *p = realloc(tok->norms, (size_t)(tok->n_norms + 1) * sizeof *p);
    if (!p) {
        free(n.text);
        tk_pattern_free(n.pattern);
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    tok->norms = p;
    tok->norms[tok->n_norms++] = n;
    return LZ_OK;
}

static lz_status string_field(const tj_val *o, const char *key, const char **s, size_t *n) {
    const tj_val *v = tj_get(o, key);
    if (!v || v->type != TJ_STR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: normalizer: \"%s\" must be a string", key);
    *s = v->u.s;
    *n = v->n;
    return LZ_OK;
}

/* {"String": "..."} or {"Regex": "..."}, as Split and Replace spell patterns. */
static lz_status load_pattern(const tj_val *v, const char *what, tk_pattern **out) {
    const tj_val *s = tj_get(v, "String"), *r = tj_get(v, "Regex");
    if (s && s->type == TJ_STR)
        return tk_pattern_literal(s->u.s, s->n, out);
    if (r && r->type == TJ_STR)
        return tk_pattern_regex(r->u.s, r->n, what, out);
    return lz_fail(LZ_ERR_INPUT, "%s: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}", what);
}

lz_status tk_load_pattern(const tj_val *v, const char *what, tk_pattern **out) { return load_pattern(v, what, out); }

lz_status tk_load_normalizer(lz_tokenizer *tok, const tj_val *v) {
    if (!v || v->type == TJ_NULL)
        return LZ_OK;
    const tj_val *type = tj_get(v, "type");
    if (!type || type->type != TJ_STR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: normalizer without a \"type\"");
    if (tj_is_str(type, "Sequence")) {
        const tj_val *list = tj_get(v, "normalizers");
        if (!list || list->type != TJ_ARR)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: normalizer Sequence: \"normalizers\" must be a list");
        for (uint32_t i = 0; i < list->n; i++)
            LZ_TRY(tk_load_normalizer(tok, &list->u.kids[i]));
        return LZ_OK;
    }
    tk_norm n = {0};
    const char *s = NULL;
    size_t len = 0;
    if (tj_is_str(type, "Prepend")) {
        LZ_TRY(string_field(v, "prepend", &s, &len));
        n.kind = TK_NORM_PREPEND;
    } else if (tj_is_str(type, "Replace")) {
        LZ_TRY(string_field(v, "content", &s, &len));
        n.kind = TK_NORM_REPLACE;
        const tj_val *pat = tj_get(v, "pattern");
        LZ_TRY(load_pattern(pat, "tokenizer.json: normalizer Replace", &n.pattern));
    } else if (tj_is_str(type, "Strip")) {
        const tj_val *l = tj_get(v, "strip_left"), *r = tj_get(v, "strip_right");
        n.kind = TK_NORM_STRIP;
        n.left = l && l->type == TJ_TRUE;
        n.right = r && r->type == TJ_TRUE;
        return add(tok, n);
    } else {
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: unsupported normalizer type '%.*s'", (int)type->n, type->u.s);
    }
    if (!(n.text = tk_strndup(s, len))) {
        tk_pattern_free(n.pattern);
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    n.text_len = len;
    return add(tok, n);
}

static lz_status apply(lz_tokenizer *tok, const tk_norm *nm, const char *s, size_t n, tk_buf *out) {
    out->n = 0;
    switch (nm->kind) {
    case TK_NORM_PREPEND:
        if (n)
            LZ_TRY(tk_buf_append(out, nm->text, nm->text_len));
        return tk_buf_append(out, s, n);
    case TK_NORM_REPLACE: {
        tk_spans *spans = &tok->norm_spans;
        LZ_TRY(tk_pattern_find(nm->pattern, s, n, spans));
        for (size_t i = 0; i < spans->n; i++) {
            const tk_span *sp = &spans->p[i];
            if (sp->match)
                LZ_TRY(tk_buf_append(out, nm->text, nm->text_len));
            else
                LZ_TRY(tk_buf_append(out, s + sp->start, sp->end - sp->start));
        }
        return tk_buf_append(out, "", 0);
    }
    case TK_NORM_STRIP: {
        size_t a = 0, b = n;
        while (nm->left && a < b) {
            uint32_t cp;
            size_t len = tk_utf8_next(s + a, b - a, &cp);
            if (!tk_is_whitespace(cp))
                break;
            a += len;
        }
        while (nm->right && b > a) {
            size_t at = b - 1;
            while (at > a && ((unsigned char)s[at] & 0xC0) == 0x80 && b - at < 4)
                at--;
            uint32_t cp;
            if (tk_utf8_next(s + at, b - at, &cp) != b - at || !tk_is_whitespace(cp))
                break;
            b = at;
        }
        return tk_buf_append(out, s + a, b - a);
    }
    }
    return lz_fail(LZ_ERR_INTERNAL, "tokenizer: bad normalizer");
}

lz_status tk_normalize(lz_tokenizer *tok, const char *s, size_t n, tk_buf **out) {
    int k = 0;
    tk_buf *dst = &tok->norm_buf[0];
    LZ_TRY(tk_buf_append(dst, "", 0)); /* dst->p is never NULL */
    dst->n = 0;
    LZ_TRY(tk_buf_append(dst, s, n));
    for (int i = 0; i < tok->n_norms; i++) {
        tk_buf *src = &tok->norm_buf[k];
        dst = &tok->norm_buf[k ^ 1];
        LZ_TRY(apply(tok, &tok->norms[i], src->p, src->n, dst));
        k ^= 1;
    }
    *out = &tok->norm_buf[k];
    return LZ_OK;
}
