/* tokenizer_load.c - reads tokenizer.json (model, added tokens, and the
 * pipeline parts, each parsed by the file that runs it) and
 * tokenizer_config.json (bos/eos, add_bos_token / add_eos_token), builds the
 * id -> string table, and answers the small lookups of tokenizer.h. */
#include <errno.h>    // errno, ENOENT
#include <jansson.h>  // json_t: tokenizer_config.json is small
#include <stdio.h>    // fopen, fread, snprintf, fprintf
#include <stdlib.h>   // calloc, malloc, free
#include <string.h>   // strerror, memcmp, strlen
#include <sys/stat.h> // fstat

#include "json_read.h" // lz_json_loadb: "model_max_length": 1000000000000000019884624838656
#include "tokenizer_internal.h"

/* ---- the BPE model ----------------------------------------------------------------------------------- */

static lz_status optional_string(const tj_val *o, const char *key, char **out, size_t *len) {
    const tj_val *v = tj_get(o, key);
    *out = NULL;
    *len = 0;
    if (!v || v->type == TJ_NULL)
        return LZ_OK;
    if (v->type != TJ_STR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: model: \"%s\" must be a string or null", key);
    if (!(*out = tk_strndup(v->u.s, v->n)))
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    *len = v->n;
    return LZ_OK;
}

static bool bool_field(const tj_val *o, const char *key, bool dflt) {
    const tj_val *v = tj_get(o, key);
    return v && (v->type == TJ_TRUE || v->type == TJ_FALSE) ? v->type == TJ_TRUE : dflt;
}

/* Loading a 128K vocabulary means ~1M lookups in tables larger than the
 * caches: merges are resolved in a pipeline, RING merges after their slots
 * were prefetched, and the (pair -> merge) inserts are batched the same way. */
enum { RING = 16 };

typedef struct {
    const char *a, *b;
    size_t na, nb, rank;
    uint64_t ha, hb, hab;
    tk_buf joined;   /* a + b (without the subword prefix of b) */
    const char *bad; /* why this merge is malformed, or NULL */
} merge_step;

typedef struct {
    int32_t a, b, id;
    uint32_t rank;
} merge_rec;

static lz_status bad_merge(const merge_step *m, const char *why) {
    return lz_fail(LZ_ERR_INPUT, "tokenizer.json: model: merge %zu: %s", m->rank, why);
}

static lz_status missing(const merge_step *m, const char *s, size_t n) {
    return lz_fail(LZ_ERR_INPUT, "tokenizer.json: model: merge %zu: '%.*s' is not in the vocabulary", m->rank,
                   (int)(n > 100 ? 100 : n), s);
}

/* Splits merge `v` into m and starts the lookups of its three strings. */
static lz_status stage_merge(const lz_tokenizer *t, const tj_val *v, size_t rank, merge_step *m) {
    m->rank = rank;
    m->bad = NULL;
    m->a = m->b = "";
    m->na = m->nb = 0;
    if (v->type == TJ_STR) { /* "a b": exactly one space (HF: line.split(' ') has two parts) */
        const char *sp = memchr(v->u.s, ' ', v->n);
        if (!sp || memchr(sp + 1, ' ', v->n - (size_t)(sp + 1 - v->u.s))) {
            m->bad = "not two tokens separated by one space";
            return LZ_OK;
        }
        m->a = v->u.s;
        m->na = (size_t)(sp - v->u.s);
        m->b = sp + 1;
        m->nb = v->n - m->na - 1;
    } else if (v->type == TJ_ARR && v->n == 2 && v->u.kids[0].type == TJ_STR && v->u.kids[1].type == TJ_STR) {
        m->a = v->u.kids[0].u.s;
        m->na = v->u.kids[0].n;
        m->b = v->u.kids[1].u.s;
        m->nb = v->u.kids[1].n;
    } else {
        m->bad = "must be \"a b\" or [\"a\", \"b\"]";
        return LZ_OK;
    }
    if (m->nb < t->prefix_len) {
        m->bad = "shorter than the continuing_subword_prefix";
        return LZ_OK;
    }
    m->joined.n = 0;
    LZ_TRY(tk_buf_append(&m->joined, m->a, m->na));
    LZ_TRY(tk_buf_append(&m->joined, m->b + t->prefix_len, m->nb - t->prefix_len));
    m->ha = tk_hash(m->a, m->na);
    m->hb = tk_hash(m->b, m->nb);
    m->hab = tk_hash(m->joined.p, m->joined.n);
    tk_strmap_prefetch(&t->vocab, m->ha);
    tk_strmap_prefetch(&t->vocab, m->hb);
    tk_strmap_prefetch(&t->vocab, m->hab);
    return LZ_OK;
}

