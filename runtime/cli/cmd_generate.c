/* cmd_generate.c - `lizard generate`: prefill a prompt, then sample tokens one
 * at a time until --max-tokens or an eos id. --stats reports the state a
 * sequence holds, by layer kind, as the context grows. The text is escaped for
 * the terminal (text_escape.h); what goes to stderr during a run waits until
 * the text is out. */
#include <inttypes.h> // PRIu64
#include <jansson.h> // json_dumps (the "text" field)
#include <stdio.h>   // printf, fprintf, fflush
#include <stdlib.h> // malloc, free
#include <string.h> // strcmp, strlen, memcpy
#include <unistd.h> // access

#include "atomic_file.h"       // lz_atomic_remove_stale_of
#include "clock.h"             // lz_now_seconds
#include "cli_options.h"       // lz_parse_options
#include "commands.h"          // lz_cmd_generate
#include "context_limit.h"     // lz_check_context
#include "engine.h"            // lz_engine
#include "utf8_clean.h"        // lz_utf8_clean
#include "engine_session.h"    // lz_engine_save_stages
#include "generation_config.h" // lz_generation_config
#include "generation_loop.h"   // lz_gen_loop
#include "id_list.h"           // lz_parse_id_list
#include "sampler.h"           // lz_sampler
#include "session_file.h"      // lz_session_load_file
#include "text_escape.h"       // lz_text_escape
#include "text_file.h"         // lz_read_text_file
#include "tokenizer.h"         // lz_tokenizer, lz_detok

typedef struct {
    const char *model, *ids, *prompt, *prompt_file, *prompts_file, *device, *dtype, *softmax, *format, *placement, *plan, *session;
    const char *move_placement, *move_plan, *session_dtype, *adapter;
    long max_tokens, top_k, seed, chunk, batch, move_after;
    double temperature, top_p;
    bool stats, ignore_eos, allow_long;
} generate_args;

/* What a run reports on stderr, kept until its text is out so that no line lands inside the text:
 * the move of --move-after, and the --stats lines (after the prompt, at powers of two, at the end). */
typedef struct {
    int moved_at; /* the position at which the sequence moved to another placement (0: it did not) */
    int n_counted;
    int position[40]; /* after the prompt, the powers of two an int holds, the end: 33 at most */
    lz_state_bytes bytes[40];
} after_text;

/* m: every layer of the model (under mpirun not the engine's model, which holds rank 0's stage only). */
static void count_state(after_text *later, const lz_model *m, int positions) {
    if (later->n_counted == (int)(sizeof later->position / sizeof later->position[0]))
        return;
    later->position[later->n_counted] = positions;
    later->bytes[later->n_counted++] = lz_state_bytes_at(m, positions);
}

static void print_after_text(const after_text *later, const generate_args *a) {
    if (later->moved_at)
        fprintf(stderr, "lizard generate: moved the sequence at position %d to %s\n", later->moved_at,
                a->move_plan ? a->move_plan : a->move_placement ? a->move_placement : "balanced");
    for (int i = 0; i < later->n_counted; i++) {
        const lz_state_bytes b = later->bytes[i];
        fprintf(stderr,
                "lizard stats: position %7d | softmax KV %10zu bytes (%d layers) | lizard GLA %zu + window %zu bytes "
                "(%d layers) | total %zu bytes/sequence\n",
                later->position[i], b.softmax_kv, b.n_softmax, b.lizard_gla, b.lizard_window, b.n_lizard,
                b.softmax_kv + b.lizard_gla + b.lizard_window);
    }
}

/* The model --stats counts: every stage's layers (this rank may hold only some), described from the
 * folder's headers (no weights read) with the engine's element sizes. */
static lz_status stats_model(lz_engine *e, const char *dir, lz_model *whole, const lz_model **out) {
    LZ_TRY(lz_model_describe(whole, dir, lz_engine_config(e), e->ops));
    *out = whole;
    return LZ_OK;
}

