/* tokenizer_json.c - a small strict JSON reader for tokenizer.json.
 *
 * Why not jansson (which the rest of the runtime uses): a 128K-entry
 * vocabulary with its merges is ~400K-1M JSON values, and jansson's per-value
 * allocations and hashed objects take ~340 ms just to parse such a file
 * (8.6 MB); the whole load must stay under 300 ms.
 * This reader builds the whole tree in one arena, keeps object members in
 * order (lookups are linear: the objects looked up by key are small), and
 * points into the input for strings without escapes. Strict RFC 8259: the
 * input must be valid UTF-8, no trailing commas, no lone surrogates. */
#include <stdio.h>  // snprintf
#include <stdlib.h> // malloc, free, strtod
#include <string.h> // memcpy, strlen

#include "tokenizer_internal.h"

enum { TJ_MAX_DEPTH = 128, TJ_BLOCK = 1 << 20 };

struct tj_block {
    struct tj_block *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

struct tj_doc {
    struct tj_block *blocks;
    tj_val root;
};

typedef struct {
    const char *s;
    size_t n, pos;
    tj_doc *doc;
    tj_val *stack; /* children of the containers being parsed */
    size_t sn, scap;
    const char *what;
} tj_parser;

static void *arena_alloc(tj_doc *d, size_t size) {
    size = (size + 15) & ~(size_t)15;
    struct tj_block *b = d->blocks;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > TJ_BLOCK ? size : TJ_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        if (d->blocks && size > TJ_BLOCK) { /* a big one: keep the current block for small ones */
            b->next = d->blocks->next;
            d->blocks->next = b;
        } else {
            b->next = d->blocks;
            d->blocks = b;
        }
    }
    void *p = b->data + b->used;
    b->used += size;
    return p;
}