static lz_status resolve_merge(lz_tokenizer *t, const merge_step *m, merge_rec *out) {
    if (m->bad)
        return bad_merge(m, m->bad);
    if (m->nb >= 3 && memcmp(m->b, "\xe2\x96\x81", 3) == 0)
        t->merge_joins_space = true;
    if ((out->a = tk_strmap_get_hashed(&t->vocab, m->a, m->na, m->ha)) < 0)
        return missing(m, m->a, m->na);
    if ((out->b = tk_strmap_get_hashed(&t->vocab, m->b, m->nb, m->hb)) < 0)
        return missing(m, m->b, m->nb);
    if ((out->id = tk_strmap_get_hashed(&t->vocab, m->joined.p, m->joined.n, m->hab)) < 0)
        return missing(m, m->joined.p, m->joined.n);
    if (m->rank > UINT32_MAX)
        return bad_merge(m, "too many merges");
    out->rank = (uint32_t)m->rank;
    return LZ_OK;
}

/* recs[rank] for every merge; *n: how many (the "#version" lines of the legacy format are skipped). */
static lz_status resolve_all(lz_tokenizer *t, const tj_val *merges, merge_rec *recs, size_t *n, merge_step *ring) {
    size_t staged = 0, done = 0;
    for (uint32_t i = 0; i < merges->n || done < staged;) {
        if (i < merges->n && staged - done < RING) {
            const tj_val *v = &merges->u.kids[i++];
            if (v->type == TJ_STR && v->n >= 8 && memcmp(v->u.s, "#version", 8) == 0)
                continue;
            LZ_TRY(stage_merge(t, v, staged, &ring[staged % RING]));
            staged++;
            continue;
        }
        LZ_TRY(resolve_merge(t, &ring[done % RING], &recs[done]));
        done++;
    }
    *n = done;
    return LZ_OK;
}

static lz_status load_merges(lz_tokenizer *t, const tj_val *merges) {
    if (!merges || merges->type == TJ_NULL)
        return tk_pairmap_init(&t->merges, 0);
    if (merges->type != TJ_ARR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: model: \"merges\" must be a list");
    LZ_TRY(tk_pairmap_init(&t->merges, merges->n));
    merge_rec *recs = malloc(((size_t)merges->n + 1) * sizeof *recs);
    merge_step ring[RING];
    memset(ring, 0, sizeof ring);
    size_t n = 0;
    lz_status st = recs ? resolve_all(t, merges, recs, &n, ring) : lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; st == LZ_OK && i < n; i++) { /* a later duplicate wins, as in HF's map */
        if (i + RING < n)
            tk_pairmap_prefetch(&t->merges, recs[i + RING].a, recs[i + RING].b);
        st = tk_pairmap_put(&t->merges, recs[i].a, recs[i].b, recs[i].rank, recs[i].id);
    }
    for (int i = 0; i < RING; i++)
        tk_buf_free(&ring[i].joined);
    free(recs);
    return st;
}