/* Text on stdout, escaped; `end`: the text ends here (a character left incomplete is escaped). */
static void print_escaped(lz_text_escape *esc, const char *text, size_t len, bool end) {
    enum { PIECE = 256 };
    char out[LZ_TEXT_ESCAPE_BOUND(PIECE)];
    for (size_t i = 0; i < len; i += PIECE) {
        const size_t k = len - i < PIECE ? len - i : PIECE;
        fwrite(out, 1, lz_text_escape_push(esc, text + i, k, out), stdout);
    }
    if (end)
        fwrite(out, 1, lz_text_escape_finish(esc, out), stdout);
}

/* Prints a generated token as it comes: decoded text with a tokenizer (a UTF-8
 * character split across tokens is held back until complete), else its id. */
static lz_status emit(lz_detok *detok, lz_text_escape *esc, const lz_tokenizer *tok, int32_t id, int index) {
    if (!tok) {
        printf("%s%d", index > 0 ? " " : "", id);
    } else {
        const char *text;
        size_t len;
        LZ_TRY(lz_detok_push(detok, id, &text, &len));
        print_escaped(esc, text, len, false);
    }
    fflush(stdout);
    return LZ_OK;
}

typedef struct {
    int32_t *ids;
    int n;
} seq_ids;

/* One run of the generation loop: what its callback sees. */
typedef struct {
    lz_engine *e;
    const lz_tokenizer *tok;
    lz_detok detok;
    lz_text_escape esc;
    bool stream;             /* one sequence as text: printed as it comes */
    const lz_model *counted; /* --stats: the model whose state is counted */
    after_text *later;
    seq_ids *out;            /* sequence i's ids (malloc'd) */
    lz_status printed;
} run_ctx;

static bool on_token(void *ctx, int slot, int32_t id, lz_gen_end end) {
    (void)end;
    run_ctx *r = ctx;
    seq_ids *c = &r->out[slot];
    c->ids[c->n++] = id;
    const int held = lz_engine_position(r->e, slot);
    if (r->counted && (c->n == 1 || (held & (held - 1)) == 0)) // after the prompt, then at powers of two
        count_state(r->later, r->counted, held);
    if (r->stream)
        r->printed = emit(&r->detok, &r->esc, r->tok, id, c->n - 1);
    return r->printed == LZ_OK;
}

/* The n prompts through the generation loop, sequence i in slot i sampling
 * with seed + i from its draw number `draws` on (a continued session), its
 * ids into out[i]; *last (or NULL): sequence 0's sampler at the end, seconds: the
 * first round's (the prompts) and the others'; *later: what to report once the
 * text is out. */
static lz_status run(lz_engine *e, const generate_args *a, const lz_tokenizer *tok, const lz_generation_config *gen,
                     const seq_ids *prompts, int n, const lz_sampler_params *params, uint64_t draws, seq_ids *out,
                     lz_sampler *last, double seconds[2], after_text *later) {
    lz_model whole = {0};
    run_ctx r = {.e = e, .tok = tok, .stream = n == 1 && strcmp(a->format, "json") != 0, .out = out, .later = later};
    lz_gen_loop g;
    lz_status s = lz_gen_init(&g, e, gen, &(lz_gen_callbacks){.on_token = on_token, .ctx = &r});
    if (s != LZ_OK)
        return s;
    g.circulate = true; // the callback leaves the engine alone
    if (n == 1 && a->stats)
        s = stats_model(e, a->model, &whole, &r.counted);
    for (int i = 0; s == LZ_OK && i < n; i++) {
        lz_sampler_params p = *params;
        p.seed += (uint64_t)i;
        lz_gen_seq q = {.feed = prompts[i].ids, .n_feed = prompts[i].n, .max_tokens = (int)a->max_tokens,
                        .ignore_eos = a->ignore_eos};
        s = lz_sampler_init(&q.sampler, &p, lz_engine_config(e)->vocab_size);
        q.sampler.n = draws;
        out[i] = (seq_ids){malloc(sizeof(int32_t) * (size_t)a->max_tokens), 0};
        if (s == LZ_OK)
            s = out[i].ids ? lz_gen_start(&g, i, q) : lz_fail(LZ_ERR_NOMEM, "generate: out of memory");
    }
    if (r.stream && tok)
        lz_detok_init(&r.detok, tok, true);
    double t0 = lz_now_seconds();
    for (int round = 0; s == LZ_OK && r.printed == LZ_OK && lz_gen_live(&g) > 0; round++) {
        s = lz_gen_round(&g);
        const double t = lz_now_seconds();
        seconds[round > 0] += t - t0;
        t0 = t;
        if (s != LZ_OK || a->move_after == 0 || out[0].n != a->move_after || !lz_gen_live(&g))
            continue;
        s = lz_engine_replan(e, a->move_placement, a->move_plan); // the live sequence changes placement here
        if (s == LZ_OK)
            later->moved_at = lz_engine_position(e, 0);
    }
    s = s != LZ_OK ? s : r.printed;
    if (s == LZ_OK && r.counted)
        count_state(later, r.counted, lz_engine_position(e, 0));
    if (r.stream && tok) {
        const char *text;
        size_t len;
        if (s == LZ_OK && lz_detok_flush(&r.detok, &text, &len) == LZ_OK)
            print_escaped(&r.esc, text, len, true);
        lz_detok_free(&r.detok);
    }
    if (last)
        *last = g.seqs[0].sampler;
    lz_gen_free(&g);
    lz_model_free(&whole);
    return s;
}

