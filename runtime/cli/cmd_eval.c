/* cmd_eval.c - `lizard eval`: how good a model is, teacher or Lizard.
 *
 *   lizard eval --model DIR --text FILE --ppl-context 256,1024   perplexity at each window length
 *   lizard eval --model DIR --passkey --contexts 1024,2048       passkey retrieval table
 *   ... --json                                                   one JSON object instead (scripts)
 *
 * Perplexity at window length W: the text (with BOS) is tokenized once and cut
 * into consecutive windows of W tokens (the last one shorter when the text does
 * not divide), each run as a fresh sequence; the result is exp of the mean
 * negative log-likelihood of every token after the first of its window. A long
 * run says how far it is on stderr every few seconds (--progress).
 * Passkey: eval_passkey.h. Forward passes go through the engine (engine.h). */
#include <jansson.h> // json_pack, json_dumpf
#include <math.h>    // exp, isfinite
#include <stdio.h>   // printf
#include <stdlib.h>  // malloc, free

#include "cli_options.h"   // lz_parse_command
#include "clock.h"         // lz_now_seconds
#include "commands.h"      // lz_cmd_eval
#include "context_limit.h" // lz_check_context
#include "engine.h"        // lz_engine
#include "eval_nll.h"      // lz_rows_nll
#include "eval_passkey.h"  // lz_passkey_run
#include "id_list.h"       // lz_parse_id_list
#include "text_file.h"     // lz_read_text_file
#include "tokenizer.h"     // lz_tokenizer

typedef struct {
    const char *model, *adapter, *text, *ppl_contexts, *contexts, *device, *dtype, *softmax_layers;
    long trials, seed, chunk;
    double progress; /* seconds between progress lines (0: after every window) */
    bool passkey, json, allow_long;
} eval_args;

typedef struct {
    int32_t *len; /* window lengths (--ppl-context) or passkey contexts (--contexts) */
    int n;
} length_list;

/* ---- perplexity ------------------------------------------------------------------------- */

typedef struct {
    int windows;
    long predicted; /* tokens scored: every token after the first of its window */
    double nll;     /* their summed negative log-likelihood */
} ppl_result;

/* How far a perplexity run is: a line on stderr (never stdout, which --json keeps to one object) when
 * `every` seconds have passed since the last, with the time left at the pace so far; none after the
 * last window, whose result line follows. */
typedef struct {
    double every, start, last;
    int seg, windows;
} ppl_progress;

static void progress_after(ppl_progress *p, int done) {
    const double now = lz_now_seconds();
    if (done >= p->windows || now - p->last < p->every)
        return;
    p->last = now;
    const double spent = now - p->start;
    fprintf(stderr, "lizard eval: perplexity at %d tokens: window %d of %d, %.0f s so far, about %.0f s left\n",
            p->seg, done, p->windows, spent, spent / done * (p->windows - done));
}

/* ids[n] in windows of `seg` tokens, fed `piece` tokens a step; logits [piece, V] and nll [piece]
 * are scratch. The rows' NLLs are added in order, so the sum does not depend on the threads. */
static lz_status windows_nll(lz_engine *e, const int32_t *ids, int n, int seg, int piece, float *logits,
                             double *nll, double progress_every, ppl_result *r) {
    const int V = lz_engine_config(e)->vocab_size;
    *r = (ppl_result){0};
    const double t0 = lz_now_seconds();
    ppl_progress p = {progress_every, t0, t0, seg, (n - 1 + seg - 1) / seg};
    for (int s0 = 0; s0 + 1 < n; s0 += seg, r->windows++) {
        const int s1 = s0 + seg < n ? s0 + seg : n;
        LZ_TRY(lz_engine_reset_slot(e, 0));
        for (int p0 = s0; p0 < s1; p0 += piece) {
            const int p1 = p0 + piece < s1 ? p0 + piece : s1;
            LZ_TRY(lz_engine_prefill(e, 0, ids + p0, p1 - p0, logits, (lz_step_out){0}));
            const int scored = (p1 < s1 ? p1 : s1 - 1) - p0; // every row but the window's last
            lz_rows_nll(logits, scored, V, ids + p0 + 1, nll);
            for (int i = 0; i < scored; i++, r->predicted++)
                r->nll += nll[i];
        }
        progress_after(&p, r->windows + 1);
    }
    return LZ_OK;
}