static lz_status load_model(lz_tokenizer *t, const tj_val *model) {
    if (!model || model->type != TJ_OBJ)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: no \"model\" object");
    const tj_val *type = tj_get(model, "type");
    if (type && !tj_is_str(type, "BPE"))
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: unsupported model type '%.*s' (only BPE is)",
                       type->type == TJ_STR ? (int)type->n : 1, type->type == TJ_STR ? type->u.s : "?");
    if (!type && !tj_get(model, "merges"))
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: the model has no \"type\" (only BPE is supported)");
    const tj_val *dropout = tj_get(model, "dropout");
    if (dropout && dropout->type == TJ_NUM && dropout->u.num > 0)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: unsupported model option: BPE dropout %g", dropout->u.num);
    LZ_TRY(optional_string(model, "continuing_subword_prefix", &t->prefix, &t->prefix_len));
    LZ_TRY(optional_string(model, "end_of_word_suffix", &t->suffix, &t->suffix_len));
    t->fuse_unk = bool_field(model, "fuse_unk", false);
    t->byte_fallback = bool_field(model, "byte_fallback", false);
    t->ignore_merges = bool_field(model, "ignore_merges", false);

    const tj_val *vocab = tj_get(model, "vocab");
    if (!vocab || vocab->type != TJ_OBJ)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: model: \"vocab\" must be an object");
    LZ_TRY(tk_strmap_init(&t->vocab, vocab->n));
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj_val *e = &vocab->u.kids[i];
        if (i + RING < vocab->n)
            tk_strmap_prefetch(&t->vocab, tk_hash(e[RING].key, e[RING].key_len));
        if (e->type != TJ_NUM || !e->is_int || e->u.num < 0 || e->u.num >= INT32_MAX)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: model: vocab['%.*s'] must be an id >= 0",
                           (int)(e->key_len > 100 ? 100 : e->key_len), e->key);
        LZ_TRY(tk_strmap_put(&t->vocab, e->key, e->key_len, (int32_t)e->u.num));
    }
    t->model_size = t->vocab.n;
    LZ_TRY(load_merges(t, tj_get(model, "merges")));
    /* SentencePiece-style vocabularies: when no merge can join a symbol to a "▁" on its right, a
     * word is the same as the words that start at each "▁", and those hit the word cache. */
    t->split_at_space = !t->ignore_merges && !t->prefix_len && !t->suffix_len && !t->merge_joins_space &&
                        tk_strmap_get(&t->vocab, "\xe2\x96\x81", 3) >= 0;

    const tj_val *unk = tj_get(model, "unk_token");
    t->unk_id = -1;
    if (unk && unk->type == TJ_STR) {
        t->unk_id = tk_strmap_get(&t->vocab, unk->u.s, unk->n);
        if (t->unk_id < 0)
            t->unk_id = -2; /* HF fails only when a character needs it */
    } else if (unk && unk->type != TJ_NULL) {
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: model: \"unk_token\" must be a string or null");
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = tk_strmap_get(&t->vocab, name, 6);
    }
    t->char_ids = malloc(0x800 * sizeof *t->char_ids);
    if (!t->char_ids)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    for (uint32_t cp = 0; cp < 0x800; cp++) {
        char u[4];
        t->char_ids[cp] = tk_strmap_get(&t->vocab, u, tk_utf8_put(cp, u));
    }
    return LZ_OK;
}

/* ---- added tokens ------------------------------------------------------------------------------------ */

static lz_status load_added(lz_tokenizer *t, const tj_val *list) {
    LZ_TRY(tk_strmap_init(&t->added_map, list && list->type == TJ_ARR ? list->n : 0));
    if (!list || list->type == TJ_NULL)
        return LZ_OK;
    if (list->type != TJ_ARR)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: \"added_tokens\" must be a list");
    t->added = calloc(list->n + 1, sizeof *t->added);
    if (!t->added)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    int64_t next_id = (int64_t)t->model_size; /* HF: ids for tokens the model lacks follow its vocabulary */
    bool single_word = false;
    for (uint32_t i = 0; i < list->n; i++) {
        const tj_val *e = &list->u.kids[i], *content = tj_get(e, "content");
        if (!content || content->type != TJ_STR)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: added_tokens[%u]: \"content\" must be a string", i);
        if (content->n == 0)
            continue;
        bool special = bool_field(e, "special", false);
        tk_added a = {.special = special,
                      .single_word = bool_field(e, "single_word", false),
                      .lstrip = bool_field(e, "lstrip", false),
                      .rstrip = bool_field(e, "rstrip", false),
                      .normalized = bool_field(e, "normalized", !special)};
        single_word |= a.single_word;
        int32_t k = tk_strmap_get(&t->added_map, content->u.s, content->n);
        if (k >= 0) { /* the same content again: its flags change, its id stays */
            tk_added *old = &t->added[k];
            a.special |= old->special;
            a.content = old->content;
            a.len = old->len;
            a.id = old->id;
            *old = a;
            continue;
        }
        a.id = tk_strmap_get(&t->vocab, content->u.s, content->n);
        if (a.id < 0) {
            if (next_id >= INT32_MAX)
                return lz_fail(LZ_ERR_INPUT, "tokenizer.json: too many added tokens");
            a.id = (int32_t)next_id++;
        }
        if (!(a.content = tk_strndup(content->u.s, content->n)))
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        a.len = content->n;
        t->added[t->n_added] = a;
        LZ_TRY(tk_strmap_put(&t->added_map, a.content, a.len, t->n_added));
        t->n_added++;
    }
    /* what each token is matched against: its normalized form where it is normalized */
    for (int i = 0; i < t->n_added; i++) {
        tk_added *a = &t->added[i];
        const char *p = a->content;
        size_t n = a->len;
        if (a->normalized && t->n_norms) {
            tk_buf *b;
            LZ_TRY(tk_normalize(t, a->content, a->len, &b));
            p = b->p;
            n = b->n;
        }
        if (!(a->pattern = tk_strndup(p, n)))
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        a->pattern_len = n;
        LZ_TRY(tk_trie_add(a->normalized ? &t->trie_norm : &t->trie_raw, a->pattern, n, i));
    }
    if (single_word)
        LZ_TRY(tk_pattern_regex(tk_word_char_regex, strlen(tk_word_char_regex), "single_word", &t->word_char));
    return LZ_OK;
}

