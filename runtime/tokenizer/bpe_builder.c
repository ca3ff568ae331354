/* bpe_builder.c - byte-level BPE training on an embedded text, and the
 * tokenizer.json / tokenizer_config.json writers (see bpe_builder.h). */
#include "bpe_builder.h"

#include <stdbool.h>            // bool
#include <stdio.h>              // snprintf
#include <stdlib.h>             // malloc, calloc, realloc, free, qsort
#include <string.h>             // memcmp, memcpy, strlen

#include <jansson.h>            // json_t, json_pack, json_dumps

#include "safetensors_writer.h" // lz_write_file_atomic

/* ---- the training text ------------------------------------------------------ */

/* Written for this project. Plain ASCII English, a mix of everyday words and
 * the vocabulary of the runtime itself, so that the tiny models' tokenizer
 * splits both prose and log-like text into sensible pieces. */
static const char corpus[] =
    "Lizards are reptiles that live on every continent except Antarctica. Most of them have four legs, "
    "a long tail, movable eyelids and small ears that open on the side of the head. There are more than "
    "seven thousand species, from the tiny gecko that fits on a fingertip to the Komodo dragon, which can "
    "grow longer than a small boat and weigh as much as a grown man.\n\n"
    "A lizard cannot make its own heat. In the morning it climbs onto a warm rock and lies in the sun "
    "until its body is ready for the day. When the afternoon becomes too hot, it hides under a stone or "
    "in the shade of a bush. Watching a lizard move between sun and shade is a good way to learn how "
    "the temperature changes during the day.\n\n"
    "Many lizards can drop their tails when a bird or a snake catches them. The tail keeps moving for a "
    "while, and the hunter looks at it while the lizard runs away. Later the lizard grows a new tail, "
    "although the new one is often shorter and has a different color. Some geckos can walk up a window "
    "because their toes are covered with millions of tiny hairs that hold on to the glass. A chameleon "
    "changes its color to show its mood, and it catches insects with a tongue that is longer than its "
    "body. The horned lizard of the desert can even squirt a thin stream of blood from its eyes to "
    "confuse a hungry fox.\n\n"
    "Computers and lizards have more in common than one might think. Both of them work with a small "
    "amount of energy, both react to what happens around them, and both keep a short memory of the "
    "recent past. A language model reads a sequence of tokens and predicts the next token. The classic "
    "model keeps every key and value that it has seen, so its memory grows with the length of the text. "
    "A linear attention layer keeps a state of fixed size instead: a matrix that is updated at each "
    "position and slowly forgets old information through a gate. The state is like the warm body of the "
    "lizard: it holds what matters and lets the rest fade away.\n\n"
    "The Lizard model mixes the two ideas. A few layers keep the full softmax attention of the teacher, "
    "and the other layers use gated linear attention with a small window of recent tokens. The window "
    "sees the last few positions exactly, while the gated state remembers a summary of everything "
    "before them. Meta tokens add a few learned numbers to the denominator of the window, which lets "
    "the layer decide how much attention to give to the window at all.\n\n"
    "To run a large model on several graphics cards, the runtime splits the layers into stages. Each "
    "process owns the layers of one stage and sends its hidden states to the next process. The first "
    "stage turns token ids into vectors, the last stage turns vectors back into scores over the "
    "vocabulary, and a sampler picks the next token from those scores. While one stage works on the "
    "first batch of requests, the stage before it can already start on the second batch, so every card "
    "stays busy.\n\n"
    "A checkpoint is a folder of files. The config file describes the shape of the model: the number of "
    "layers, the hidden size, the number of heads, and the settings of the rotary position embedding. "
    "The weights live in safetensors files, which begin with a small header that lists the name, the "
    "type and the shape of every tensor, followed by the raw numbers. Because the header says where each "
    "tensor starts, a program can map the file into memory and read only the tensors that it needs.\n\n"
    "When you test a new program, start with a tiny model. A tiny model has random weights, so its "
    "answers mean nothing, but it runs in a second and shows whether every part of the program fits "
    "together. Write the numbers you expect, compare them with the numbers you get, and print the name "
    "of the file, the layer or the tensor whenever something goes wrong. A good error message saves an "
    "hour of searching.\n\n"
    "In the evening the desert cools down and the lizards return to their holes. The stars come out, "
    "the wind moves the sand, and somewhere a small gecko starts to sing. Tomorrow the sun will rise "
    "again, the rocks will grow warm, and the long patient work of being a lizard will begin once more. "
    "Numbers for the curious: 1 lizard, 2 eyes, 4 legs, 5 toes on each foot, 12 hours of sun, 24 hours "
    "in a day, 365 days in a year, 2048 tokens in a window, 4096 positions in a context.\n";

