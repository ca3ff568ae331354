/* tokenizer_util.c - the tokenizer's plumbing: growable buffers, UTF-8, the
 * hash function and three open-addressing hash maps (vocabulary, merges, the
 * BPE word cache). */
#include <stdlib.h> // malloc, realloc, free
#include <string.h> // memcpy, memcmp

#include "tokenizer_internal.h"

/* ---- buffers ------------------------------------------------------------------------------------------ */

static lz_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return LZ_OK;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem)
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    *p = q;
    *cap = c;
    return LZ_OK;
}

lz_status tk_buf_reserve(tk_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->n - 1)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    return grow((void **)&b->p, &b->cap, b->n + extra + 1, 1);
}

lz_status tk_buf_append(tk_buf *b, const void *s, size_t n) {
    LZ_TRY(tk_buf_reserve(b, n));
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return LZ_OK;
}

void tk_buf_free(tk_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

lz_status tk_ids_push(tk_ids *v, int32_t id) {
    LZ_TRY(grow((void **)&v->p, &v->cap, v->n + 1, sizeof *v->p));
    v->p[v->n++] = id;
    return LZ_OK;
}

lz_status tk_ids_append(tk_ids *v, const int32_t *ids, size_t n) {
    LZ_TRY(grow((void **)&v->p, &v->cap, v->n + n, sizeof *v->p));
    if (n)
        memcpy(v->p + v->n, ids, n * sizeof *ids);
    v->n += n;
    return LZ_OK;
}

lz_status tk_spans_push(tk_spans *v, size_t start, size_t end, bool match) {
    LZ_TRY(grow((void **)&v->p, &v->cap, v->n + 1, sizeof *v->p));
    v->p[v->n++] = (tk_span){start, end, match};
    return LZ_OK;
}

/* ---- UTF-8 ------------------------------------------------------------------------------------------ */

size_t tk_utf8_next(const char *str, size_t n, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[0];
    *cp = TK_INVALID_CP;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 1;
    if (n < len)
        return 1;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 1;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 1;
    *cp = v;
    return len;
}

size_t tk_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Whether s[0..n) (n >= 1, s[0] a lead byte) can still become a valid sequence. */
static bool valid_start(const unsigned char *s, size_t n, size_t want) {
    if (n >= want)
        return false;
    for (size_t i = 1; i < n; i++) {
        unsigned c = s[i];
        unsigned lo = 0x80, hi = 0xBF;
        if (i == 1) {
            if (s[0] == 0xE0)
                lo = 0xA0;
            else if (s[0] == 0xED)
                hi = 0x9F;
            else if (s[0] == 0xF0)
                lo = 0x90;
            else if (s[0] == 0xF4)
                hi = 0x8F;
        }
        if (c < lo || c > hi)
            return false;
    }
    return true;
}

size_t tk_utf8_complete_prefix(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned c = s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t want = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (want && valid_start(s + n - back, back, want))
            return n - back;
        return n;
    }
    return n;
}

bool tk_is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

uint64_t tk_hash(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ (w * 0xC2B2AE3D27D4EB4Full)) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ (w * 0xC2B2AE3D27D4EB4Full)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

/* Zeroed slots for `expected` keys, a power of two of them with the load at
 * most 0.6 (*mask = count - 1); NULL after recording the failure. */
static void *alloc_slots(size_t expected, size_t slot_bytes, size_t *mask) {
    size_t size = 16;
    while (size < expected + expected * 2 / 3 + 1)
        size *= 2;
    void *slots = calloc(size, slot_bytes);
    if (!slots)
        lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    *mask = size - 1;
    return slots;
}

/* ---- string -> id ------------------------------------------------------------------------------------ */

lz_status tk_strmap_init(tk_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->slots = alloc_slots(expected, sizeof *m->slots, &m->mask);
    return m->slots ? LZ_OK : LZ_ERR_NOMEM;
}