/* The text's ids, checked against the model's vocabulary once the engine is open. */
static lz_status read_text_ids(lz_tokenizer *tok, const eval_args *a, int32_t **ids, int *n_tokens) {
    char *text = NULL;
    size_t len = 0;
    LZ_TRY(lz_read_text_file("--text", a->text, &text, &len));
    lz_status s = lz_tokenizer_encode(tok, text, len, true, ids, n_tokens);
    free(text);
    if (s == LZ_OK && *n_tokens < 2)
        s = lz_fail(LZ_ERR_INPUT, "--text %s: %d tokens; perplexity needs at least 2", a->text, *n_tokens);
    return s;
}

/* results[i] for window length lens->len[i] over ids[n_tokens]. */
static lz_status perplexity(lz_engine *e, lz_tokenizer *tok, const eval_args *a, const length_list *lens,
                            const int32_t *ids, int n_tokens, ppl_result *results) {
    lz_status s = lz_tokenizer_check_ids(tok, ids, n_tokens, lz_engine_config(e)->vocab_size, "lizard eval: --text");
    const int V = lz_engine_config(e)->vocab_size, piece = (int)a->chunk;
    float *logits = s == LZ_OK ? malloc(sizeof(float) * (size_t)piece * V) : NULL;
    double *nll = s == LZ_OK ? malloc(sizeof(double) * (size_t)piece) : NULL;
    if (s == LZ_OK && (!logits || !nll))
        s = lz_fail(LZ_ERR_NOMEM, "logits: out of memory");
    for (int i = 0; s == LZ_OK && i < lens->n; i++) {
        ppl_result *r = &results[i];
        s = windows_nll(e, ids, n_tokens, lens->len[i], piece, logits, nll, a->progress, r);
        if (s == LZ_OK && !a->json) {
            printf("perplexity %.4f  (mean nll %.4f over %ld predicted tokens of %d, segments of %d)\n",
                   exp(r->nll / (double)r->predicted), r->nll / (double)r->predicted, r->predicted, n_tokens,
                   lens->len[i]);
            fflush(stdout);
        }
    }
    free(logits), free(nll);
    return s;
}

/* ---- passkey ------------------------------------------------------------------------------ */

static lz_status passkey(lz_engine *e, lz_tokenizer *tok, const eval_args *a, const length_list *ctx,
                         int *correct) {
    if (!a->json)
        printf("%8s %7s %8s %9s\n", "context", "trials", "correct", "accuracy");
    for (int c = 0; c < ctx->n; c++) {
        LZ_TRY(lz_passkey_run(e, tok, ctx->len[c], a->trials, (uint64_t)a->seed, &correct[c]));
        if (!a->json) {
            printf("%8d %7ld %8d %9.2f\n", ctx->len[c], a->trials, correct[c], (double)correct[c] / (double)a->trials);
            fflush(stdout);
        }
    }
    return LZ_OK;
}

/* ---- --json ------------------------------------------------------------------------------- */

/* a JSON number, or null where the figure is not finite (a model that produced NaN logits) */
static json_t *real_or_null(double x) {
    return isfinite(x) ? json_real(x) : json_null();
}

/* {"model", "device", "softmax_layers", "text", "text_tokens",
 *  "perplexity": [{"context", "ppl", "mean_nll", "tokens", "windows"}],
 *  "passkey": [{"context", "trials", "correct", "accuracy"}]} on one line */