const char *lz_bpe_corpus(void) { return corpus; }

/* ---- bytes to unicode --------------------------------------------------------- */

static bool maps_to_itself(uint8_t b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t lz_bpe_byte_to_codepoint(uint8_t b) {
    if (maps_to_itself(b))
        return b;
    uint32_t n = 0; /* rank of b among the bytes that do not map to themselves */
    for (int c = 0; c < b; c++)
        n += !maps_to_itself((uint8_t)c);
    return 256 + n;
}

/* Spells raw token bytes in the mapped alphabet, UTF-8 encoded (every mapped
 * code point is below 0x800: one or two bytes). `out` holds 2*len+1. */
static void spell_token(const uint8_t *bytes, size_t len, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = lz_bpe_byte_to_codepoint(bytes[i]);
        if (cp < 0x80) {
            out[k++] = (char)cp;
        } else {
            out[k++] = (char)(0xC0 | (cp >> 6));
            out[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[k] = '\0';
}

/* ---- pre-tokenization ----------------------------------------------------------- */

/* A simplified version of the LLaMA-3 split regex: " word", digits in groups
 * of up to three, " punct..." and whitespace runs that leave one space for
 * the next word. Non-ASCII bytes count as letters. */
static bool is_letter(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static bool is_space(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_punct(uint8_t c) { return !is_letter(c) && !is_digit(c) && !is_space(c); }

/* End of the unit that starts at i. */
static size_t unit_end(const uint8_t *s, size_t len, size_t i) {
    size_t j = i;
    if (s[j] == ' ' && j + 1 < len && (is_letter(s[j + 1]) || is_punct(s[j + 1])))
        j++; /* the space belongs to the word after it */
    if (is_letter(s[j])) {
        while (j < len && is_letter(s[j]))
            j++;
        return j;
    }
    if (is_punct(s[j])) {
        while (j < len && is_punct(s[j]))
            j++;
        return j;
    }
    if (is_digit(s[j])) {
        while (j < len && j < i + 3 && is_digit(s[j]))
            j++;
        return j;
    }
    while (j < len && is_space(s[j]))
        j++;
    if (j - i > 1 && j < len && s[j - 1] == ' ' && !is_digit(s[j]))
        j--; /* leave the last space to the next word */
    return j;
}

/* ---- training state ----------------------------------------------------------- */

typedef struct {
    int *ids;  /* current tokens of the word */
    int n;
    long count; /* occurrences in the text */
} word;

typedef struct {
    int a, b;
    long count;
} pair_count;

typedef struct {
    lz_bpe *bpe;
    word *words;
    size_t n_words;
} trainer;

static int compare_units(const void *x, const void *y) {
    const word *a = x, *b = y; /* ids still hold bytes at this point */
    int n = a->n < b->n ? a->n : b->n;
    for (int i = 0; i < n; i++)
        if (a->ids[i] != b->ids[i])
            return a->ids[i] < b->ids[i] ? -1 : 1;
    return (a->n > b->n) - (a->n < b->n);
}

/* Cuts the text into units, then merges equal units into one word with a count. */
static lz_status collect_words(trainer *t, const uint8_t *s, size_t len) {
    t->words = calloc(len ? len : 1, sizeof *t->words);
    if (!t->words)
        return lz_fail(LZ_ERR_NOMEM, "bpe: out of memory");
    for (size_t i = 0; i < len;) {
        size_t j = unit_end(s, len, i);
        word *w = &t->words[t->n_words++];
        w->ids = malloc((j - i) * sizeof *w->ids);
        if (!w->ids)
            return lz_fail(LZ_ERR_NOMEM, "bpe: out of memory");
        for (size_t k = i; k < j; k++)
            w->ids[w->n++] = s[k];
        w->count = 1;
        i = j;
    }
    qsort(t->words, t->n_words, sizeof *t->words, compare_units);
    size_t kept = 0;
    for (size_t i = 0; i < t->n_words; i++) {
        if (kept > 0 && compare_units(&t->words[kept - 1], &t->words[i]) == 0) {
            t->words[kept - 1].count++;
            free(t->words[i].ids);
        } else {
            t->words[kept++] = t->words[i];
        }
    }
    t->n_words = kept;
    return LZ_OK;
}

static lz_status add_token(lz_bpe *bpe, const uint8_t *bytes, size_t len) {
    uint8_t *copy = malloc(len);
    if (!copy)
        return lz_fail(LZ_ERR_NOMEM, "bpe: out of memory");
    memcpy(copy, bytes, len);
    bpe->bytes[bpe->n_tokens] = copy;
    bpe->len[bpe->n_tokens++] = len;
    return LZ_OK;
}

/* Byte strings compared as unsigned bytes, a prefix before its extensions. */
static int compare_bytes(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}

static int compare_pair_ids(const void *x, const void *y) {
    const pair_count *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return (p->b > q->b) - (p->b < q->b);
}

/* True if pair p should be merged before pair q. */
static bool better_pair(const lz_bpe *bpe, const pair_count *p, const pair_count *q) {
    if (p->count != q->count)
        return p->count > q->count;
    int c = compare_bytes(bpe->bytes[p->a], bpe->len[p->a], bpe->bytes[q->a], bpe->len[q->a]);
    if (c == 0)
        c = compare_bytes(bpe->bytes[p->b], bpe->len[p->b], bpe->bytes[q->b], bpe->len[q->b]);
    return c < 0;
}

/* Counts every adjacent pair (weighted by word count) and picks the best.
 * Returns false when no word has two tokens left. */
static bool best_pair(const trainer *t, pair_count *scratch, pair_count *best) {
    size_t n = 0;
    for (size_t i = 0; i < t->n_words; i++)
        for (int k = 0; k + 1 < t->words[i].n; k++)
            scratch[n++] = (pair_count){t->words[i].ids[k], t->words[i].ids[k + 1], t->words[i].count};
    if (n == 0)
        return false;
    qsort(scratch, n, sizeof *scratch, compare_pair_ids);
    bool found = false;
    for (size_t i = 0; i < n;) {
        pair_count run = scratch[i++];
        while (i < n && scratch[i].a == run.a && scratch[i].b == run.b)
            run.count += scratch[i++].count;
        if (!found || better_pair(t->bpe, &run, best)) {
            *best = run;
            found = true;
        }
    }
    return true;
}

/* Id of the token with these bytes, or -1. Linear: vocabularies here are small. */
static int find_token(const lz_bpe *bpe, const uint8_t *bytes, size_t len) {
    for (int i = bpe->n_tokens - 1; i >= 0; i--)
        if (bpe->len[i] == len && memcmp(bpe->bytes[i], bytes, len) == 0)
            return i;
    return -1;
}

/* Replaces every (a, b), left to right, by `merged` in every word. */
static void apply_merge(trainer *t, int a, int b, int merged) {
    for (size_t i = 0; i < t->n_words; i++) {
        word *w = &t->words[i];
        int out = 0;
        for (int k = 0; k < w->n; k++) {
            if (k + 1 < w->n && w->ids[k] == a && w->ids[k + 1] == b) {
                w->ids[out++] = merged;
                k++;
            } else {
                w->ids[out++] = w->ids[k];
            }
        }
        w->n = out;
    }
}

/* One merge step; the merged token is new unless an earlier merge already
 * spelled the same bytes (then the vocabulary does not grow, as in HF's trainer). */
static lz_status merge_once(trainer *t, const pair_count *p, int max_merges) {
    lz_bpe *bpe = t->bpe;
    size_t la = bpe->len[p->a], lb = bpe->len[p->b];
    uint8_t *joined = malloc(la + lb);
    if (!joined)
        return lz_fail(LZ_ERR_NOMEM, "bpe: out of memory");
    memcpy(joined, bpe->bytes[p->a], la);
    memcpy(joined + la, bpe->bytes[p->b], lb);
    int id = find_token(bpe, joined, la + lb);
    lz_status st = LZ_OK;
    if (id < 0) {
        id = bpe->n_tokens;
        st = add_token(bpe, joined, la + lb);
    }
    free(joined);
    LZ_TRY(st);
    if (bpe->n_merges >= max_merges)
        return lz_fail(LZ_ERR_INTERNAL, "bpe: more than %d merges", max_merges);
    bpe->merges[bpe->n_merges][0] = p->a;
    bpe->merges[bpe->n_merges][1] = p->b;
    bpe->n_merges++;
    apply_merge(t, p->a, p->b, id);
    return LZ_OK;
}

static lz_status train_loop(trainer *t, size_t n_chars, int n_tokens) {
    /* Every word has at most n_chars - 1 pairs in all; each merge removes at
     * least one pair occurrence, so there are at most n_chars merges. */
    int max_merges = (int)n_chars + 1;
    t->bpe->merges = calloc((size_t)max_merges, sizeof *t->bpe->merges);
    pair_count *scratch = calloc(n_chars ? n_chars : 1, sizeof *scratch);
    lz_status st = (t->bpe->merges && scratch) ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "bpe: out of memory");
    while (st == LZ_OK && t->bpe->n_tokens < n_tokens) {
        pair_count best;
        if (!best_pair(t, scratch, &best))
            st = lz_fail(LZ_ERR_INTERNAL, "bpe: the training text ran out of pairs at %d of %d tokens",
                         t->bpe->n_tokens, n_tokens);
        else
            st = merge_once(t, &best, max_merges);
    }
    free(scratch);
    return st;
}

lz_status lz_bpe_train(const char *text, size_t len, int n_tokens, lz_bpe *out) {
    *out = (lz_bpe){0};
    if (n_tokens < 256)
        return lz_fail(LZ_ERR_INTERNAL, "bpe: %d tokens is fewer than the 256 byte tokens", n_tokens);
    out->bytes = calloc((size_t)n_tokens, sizeof *out->bytes);
    out->len = calloc((size_t)n_tokens, sizeof *out->len);
    trainer t = {.bpe = out};
    lz_status st = (out->bytes && out->len) ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "bpe: out of memory");
    for (int b = 0; b < 256 && st == LZ_OK; b++) {
        uint8_t byte = (uint8_t)b;
        st = add_token(out, &byte, 1);
    }
    if (st == LZ_OK)
        st = collect_words(&t, (const uint8_t *)text, len);
    if (st == LZ_OK)
        st = train_loop(&t, len, n_tokens);
    for (size_t i = 0; t.words && i < t.n_words; i++)
        free(t.words[i].ids);
    free(t.words);
    if (st != LZ_OK)
        lz_bpe_free(out);
    return st;
}

void lz_bpe_free(lz_bpe *bpe) {
    for (int i = 0; bpe->bytes && i < bpe->n_tokens; i++)
        free(bpe->bytes[i]);
    free(bpe->bytes);
    free(bpe->len);
    free(bpe->merges);
    *bpe = (lz_bpe){0};
}

/* ---- tokenizer.json ------------------------------------------------------------- */

/* LLaMA-3's pre-tokenizer split pattern, as in its tokenizer.json. */
static const char llama3_split_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_t *added_token(int id, const char *content) {
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", 0,
                     "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
}

static json_t *pre_tokenizer(void) {
    return json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence", "pretokenizers",
                     "type", "Split", "pattern", "Regex", llama3_split_regex, "behavior", "Isolated", "invert", 0,
                     "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0);
}

/* Prepends <|begin_of_text|> to every sequence, as LLaMA-3's post-processor does. */
static json_t *post_processor(int bos_id) {
    return json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}],"
                     " s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}],"
                     " s:{s:{s:s, s:[i], s:[s]}}}",
                     "type", "TemplateProcessing",
                     "single", "SpecialToken", "id", LZ_BPE_BOS, "type_id", 0, "Sequence", "id", "A", "type_id", 0,
                     "pair", "SpecialToken", "id", LZ_BPE_BOS, "type_id", 0, "Sequence", "id", "A", "type_id", 0,
                     "SpecialToken", "id", LZ_BPE_BOS, "type_id", 1, "Sequence", "id", "B", "type_id", 1,
                     "special_tokens", LZ_BPE_BOS, "id", LZ_BPE_BOS, "ids", bos_id, "tokens", LZ_BPE_BOS);
}