/* "ids": [...] and, with a tokenizer, "text": the decoded continuation; then "}". */
static lz_status print_json_fields(const lz_tokenizer *tok, const int32_t *ids, int n) {
    printf("\"ids\": [");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]");
    if (tok) {
        char *text;
        size_t len;
        LZ_TRY(lz_tokenizer_decode(tok, ids, n, true, &text, &len));
        char *clean = lz_utf8_clean(text, len);
        json_t *str = clean ? json_string(clean) : NULL;
        char *dumped = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
        free(clean);
        printf(", \"text\": %s", dumped ? dumped : "null");
        free(dumped);
        json_decref(str);
        free(text);
    }
    printf("}\n");
    fflush(stdout); // the result is out before a session save that may still fail
    return LZ_OK;
}

static lz_status print_json(const lz_tokenizer *tok, const int32_t *ids, int n) {
    printf("{");
    return print_json_fields(tok, ids, n);
}

/* generation_config.json's defaults, overridden by the flags given. */
static lz_sampler_params sampler_params(const generate_args *a, const lz_generation_config *gen) {
    lz_sampler_params p = gen->defaults;
    p.temperature = a->temperature >= 0 ? a->temperature : p.temperature;
    p.top_k = a->top_k >= 0 ? (int)a->top_k : p.top_k;
    p.top_p = a->top_p >= 0 ? a->top_p : p.top_p;
    p.seed = a->seed >= 0 ? (uint64_t)a->seed : 0;
    return p;
}

/* A continued session samples as it did (its parameters, seed and count of
 * draws), but for the flags given now: those override it, with one line
 * naming each that differs. */
static lz_status continued_sampler(const generate_args *a, const Lizard__SequenceState *saved, lz_sampler_params *p,
                                   uint64_t *draws) {
    lz_sampler_params kept;
    LZ_TRY(lz_session_sampler_load(saved, a->session, &kept, draws));
    char said[512] = "";
    size_t n = 0;
#define OVERRIDE(given, field, flag, fmt)                                                                     \
    if (given && p->field != kept.field)                                                                      \
        n += (size_t)snprintf(said + n, n < sizeof said ? sizeof said - n : 0, "%s" flag " " fmt " (saved " fmt ")", \
                              n ? ", " : "", p->field, kept.field);                                           \
    kept.field = given ? p->field : kept.field;
    OVERRIDE(a->temperature >= 0, temperature, "--temperature", "%g")
    OVERRIDE(a->top_k >= 0, top_k, "--top-k", "%d")
    OVERRIDE(a->top_p >= 0, top_p, "--top-p", "%g")
    OVERRIDE(a->seed >= 0, seed, "--seed", "%" PRIu64)
#undef OVERRIDE
    if (n)
        fprintf(stderr, "lizard generate: %s: sampling with the flags given instead of the session's: %s\n", a->session,
                said);
    *p = kept;
    return LZ_OK;
}

