/* tokenizer_pretok.c - pre-tokenizers: how a piece of normalized text is cut
 * into the words the model sees. Split (a regex or string, with HF's five
 * delimiter behaviours and invert), ByteLevel (GPT-2's byte-to-unicode map,
 * optional prefix space and GPT-2 regex), Metaspace (" " -> "▁", prepend
 * scheme, split) and Digits, in a Sequence. Stages run depth-first: each word
 * a stage emits goes through the following stages and the model before the
 * next one is cut, so each stage needs only its own scratch buffers. */
#include <stdlib.h> // realloc
#include <string.h> // memmem, memcpy

#include "tokenizer_internal.h"

/* ---- loading ---------------------------------------------------------------------------------------- */

static bool flag(const tj_val *o, const char *key, bool dflt) {
    const tj_val *v = tj_get(o, key);
    return v && (v->type == TJ_TRUE || v->type == TJ_FALSE) ? v->type == TJ_TRUE : dflt;
}

static lz_status add(lz_tokenizer *tok, tk_pretok pt) {
    tk_pretok *p = realloc(tok->pretoks, (size_t)(tok->n_pretoks + 1) * sizeof *p);
    if (!p) {
        tk_pattern_free(pt.pattern);
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    tok->pretoks = p;
    tok->pretoks[tok->n_pretoks++] = pt;
    return LZ_OK;
}

static lz_status behavior(const tj_val *v, tk_behavior *out) {
    static const struct {
        const char *name;
        tk_behavior b;
    } names[] = {{"Removed", TK_SPLIT_REMOVED},
                 {"Isolated", TK_SPLIT_ISOLATED},
                 {"MergedWithPrevious", TK_SPLIT_MERGED_PREV},
                 {"MergedWithNext", TK_SPLIT_MERGED_NEXT},
                 {"Contiguous", TK_SPLIT_CONTIGUOUS}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (tj_is_str(v, names[i].name)) {
            *out = names[i].b;
            return LZ_OK;
        }
    return lz_fail(LZ_ERR_INPUT, "tokenizer.json: pre_tokenizer Split: unknown \"behavior\"");
}

/* Metaspace's replacement character and prepend scheme (also read by the decoder). */
lz_status tk_load_metaspace(const tj_val *v, const char *what, char repl[8], size_t *repl_len, tk_prepend *prepend) {
    const tj_val *r = tj_get(v, "replacement");
    if (!r || r->type != TJ_STR || r->n == 0 || r->n > 4)
        return lz_fail(LZ_ERR_INPUT, "%s Metaspace: \"replacement\" must be one character", what);
    uint32_t cp;
    if (tk_utf8_next(r->u.s, r->n, &cp) != r->n)
        return lz_fail(LZ_ERR_INPUT, "%s Metaspace: \"replacement\" must be one character", what);
    memcpy(repl, r->u.s, r->n);
    *repl_len = r->n;
    const tj_val *scheme = tj_get(v, "prepend_scheme");
    if (scheme && scheme->type == TJ_STR) {
        if (tj_is_str(scheme, "always"))
            *prepend = TK_PREPEND_ALWAYS;
        else if (tj_is_str(scheme, "first"))
            *prepend = TK_PREPEND_FIRST;
        else if (tj_is_str(scheme, "never"))
            *prepend = TK_PREPEND_NEVER;
        else
            return lz_fail(LZ_ERR_INPUT, "%s Metaspace: unknown prepend_scheme '%.*s'", what, (int)scheme->n,
                           scheme->u.s);
    } else { /* files before tokenizers 0.19: add_prefix_space */
        *prepend = flag(v, "add_prefix_space", true) ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    }
    return LZ_OK;
}

lz_status tk_load_pretokenizer(lz_tokenizer *tok, const tj_val *v) {
    if (!v || v->type == TJ_NULL)
        return LZ_OK;
    const tj_val *type = tj_get(v, "type");
    if (!type || type->type != TJ_STR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: pre_tokenizer without a \"type\"");
    tk_pretok pt = {0};
    if (tj_is_str(type, "Sequence")) {
        const tj_val *list = tj_get(v, "pretokenizers");
        if (!list || list->type != TJ_ARR)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: pre_tokenizer Sequence: \"pretokenizers\" must be a list");
        for (uint32_t i = 0; i < list->n; i++)
            LZ_TRY(tk_load_pretokenizer(tok, &list->u.kids[i]));
        return LZ_OK;
    }
    if (tj_is_str(type, "Split")) {
        pt.kind = TK_PT_SPLIT;
        LZ_TRY(behavior(tj_get(v, "behavior"), &pt.behavior));
        pt.invert = flag(v, "invert", false);
        LZ_TRY(tk_load_pattern(tj_get(v, "pattern"), "tokenizer.json: pre_tokenizer Split", &pt.pattern));
    } else if (tj_is_str(type, "ByteLevel")) {
        pt.kind = TK_PT_BYTELEVEL;
        pt.add_prefix_space = flag(v, "add_prefix_space", true);
        if (flag(v, "use_regex", true))
            LZ_TRY(tk_pattern_regex(tk_gpt2_regex, strlen(tk_gpt2_regex), "ByteLevel", &pt.pattern));
    } else if (tj_is_str(type, "Metaspace")) {
        pt.kind = TK_PT_METASPACE;
        LZ_TRY(tk_load_metaspace(v, "tokenizer.json: pre_tokenizer", pt.repl, &pt.repl_len, &pt.prepend));
        pt.split = flag(v, "split", true);
    } else if (tj_is_str(type, "Digits")) {
        pt.kind = TK_PT_DIGITS;
        pt.behavior = flag(v, "individual_digits", false) ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS;
        LZ_TRY(tk_pattern_regex("\\p{N}", 5, "Digits", &pt.pattern));
    } else {
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: unsupported pre_tokenizer type '%.*s'", (int)type->n, type->u.s);
    }
    return add(tok, pt);
}

/* ---- running ---------------------------------------------------------------------------------------- */

/* HF's SplitDelimiterBehavior applied to find_matches' spans: the spans kept. */
static lz_status apply_behavior(tk_behavior b, const tk_spans *in, tk_spans *out) {
    out->n = 0;
    bool prev = false;
    switch (b) {
    case TK_SPLIT_ISOLATED:
        for (size_t i = 0; i < in->n; i++)
            LZ_TRY(tk_spans_push(out, in->p[i].start, in->p[i].end, false));
        return LZ_OK;
    case TK_SPLIT_REMOVED:
        for (size_t i = 0; i < in->n; i++)
            if (!in->p[i].match)
                LZ_TRY(tk_spans_push(out, in->p[i].start, in->p[i].end, false));
        return LZ_OK;
    case TK_SPLIT_CONTIGUOUS:
    case TK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < in->n; i++) {
            bool m = in->p[i].match;
            bool merge = b == TK_SPLIT_CONTIGUOUS ? m == prev : (m && !prev);
            if (merge && out->n)
                out->p[out->n - 1].end = in->p[i].end;
            else
                LZ_TRY(tk_spans_push(out, in->p[i].start, in->p[i].end, false));
            prev = m;
        }
        return LZ_OK;
    case TK_SPLIT_MERGED_NEXT: /* built backwards, then reversed */
        for (size_t i = in->n; i-- > 0;) {
            bool m = in->p[i].match;
            if (m && !prev && out->n)
                out->p[out->n - 1].start = in->p[i].start;
            else
                LZ_TRY(tk_spans_push(out, in->p[i].start, in->p[i].end, false));
            prev = m;
        }
        for (size_t i = 0, j = out->n; i + 1 < j; i++, j--) {
            tk_span t = out->p[i];
            out->p[i] = out->p[j - 1];
            out->p[j - 1] = t;
        }
        return LZ_OK;
    }
    return LZ_OK;
}