static json_t *spelled(const lz_bpe *bpe, int id) {
    char buf[2 * 256 + 1], *text = buf;
    size_t len = bpe->len[id];
    if (2 * len + 1 > sizeof buf && !(text = malloc(2 * len + 1)))
        return NULL;
    spell_token(bpe->bytes[id], len, text);
    json_t *s = json_string(text);
    if (text != buf)
        free(text);
    return s;
}

/* {"type": "BPE", ..., "vocab": {token: id}, "merges": [[a, b], ...]} */
static json_t *bpe_model(const lz_bpe *bpe) {
    json_t *vocab = json_object(), *merges = json_array();
    bool bad = !vocab || !merges;
    for (int i = 0; i < bpe->n_tokens && !bad; i++) {
        json_t *key = spelled(bpe, i);
        bad = !key || json_object_set_new(vocab, json_string_value(key), json_integer(i)) != 0;
        json_decref(key);
    }
    for (int m = 0; m < bpe->n_merges && !bad; m++)
        bad = json_array_append_new(merges, json_pack("[o, o]", spelled(bpe, bpe->merges[m][0]),
                                                      spelled(bpe, bpe->merges[m][1]))) != 0;
    if (bad) {
        json_decref(vocab);
        json_decref(merges);
        return NULL;
    }
    return json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout", "unk_token",
                     "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                     "ignore_merges", 1, "vocab", vocab, "merges", merges);
}