/* Slots hold the low 32 bits of the hash; len_plus1 == 0 marks an empty one. */
static struct tk_str_slot *str_find(const tk_strmap *m, const char *k, size_t n, uint64_t h) {
    const uint32_t h32 = (uint32_t)h, want = (uint32_t)n + 1;
    for (size_t i = (size_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        struct tk_str_slot *s = &m->slots[i];
        if (!s->len_plus1 || (s->hash == h32 && s->len_plus1 == want && memcmp(m->pool.p + s->off, k, n) == 0))
            return s;
    }
}

static lz_status str_rehash(tk_strmap *m) {
    size_t size = (m->mask + 1) * 2;
    struct tk_str_slot *old = m->slots;
    size_t old_size = m->mask + 1;
    m->slots = calloc(size, sizeof *m->slots);
    if (!m->slots) {
        m->slots = old;
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    }
    m->mask = size - 1;
    for (size_t i = 0; i < old_size; i++) {
        if (!old[i].len_plus1)
            continue;
        size_t j = (size_t)(tk_hash(m->pool.p + old[i].off, old[i].len_plus1 - 1) >> 32) & m->mask;
        while (m->slots[j].len_plus1)
            j = (j + 1) & m->mask;
        m->slots[j] = old[i];
    }
    free(old);
    return LZ_OK;
}

lz_status tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t val) {
    if (n >= UINT32_MAX || m->pool.n > UINT32_MAX - n - 1)
        return lz_fail(LZ_ERR_INPUT, "tokenizer: vocabulary too large");
    uint64_t h = tk_hash(k, n);
    struct tk_str_slot *s = str_find(m, k, n, h);
    if (s->len_plus1) {
        s->val = val;
        return LZ_OK;
    }
    if ((m->n + 1) * 5 > (m->mask + 1) * 3) {
        LZ_TRY(str_rehash(m));
        s = str_find(m, k, n, h);
    }
    uint32_t off = (uint32_t)m->pool.n;
    LZ_TRY(tk_buf_append(&m->pool, k, n));
    *s = (struct tk_str_slot){(uint32_t)h, off, (uint32_t)n + 1, val};
    m->n++;
    return LZ_OK;
}

int32_t tk_strmap_get_hashed(const tk_strmap *m, const char *k, size_t n, uint64_t h) {
    if (!m->slots)
        return -1;
    const struct tk_str_slot *s = str_find(m, k, n, h);
    return s->len_plus1 ? s->val : -1;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n) {
    return tk_strmap_get_hashed(m, k, n, tk_hash(k, n));
}

void tk_strmap_prefetch(const tk_strmap *m, uint64_t h) {
    if (m->slots)
        __builtin_prefetch(&m->slots[(size_t)(h >> 32) & m->mask]);
}

void tk_strmap_free(tk_strmap *m) {
    free(m->slots);
    tk_buf_free(&m->pool);
    memset(m, 0, sizeof *m);
}

/* ---- (id, id) -> merge --------------------------------------------------------------------------------- */

enum { PAIR_EMPTY = 0 }; /* key 0 is the pair (0, 0) shifted: keys are stored + 1 */

static uint64_t pair_key(int32_t a, int32_t b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }

static uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

lz_status tk_pairmap_init(tk_pairmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->slots = alloc_slots(expected, sizeof *m->slots, &m->mask);
    return m->slots ? LZ_OK : LZ_ERR_NOMEM;
}

lz_status tk_pairmap_put(tk_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    if ((m->n + 1) * 5 > (m->mask + 1) * 3) {
        size_t size = (m->mask + 1) * 2, old_size = m->mask + 1;
        struct tk_pair_slot *old = m->slots;
        m->slots = calloc(size, sizeof *m->slots);
        if (!m->slots) {
            m->slots = old;
            return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
        }
        m->mask = size - 1;
        for (size_t i = 0; i < old_size; i++) {
            if (old[i].key == PAIR_EMPTY)
                continue;
            size_t j = pair_hash(old[i].key) & m->mask;
            while (m->slots[j].key != PAIR_EMPTY)
                j = (j + 1) & m->mask;
            m->slots[j] = old[i];
        }
        free(old);
    }
    uint64_t k = pair_key(a, b);
    size_t i = pair_hash(k) & m->mask;
    while (m->slots[i].key != PAIR_EMPTY && m->slots[i].key != k)
        i = (i + 1) & m->mask;
    if (m->slots[i].key == PAIR_EMPTY)
        m->n++;
    m->slots[i] = (struct tk_pair_slot){k, rank, id};
    return LZ_OK;
}