static lz_status syntax(const tj_parser *p, const char *expected) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->n; i++) {
        if (p->s[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    return lz_fail(LZ_ERR_INPUT, "%s: invalid JSON at line %zu column %zu: %s", p->what, line, col, expected);
}

static void skip_ws(tj_parser *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            break;
        p->pos++;
    }
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* p->pos at the opening quote. */
/* Whether any byte of the 8 in w is '"', '\\' or below 0x20 (the bytes that end a plain run). */
static bool special_byte(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    uint64_t zero_q = (q - ones) & ~q & high, zero_b = (b - ones) & ~b & high;
    uint64_t low = (w - ones * 0x20) & ~w & high; /* bytes < 0x20 (ASCII; high bytes masked by ~w) */
    return (zero_q | zero_b | low) != 0;
}

static lz_status parse_string(tj_parser *p, const char **out, uint32_t *out_len) {
    size_t start = ++p->pos, i = start;
    bool escaped = false;
    for (;;) {
        while (i + 8 <= p->n) { /* skip 8 plain bytes at a time */
            uint64_t w;
            memcpy(&w, p->s + i, 8);
            if (special_byte(w))
                break;
            i += 8;
        }
        if (i >= p->n)
            return p->pos = i, syntax(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[i];
        if (c == '"')
            break;
        if (c < 0x20)
            return p->pos = i, syntax(p, "control character in a string");
        if (c == '\\') {
            escaped = true;
            i += 2;
            continue;
        }
        i++;
    }
    size_t raw = i - start;
    if (raw > UINT32_MAX)
        return syntax(p, "string too long");
    p->pos = i + 1;
    if (!escaped) {
        *out = p->s + start;
        *out_len = (uint32_t)raw;
        return LZ_OK;
    }
    char *dst = arena_alloc(p->doc, raw + 1);
    if (!dst)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", p->what);
    size_t o = 0;
    for (size_t j = start; j < i;) {
        char c = p->s[j];
        if (c != '\\') {
            dst[o++] = c;
            j++;
            continue;
        }
        char e = p->s[j + 1];
        j += 2;
        switch (e) {
        case '"': dst[o++] = '"'; break;
        case '\\': dst[o++] = '\\'; break;
        case '/': dst[o++] = '/'; break;
        case 'b': dst[o++] = '\b'; break;
        case 'f': dst[o++] = '\f'; break;
        case 'n': dst[o++] = '\n'; break;
        case 'r': dst[o++] = '\r'; break;
        case 't': dst[o++] = '\t'; break;
        case 'u': {
            int hi = j + 4 <= i ? hex4(p->s + j) : -1;
            if (hi < 0)
                return p->pos = j, syntax(p, "bad \\u escape");
            j += 4;
            uint32_t cp = (uint32_t)hi;
            if (hi >= 0xD800 && hi <= 0xDBFF) {
                int lo = (j + 6 <= i && p->s[j] == '\\' && p->s[j + 1] == 'u') ? hex4(p->s + j + 2) : -1;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return p->pos = j, syntax(p, "lone surrogate in a \\u escape");
                j += 6;
                cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            } else if (hi >= 0xDC00 && hi <= 0xDFFF) {
                return p->pos = j, syntax(p, "lone surrogate in a \\u escape");
            }
            o += tk_utf8_put(cp, dst + o);
            break;
        }
        default: return p->pos = j - 1, syntax(p, "bad escape in a string");
        }
    }
    dst[o] = '\0';
    *out = dst;
    *out_len = (uint32_t)o;
    return LZ_OK;
}

static lz_status parse_number(tj_parser *p, tj_val *v) {
    size_t start = p->pos, i = start;
    bool integer = true;
    if (i < p->n && p->s[i] == '-')
        i++;
    if (i >= p->n || p->s[i] < '0' || p->s[i] > '9')
        return syntax(p, "a value");
    if (p->s[i] == '0')
        i++;
    else
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
            i++;
    if (i < p->n && p->s[i] == '.') {
        integer = false;
        i++;
        if (i >= p->n || p->s[i] < '0' || p->s[i] > '9')
            return p->pos = i, syntax(p, "digits after '.'");
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
            i++;
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        integer = false;
        i++;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-'))
            i++;
        if (i >= p->n || p->s[i] < '0' || p->s[i] > '9')
            return p->pos = i, syntax(p, "digits in the exponent");
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
            i++;
    }
    size_t len = i - start;
    v->type = TJ_NUM;
    v->is_int = 0;
    size_t digits = len - (p->s[start] == '-');
    if (integer && digits <= 15) { /* ids: no strtod, and exact as a double */
        int64_t x = 0;
        for (size_t k = start + (p->s[start] == '-'); k < i; k++)
            x = x * 10 + (p->s[k] - '0');
        v->u.num = (double)(p->s[start] == '-' ? -x : x);
        v->is_int = 1;
    } else {
        char buf[512];
        if (len >= sizeof buf)
            return syntax(p, "a number of reasonable length");
        memcpy(buf, p->s + start, len);
        buf[len] = '\0';
        v->u.num = strtod(buf, NULL);
    }
    p->pos = i;
    return LZ_OK;
}

static lz_status push_child(tj_parser *p, const tj_val *v) {
    if (p->sn == p->scap) {
        size_t cap = p->scap ? p->scap * 2 : 256;
        tj_val *s = realloc(p->stack, cap * sizeof *s);
        if (!s)
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", p->what);
        p->stack = s;
        p->scap = cap;
    }
    p->stack[p->sn++] = *v;
    return LZ_OK;
}

static lz_status parse_value(tj_parser *p, tj_val *v, int depth);

/* The children pushed since `base` become v's array. */
static lz_status close_container(tj_parser *p, tj_val *v, size_t base) {
    size_t count = p->sn - base;
    if (count > UINT32_MAX)
        return syntax(p, "fewer elements");
    v->n = (uint32_t)count;
    v->u.kids = NULL;
    if (count) {
        v->u.kids = arena_alloc(p->doc, count * sizeof(tj_val));
        if (!v->u.kids)
            return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", p->what);
        memcpy(v->u.kids, p->stack + base, count * sizeof(tj_val));
    }
    p->sn = base;
    return LZ_OK;
}

static lz_status parse_container(tj_parser *p, tj_val *v, int depth, bool object) {
    if (depth >= TJ_MAX_DEPTH)
        return syntax(p, "less nesting");
    v->type = object ? TJ_OBJ : TJ_ARR;
    p->pos++;
    size_t base = p->sn;
    skip_ws(p);
    char close = object ? '}' : ']';
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        return close_container(p, v, base);
    }
    for (;;) {
        tj_val child = {0};
        if (object) {
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != '"')
                return syntax(p, "a member name");
            LZ_TRY(parse_string(p, &child.key, &child.key_len));
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':')
                return syntax(p, "':'");
            p->pos++;
        }
        const char *key = child.key;
        uint32_t key_len = child.key_len;
        LZ_TRY(parse_value(p, &child, depth + 1));
        child.key = key;
        child.key_len = key_len;
        LZ_TRY(push_child(p, &child));
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == close) {
            p->pos++;
            return close_container(p, v, base);
        }
        return syntax(p, object ? "',' or '}'" : "',' or ']'");
    }
}