static lz_status byte_level(lz_tokenizer *tok, int stage, tk_pretok *pt, const char *s, size_t n, bool at_start,
                            tk_ids *out) {
    if (pt->add_prefix_space && s[0] != ' ') {
        pt->buf.n = 0;
        LZ_TRY(tk_buf_append(&pt->buf, " ", 1));
        LZ_TRY(tk_buf_append(&pt->buf, s, n));
        s = pt->buf.p;
        n = pt->buf.n;
    }
    if (pt->pattern) {
        LZ_TRY(tk_pattern_find(pt->pattern, s, n, &pt->spans));
    } else {
        pt->spans.n = 0;
        LZ_TRY(tk_spans_push(&pt->spans, 0, n, false));
    }
    const tk_bytemap *m = &tok->bytemap;
    for (size_t i = 0; i < pt->spans.n; i++) {
        const tk_span sp = pt->spans.p[i];
        if (sp.end == sp.start)
            continue;
        tk_buf *b = &pt->buf2;
        b->n = 0;
        LZ_TRY(tk_buf_reserve(b, 2 * (sp.end - sp.start)));
        for (size_t k = sp.start; k < sp.end; k++) {
            uint8_t c = (uint8_t)s[k];
            b->p[b->n++] = m->utf8[c][0];
            if (m->len[c] == 2)
                b->p[b->n++] = m->utf8[c][1];
        }
        LZ_TRY(tk_pretokenize(tok, stage + 1, b->p, b->n, at_start && sp.start == 0, out));
    }
    return LZ_OK;
}