static lz_status print_json(const lz_engine *e, const eval_args *a, const length_list *lens,
                            const ppl_result *ppl, int n_tokens, const length_list *ctx, const int *correct) {
    json_t *root = json_object(), *layers = json_array(), *pp = json_array(), *pk = json_array();
    bool ok = root && layers && pp && pk;
    for (int l = 0; ok && l < e->cfg.num_hidden_layers; l++)
        if (e->cfg.softmax_layer[l])
            ok = json_array_append_new(layers, json_integer(l)) == 0;
    for (int i = 0; ok && a->text && i < lens->n; i++) {
        const double mean = ppl[i].nll / (double)ppl[i].predicted;
        ok = json_array_append_new(pp, json_pack("{s:i, s:o, s:o, s:I, s:i}", "context", lens->len[i], "ppl",
                                                 real_or_null(exp(mean)), "mean_nll", real_or_null(mean), "tokens",
                                                 (json_int_t)ppl[i].predicted, "windows", ppl[i].windows)) == 0;
    }
    for (int c = 0; ok && a->passkey && c < ctx->n; c++)
        ok = json_array_append_new(pk, json_pack("{s:i, s:I, s:i, s:f}", "context", ctx->len[c], "trials",
                                                 (json_int_t)a->trials, "correct", correct[c], "accuracy",
                                                 (double)correct[c] / (double)a->trials)) == 0;
    ok = ok && json_object_set_new(root, "model", json_string(a->model)) == 0 &&
         json_object_set_new(root, "device", json_string(a->device)) == 0 &&
         json_object_set(root, "softmax_layers", layers) == 0 &&
         json_object_set_new(root, "text", a->text ? json_string(a->text) : json_null()) == 0 &&
         json_object_set_new(root, "text_tokens", json_integer(n_tokens)) == 0 &&
         json_object_set(root, "perplexity", pp) == 0 && json_object_set(root, "passkey", pk) == 0 &&
         json_dumpf(root, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10)) == 0 &&
         printf("\n") == 1;
    fflush(stdout);
    json_decref(layers), json_decref(pp), json_decref(pk), json_decref(root);
    return ok ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "--json: out of memory");
}

/* ---- the command ------------------------------------------------------------------------------ */

static lz_status run_eval(const eval_args *a, const length_list *lens, const length_list *ctx) {
    lz_tokenizer *tok;
    LZ_TRY(lz_tokenizer_load(a->model, &tok));
    int32_t *ids = NULL;
    int n_tokens = 0;
    lz_status s = a->text ? read_text_ids(tok, a, &ids, &n_tokens) : LZ_OK;
    // the engine is sized by what runs: a window longer than the text holds the text
    int longest = 1;
    for (int i = 0; i < lens->n; i++) {
        const int window = lens->len[i] < n_tokens ? lens->len[i] : n_tokens;
        longest = window > longest ? window : longest;
    }
    for (int i = 0; i < ctx->n; i++)
        longest = ctx->len[i] > longest ? ctx->len[i] : longest;
    lz_engine e;
    lz_engine_options eo = {.model_dir = a->model, .adapter_dir = a->adapter, .device = a->device, .dtype = a->dtype,
                            .softmax_layers = a->softmax_layers, .n_slots = 1, .max_context = longest,
                            .prefill_chunk = (int)a->chunk};
    if (s == LZ_OK)
        s = lz_check_context(a->model, a->softmax_layers, longest, a->allow_long);
    if (s == LZ_OK)
        s = lz_engine_open(&e, &eo); // under mpirun every rank reads the same text to size the same engine
    if (s != LZ_OK || e.worker) { // a worker rank returns when rank 0 closes the engine
        free(ids);
        lz_tokenizer_free(tok);
        if (s == LZ_OK)
            lz_engine_close(&e);
        return s;
    }
    ppl_result *ppl = calloc((size_t)lens->n + 1, sizeof *ppl);
    int *correct = calloc((size_t)ctx->n + 1, sizeof *correct);
    s = ppl && correct ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "out of memory");
    if (s == LZ_OK)
        lz_tokenizer_warn_vocab(tok, lz_engine_config(&e)->vocab_size, a->model);
    if (s == LZ_OK && a->text)
        s = perplexity(&e, tok, a, lens, ids, n_tokens, ppl);
    if (s == LZ_OK && a->passkey)
        s = passkey(&e, tok, a, ctx, correct);
    if (s == LZ_OK && a->json)
        s = print_json(&e, a, lens, ppl, n_tokens, ctx, correct);
    free(ppl), free(correct), free(ids);
    lz_engine_close(&e);
    lz_tokenizer_free(tok);
    return s;
}