/* Ids index a table: far beyond any real vocabulary (LLaMA-3: 128256) is an error. */
enum { TK_MAX_ID = 1 << 24 };

/* ---- id -> strings ----------------------------------------------------------------------------------- */

static lz_status set_id(lz_tokenizer *t, int32_t id, const char *tok, size_t tok_len, const char *dec, size_t dec_len,
                        bool special) {
    tk_idinfo *info = &t->ids[id];
    if (t->id_pool.n + tok_len + dec_len > INT32_MAX)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: vocabulary too large");
    info->tok_off = (int32_t)t->id_pool.n;
    info->tok_len = (uint32_t)tok_len;
    LZ_TRY(tk_buf_append(&t->id_pool, tok, tok_len));
    info->off = (uint32_t)t->id_pool.n;
    info->len = (uint32_t)dec_len;
    LZ_TRY(tk_buf_append(&t->id_pool, dec, dec_len));
    info->special = special;
    return LZ_OK;
}

static lz_status build_ids(lz_tokenizer *t) {
    int32_t max = -1;
    for (size_t i = 0; i <= t->vocab.mask; i++)
        if (t->vocab.slots[i].len_plus1 && t->vocab.slots[i].val > max)
            max = t->vocab.slots[i].val;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id > max)
            max = t->added[i].id;
    if (max >= TK_MAX_ID)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: token id %d is too large (ids are below %d)", max, TK_MAX_ID);
    t->n_ids = max + 1;
    t->ids = malloc(((size_t)t->n_ids + 1) * sizeof *t->ids);
    if (!t->ids)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < t->n_ids; i++)
        t->ids[i] = (tk_idinfo){0, 0, -1, 0, false};
    LZ_TRY(tk_buf_reserve(&t->id_pool, t->vocab.pool.n * 2 + 16));
    for (size_t i = 0; i <= t->vocab.mask; i++) {
        const struct tk_str_slot *s = &t->vocab.slots[i];
        if (s->len_plus1)
            LZ_TRY(set_id(t, s->val, t->vocab.pool.p + s->off, s->len_plus1 - 1, t->vocab.pool.p + s->off,
                          s->len_plus1 - 1, false));
    }
    for (int i = 0; i < t->n_added; i++) {
        const tk_added *a = &t->added[i];
        /* HF decodes a normalized token through its normalized form (e.g. "▁Lizard" for "Lizard") */
        bool norm = a->normalized && t->n_norms;
        LZ_TRY(set_id(t, a->id, a->content, a->len, norm ? a->pattern : a->content, norm ? a->pattern_len : a->len,
                      a->special));
    }
    return LZ_OK;
}

/* ---- tokenizer_config.json --------------------------------------------------------------------------- */