static lz_status metaspace(lz_tokenizer *tok, int stage, tk_pretok *pt, const char *s, size_t n, bool at_start,
                           tk_ids *out) {
    tk_buf *b = &pt->buf;
    b->n = 0;
    bool starts = s[0] == ' ' || (n >= pt->repl_len && memcmp(s, pt->repl, pt->repl_len) == 0);
    bool prepend = !starts && (pt->prepend == TK_PREPEND_ALWAYS || (pt->prepend == TK_PREPEND_FIRST && at_start));
    if (prepend)
        LZ_TRY(tk_buf_append(b, pt->repl, pt->repl_len));
    LZ_TRY(tk_buf_reserve(b, n * pt->repl_len));
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(b->p + b->n, pt->repl, pt->repl_len);
            b->n += pt->repl_len;
        } else {
            b->p[b->n++] = s[i];
        }
    }
    if (!pt->split)
        return tk_pretokenize(tok, stage + 1, b->p, b->n, at_start, out);
    /* a piece starts at every replacement character (MergedWithNext) */
    size_t start = 0;
    for (size_t i = 1; i + pt->repl_len <= b->n; i++) {
        if (memcmp(b->p + i, pt->repl, pt->repl_len) != 0)
            continue;
        LZ_TRY(tk_pretokenize(tok, stage + 1, b->p + start, i - start, at_start && start == 0, out));
        start = i;
        i += pt->repl_len - 1;
    }
    return tk_pretokenize(tok, stage + 1, b->p + start, b->n - start, at_start && start == 0, out);
}

lz_status tk_pretokenize(lz_tokenizer *tok, int stage, const char *s, size_t n, bool at_start, tk_ids *out) {
    if (n == 0)
        return LZ_OK;
    if (stage == tok->n_pretoks)
        return tk_bpe_word(tok, s, n, out);
    tk_pretok *pt = &tok->pretoks[stage];
    switch (pt->kind) {
    case TK_PT_BYTELEVEL: return byte_level(tok, stage, pt, s, n, at_start, out);
    case TK_PT_METASPACE: return metaspace(tok, stage, pt, s, n, at_start, out);
    case TK_PT_SPLIT:
    case TK_PT_DIGITS:
        LZ_TRY(tk_pattern_find(pt->pattern, s, n, &pt->spans));
        if (pt->invert)
            for (size_t i = 0; i < pt->spans.n; i++)
                pt->spans.p[i].match = !pt->spans.p[i].match;
        LZ_TRY(apply_behavior(pt->behavior, &pt->spans, &pt->kept));
        for (size_t i = 0; i < pt->kept.n; i++) {
            const tk_span sp = pt->kept.p[i];
            LZ_TRY(tk_pretokenize(tok, stage + 1, s + sp.start, sp.end - sp.start, at_start && sp.start == 0, out));
        }
        return LZ_OK;
    }
    return lz_fail(LZ_ERR_INTERNAL, "tokenizer: bad pre-tokenizer");
}
