/* tokenizer_decode.c - ids -> text, streaming. HF's decode: each id becomes
 * its token string (an added token's own content, or its normalized form),
 * special tokens are dropped when asked, and the decoder chain turns the token
 * strings into text. Supported chains: ByteLevel; Metaspace; and any Sequence
 * of Replace (string pattern), ByteFallback, Metaspace, Strip before a Fuse,
 * with at most one Strip after it (LLaMA-2 / Mistral: Replace("▁", " "),
 * ByteFallback, Fuse, Strip(" ", 1, 0)). No decoder: tokens joined by " ".
 *
 * Every step before the fuse works on one token at a time, so a token's bytes
 * are known as soon as it arrives; what remains for the stream is the Strip
 * after the fuse (at the very start and end of the text) and UTF-8 characters
 * split across tokens, which are held back until complete. Bytes that cannot
 * become valid UTF-8 are passed through as they are (HF prints U+FFFD). */
#include <stdlib.h> // realloc, free
#include <string.h> // memcpy, memmove, memcmp, memmem

#include "tokenizer_internal.h"

/* ---- loading ---------------------------------------------------------------------------------------- */

static lz_status add(lz_tokenizer *tok, tk_dec d) {
    tk_dec *p = realloc(tok->decs, (size_t)(tok->n_decs + 1) * sizeof *p);
    if (!p) {
        free(d.from);
        free(d.to);
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    tok->decs = p;
    tok->decs[tok->n_decs++] = d;
    tok->n_decs_alloc = tok->n_decs;
    return LZ_OK;
}

static lz_status one_char(const tj_val *v, const char *what, uint32_t *cp) {
    if (!v || v->type != TJ_STR || v->n == 0 || tk_utf8_next(v->u.s, v->n, cp) != v->n)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: decoder %s: must be one character", what);
    return LZ_OK;
}

static lz_status count(const tj_val *o, const char *key, size_t *out) {
    const tj_val *v = tj_get(o, key);
    if (!v || v->type != TJ_NUM || !v->is_int || v->u.num < 0)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: decoder Strip: \"%s\" must be a count", key);
    *out = v->u.num > 1000000 ? 1000000 : (size_t)v->u.num;
    return LZ_OK;
}

static lz_status load_steps(lz_tokenizer *tok, const tj_val *v) {
    const tj_val *type = tj_get(v, "type");
    if (!type || type->type != TJ_STR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: decoder without a \"type\"");
    tk_dec d = {0};
    if (tj_is_str(type, "Sequence")) {
        const tj_val *list = tj_get(v, "decoders");
        if (!list || list->type != TJ_ARR)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: decoder Sequence: \"decoders\" must be a list");
        for (uint32_t i = 0; i < list->n; i++)
            LZ_TRY(load_steps(tok, &list->u.kids[i]));
        return LZ_OK;
    } else if (tj_is_str(type, "ByteLevel")) {
        d.kind = TK_DEC_BYTELEVEL;
    } else if (tj_is_str(type, "ByteFallback")) {
        d.kind = TK_DEC_BYTEFALLBACK;
    } else if (tj_is_str(type, "Fuse")) {
        d.kind = TK_DEC_FUSE;
    } else if (tj_is_str(type, "Metaspace")) {
        char repl[8];
        size_t len;
        d.kind = TK_DEC_METASPACE;
        LZ_TRY(tk_load_metaspace(v, "tokenizer.json: decoder", repl, &len, &d.prepend));
        tk_utf8_next(repl, len, &d.ch);
    } else if (tj_is_str(type, "Strip")) {
        d.kind = TK_DEC_STRIP;
        LZ_TRY(one_char(tj_get(v, "content"), "Strip \"content\"", &d.ch));
        LZ_TRY(count(v, "start", &d.start));
        LZ_TRY(count(v, "stop", &d.stop));
    } else if (tj_is_str(type, "Replace")) {
        const tj_val *pat = tj_get(v, "pattern"), *s = tj_get(pat, "String"), *content = tj_get(v, "content");
        if (!s || s->type != TJ_STR || !content || content->type != TJ_STR)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: decoder Replace: only a {\"String\": ...} pattern and a "
                                         "string content are supported");
        d.kind = TK_DEC_REPLACE;
        d.from = tk_strndup(s->u.s, s->n);
        d.to = tk_strndup(content->u.s, content->n);
        d.from_len = s->n;
        d.to_len = content->n;
        if (!d.from || !d.to) {
            free(d.from);
            free(d.to);
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        }
    } else {
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: unsupported decoder type '%.*s'", (int)type->n, type->u.s);
    }
    return add(tok, d);
}

static const char *step_name(tk_dec_kind k) {
    switch (k) {
    case TK_DEC_BYTELEVEL: return "ByteLevel";
    case TK_DEC_METASPACE: return "Metaspace";
    case TK_DEC_BYTEFALLBACK: return "ByteFallback";
    case TK_DEC_FUSE: return "Fuse";
    case TK_DEC_STRIP: return "Strip";
    case TK_DEC_REPLACE: return "Replace";
    }
    return "?";
}

