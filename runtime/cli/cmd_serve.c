/* cmd_serve.c - `lizard serve`: an OpenAI-compatible HTTP server on the
 * engine. Rank 0 listens (HTTP threads) and drives the engine from its main
 * thread (the scheduler); under mpirun the other ranks serve pipeline steps
 * inside lz_engine_open until rank 0 closes the engine. SIGTERM or SIGINT
 * drains: no new requests, the accepted ones go on for --drain-timeout
 * seconds (a second signal: none), then end as they are; sessions are written
 * to --session-dir, exit 0. Under mpirun, when the job ends for a failed
 * rank (rank 0's watchdog, or the launcher's SIGTERM before its SIGKILL),
 * every answer in progress ends with an error event naming why. */
#include <signal.h> // sigaction, SIGTERM
#include <stdatomic.h> // atomic_store
#include <stdio.h>  // fprintf, snprintf
#include <stdlib.h> // free
#include <string.h> // strrchr, strlen
#include <unistd.h> // access, getpid, getppid

#include "cli_options.h"       // lz_parse_command
#include "commands.h"          // lz_cmd_serve
#include "engine.h"            // lz_engine
#include "generation_config.h" // lz_generation_config
#include "mpi_world.h"         // lz_world_get
#include "serve_chat.h"        // serve_chat_detect
#include "serve_http.h"        // serve_server
#include "serve_scheduler.h"   // serve_scheduler
#include "tokenizer.h"         // lz_tokenizer
#include "watchdog.h"          // lz_watchdog_on_end

typedef struct {
    const char *model, *adapter, *host, *api_key, *chat_template, *device, *dtype, *softmax, *placement, *plan, *session_dir;
    long port, max_batch, max_prompt_tokens, max_tokens, queue_size, max_context, chunk, max_body, prefix_cache,
        prefix_min;
    double session_memory, drain_timeout, health_step_timeout;
    bool session_per_key, no_access_log;
} serve_args;

static volatile sig_atomic_t stop_requested; /* stop signals received (1: drain, 2: end now) */

/* Why this process ends within a second, for the clients whose answers it cuts (serve_http.h), or NULL. */
static _Atomic(const char *) ending;
/* Under mpirun: the launcher that started this rank. It ends a job whose rank failed (or that was
 * stopped) with SIGTERM and, a second later, SIGKILL: a drain cannot finish then. */
static pid_t launcher;

static void on_stop_signal(int sig, siginfo_t *info, void *unused) {
    (void)sig, (void)unused;
    if (launcher > 0 && info && info->si_pid == launcher)
        atomic_store(&ending, "the pipeline's launcher (mpirun) is ending the job: a rank failed or the job was "
                              "stopped; this answer ends here");
    if (stop_requested < 2)
        stop_requested = stop_requested + 1;
}

/* lz_watchdog_on_end: rank 0's watchdog ends the job (a rank silent or stalled); its line for the clients. */
static void pipeline_failed(const char *line) {
    static char said[700];
    snprintf(said, sizeof said, "the pipeline failed (%s); the server is ending", line);
    atomic_store(&ending, said);
}

static lz_status install_signals(void) {
    if (lz_world_get()->size > 1) {
        launcher = getppid();
        lz_watchdog_on_end(pipeline_failed);
    }
    struct sigaction sa = {0};
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    struct sigaction ignore = {0};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0 ||
        sigaction(SIGPIPE, &ignore, NULL) != 0) // a client that hangs up must not end the server
        return lz_fail(LZ_ERR_INTERNAL, "lizard serve: cannot install signal handlers");
    return LZ_OK;
}

/* The name /v1/models reports: the model folder's last component. */
static const char *model_name(const char *dir) {
    static char name[256];
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(name, sizeof name, "%.*s", (int)(n - start), dir + start);
    return name;
}

/* Once at start, when the model names no chat format lizard knows: chat requests get LLaMA-3's markers,
 * which a tokenizer without them (a base model's) reads as plain text. */