/* The session to continue, if --session names an existing file: read and
 * checked now (its position sizes the context), checked against the model
 * and loaded once the engine is open. */
static lz_status read_session(const generate_args *a, lz_session_loaded *saved) {
    *saved = (lz_session_loaded){NULL, NULL, false};
    if (!a->session || access(a->session, F_OK) != 0)
        return LZ_OK;
    return lz_session_load_file(a->session, NULL, saved);
}

/* Everything fed and generated, saved to --session (atomically). */
static lz_status write_session(const generate_args *a, lz_engine *e, const Lizard__SequenceState *saved,
                               const int32_t *input, int n_input, const int32_t *out, int n_out,
                               const lz_sampler *sampler) {
    const size_t n_old = saved ? saved->n_tokens : 0, n_tokens = n_old + (size_t)n_input + (size_t)n_out;
    int32_t *tokens = malloc(sizeof(int32_t) * (n_tokens ? n_tokens : 1));
    if (!tokens)
        return lz_fail(LZ_ERR_NOMEM, "--session: out of memory");
    if (n_old)
        memcpy(tokens, saved->tokens, sizeof(int32_t) * n_old);
    if (n_input > 0)
        memcpy(tokens + n_old, input, sizeof(int32_t) * (size_t)n_input);
    if (n_out > 0)
        memcpy(tokens + n_old + n_input, out, sizeof(int32_t) * (size_t)n_out);
    uint8_t fp[LZ_FINGERPRINT_BYTES];
    lz_session_fingerprint(&e->model, a->model, fp);
    Lizard__SequenceState msg = LIZARD__SEQUENCE_STATE__INIT;
    Lizard__SamplerState sampling;
    lz_session_sampler_save(&msg, &sampling, sampler);
    msg.fingerprint = (ProtobufCBinaryData){LZ_FINGERPRINT_BYTES, fp};
    msg.position = (uint64_t)lz_engine_position(e, 0);
    msg.tokens = tokens;
    msg.n_tokens = n_tokens;
    msg.has_pending = n_out > 0; // the last sampled token has not been fed
    lz_status s = lz_engine_save_file(e, 0, &msg, a->session);
    free(tokens);
    return s;
}

/* The engine for n prompts and what each may generate (`context` positions),
 * and generation_config.json; the prompts' ids checked against the model's
 * vocabulary. A worker rank returns with e->worker set, its engine closed
 * (it has served every step already). */
static lz_status open_engine(const generate_args *a, const lz_tokenizer *tok, const seq_ids *prompts, int n,
                             int context, lz_engine *e, lz_generation_config *gen) {
    LZ_TRY(lz_check_context(a->model, a->softmax, context, a->allow_long));
    lz_engine_options eo = {.model_dir = a->model, .adapter_dir = a->adapter, .device = a->device, .dtype = a->dtype,
                            .softmax_layers = a->softmax, .n_slots = n, .max_context = context,
                            .prefill_chunk = (int)a->chunk, .placement = a->placement, .plan_file = a->plan,
                            .session_state_bf16 = a->session_dtype && strcmp(a->session_dtype, "bf16") == 0};
    LZ_TRY(lz_engine_open(e, &eo));
    lz_status s = e->worker ? LZ_OK : lz_generation_config_load(a->model, lz_engine_config(e), gen);
    if (s == LZ_OK && tok && !e->worker)
        lz_tokenizer_warn_vocab(tok, lz_engine_config(e)->vocab_size, a->model);
    for (int i = 0; s == LZ_OK && !e->worker && tok && (a->prompt || a->prompts_file) && i < n; i++)
        s = lz_tokenizer_check_ids(tok, prompts[i].ids, prompts[i].n, lz_engine_config(e)->vocab_size,
                                   a->prompts_file ? "lizard generate: --prompts-file" : "lizard generate: --prompt");
    const bool worker = e->worker;
    if (s != LZ_OK || worker)
        lz_engine_close(e); // which clears it
    e->worker = worker;
    return s;
}