lz_status tk_load_decoder(lz_tokenizer *tok, const tj_val *v) {
    if (!v || v->type == TJ_NULL)
        return LZ_OK;
    tok->has_decoder = true;
    LZ_TRY(load_steps(tok, v));
    /* After the first step that fuses the tokens into one string (Fuse, ByteLevel), only Strip can follow. */
    int fused = -1;
    for (int i = 0; i < tok->n_decs; i++) {
        tk_dec *d = &tok->decs[i];
        if (fused < 0) {
            if (d->kind == TK_DEC_FUSE || d->kind == TK_DEC_BYTELEVEL)
                fused = i;
            continue;
        }
        if (d->kind == TK_DEC_FUSE)
            continue;
        if (d->kind != TK_DEC_STRIP || tok->strip_ch)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: unsupported decoder: '%s' after '%s'", step_name(d->kind),
                           step_name(tok->decs[fused].kind));
        tok->strip_ch = d->ch;
        tok->strip_start = (int)d->start;
        tok->strip_stop = (int)d->stop;
    }
    if (fused >= 0) /* what runs per token */
        tok->n_decs = tok->decs[fused].kind == TK_DEC_BYTELEVEL ? fused + 1 : fused;
    return LZ_OK;
}

/* ---- one token ------------------------------------------------------------------------------------- */

static lz_status reserve(char **p, size_t *cap, size_t need) {
    if (need <= *cap)
        return LZ_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *q = realloc(*p, c);
    if (!q)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    *p = q;
    *cap = c;
    return LZ_OK;
}

static int hex_digit(char c) {
    return (c >= '0' && c <= '9')   ? c - '0'
           : (c >= 'a' && c <= 'f') ? c - 'a' + 10
           : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                    : -1;
}

/* HF: u8::from_str_radix(&token[3..5], 16) on a 6-byte "<0x..>" token. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    if (s[3] == '+' && lo >= 0)
        return lo;
    return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

/* One step on one token: s -> dst (dst has room for bound(d, n) bytes). */
static size_t step(const lz_tokenizer *tok, const tk_dec *d, int index, const char *s, size_t n, char *dst) {
    size_t o = 0;
    switch (d->kind) {
    case TK_DEC_REPLACE:
        for (size_t i = 0; i < n;) {
            const char *m = d->from_len ? memmem(s + i, n - i, d->from, d->from_len) : NULL;
            size_t stop = m ? (size_t)(m - s) : n;
            memcpy(dst + o, s + i, stop - i);
            o += stop - i;
            if (!m)
                break;
            memcpy(dst + o, d->to, d->to_len);
            o += d->to_len;
            i = stop + d->from_len;
        }
        return o;
    case TK_DEC_BYTEFALLBACK: {
        int b = byte_token(s, n);
        if (b < 0)
            break;
        dst[0] = (char)b;
        return 1;
    }
    case TK_DEC_METASPACE:
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t len = tk_utf8_next(s + i, n - i, &cp);
            if (cp != d->ch)
                memcpy(dst + o, s + i, len), o += len;
            else if (index != 0 || d->prepend == TK_PREPEND_NEVER)
                dst[o++] = ' ';
            i += len;
        }
        return o;
    case TK_DEC_STRIP: {
        size_t a = 0, b = n;
        for (size_t k = 0; k < d->start && a < b; k++) {
            uint32_t cp;
            size_t len = tk_utf8_next(s + a, b - a, &cp);
            if (cp != d->ch)
                break;
            a += len;
        }
        char c[4];
        size_t clen = tk_utf8_put(d->ch, c);
        for (size_t k = 0; k < d->stop && b - a >= clen && memcmp(s + b - clen, c, clen) == 0; k++)
            b -= clen;
        memcpy(dst, s + a, b - a);
        return b - a;
    }
    case TK_DEC_BYTELEVEL:
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t len = tk_utf8_next(s + i, n - i, &cp);
            int b = cp < TK_BYTEMAP_CPS ? tok->bytemap.byte_of[cp] : -1;
            if (b < 0) /* a character outside the map: HF keeps the token's own bytes */
                goto copy;
            dst[o++] = (char)b;
            i += len;
        }
        return o;
    case TK_DEC_FUSE: break;
    }
copy:
    memcpy(dst, s, n);
    return n;
}

/* Room a step needs for a token of n bytes: only Replace can grow it. */
static size_t bound(const tk_dec *d, size_t n) {
    return (d->kind == TK_DEC_REPLACE && d->to_len > 1 ? n * d->to_len : n) + 1;
}