static bool literal(tj_parser *p, const char *word) {
    size_t len = strlen(word);
    if (p->n - p->pos < len || memcmp(p->s + p->pos, word, len) != 0)
        return false;
    p->pos += len;
    return true;
}

static lz_status parse_value(tj_parser *p, tj_val *v, int depth) {
    skip_ws(p);
    if (p->pos >= p->n)
        return syntax(p, "a value");
    char c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, v, depth, true);
    case '[': return parse_container(p, v, depth, false);
    case '"': v->type = TJ_STR; return parse_string(p, &v->u.s, &v->n);
    case 't': v->type = TJ_TRUE; return literal(p, "true") ? LZ_OK : syntax(p, "a value");
    case 'f': v->type = TJ_FALSE; return literal(p, "false") ? LZ_OK : syntax(p, "a value");
    case 'n': v->type = TJ_NULL; return literal(p, "null") ? LZ_OK : syntax(p, "a value");
    default: return parse_number(p, v);
    }
}

/* Offset of the first byte that is not valid UTF-8, or n. */
static size_t utf8_check(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint64_t w;
        if (i + 8 <= n && (memcpy(&w, s + i, 8), (w & 0x8080808080808080ull) == 0)) {
            i += 8; /* eight ASCII bytes */
            continue;
        }
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t len = tk_utf8_next(s + i, n - i, &cp);
        if (cp == TK_INVALID_CP)
            return i;
        i += len;
    }
    return n;
}

lz_status tj_parse(const char *text, size_t len, const char *what, tj_doc **out, const tj_val **root) {
    *out = NULL;
    *root = NULL;
    tj_parser p = {text, len, 0, NULL, NULL, 0, 0, what};
    size_t bad = utf8_check(text, len);
    if (bad < len) {
        p.pos = bad;
        return syntax(&p, "valid UTF-8");
    }
    p.doc = calloc(1, sizeof *p.doc);
    if (!p.doc)
        return lz_fail(LZ_ERR_NOMEM, "%s: out of memory", what);
    lz_status st = parse_value(&p, &p.doc->root, 0);
    if (st == LZ_OK) {
        skip_ws(&p);
        if (p.pos != p.n)
            st = syntax(&p, "the end of the document");
    }
    free(p.stack);
    if (st != LZ_OK) {
        tj_free(p.doc);
        return st;
    }
    *out = p.doc;
    *root = &p.doc->root;
    return LZ_OK;
}

void tj_free(tj_doc *doc) {
    if (!doc)
        return;
    for (struct tj_block *b = doc->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(doc);
}

const tj_val *tj_get(const tj_val *o, const char *key) {
    if (!o || o->type != TJ_OBJ)
        return NULL;
    size_t len = strlen(key);
    for (uint32_t i = 0; i < o->n; i++) {
        const tj_val *m = &o->u.kids[i];
        if (m->key_len == len && memcmp(m->key, key, len) == 0)
            return m;
    }
    return NULL;
}

bool tj_is_str(const tj_val *v, const char *s) {
    return v && v->type == TJ_STR && v->n == strlen(s) && memcmp(v->u.s, s, v->n) == 0;
}