/* "<s>" or {"content": "<s>", ...} */
static const char *token_string(json_t *v) {
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static lz_status load_config(lz_tokenizer *t, const char *text, size_t len) {
    json_error_t err;
    json_t *root = lz_json_loadb(text, len, 0, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return lz_fail(LZ_ERR_INPUT, "tokenizer_config.json: invalid JSON (line %d: %s)", err.line,
                       root ? "not an object" : err.text);
    }
    const char *bos = token_string(json_object_get(root, "bos_token"));
    const char *eos = token_string(json_object_get(root, "eos_token"));
    if (bos)
        t->bos_id = lz_tokenizer_token_to_id(t, bos, strlen(bos));
    if (eos)
        t->eos_id = lz_tokenizer_token_to_id(t, eos, strlen(eos));
    json_t *add_bos = json_object_get(root, "add_bos_token"), *add_eos = json_object_get(root, "add_eos_token");
    lz_status st = LZ_OK;
    if (json_is_boolean(add_bos) || json_is_boolean(add_eos)) {
        /* transformers' update_post_processor: [bos] $A [eos] as the flags say */
        t->n_pre = t->n_post = 0;
        if (json_is_true(add_bos) && t->bos_id < 0)
            st = lz_fail(LZ_ERR_INPUT, "tokenizer_config.json: add_bos_token is true but bos_token '%s' is not a token",
                         bos ? bos : "(none)");
        else if (json_is_true(add_eos) && t->eos_id < 0)
            st = lz_fail(LZ_ERR_INPUT, "tokenizer_config.json: add_eos_token is true but eos_token '%s' is not a token",
                         eos ? eos : "(none)");
        if (st == LZ_OK && json_is_true(add_bos)) {
            free(t->pre_ids);
            t->pre_ids = malloc(sizeof(int32_t));
            st = t->pre_ids ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
            if (st == LZ_OK)
                t->pre_ids[t->n_pre++] = t->bos_id;
        }
        if (st == LZ_OK && json_is_true(add_eos)) {
            free(t->post_ids);
            t->post_ids = malloc(sizeof(int32_t));
            st = t->post_ids ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
            if (st == LZ_OK)
                t->post_ids[t->n_post++] = t->eos_id;
        }
    }
    json_decref(root);
    return st;
}

/* ---- loading ----------------------------------------------------------------------------------------- */

static lz_status build(lz_tokenizer *t, const tj_val *root) {
    if (root->type != TJ_OBJ)
        return lz_fail(LZ_ERR_INPUT, "tokenizer.json: not a JSON object");
    LZ_TRY(load_model(t, tj_get(root, "model")));
    LZ_TRY(tk_load_normalizer(t, tj_get(root, "normalizer")));
    LZ_TRY(tk_load_pretokenizer(t, tj_get(root, "pre_tokenizer")));
    LZ_TRY(tk_load_post_processor(t, tj_get(root, "post_processor")));
    LZ_TRY(tk_load_decoder(t, tj_get(root, "decoder")));
    LZ_TRY(load_added(t, tj_get(root, "added_tokens")));
    LZ_TRY(build_ids(t));
    for (int i = 0; i < t->n_pre; i++) /* the post-processor's ids must exist */
        if (t->pre_ids[i] >= t->n_ids)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor: id %d is not in the vocabulary",
                           t->pre_ids[i]);
    for (int i = 0; i < t->n_post; i++)
        if (t->post_ids[i] >= t->n_ids)
            return lz_fail(LZ_ERR_INPUT, "tokenizer.json: post_processor: id %d is not in the vocabulary",
                           t->post_ids[i]);
    if (t->n_pre)
        t->bos_id = t->pre_ids[0];
    return tk_cache_init(&t->cache, 1 << 16);
}

lz_status lz_tokenizer_load_json(const char *json, size_t json_len, const char *config, size_t config_len,
                                 lz_tokenizer **out) {
    *out = NULL;
    lz_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    tk_bytemap_init(&t->bytemap);
    t->unk_id = t->bos_id = t->eos_id = -1;
    tj_doc *doc;
    const tj_val *root;
    lz_status st = tj_parse(json, json_len, "tokenizer.json", &doc, &root);
    if (st == LZ_OK) {
        st = build(t, root);
        tj_free(doc);
    }
    if (st == LZ_OK && config)
        st = load_config(t, config, config_len);
    if (st != LZ_OK) {
        lz_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LZ_OK;
}

/* Reads a whole file; *found = false (and LZ_OK) when it does not exist and `optional`. */
static lz_status read_file(const char *path, bool optional, char **out, size_t *len, bool *found) {
    *out = NULL;
    *len = 0;
    *found = false;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (optional && errno == ENOENT)
            return LZ_OK;
        return lz_fail(LZ_ERR_IO, "tokenizer: cannot open %s: %s", path, strerror(errno));
    }
    struct stat sb;
    lz_status st = LZ_OK;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size > ((uint64_t)1 << 31))
        st = lz_fail(LZ_ERR_IO, "tokenizer: cannot read %s (size)", path);
    size_t size = st == LZ_OK ? (size_t)sb.st_size : 0;
    char *buf = st == LZ_OK ? malloc(size + 1) : NULL;
    if (st == LZ_OK && !buf)
        st = lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory reading %s", path);
    if (st == LZ_OK && fread(buf, 1, size, f) != size)
        st = lz_fail(LZ_ERR_IO, "tokenizer: cannot read %s", path);
    fclose(f);
    if (st != LZ_OK) {
        free(buf);
        return st;
    }
    buf[size] = '\0';
    *out = buf;
    *len = size;
    *found = true;
    return LZ_OK;
}