static void warn_assumed_chat(const lz_tokenizer *tok, const char *model, const char *why) {
    static const char marker[] = "<|start_header_id|>";
    const int32_t id = lz_tokenizer_token_to_id(tok, marker, sizeof marker - 1);
    const bool special = id >= 0 && lz_tokenizer_is_special(tok, id);
    fprintf(stderr, "lizard serve: warning: %s names no chat format (%s): /v1/chat/completions wraps messages in "
                    "LLaMA-3 markers%s; --chat-template llama3|mistral says which the model was trained on, and "
                    "/v1/completions takes text as it is\n",
            model, why, special ? "" : ", which its tokenizer does not have: the model reads them as plain text");
}

/* Rank 0 after the engine is open: tokenizer, scheduler, HTTP, the loop. */
static lz_status serve(const serve_args *a, lz_engine *e) {
    lz_generation_config gen;
    LZ_TRY(lz_generation_config_load(a->model, lz_engine_config(e), &gen));
    serve_chat_format chat;
    const char *why;
    bool assumed;
    LZ_TRY(serve_chat_detect(a->model, a->chat_template, &chat, &why, &assumed));
    lz_tokenizer *tok = NULL;
    LZ_TRY(lz_tokenizer_load(a->model, &tok));
    lz_tokenizer_warn_vocab(tok, lz_engine_config(e)->vocab_size, a->model);
    if (assumed)
        warn_assumed_chat(tok, a->model, why);
    serve_metrics metrics;
    if (serve_metrics_init(&metrics) != 0) {
        lz_tokenizer_free(tok);
        return lz_fail(LZ_ERR_INTERNAL, "lizard serve: cannot create the metrics' lock");
    }
    size_t eos_len = 0;
    const int32_t eos = lz_tokenizer_eos_id(tok);
    const char *eos_token = eos >= 0 ? lz_tokenizer_id_to_token(tok, eos, &eos_len) : NULL;
    char eos_text[256];
    snprintf(eos_text, sizeof eos_text, "%.*s", eos_token ? (int)eos_len : 0, eos_token ? eos_token : "");
    serve_scheduler sched;
    const serve_scheduler_options so = {.max_batch = (int)a->max_batch, .queue_size = (int)a->queue_size,
                                        .session_memory = (size_t)a->session_memory, .session_dir = a->session_dir,
                                        .prefix_entries = (int)a->prefix_cache,
                                        .prefix_min_tokens = (int)a->prefix_min,
                                        .drain_timeout = a->drain_timeout};
    lz_status s = serve_scheduler_init(&sched, e, a->model, &gen, &metrics, &so);
    if (s != LZ_OK) {
        serve_metrics_free(&metrics);
        lz_tokenizer_free(tok);
        return s;
    }
    serve_server srv = {.sched = &sched, .metrics = &metrics, .tok = tok, .gen = &gen, .chat = chat,
                        .eos_text = eos_text, .model_name = model_name(a->model), .api_key = a->api_key,
                        .session_per_key = a->session_per_key,
                        .max_prompt_tokens = a->max_prompt_tokens, .max_tokens = a->max_tokens,
                        .max_body_bytes = a->max_body, .vocab = lz_engine_config(e)->vocab_size,
                        .stop = &stop_requested, .ending = &ending, .health_step_timeout = a->health_step_timeout,
                        .access_log = !a->no_access_log};
    atomic_init(&srv.next_id, 1);
    atomic_init(&srv.in_flight, 0);
    int port = 0;
    if (pthread_mutex_init(&srv.tok_mu, NULL) != 0)
        s = lz_fail(LZ_ERR_INTERNAL, "lizard serve: cannot create the tokenizer's lock");
    if (s == LZ_OK)
        s = serve_http_start(&srv, a->host, (int)a->port, &port);
    if (s == LZ_OK) {
        fprintf(stderr, "lizard serve: listening on http://%s:%d (pid %d), model %s, %ld slots, chat format %s (%s)\n",
                a->host, port, (int)getpid(), srv.model_name, a->max_batch, serve_chat_format_name(chat), why);
        s = serve_scheduler_run(&sched, &stop_requested);
        serve_http_stop(&srv); // every accepted request has been answered
        fprintf(stderr, "lizard serve: drained, exiting\n");
    }
    pthread_mutex_destroy(&srv.tok_mu);
    serve_scheduler_free(&sched);
    serve_metrics_free(&metrics);
    lz_tokenizer_free(tok);
    return s;
}