static lz_status generate(const generate_args *a, lz_tokenizer *tok, const int32_t *input, int n_input) {
    if (a->session) // temp files of saves to it that were killed
        LZ_TRY(lz_atomic_remove_stale_of(a->session, NULL));
    lz_session_loaded file;
    LZ_TRY(read_session(a, &file));
    const Lizard__SequenceState *saved = file.msg;
    // feed: the token the saved run sampled last (not yet fed), then the new input
    const bool pending = saved && saved->has_pending;
    const int n_feed = n_input + (pending ? 1 : 0), held = saved ? (int)saved->position : 0;
    int32_t *feed = malloc(sizeof(int32_t) * (size_t)(n_feed ? n_feed : 1));
    lz_status s = feed ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "out of memory");
    if (s == LZ_OK && n_feed == 0)
        s = lz_fail(LZ_ERR_INPUT, "lizard generate: --session %s holds nothing to continue and no --ids/--prompt was given",
                    a->session);
    if (s == LZ_OK && pending)
        feed[0] = saved->tokens[saved->n_tokens - 1];
    if (s == LZ_OK && n_input > 0) // input is NULL when the session is continued without new tokens
        memcpy(feed + (pending ? 1 : 0), input, sizeof(int32_t) * (size_t)n_input);
    lz_engine e = {0};
    lz_generation_config gen;
    if (s == LZ_OK)
        s = open_engine(a, tok, &(seq_ids){feed, n_feed}, 1, held + n_feed + (int)a->max_tokens, &e, &gen);
    if (s != LZ_OK || e.worker) {
        free(feed);
        lz_session_loaded_free(&file);
        return s;
    }
    lz_sampler sampler = {0};
    seq_ids out = {NULL, 0};
    double seconds[2] = {0, 0};
    lz_sampler_params p = sampler_params(a, &gen);
    uint64_t draws = 0;
    if (s == LZ_OK && saved) // the saved sequence: the same model, its state, its sampler
        s = continued_sampler(a, saved, &p, &draws);
    if (s == LZ_OK && saved) {
        uint8_t fp[LZ_FINGERPRINT_BYTES];
        lz_session_fingerprint(&e.model, a->model, fp);
        s = lz_session_check_fingerprint(saved, fp, a->session);
        if (s == LZ_OK)
            s = lz_engine_restore_stages(&e, 0, saved);
    }
    after_text later = {0};
    if (s == LZ_OK) // draws: where its random stream is
        s = run(&e, a, tok, &gen, &(seq_ids){feed, n_feed}, 1, &p, draws, &out, &sampler, seconds, &later);
    const bool json = strcmp(a->format, "json") == 0;
    if (s == LZ_OK && json)
        s = print_json(tok, out.ids, out.n);
    else if (!json && (s == LZ_OK || out.n > 0)) // the text's line ends before anything else, an error too
        printf("\n"), fflush(stdout);
    print_after_text(&later, a);
    if (s == LZ_OK && a->session)
        s = write_session(a, &e, saved, input, n_input, out.ids, out.n, &sampler);
    free(out.ids), free(feed);
    lz_session_loaded_free(&file);
    lz_engine_close(&e);
    return s;
}

/* One result line per sequence: JSON, or "[i] text" (ids without a tokenizer). */
static lz_status print_completion(const generate_args *a, const lz_tokenizer *tok, int index, const seq_ids *c) {
    if (strcmp(a->format, "json") == 0) {
        printf("{\"index\": %d, ", index);
        return print_json_fields(tok, c->ids, c->n);
    }
    printf("[%d] ", index);
    if (!tok) {
        for (int i = 0; i < c->n; i++)
            printf("%s%d", i ? " " : "", c->ids[i]);
    } else {
        char *text;
        size_t len;
        LZ_TRY(lz_tokenizer_decode(tok, c->ids, c->n, true, &text, &len));
        print_escaped(&(lz_text_escape){.n_held = 0}, text, len, true);
        free(text);
    }
    printf("\n");
    return LZ_OK;
}