/* A list flag's lengths, each at least `min`. */
static lz_status parse_lengths(const char *flag, const char *text, int min, const char *why, length_list *out) {
    LZ_TRY(lz_parse_id_list(flag, text, &out->len, &out->n));
    for (int i = 0; i < out->n; i++)
        if (out->len[i] < min) {
            const int bad = out->len[i];
            free(out->len);
            out->len = NULL;
            return lz_fail(LZ_ERR_INPUT, "%s: %d tokens is too short %s", flag, bad, why);
        }
    return LZ_OK;
}

lz_status lz_cmd_eval(int argc, char **argv) {
    eval_args a = {.ppl_contexts = "1024", .contexts = "1024,2048,4096", .device = "cpu", .dtype = "bf16",
                   .trials = 5, .chunk = 256, .progress = 5};
    const lz_option options[] = {
        {"--model", LZ_OPT_DIR, "DIR", "model folder (teacher or Lizard) with tokenizer.json", &a.model, true, 0,
         0},
        {"--adapter", LZ_OPT_DIR, "DIR", "a PEFT LoRA adapter folder (finetune --adapter-out) merged in at load",
         &a.adapter, false, 0, 0},
        {"--text", LZ_OPT_STRING, "FILE", "UTF-8 text: report its perplexity", &a.text, false, 0, 0},
        {"--ppl-context", LZ_OPT_STRING, "N,N,...", "perplexity window lengths in tokens, one result each (default "
         "1024)", &a.ppl_contexts, false, 0, 0},
        {"--passkey", LZ_OPT_FLAG, "", "passkey retrieval at each of --contexts", &a.passkey, false, 0, 0},
        {"--contexts", LZ_OPT_STRING, "N,N,...", "passkey context lengths in tokens (default 1024,2048,4096)",
         &a.contexts, false, 0, 0},
        {"--trials", LZ_OPT_INT, "N", "passkey trials per context (default 5)", &a.trials, false, 1, 100000},
        {"--seed", LZ_OPT_INT, "N", "passkey numbers and depths (default 0)", &a.seed, false, 0, 9007199254740991.0},
        {"--json", LZ_OPT_FLAG, "", "print one JSON object (model, perplexity and passkey tables) instead", &a.json,
         false, 0, 0},
        {"--progress", LZ_OPT_FLOAT, "S", "seconds between the progress lines of a long perplexity run on stderr "
         "(default 5; 0: after every window)", &a.progress, false, 0, 1e6},
        {"--allow-long-context", LZ_OPT_FLAG, "", "run softmax layers past max_position_embeddings", &a.allow_long,
         false, 0, 0},
        {"--prefill-chunk", LZ_OPT_INT, "N", "tokens per forward step (default 256)", &a.chunk, false, 1, 1 << 20},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &a.softmax_layers, false, 0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &a.device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32|fp8", "CUDA weights and activations (default bf16); fp8: the linear "
         "layers' weights in FP8 E4M3 with a scale per row", &a.dtype, false, 0, 0},
    };
    const lz_command_spec spec = {"eval", "perplexity of a text and passkey retrieval across context lengths",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    if (!a.text && !a.passkey)
        return lz_fail(LZ_ERR_INPUT, "lizard eval: give --text FILE and/or --passkey");
    length_list lens = {0}, ctx = {0};
    lz_status s = LZ_OK;
    if (a.text)
        s = parse_lengths("--ppl-context", a.ppl_contexts, 2, "for a perplexity window", &lens);
    if (s == LZ_OK && a.passkey)
        s = parse_lengths("--contexts", a.contexts, LZ_PASSKEY_MIN_CONTEXT, "for a passkey prompt", &ctx);
    if (s == LZ_OK)
        s = run_eval(&a, &lens, &ctx);
    free(lens.len), free(ctx.len);
    return s;
}
