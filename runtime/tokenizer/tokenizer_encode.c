/* tokenizer_encode.c - text -> ids, HF's Tokenizer::encode for one sequence:
 *   1. added tokens that match the raw text (normalized: false) are cut out;
 *   2. each other piece is normalized, and added tokens with normalized: true
 *      are cut out of the normalized text;
 *   3. the remaining pieces go through the pre-tokenizers and the model;
 *   4. with add_special, the post-processor's tokens go around the result.
 * Also the post-processor's loading: TemplateProcessing (its single-sequence
 * template), Bert/RobertaProcessing, ByteLevel (adds nothing), Sequence. */
#include <limits.h> // INT_MAX
#include <stdlib.h> // malloc, realloc, free
#include <string.h> // memcmp

#include "tokenizer_internal.h"

/* ---- post-processor -------------------------------------------------------------------------------- */

static lz_status append_ids(int32_t **list, int *n, const int32_t *ids, int k, bool front) {
    int32_t *p = realloc(*list, (size_t)(*n + k + 1) * sizeof *p);
    if (!p)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    if (front) {
        for (int i = *n - 1; i >= 0; i--)
            p[i + k] = p[i];
        for (int i = 0; i < k; i++)
            p[i] = ids[i];
    } else {
        for (int i = 0; i < k; i++)
            p[*n + i] = ids[i];
    }
    *list = p;
    *n += k;
    return LZ_OK;
}

static lz_status id_value(const tj_val *v, int32_t *id) {
    if (!v || v->type != TJ_NUM || !v->is_int || v->u.num < 0 || v->u.num > INT32_MAX)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor: a token id must be an integer >= 0");
    *id = (int32_t)v->u.num;
    return LZ_OK;
}

/* The ids of one TemplateProcessing special token (by name). */
static lz_status template_special(const tj_val *specials, const tj_val *name, int32_t **ids, int *n) {
    const tj_val *entry = NULL;
    for (uint32_t i = 0; specials && specials->type == TJ_OBJ && i < specials->n; i++) {
        const tj_val *m = &specials->u.kids[i];
        if (name && name->type == TJ_STR && m->key_len == name->n && memcmp(m->key, name->u.s, name->n) == 0)
            entry = m;
    }
    const tj_val *list = tj_get(entry, "ids");
    if (!list || list->type != TJ_ARR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor: template token '%.*s' has no ids",
                       name && name->type == TJ_STR ? (int)name->n : 0, name && name->type == TJ_STR ? name->u.s : "");
    *n = 0;
    *ids = malloc(sizeof(int32_t) * (list->n + 1));
    if (!*ids)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    for (uint32_t i = 0; i < list->n; i++) {
        lz_status st = id_value(&list->u.kids[i], &(*ids)[i]);
        if (st != LZ_OK) {
            free(*ids);
            return st;
        }
    }
    *n = (int)list->n;
    return LZ_OK;
}

/* What one processor adds before and after the sequence. */
static lz_status load_processor(const tj_val *v, int32_t **pre, int *n_pre, int32_t **post, int *n_post) {
    const tj_val *type = tj_get(v, "type");
    if (!type || type->type != TJ_STR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor without a \"type\"");
    if (tj_is_str(type, "ByteLevel"))
        return LZ_OK;
    if (tj_is_str(type, "Sequence")) {
        const tj_val *list = tj_get(v, "processors");
        if (!list || list->type != TJ_ARR)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor Sequence: \"processors\" must be a list");
        for (uint32_t i = 0; i < list->n; i++) { /* each wraps what the ones before produced */
            int32_t *a = NULL, *b = NULL;
            int na = 0, nb = 0;
            lz_status st = load_processor(&list->u.kids[i], &a, &na, &b, &nb);
            if (st == LZ_OK)
                st = append_ids(pre, n_pre, a, na, true);
            if (st == LZ_OK)
                st = append_ids(post, n_post, b, nb, false);
            free(a);
            free(b);
            LZ_TRY(st);
        }
        return LZ_OK;
    }
    if (tj_is_str(type, "BertProcessing") || tj_is_str(type, "RobertaProcessing")) {
        const tj_val *cls = tj_get(v, "cls"), *sep = tj_get(v, "sep");
        int32_t c = 0, s = 0;
        if (!cls || cls->type != TJ_ARR || cls->n != 2 || !sep || sep->type != TJ_ARR || sep->n != 2)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor: \"cls\" and \"sep\" must be [token, id]");
        LZ_TRY(id_value(&cls->u.kids[1], &c));
        LZ_TRY(id_value(&sep->u.kids[1], &s));
        LZ_TRY(append_ids(pre, n_pre, &c, 1, false));
        return append_ids(post, n_post, &s, 1, false);
    }
    if (!tj_is_str(type, "TemplateProcessing"))
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: unsupported post_processor type '%.*s'", (int)type->n, type->u.s);
    const tj_val *single = tj_get(v, "single"), *specials = tj_get(v, "special_tokens");
    if (!single || single->type != TJ_ARR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor TemplateProcessing: \"single\" must be a list");
    bool seen_a = false;
    for (uint32_t i = 0; i < single->n; i++) {
        const tj_val *item = &single->u.kids[i], *sp = tj_get(item, "SpecialToken"), *seq = tj_get(item, "Sequence");
        if (seq) {
            if (!tj_is_str(tj_get(seq, "id"), "A") || seen_a)
                return lz_fail(LZ_ERR_INPUT,
                               "tokenizer.json: post_processor TemplateProcessing: \"single\" must hold $A once");
            seen_a = true;
        } else if (sp) {
            int32_t *ids;
            int n;
            LZ_TRY(template_special(specials, tj_get(sp, "id"), &ids, &n));
            lz_status st = seen_a ? append_ids(post, n_post, ids, n, false) : append_ids(pre, n_pre, ids, n, false);
            free(ids);
            LZ_TRY(st);
        } else {
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor TemplateProcessing: bad template item");
        }
    }
    return LZ_OK;
}