/* index[i]: the number sequence i's result carries (NULL: i). */
static lz_status generate_many(const generate_args *a, lz_tokenizer *tok, const seq_ids *prompts, const int *index,
                               int n) {
    int longest = 0;
    for (int i = 0; i < n; i++)
        longest = prompts[i].n > longest ? prompts[i].n : longest;
    lz_engine e;
    lz_generation_config gen;
    LZ_TRY(open_engine(a, tok, prompts, n, longest + (int)a->max_tokens, &e, &gen));
    if (e.worker)
        return LZ_OK;
    seq_ids *out = calloc((size_t)n, sizeof(seq_ids));
    double seconds[2] = {0, 0};
    after_text later = {0};
    lz_status s = out ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "out of memory");
    if (s == LZ_OK) {
        const lz_sampler_params p = sampler_params(a, &gen);
        s = run(&e, a, tok, &gen, prompts, n, &p, 0, out, NULL, seconds, &later);
    }
    long prompt_tokens = 0, generated = 0, decoded = 0; // each sequence's first token comes from its prompt's step
    for (int i = 0; s == LZ_OK && i < n; i++) {
        s = print_completion(a, tok, index ? index[i] : i, &out[i]);
        prompt_tokens += prompts[i].n, generated += out[i].n, decoded += out[i].n - (out[i].n > 0);
    }
    fflush(stdout);
    print_after_text(&later, a);
    if (s == LZ_OK)
        fprintf(stderr, "lizard generate: %d sequences, %ld prompt tokens in %.3f s, %ld tokens generated (%ld by "
                        "decode steps in %.3f s: %.1f tok/s)\n", n, prompt_tokens, seconds[0], generated, decoded,
                seconds[1], decoded > 0 ? decoded / seconds[1] : 0.0);
    for (int i = 0; out && i < n; i++)
        free(out[i].ids);
    free(out);
    lz_engine_close(&e);
    return s;
}

/* Lines of FILE, each a prompt, tokenized, and each prompt's line in the file counted from 0 (the number
 * its result carries: a blank line is skipped but keeps its number). */
static lz_status read_prompts(const char *path, lz_tokenizer *tok, seq_ids **prompts, int **lines, int *n) {
    if (!tok)
        return lz_fail(LZ_ERR_INPUT, "--prompts-file: the model has no tokenizer.json");
    FILE *f = fopen(path, "rb");
    if (!f)
        return lz_fail(LZ_ERR_IO, "--prompts-file: %s: cannot open", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    lz_status s = LZ_OK;
    *prompts = NULL;
    *lines = NULL;
    *n = 0;
    for (int line_no = 0; s == LZ_OK && (len = getline(&line, &cap, f)) >= 0; line_no++) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        seq_ids *grown = realloc(*prompts, sizeof(seq_ids) * (size_t)(*n + 1));
        if (grown)
            *prompts = grown;
        int *grown_lines = grown ? realloc(*lines, sizeof(int) * (size_t)(*n + 1)) : NULL;
        if (!grown_lines) {
            s = lz_fail(LZ_ERR_NOMEM, "--prompts-file: out of memory");
            break;
        }
        *lines = grown_lines;
        int32_t *ids;
        int k;
        s = lz_tokenizer_encode(tok, line, (size_t)len, true, &ids, &k);
        if (s == LZ_OK) {
            (*lines)[*n] = line_no;
            (*prompts)[(*n)++] = (seq_ids){ids, k};
        }
    }
    free(line);
    fclose(f);
    if (s == LZ_OK && *n == 0)
        s = lz_fail(LZ_ERR_INPUT, "--prompts-file: %s has no prompts", path);
    return s;
}

static lz_status generate_checked(const generate_args *ap, bool continuing);