/* A key that no request could present is refused before anything loads: an empty one (which an
 * empty bearer token would otherwise match) and one with spaces at its ends or control bytes,
 * which an Authorization header does not carry as they are. */
static lz_status check_api_key(const char *key) {
    if (!key)
        return LZ_OK;
    const size_t n = strlen(key);
    if (n == 0)
        return lz_fail(LZ_ERR_INPUT, "--api-key: empty; give a key, or leave the flag out to serve without one");
    if (key[0] == ' ' || key[0] == '\t' || key[n - 1] == ' ' || key[n - 1] == '\t')
        return lz_fail(LZ_ERR_INPUT, "--api-key: begins or ends with a space, which no Authorization header carries");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
            return lz_fail(LZ_ERR_INPUT, "--api-key: a control character at byte %zu", i);
    return LZ_OK;
}

lz_status lz_cmd_serve(int argc, char **argv) {
    serve_args a = {.host = "127.0.0.1", .device = "cpu", .dtype = "bf16", .port = 8000, .max_batch = 8,
                    .max_prompt_tokens = 4096, .max_tokens = 256, .queue_size = 256, .max_context = 0,
                    .chunk = 512, .max_body = 1 << 20, .prefix_cache = 8, .prefix_min = 16,
                    .session_memory = 256.0 * (1 << 20), .drain_timeout = 30, .health_step_timeout = 30};
    const lz_option options[] = {
        {"--model", LZ_OPT_STRING, "DIR", "model folder (config.json + safetensors + tokenizer.json)", &a.model, true,
         0, 0},
        {"--adapter", LZ_OPT_DIR, "DIR", "a PEFT LoRA adapter folder (finetune --adapter-out) merged in at load",
         &a.adapter, false, 0, 0},
        {"--port", LZ_OPT_INT, "P", "TCP port (default 8000; 0 = any free port, printed at start)", &a.port, false, 0,
         65535},
        {"--host", LZ_OPT_STRING, "HOST", "address or host name to listen on (default 127.0.0.1)", &a.host, false, 0,
         0},
        {"--api-key", LZ_OPT_STRING, "KEY", "require 'Authorization: Bearer KEY' on /v1/*", &a.api_key, false, 0, 0},
        {"--max-batch", LZ_OPT_INT, "N", "sequences generated together (state slots, default 8)", &a.max_batch,
         false, 1, 4096},
        {"--max-prompt-tokens", LZ_OPT_INT, "N", "longest prompt accepted (default 4096)", &a.max_prompt_tokens,
         false, 1, 1 << 24},
        {"--max-tokens", LZ_OPT_INT, "N", "default and largest max_tokens of a request (default 256)", &a.max_tokens,
         false, 1, 1 << 24},
        {"--queue-size", LZ_OPT_INT, "N", "requests waiting for a slot before 429 (default 256)", &a.queue_size,
         false, 1, 1 << 20},
        {"--max-context", LZ_OPT_INT, "N",
         "positions a sequence may reach in softmax layers' KV caches (default max-prompt-tokens + max-tokens)",
         &a.max_context, false, 1, 1 << 24},
        {"--max-body-bytes", LZ_OPT_INT, "N", "largest request body (default 1 MiB; larger: 413)", &a.max_body, false,
         64, 1 << 30},
        {"--chat-template", LZ_OPT_STRING, "llama3|mistral",
         "chat format (default: from tokenizer_config.json's chat_template, else llama3)", &a.chat_template, false, 0,
         0},
        {"--session-memory", LZ_OPT_FLOAT, "BYTES", "saved sessions kept in memory (default 256 MiB)",
         &a.session_memory, false, 0, 1e15},
        {"--session-dir", LZ_OPT_STRING, "DIR", "sessions beyond --session-memory, and all of them at exit",
         &a.session_dir, false, 0, 0},
        {"--session-per-key", LZ_OPT_FLAG, "", "keep each API key's sessions apart (names stored under a hash of the "
                                               "request's bearer key; a session request without one is refused)",
         &a.session_per_key, false, 0, 0},
        {"--prefix-cache", LZ_OPT_INT, "N", "prompt states kept for prompts that extend them (default 8; 0 = off)",
         &a.prefix_cache, false, 0, 1 << 16},
        {"--prefix-min-tokens", LZ_OPT_INT, "N", "shortest prompt whose state is cached (default 16)", &a.prefix_min,
         false, 1, 1 << 24},
        {"--drain-timeout", LZ_OPT_FLOAT, "SECONDS",
         "after SIGTERM/SIGINT, how long running requests may go on before they end as they are (default 30)",
         &a.drain_timeout, false, 0, 1e6},
        {"--health-step-timeout", LZ_OPT_FLOAT, "SECONDS",
         "/health answers 503 while an engine step has run longer (a stuck device or rank; default 30)",
         &a.health_step_timeout, false, 0.001, 1e6},
        {"--no-access-log", LZ_OPT_FLAG, "", "no line per request on stderr", &a.no_access_log, false, 0, 0},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "backend (default cpu)", &a.device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32", "CUDA weights and activations (default bf16)", &a.dtype, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &a.softmax, false, 0, 0},
        {"--prefill-chunk", LZ_OPT_INT, "N", "prompt tokens fed per scheduler step (default 512)", &a.chunk, false, 1,
         1 << 20},
        {"--placement", LZ_OPT_STRING, "balanced|by-type", "under mpirun: how layers are spread over the ranks",
         &a.placement, false, 0, 0},
        {"--plan", LZ_OPT_STRING, "FILE", "under mpirun: a hand-written placement plan", &a.plan, false, 0, 0},
    };
    const lz_command_spec spec = {"serve", "an OpenAI-compatible HTTP server (completions, chat, streaming, sessions)",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    LZ_TRY(check_api_key(a.api_key));
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", a.model);
    if (access(tok_path, F_OK) != 0)
        return lz_fail(LZ_ERR_INPUT, "lizard serve: %s: not found (the server tokenizes text)", tok_path);
    if (a.session_dir && access(a.session_dir, W_OK) != 0)
        return lz_fail(LZ_ERR_INPUT, "lizard serve: --session-dir %s: not a writable folder", a.session_dir);
    LZ_TRY(serve_http_check_host(a.host));
    const long context = a.max_context ? a.max_context : a.max_prompt_tokens + a.max_tokens;
    lz_engine e;
    const lz_engine_options eo = {.model_dir = a.model, .adapter_dir = a.adapter, .device = a.device, .dtype = a.dtype,
                                  .softmax_layers = a.softmax, .n_slots = (int)a.max_batch,
                                  .max_context = (int)(context < (1 << 24) ? context : (1 << 24)),
                                  .prefill_chunk = (int)a.chunk, .placement = a.placement, .plan_file = a.plan};
    LZ_TRY(install_signals()); // on every rank: a worker waits for rank 0 to drain and close
    LZ_TRY(lz_engine_open(&e, &eo));
    lz_status s = e.worker ? LZ_OK : serve(&a, &e); // a worker rank has served every step already
    lz_engine_close(&e);
    return s;
}
