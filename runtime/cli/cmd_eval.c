/* cmd_eval.c - `lizard eval`: how good a model is, teacher or Lizard.
 *
 *   lizard eval --model DIR --text FILE                      perplexity
 *   lizard eval --model DIR --passkey --contexts 1024,2048   passkey retrieval table
 *
 * Perplexity: the text (with BOS) cut into segments of --ppl-context tokens,
 * each a fresh sequence; exp of the mean negative log-likelihood of every
 * token after the first of its segment.
 * Passkey: a 5-digit number hidden at a random depth in repeated filler text
 * of about the given number of tokens, asked for at the end; the greedy
 * continuation must contain it. Forward passes go through the engine (engine.h). */
#include <math.h>   // exp, log
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // malloc, free
#include <string.h> // strlen, strstr, memcpy

#include "cli_options.h"   // lz_parse_command
#include "commands.h"      // lz_cmd_eval
#include "context_limit.h" // lz_check_context
#include "engine.h"        // lz_engine
#include "id_list.h"       // lz_parse_id_list
#include "mpi_world.h"     // lz_world_get
#include "text_file.h"     // lz_read_text_file
#include "tokenizer.h"     // lz_tokenizer

typedef struct {
    const char *model, *text, *contexts, *device, *dtype, *softmax_layers;
    long ppl_context, trials, seed, chunk;
    bool passkey, allow_long;
} eval_args;

/* ---- perplexity ------------------------------------------------------------------------- */

// log-softmax of logits[V] at `id`
static double log_prob(const float *logits, int V, int id) {
    double mx = logits[0], sum = 0;
    for (int v = 1; v < V; v++)
        mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < V; v++)
        sum += exp((double)logits[v] - mx);
    return (double)logits[id] - mx - log(sum);
}

static lz_status perplexity(lz_engine *e, lz_tokenizer *tok, const eval_args *a) {
    char *text = NULL;
    size_t len = 0;
    LZ_TRY(lz_read_text_file("--text", a->text, &text, &len));
    int32_t *ids = NULL;
    int n = 0;
    lz_status s = lz_tokenizer_encode(tok, text, len, true, &ids, &n);
    free(text);
    if (s == LZ_OK && n < 2)
        s = lz_fail(LZ_ERR_INPUT, "--text %s: %d tokens; perplexity needs at least 2", a->text, n);
    const int V = e->model.cfg.vocab_size, seg = (int)a->ppl_context, piece = (int)a->chunk;
    float *logits = s == LZ_OK ? malloc(sizeof(float) * (size_t)piece * V) : NULL;
    if (s == LZ_OK && !logits)
        s = lz_fail(LZ_ERR_NOMEM, "logits: out of memory");
    double nll = 0;
    long counted = 0;
    for (int s0 = 0; s == LZ_OK && s0 + 1 < n; s0 += seg) {
        const int s1 = s0 + seg < n ? s0 + seg : n;
        s = lz_state_reset_slot(&e->state, &e->model, 0);
        for (int p0 = s0; s == LZ_OK && p0 < s1; p0 += piece) {
            const int p1 = p0 + piece < s1 ? p0 + piece : s1;
            s = lz_engine_prefill(e, 0, ids + p0, p1 - p0, logits, NULL);
            for (int t = p0; s == LZ_OK && t + 1 < s1 && t < p1; t++, counted++)
                nll -= log_prob(logits + (size_t)(t - p0) * V, V, ids[t + 1]);
        }
    }
    if (s == LZ_OK)
        printf("perplexity %.4f  (mean nll %.4f over %ld predicted tokens of %d, segments of %d)\n",
               exp(nll / (double)counted), nll / (double)counted, counted, n, seg);
    free(logits);
    free(ids);
    return s;
}

