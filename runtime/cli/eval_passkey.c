/* eval_passkey.c - the passkey retrieval test (eval_passkey.h): the prompt
 * intro + filler x before + needle + filler x after + question, cut to fit the
 * context, then greedy decoding through the engine. */
#include <stdio.h>  // snprintf, sprintf
#include <stdlib.h> // malloc, free
#include <string.h> // strlen, strstr

#include "eval_passkey.h"

static const char intro[] = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
                            "it. I will quiz you about the important information there.\n";
static const char filler[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
                             "again. ";
static const char question[] = "\nWhat is the pass key? The pass key is";

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* intro + filler x before + needle + filler x after + question */
static char *passkey_text(int n_filler, int before, int key) {
    char needle[128];
    snprintf(needle, sizeof needle, "The pass key is %d. Remember it. %d is the pass key. ", key, key);
    const size_t cap = sizeof intro + strlen(needle) + sizeof question + (size_t)n_filler * strlen(filler) + 1;
    char *text = malloc(cap), *p = text;
    if (!text)
        return NULL;
    p += sprintf(p, "%s", intro);
    for (int i = 0; i < n_filler; i++) {
        if (i == before)
            p += sprintf(p, "%s", needle);
        p += sprintf(p, "%s", filler);
    }
    if (before >= n_filler)
        p += sprintf(p, "%s", needle);
    sprintf(p, "%s", question);
    return text;
}

/* The prompt of about `context` tokens (at most context - answer room) for one trial. */
static lz_status passkey_prompt(lz_tokenizer *tok, int context, int answer, double depth, int key, int32_t **ids,
                                int *n) {
    int n_filler = context / 8;
    for (;;) {
        char *text = passkey_text(n_filler, (int)(depth * n_filler), key);
        if (!text)
            return lz_fail(LZ_ERR_NOMEM, "passkey prompt: out of memory");
        lz_status s = lz_tokenizer_encode(tok, text, strlen(text), true, ids, n);
        free(text);
        LZ_TRY(s);
        if (*n + answer <= context)
            return LZ_OK;
        free(*ids);
        *ids = NULL;
        if (n_filler == 0)
            return lz_fail(LZ_ERR_INPUT, "--contexts %d: too short for the passkey prompt", context);
        const int over = *n + answer - context; // drop about enough filler and try again
        n_filler -= over / 20 + 1 < n_filler ? over / 20 + 1 : n_filler;
    }
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        best = x[i] > x[best] ? i : best;
    return best;
}

static lz_status passkey_trial(lz_engine *e, lz_tokenizer *tok, int context, uint64_t seed, bool *found) {
    enum { ANSWER = 8 };
    const int V = lz_engine_config(e)->vocab_size, key = 10000 + (int)(mix64(seed) % 90000);
    const double depth = (double)(mix64(seed ^ 0xD1B54A32D192ED03ULL) >> 11) * 0x1.0p-53;
    int32_t *ids, n, out[ANSWER], slot = 0;
    LZ_TRY(passkey_prompt(tok, context, ANSWER, depth, key, &ids, &n));
    float *logits = malloc(sizeof(float) * (size_t)V);
    lz_status s = logits ? lz_tokenizer_check_ids(tok, ids, n, V, "lizard eval: --passkey prompt")
                         : lz_fail(LZ_ERR_NOMEM, "out of memory");
    if (s == LZ_OK)
        s = lz_engine_reset_slot(e, 0);
    if (s == LZ_OK)
        s = lz_engine_prefill(e, 0, ids, n, NULL, (lz_step_out){.logits = logits});
    for (int i = 0; s == LZ_OK && i < ANSWER; i++) {
        out[i] = argmax(logits, V);
        if (i + 1 < ANSWER)
            s = lz_engine_decode(e, 1, &slot, &out[i], (lz_step_out){.logits = logits});
    }
    char *answer = NULL, want[16];
    size_t len;
    if (s == LZ_OK)
        s = lz_tokenizer_decode(tok, out, ANSWER, true, &answer, &len);
    snprintf(want, sizeof want, "%d", key);
    *found = s == LZ_OK && strstr(answer, want) != NULL;
    free(answer), free(logits), free(ids);
    return s;
}

lz_status lz_passkey_run(lz_engine *e, lz_tokenizer *tok, int context, long trials, uint64_t seed, int *correct) {
    *correct = 0;
    for (long t = 0; t < trials; t++) {
        bool found;
        LZ_TRY(passkey_trial(e, tok, context, mix64(seed * 1000003u + (uint64_t)t), &found));
        *correct += found;
    }
    return LZ_OK;
}