lz_status lz_bpe_tokenizer_json(const lz_bpe *bpe, char **out) {
    int bos = bpe->n_tokens, eos = bpe->n_tokens + 1;
    /* "o" steals a reference even on failure, so NULL parts fail cleanly. */
    json_t *root = json_pack(
        "{s:s, s:n, s:n, s:[o, o], s:n, s:o, s:o, s:{s:s, s:b, s:b, s:b}, s:o}", "version", "1.0", "truncation",
        "padding", "added_tokens", added_token(bos, LZ_BPE_BOS), added_token(eos, LZ_BPE_EOS), "normalizer",
        "pre_tokenizer", pre_tokenizer(), "post_processor", post_processor(bos), "decoder", "type", "ByteLevel",
        "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "model", bpe_model(bpe));
    *out = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return *out ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "bpe: out of memory building tokenizer.json");
}

/* transformers' AutoTokenizer reads the special token strings from here. */
static lz_status tokenizer_config_json(const lz_bpe *bpe, int model_max_length, char **out) {
    char bos_id[16], eos_id[16];
    snprintf(bos_id, sizeof bos_id, "%d", bpe->n_tokens);
    snprintf(eos_id, sizeof eos_id, "%d", bpe->n_tokens + 1);
    json_t *root = json_pack("{s:s, s:s, s:b, s:b, s:i, s:s, s:b, s:{s:o, s:o}}", "bos_token", LZ_BPE_BOS,
                             "eos_token", LZ_BPE_EOS, "add_bos_token", 1, "add_eos_token", 0, "model_max_length",
                             model_max_length, "tokenizer_class", "PreTrainedTokenizerFast",
                             "clean_up_tokenization_spaces", 0, "added_tokens_decoder", bos_id,
                             added_token(bpe->n_tokens, LZ_BPE_BOS), eos_id,
                             added_token(bpe->n_tokens + 1, LZ_BPE_EOS));
    *out = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return *out ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "bpe: out of memory building tokenizer_config.json");
}

static lz_status write_text(const char *dir, const char *name, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lz_write_file_atomic(path, text, strlen(text));
}

lz_status lz_bpe_write_files(const char *dir, const lz_bpe *bpe, int model_max_length) {
    char *tok = NULL, *cfg = NULL;
    lz_status st = lz_bpe_tokenizer_json(bpe, &tok);
    if (st == LZ_OK)
        st = tokenizer_config_json(bpe, model_max_length, &cfg);
    if (st == LZ_OK)
        st = write_text(dir, "tokenizer.json", tok);
    if (st == LZ_OK)
        st = write_text(dir, "tokenizer_config.json", cfg);
    free(tok);
    free(cfg);
    return st;
}