/* The bytes one token contributes to the fused text (in d->work or d->work2). */
static lz_status token_bytes(lz_detok *d, int32_t id, const char **out, size_t *out_n) {
    const lz_tokenizer *tok = d->tok;
    const tk_idinfo *info = &tok->ids[id];
    const char *s = tok->id_pool.p + info->off;
    size_t n = info->len;
    int index = d->n_tokens++;
    if (!tok->has_decoder) { /* HF: tokens.join(" ") */
        LZ_TRY(reserve(&d->work, &d->cap_work, n + 2));
        size_t o = 0;
        if (index > 0)
            d->work[o++] = ' ';
        memcpy(d->work + o, s, n);
        *out = d->work;
        *out_n = o + n;
        return LZ_OK;
    }
    char **buf[2] = {&d->work, &d->work2};
    size_t *cap[2] = {&d->cap_work, &d->cap_work2};
    for (int i = 0, k = 0; i < tok->n_decs; i++, k ^= 1) {
        LZ_TRY(reserve(buf[k], cap[k], bound(&tok->decs[i], n)));
        n = step(tok, &tok->decs[i], index, s, n, *buf[k]);
        s = *buf[k];
    }
    *out = s;
    *out_n = n;
    return LZ_OK;
}

/* ---- the stream ------------------------------------------------------------------------------------ */

void lz_detok_init(lz_detok *d, const lz_tokenizer *tok, bool skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->skip_special = skip_special;
    d->strip_left = tok->strip_start;
}

void lz_detok_free(lz_detok *d) {
    free(d->pending);
    free(d->out);
    free(d->work);
    free(d->work2);
    memset(d, 0, sizeof *d);
}

/* Moves what is ready from d->pending to d->out. */
static lz_status release(lz_detok *d, bool final, const char **text, size_t *len) {
    const lz_tokenizer *tok = d->tok;
    char c[4];
    size_t clen = tok->strip_ch ? tk_utf8_put(tok->strip_ch, c) : 0;
    *text = "";
    *len = 0;
    size_t skip = 0; /* leading bytes stripped */
    while (d->strip_left > 0 && d->n_pending - skip > 0) {
        size_t have = d->n_pending - skip;
        if (have >= clen && memcmp(d->pending + skip, c, clen) == 0) {
            skip += clen;
            d->strip_left--;
        } else if (have < clen && memcmp(d->pending + skip, c, have) == 0 && !final) {
            break; /* maybe the strip character, maybe not: wait */
        } else {
            d->strip_left = 0;
        }
    }
    size_t ready = d->n_pending;
    if (d->strip_left > 0 && !final)
        ready = skip; /* only strip characters (or a part of one) so far */
    else if (!final)
        ready = skip + tk_utf8_complete_prefix(d->pending + skip, d->n_pending - skip);
    /* trailing strip characters: dropped at the end, else released with what follows them */
    for (int k = 0; k < tok->strip_stop && ready - skip >= clen && memcmp(d->pending + ready - clen, c, clen) == 0; k++)
        ready -= clen;
    LZ_TRY(reserve(&d->out, &d->cap_out, ready - skip + 1));
    if (ready > skip)
        memcpy(d->out, d->pending + skip, ready - skip);
    *text = d->out;
    *len = ready - skip;
    size_t rest = final ? 0 : d->n_pending - ready;
    if (rest)
        memmove(d->pending, d->pending + ready, rest);
    d->n_pending = rest;
    return LZ_OK;
}

lz_status lz_detok_push(lz_detok *d, int32_t id, const char **text, size_t *len) {
    const lz_tokenizer *tok = d->tok;
    *text = "";
    *len = 0;
    if (id < 0 || id >= tok->n_ids || tok->ids[id].tok_off < 0)
        return LZ_OK; /* HF skips ids it does not know */
    if (d->skip_special && tok->ids[id].special)
        return LZ_OK;
    const char *s;
    size_t n;
    LZ_TRY(token_bytes(d, id, &s, &n));
    LZ_TRY(reserve(&d->pending, &d->cap_pending, d->n_pending + n + 1));
    memcpy(d->pending + d->n_pending, s, n);
    d->n_pending += n;
    return release(d, false, text, len);
}

lz_status lz_detok_flush(lz_detok *d, const char **text, size_t *len) { return release(d, true, text, len); }

lz_status lz_tokenizer_decode(const lz_tokenizer *tok, const int32_t *ids, int n, bool skip_special, char **text,
                              size_t *len) {
    *text = NULL;
    *len = 0;
    lz_detok d;
    lz_detok_init(&d, tok, skip_special);
    tk_buf all = {0};
    lz_status st = tk_buf_append(&all, "", 0);
    for (int i = 0; i <= n && st == LZ_OK; i++) {
        const char *s;
        size_t k;
        st = i < n ? lz_detok_push(&d, ids[i], &s, &k) : lz_detok_flush(&d, &s, &k);
        if (st == LZ_OK)
            st = tk_buf_append(&all, s, k);
    }
    lz_detok_free(&d);
    if (st != LZ_OK) {
        tk_buf_free(&all);
        return st;
    }
    *text = all.p;
    *len = all.n;
    return LZ_OK;
}