lz_status lz_cmd_generate(int argc, char **argv) {
    generate_args a = {.device = "cpu", .dtype = "bf16", .format = "text", .max_tokens = 16, .top_k = -1, .seed = -1,
                       .chunk = 512, .temperature = -1.0, .top_p = -1.0};
    const lz_option options[] = {
        {"--model", LZ_OPT_DIR, "DIR", "model folder (config.json + safetensors)", &a.model, true, 0, 0},
        {"--adapter", LZ_OPT_DIR, "DIR", "a PEFT LoRA adapter folder (finetune --adapter-out) merged in at load",
         &a.adapter, false, 0, 0},
        {"--ids", LZ_OPT_STRING, "1,2,3", "prompt token ids", &a.ids, false, 0, 0},
        {"--prompt", LZ_OPT_STRING, "TEXT", "prompt text (tokenized with the model's tokenizer.json)", &a.prompt,
         false, 0, 0},
        {"--prompt-file", LZ_OPT_STRING, "FILE", "prompt text read from FILE (for prompts longer than a command line)",
         &a.prompt_file, false, 0, 0},
        {"--prompts-file", LZ_OPT_STRING, "FILE", "many prompts, one per line, generated together as a batch; each "
         "result is numbered by its prompt's line, from 0 (blank lines are skipped, not renumbered)",
         &a.prompts_file, false, 0, 0},
        {"--batch", LZ_OPT_INT, "N", "generate N sequences from the prompt at once (seeds S, S+1, ...)", &a.batch,
         false, 1, 1 << 16},
        {"--max-tokens", LZ_OPT_INT, "N", "tokens to generate (default 16)", &a.max_tokens, false, 1, 1 << 24},
        {"--temperature", LZ_OPT_FLOAT, "T", "0 = greedy (default: generation_config.json, else greedy)",
         &a.temperature, false, 0, 100},
        {"--top-k", LZ_OPT_INT, "K", "keep the K most likely tokens (0 = off)", &a.top_k, false, 0, 1 << 30},
        {"--top-p", LZ_OPT_FLOAT, "P", "keep the smallest set with probability >= P (1 = off)", &a.top_p, false,
         1e-9, 1},
        {"--seed", LZ_OPT_INT, "S", "sampling seed (default 0; a continued --session: its own)", &a.seed, false, 0, 9e15},
        {"--format", LZ_OPT_STRING, "text|json",
         "text: the text as it comes (ids without a tokenizer); json: {\"ids\": [...], \"text\": ...}", &a.format,
         false, 0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &a.device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32|fp8", "CUDA weights and activations (default bf16); fp8: the linear "
         "layers' weights in FP8 E4M3 with a scale per row", &a.dtype, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &a.softmax, false, 0, 0},
        {"--prefill-chunk", LZ_OPT_INT, "N", "tokens per prefill step (default 512)", &a.chunk, false, 1, 1 << 20},
        {"--ignore-eos", LZ_OPT_FLAG, "", "do not stop at eos ids", &a.ignore_eos, false, 0, 0},
        {"--placement", LZ_OPT_STRING, "balanced|by-type", "under mpirun: how layers are spread over the ranks",
         &a.placement, false, 0, 0},
        {"--plan", LZ_OPT_STRING, "FILE", "under mpirun: a hand-written placement plan", &a.plan, false, 0, 0},
        {"--session", LZ_OPT_STRING, "FILE", "continue the sequence saved in FILE (if it exists; with its sampler, but for "
                                           "the sampling flags given), save it there after",
         &a.session, false, 0, 0},
        {"--session-dtype", LZ_OPT_STRING, "fp32|bf16", "the saved Lizard layers' S and z: fp32 (default, exact) or bf16 "
                                                        "(half the bytes; the continuation is rounded)", &a.session_dtype,
         false, 0, 0},
        {"--stats", LZ_OPT_FLAG, "", "print state bytes per sequence by layer kind (stderr)", &a.stats, false, 0, 0},
        {"--move-after", LZ_OPT_INT, "N", "under mpirun: after N tokens, move the live sequence to another placement "
                                          "(--move-placement or --move-plan) and go on", &a.move_after, false, 1, 1 << 30},
        {"--move-placement", LZ_OPT_STRING, "balanced|by-type", "the placement --move-after moves to",
         &a.move_placement, false, 0, 0},
        {"--move-plan", LZ_OPT_STRING, "FILE", "or the plan file it moves to", &a.move_plan, false, 0, 0},
        {"--allow-long-context", LZ_OPT_FLAG, "", "let softmax layers run past max_position_embeddings",
         &a.allow_long, false, 0, 0},
    };
    const lz_command_spec spec = {"generate", "continue a prompt, token by token", options,
                                  (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    if (strcmp(a.format, "text") != 0 && strcmp(a.format, "json") != 0)
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --format: expected text or json, got '%s'", a.format);
    const bool continuing = a.session && access(a.session, F_OK) == 0;
    const int inputs = (a.ids != NULL) + (a.prompt != NULL) + (a.prompt_file != NULL) + (a.prompts_file != NULL);
    if (inputs > 1 || (inputs == 0 && !continuing))
        return lz_fail(LZ_ERR_INPUT, "lizard generate: give exactly one of --ids 1,2,3, --prompt TEXT, --prompt-file FILE "
                       "or --prompts-file FILE");
    char *file_text = NULL; // --prompt-file: the text, then used as --prompt
    size_t file_len = 0;
    if (a.prompt_file) {
        LZ_TRY(lz_read_text_file("--prompt-file", a.prompt_file, &file_text, &file_len));
        a.prompt = file_text;
    }
    const lz_status s = generate_checked(&a, continuing);
    free(file_text);
    return s;
}

/* generate, once its input is known: one prompt or many. */
static lz_status generate_checked(const generate_args *ap, bool continuing) {
    const generate_args a = *ap;
    if (a.session && (a.prompts_file || a.batch))
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --session keeps one sequence (not --batch or --prompts-file)");
    if (a.prompts_file && a.batch)
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --batch copies one prompt; --prompts-file gives many");
    if (a.session_dtype && strcmp(a.session_dtype, "fp32") != 0 && strcmp(a.session_dtype, "bf16") != 0)
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --session-dtype: expected fp32 or bf16, got '%s'", a.session_dtype);
    if (a.session_dtype && !a.session)
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --session-dtype needs --session FILE");
    if (a.move_after && (a.prompts_file || a.batch))
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --move-after moves one sequence (not --batch or --prompts-file)");
    if ((a.move_placement || a.move_plan) && !a.move_after)
        return lz_fail(LZ_ERR_INPUT, "lizard generate: --move-placement / --move-plan need --move-after N");
    if (a.move_placement && a.move_plan)
        return lz_fail(LZ_ERR_INPUT, "lizard generate: give one of --move-placement and --move-plan");
    // The tokenizer is optional with --ids (ids are printed), required with --prompt.
    lz_tokenizer *tok = NULL;
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", a.model);
    if (a.prompt || access(tok_path, F_OK) == 0)
        LZ_TRY(lz_tokenizer_load(a.model, &tok));
    if (a.prompts_file) {
        seq_ids *prompts = NULL;
        int *lines = NULL, n = 0;
        lz_status s = read_prompts(a.prompts_file, tok, &prompts, &lines, &n);
        if (s == LZ_OK)
            s = generate_many(&a, tok, prompts, lines, n);
        for (int i = 0; i < n; i++)
            free((void *)prompts[i].ids);
        free(prompts), free(lines);
        lz_tokenizer_free(tok);
        return s;
    }
    int32_t *prompt = NULL;
    int n_prompt = 0;
    // a continued session already has its BOS
    lz_status s = a.prompt ? lz_tokenizer_encode(tok, a.prompt, strlen(a.prompt), !continuing, &prompt, &n_prompt)
                  : a.ids  ? lz_parse_id_list("--ids", a.ids, &prompt, &n_prompt)
                           : LZ_OK;
    if (s == LZ_OK && a.prompt && n_prompt == 0 && !continuing)
        s = lz_fail(LZ_ERR_INPUT, "lizard generate: --prompt: the text has no tokens");
    if (s == LZ_OK && a.batch > 0) { // N copies of the prompt
        seq_ids *copies = malloc(sizeof(seq_ids) * (size_t)a.batch);
        s = copies ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "--batch: out of memory");
        for (long i = 0; s == LZ_OK && i < a.batch; i++)
            copies[i] = (seq_ids){prompt, n_prompt};
        if (s == LZ_OK)
            s = generate_many(&a, tok, copies, NULL, (int)a.batch);
        free(copies);
    } else if (s == LZ_OK) {
        s = generate(&a, tok, prompt, n_prompt);
    }
    free(prompt);
    lz_tokenizer_free(tok);
    return s;
}