lz_status lz_tokenizer_load(const char *dir, lz_tokenizer **out) {
    *out = NULL;
    char path[4096], cpath[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    char *json = NULL, *config = NULL;
    size_t len, clen;
    bool found, cfound;
    lz_status st = read_file(path, false, &json, &len, &found);
    if (st == LZ_OK)
        st = read_file(cpath, true, &config, &clen, &cfound);
    if (st == LZ_OK) {
        st = lz_tokenizer_load_json(json, len, cfound ? config : NULL, cfound ? clen : 0, out);
        if (st != LZ_OK)
            lz_error_prefix("%s/", dir);
    }
    free(json);
    free(config);
    return st;
}

void lz_tokenizer_free(lz_tokenizer *t) {
    if (!t)
        return;
    tk_strmap_free(&t->vocab);
    tk_pairmap_free(&t->merges);
    free(t->prefix);
    free(t->suffix);
    free(t->char_ids);
    for (int i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].pattern);
    }
    free(t->added);
    tk_strmap_free(&t->added_map);
    tk_trie_free(&t->trie_raw);
    tk_trie_free(&t->trie_norm);
    tk_pattern_free(t->word_char);
    for (int i = 0; i < t->n_norms; i++) {
        free(t->norms[i].text);
        tk_pattern_free(t->norms[i].pattern);
    }
    free(t->norms);
    for (int i = 0; i < t->n_pretoks; i++) {
        tk_pretok *p = &t->pretoks[i];
        tk_pattern_free(p->pattern);
        tk_buf_free(&p->buf);
        tk_buf_free(&p->buf2);
        free(p->spans.p);
        free(p->kept.p);
    }
    free(t->pretoks);
    free(t->pre_ids);
    free(t->post_ids);
    for (int i = 0; i < t->n_decs_alloc; i++) {
        free(t->decs[i].from);
        free(t->decs[i].to);
    }
    free(t->decs);
    free(t->ids);
    tk_buf_free(&t->id_pool);
    tk_cache_free(&t->cache);
    tk_buf_free(&t->norm_buf[0]);
    tk_buf_free(&t->norm_buf[1]);
    tk_buf_free(&t->word_buf);
    free(t->raw_spans.p);
    free(t->norm_spans.p);
    free(t->raw_which.p);
    free(t->norm_which.p);
    free(t->syms);
    free(t->heap);
    free(t);
}

/* ---- lookups ----------------------------------------------------------------------------------------- */

int32_t lz_tokenizer_vocab_size(const lz_tokenizer *tok) { return tok->n_ids; }

lz_status lz_tokenizer_check_ids(const lz_tokenizer *tok, const int32_t *ids, int n, int model_vocab,
                                 const char *what) {
    for (int i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < model_vocab)
            continue;
        size_t len = 0;
        const char *token = lz_tokenizer_id_to_token(tok, ids[i], &len);
        return lz_fail(LZ_ERR_INPUT,
                       "%s: token %d ('%.*s') is not in the model's vocabulary (vocab_size %d; the tokenizer has "
                       "%d ids)", what, ids[i], token ? (int)(len > 64 ? 64 : len) : 0, token ? token : "", model_vocab,
                       tok->n_ids);
    }
    return LZ_OK;
}

void lz_tokenizer_warn_vocab(const lz_tokenizer *tok, int model_vocab, const char *dir) {
    if (tok->n_ids > model_vocab)
        fprintf(stderr, "lizard: warning: %s/tokenizer.json has %d token ids, the model %d (config.json "
                "vocab_size): text that becomes an id >= %d is refused\n", dir, tok->n_ids, model_vocab, model_vocab);
}

int32_t lz_tokenizer_token_to_id(const lz_tokenizer *tok, const char *token, size_t len) {
    int32_t k = tk_strmap_get(&tok->added_map, token, len);
    if (k >= 0)
        return tok->added[k].id;
    return tk_strmap_get(&tok->vocab, token, len);
}

const char *lz_tokenizer_id_to_token(const lz_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_ids || tok->ids[id].tok_off < 0)
        return NULL;
    if (len)
        *len = tok->ids[id].tok_len;
    return tok->id_pool.p + tok->ids[id].tok_off;
}

bool lz_tokenizer_is_special(const lz_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && tok->ids[id].special;
}

int32_t lz_tokenizer_bos_id(const lz_tokenizer *tok) { return tok->bos_id; }
int32_t lz_tokenizer_eos_id(const lz_tokenizer *tok) { return tok->eos_id; }