lz_status tk_load_post_processor(lz_tokenizer *tok, const tj_val *v) {
    if (!v || v->type == TJ_NULL)
        return LZ_OK;
    return load_processor(v, &tok->pre_ids, &tok->n_pre, &tok->post_ids, &tok->n_post);
}

/* ---- encoding ---------------------------------------------------------------------------------------- */

/* Steps 2-3 for one piece of raw text between added tokens; plain: the piece
 * overlaps text where special tokens are ordinary text. */
static lz_status encode_piece(lz_tokenizer *tok, const char *s, size_t n, bool at_start, bool plain, tk_ids *out) {
    const char *p = s;
    size_t m = n;
    if (tok->n_norms) {
        tk_buf *b;
        LZ_TRY(tk_normalize(tok, s, n, &b));
        p = b->p;
        m = b->n;
    }
    if (tok->trie_norm.n == 0)
        return tk_pretokenize(tok, 0, p, m, at_start, out);
    tk_spans *spans = &tok->norm_spans;
    const lz_text_span all = {0, m}; // normalized offsets do not map back to the raw ranges: the whole piece
    LZ_TRY(tk_added_find(tok, &tok->trie_norm, p, m, &all, plain ? 1 : 0, spans, &tok->norm_which));
    size_t k = 0;
    for (size_t i = 0; i < spans->n; i++) {
        const tk_span sp = spans->p[i];
        if (sp.match)
            LZ_TRY(tk_ids_push(out, tok->added[tok->norm_which.p[k++]].id));
        else
            LZ_TRY(tk_pretokenize(tok, 0, p + sp.start, sp.end - sp.start, at_start && sp.start == 0, out));
    }
    return LZ_OK;
}

static lz_status encode_text(lz_tokenizer *tok, const char *s, size_t n, const lz_text_span *plain, int n_plain,
                             tk_ids *out) {
    tk_spans *spans = &tok->raw_spans;
    LZ_TRY(tk_added_find(tok, &tok->trie_raw, s, n, plain, n_plain, spans, &tok->raw_which));
    size_t k = 0;
    for (size_t i = 0; i < spans->n; i++) {
        const tk_span sp = spans->p[i];
        if (sp.match)
            LZ_TRY(tk_ids_push(out, tok->added[tok->raw_which.p[k++]].id));
        else if (sp.end > sp.start) {
            bool in_plain = false;
            for (int r = 0; r < n_plain && !in_plain; r++)
                in_plain = sp.start < plain[r].end && plain[r].start < sp.end;
            LZ_TRY(encode_piece(tok, s + sp.start, sp.end - sp.start, sp.start == 0, in_plain, out));
        }
    }
    return LZ_OK;
}

lz_status lz_tokenizer_encode(lz_tokenizer *tok, const char *text, size_t len, bool add_special, int32_t **ids,
                              int *n) {
    return lz_tokenizer_encode_plain(tok, text, len, add_special, NULL, 0, ids, n);
}

lz_status lz_tokenizer_encode_plain(lz_tokenizer *tok, const char *text, size_t len, bool add_special,
                                    const lz_text_span *plain, int n_plain, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    tk_ids out = {0};
    lz_status st = tk_ids_push(&out, 0); /* never NULL, even when empty */
    out.n = 0;
    if (st == LZ_OK && add_special)
        st = tk_ids_append(&out, tok->pre_ids, (size_t)tok->n_pre);
    if (st == LZ_OK && len)
        st = encode_text(tok, text, len, plain, n_plain, &out);
    if (st == LZ_OK && add_special)
        st = tk_ids_append(&out, tok->post_ids, (size_t)tok->n_post);
    if (st == LZ_OK && out.n > INT_MAX)
        st = lz_fail(LZ_ERR_INPUT, "tokenizer: text too long (more than %d tokens)", INT_MAX);
    if (st != LZ_OK) {
        free(out.p);
        return st;
    }
    *ids = out.p;
    *n = (int)out.n;
    return LZ_OK;
}