/* ---- passkey ------------------------------------------------------------------------------ */

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
    const int V = e->model.cfg.vocab_size, key = 10000 + (int)(mix64(seed) % 90000);
    const double depth = (double)(mix64(seed ^ 0xD1B54A32D192ED03ULL) >> 11) * 0x1.0p-53;
    int32_t *ids, n, out[ANSWER], slot = 0;
    LZ_TRY(passkey_prompt(tok, context, ANSWER, depth, key, &ids, &n));
    float *logits = malloc(sizeof(float) * (size_t)V);
    lz_status s = logits ? lz_state_reset_slot(&e->state, &e->model, 0) : lz_fail(LZ_ERR_NOMEM, "out of memory");
    if (s == LZ_OK)
        s = lz_engine_prefill(e, 0, ids, n, NULL, logits);
    for (int i = 0; s == LZ_OK && i < ANSWER; i++) {
        out[i] = argmax(logits, V);
        if (i + 1 < ANSWER)
            s = lz_engine_decode(e, 1, &slot, &out[i], logits);
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

static lz_status passkey(lz_engine *e, lz_tokenizer *tok, const int32_t *contexts, int n_contexts,
                         const eval_args *a) {
    printf("%8s %7s %8s %9s\n", "context", "trials", "correct", "accuracy");
    for (int c = 0; c < n_contexts; c++) {
        int correct = 0;
        for (int t = 0; t < a->trials; t++) {
            bool found;
            LZ_TRY(passkey_trial(e, tok, contexts[c], mix64((uint64_t)a->seed * 1000003u + (uint64_t)t), &found));
            correct += found;
        }
        printf("%8d %7ld %8d %9.2f\n", contexts[c], a->trials, correct, (double)correct / (double)a->trials);
        fflush(stdout);
    }
    return LZ_OK;
}

/* ---- the command ------------------------------------------------------------------------------ */

static lz_status run_eval(const eval_args *a, const int32_t *contexts, int n_contexts) {
    int max_context = a->text ? (int)a->ppl_context : 1;
    for (int i = 0; i < n_contexts; i++)
        max_context = contexts[i] > max_context ? contexts[i] : max_context;
    lz_tokenizer *tok;
    LZ_TRY(lz_tokenizer_load(a->model, &tok));
    lz_engine e;
    lz_engine_options eo = {.model_dir = a->model, .device = a->device, .dtype = a->dtype,
                            .softmax_layers = a->softmax_layers, .n_slots = 1, .max_context = max_context,
                            .prefill_chunk = (int)a->chunk};
    lz_status s = lz_check_context(a->model, a->softmax_layers, max_context, a->allow_long);
    if (s != LZ_OK) {
        lz_tokenizer_free(tok);
        return s;
    }
    s = lz_engine_open(&e, &eo);
    if (s == LZ_OK && a->text)
        s = perplexity(&e, tok, a);
    if (s == LZ_OK && a->passkey)
        s = passkey(&e, tok, contexts, n_contexts, a);
    lz_engine_close(&e);
    lz_tokenizer_free(tok);
    return s;
}

lz_status lz_cmd_eval(int argc, char **argv) {
    eval_args a = {.contexts = "1024,2048,4096", .device = "cpu", .dtype = "bf16", .ppl_context = 1024,
                   .trials = 5, .chunk = 256};
    const lz_option options[] = {
        {"--model", LZ_OPT_DIR, "DIR", "model folder (teacher or Lizard) with tokenizer.json", &a.model, true, 0,
         0},
        {"--text", LZ_OPT_STRING, "FILE", "UTF-8 text: report its perplexity", &a.text, false, 0, 0},
        {"--ppl-context", LZ_OPT_INT, "N", "tokens per perplexity segment (default 1024)", &a.ppl_context, false, 2,
         1 << 24},
        {"--passkey", LZ_OPT_FLAG, "", "passkey retrieval at each of --contexts", &a.passkey, false, 0, 0},
        {"--contexts", LZ_OPT_STRING, "N,N,...", "passkey context lengths in tokens (default 1024,2048,4096)",
         &a.contexts, false, 0, 0},
        {"--trials", LZ_OPT_INT, "N", "passkey trials per context (default 5)", &a.trials, false, 1, 100000},
        {"--seed", LZ_OPT_INT, "N", "passkey numbers and depths (default 0)", &a.seed, false, 0, 9007199254740991.0},
        {"--prefill-chunk", LZ_OPT_INT, "N", "tokens per forward step (default 256)", &a.chunk, false, 1, 1 << 20},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &a.softmax_layers, false, 0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &a.device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32", "CUDA weights and activations (default bf16)", &a.dtype, false, 0, 0},
        {"--allow-long-context", LZ_OPT_FLAG, "", "let softmax layers run past max_position_embeddings",
         &a.allow_long, false, 0, 0},
    };
    const lz_command_spec spec = {"eval", "perplexity of a text and passkey retrieval across context lengths",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    if (!a.text && !a.passkey)
        return lz_fail(LZ_ERR_INPUT, "lizard eval: give --text FILE and/or --passkey");
    if (lz_world_get()->size > 1) // it resets sequence state between trials, which a pipeline's other ranks hold
        return lz_fail(LZ_ERR_INPUT, "lizard eval: runs in one process, not under mpirun -np %d",
                       lz_world_get()->size);
    int32_t *contexts = NULL;
    int n_contexts = 0;
    if (a.passkey) {
        LZ_TRY(lz_parse_id_list("--contexts", a.contexts, &contexts, &n_contexts));
        for (int i = 0; i < n_contexts; i++)
            if (contexts[i] < 64) {
                free(contexts);
                return lz_fail(LZ_ERR_INPUT, "--contexts: %d tokens is too short for a passkey prompt", contexts[i]);
            }
    }
    lz_status s = run_eval(&a, contexts, n_contexts);
    free(contexts);
    return s;
}