void tk_pairmap_prefetch(const tk_pairmap *m, int32_t a, int32_t b) {
    __builtin_prefetch(&m->slots[pair_hash(pair_key(a, b)) & m->mask]);
}

bool tk_pairmap_get(const tk_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
    uint64_t k = pair_key(a, b);
    for (size_t i = pair_hash(k) & m->mask;; i = (i + 1) & m->mask) {
        const struct tk_pair_slot *s = &m->slots[i];
        if (s->key == k) {
            *rank = s->rank;
            *id = s->id;
            return true;
        }
        if (s->key == PAIR_EMPTY)
            return false;
    }
}

void tk_pairmap_free(tk_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- word cache --------------------------------------------------------------------------------------- */

enum { CACHE_MAX_KEYS = 1 << 22, CACHE_MAX_IDS = 1 << 20 };

lz_status tk_cache_init(tk_cache *c, size_t slots) {
    memset(c, 0, sizeof *c);
    c->slots = malloc(slots * sizeof *c->slots);
    if (!c->slots)
        return lz_fail(LZ_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < slots; i++)
        c->slots[i].key_len = UINT32_MAX;
    c->mask = slots - 1;
    return LZ_OK;
}

static struct tk_cache_slot *cache_find(const tk_cache *c, const char *k, size_t n, uint64_t h) {
    for (size_t i = h & c->mask;; i = (i + 1) & c->mask) {
        struct tk_cache_slot *s = &c->slots[i];
        if (s->key_len == UINT32_MAX || (s->hash == h && s->key_len == n && memcmp(c->keys.p + s->key_off, k, n) == 0))
            return s;
    }
}

const int32_t *tk_cache_get(const tk_cache *c, const char *k, size_t n, size_t *n_ids) {
    const struct tk_cache_slot *s = cache_find(c, k, n, tk_hash(k, n));
    if (s->key_len == UINT32_MAX)
        return NULL;
    static const int32_t none[1] = {0};
    *n_ids = s->n_ids;
    return s->n_ids ? c->ids.p + s->ids_off : none; /* a word can map to no ids (no unk token) */
}

lz_status tk_cache_put(tk_cache *c, const char *k, size_t n, const int32_t *ids, size_t n_ids) {
    if ((c->n + 1) * 5 > (c->mask + 1) * 3 || c->keys.n + n > CACHE_MAX_KEYS || c->ids.n + n_ids > CACHE_MAX_IDS) {
        for (size_t i = 0; i <= c->mask; i++) /* full: start over */
            c->slots[i].key_len = UINT32_MAX;
        c->n = 0;
        c->keys.n = 0;
        c->ids.n = 0;
    }
    uint64_t h = tk_hash(k, n);
    struct tk_cache_slot *s = cache_find(c, k, n, h);
    if (s->key_len != UINT32_MAX)
        return LZ_OK;
    uint32_t key_off = (uint32_t)c->keys.n, ids_off = (uint32_t)c->ids.n;
    LZ_TRY(tk_buf_append(&c->keys, k, n));
    LZ_TRY(tk_ids_append(&c->ids, ids, n_ids));
    *s = (struct tk_cache_slot){h, key_off, (uint32_t)n, ids_off, (uint32_t)n_ids};
    c->n++;
    return LZ_OK;
}

void tk_cache_free(tk_cache *c) {
    free(c->slots);
    tk_buf_free(&c->keys);
    free(c->ids.p);
    memset(c, 0, sizeof *c);
}

char *tk_strndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        if (n)
            memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}
