/* main.c - the `lizard` binary: picks a command, runs it, turns its status
 * into an exit code (2 = bad input, 1 = internal) with a one-line error. */
#include <stdbool.h> // bool
#include <stdio.h>   // fprintf
#include <string.h> // strcmp

#include "commands.h" // lz_cmd_*
#include "error.h"    // lz_error_message
#include "knobs.h"    // lz_knobs_check, lz_knobs_print
#include "mpi_world.h" // lz_world_init, lz_world_finish
#include "ops.h"       // lz_cuda_knob_table
#include "watchdog.h"  // lz_watchdog_set_timeout, lz_watchdog_start

typedef struct {
    const char *name;
    lz_status (*run)(int argc, char **argv);
    const char *summary;
    bool every_rank; /* under mpirun every rank runs it (as a stage of the engine); else rank 0 alone does */
} command;

static const command commands[] = {
    {"forward", lz_cmd_forward, "run a prompt, write the logits of every position (.npy)", true},
    {"generate", lz_cmd_generate, "continue a prompt token by token", true},
    {"serve", lz_cmd_serve, "an OpenAI-compatible HTTP server: completions, chat, streaming, sessions", true},
    {"bench", lz_cmd_bench, "prompt and decode throughput beside the device's ceilings", true},
    {"plan", lz_cmd_plan, "place the layers on pipeline ranks (balanced, by-type, a file) and show each rank's bytes",
     false},
    {"distill", lz_cmd_distill, "stage-1 attention distillation: a teacher folder -> a Lizard model folder", true},
    {"finetune", lz_cmd_finetune, "stage 2: LoRA fine-tuning of a Lizard model folder on next-token prediction", true},
    {"eval", lz_cmd_eval, "perplexity of a text; passkey retrieval across context lengths", true},
    {"info", lz_cmd_info, "describe a model folder: layer kinds, parameters, state bytes", false},
    {"tokenize", lz_cmd_tokenize, "text -> token ids and back with the model's tokenizer.json", false},
    {"init", lz_cmd_init, "write a random-weight model of a named shape (tiny-hybrid, llama3-8b-*, ...)", false},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *out) {
    fprintf(out, "usage: lizard [--rank-timeout S] <command> [flags]   (lizard <command> --help for its flags)\n\n"
                 "  --rank-timeout S  under mpirun: a rank silent or waiting longer than S seconds ends the job\n"
                 "                    (default: LIZARD_STEP_TIMEOUT, else 30; 0: off)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

/* "lizard: error: MESSAGE": under mpirun with the rank in front, and each said once (a message may
 * begin with the rank, or with "lizard COMMAND: "). */
static void print_error(const char *name) {
    const char *m = lz_error_message(), *rank = lz_error_rank_prefix();
    if (*rank && strncmp(m, rank, strlen(rank)) == 0)
        m += strlen(rank);
    char own[64];
    snprintf(own, sizeof own, "lizard %s: ", name);
    if (strncmp(m, own, strlen(own)) == 0)
        m += strlen(own);
    fprintf(stderr, "lizard: error: %s%s\n", rank, m);
}

static int finish(int code) {
    lz_world_finish(code);
    return code;
}

/* `lizard --rank-timeout S <command> ...` holds for every command (watchdog.h); the flag leaves argv. */
static lz_status take_rank_timeout(int *argc, char ***argv) {
    char **a = *argv;
    if (*argc < 2 || strncmp(a[1], "--rank-timeout", 14) != 0 || (a[1][14] != 0 && a[1][14] != '='))
        return LZ_OK;
    const bool joined = a[1][14] == '=';
    if (!joined && *argc < 3)
        return lz_fail(LZ_ERR_INPUT, "--rank-timeout: expected seconds");
    LZ_TRY(lz_watchdog_set_timeout(joined ? a[1] + 15 : a[2], "--rank-timeout"));
    const int used = joined ? 1 : 2;
    a[used] = a[0];
    *argv = a + used, *argc -= used;
    return LZ_OK;
}

int main(int argc, char **argv) {
    if (lz_world_init(&argc, &argv) != LZ_OK) {
        fprintf(stderr, "lizard: error: %s\n", lz_error_message());
        return 1;
    }
    const lz_world *w = lz_world_get();
    // every LIZARD_* variable checked before anything runs: the process's and the CUDA backend's
    const lz_knob_table *const backend_knobs[] = {&lz_cuda_knob_table};
    if (lz_knobs_check(backend_knobs, 1) != LZ_OK) {
        fprintf(stderr, "lizard: error: %s\n", lz_error_message());
        return finish(2);
    }
    if (lz_knobs_get()->profile && w->rank == 0)
        lz_knobs_print(stderr, backend_knobs, 1);
    if (take_rank_timeout(&argc, &argv) != LZ_OK) {
        fprintf(stderr, "lizard: error: %s\n", lz_error_message());
        return finish(2);
    }
    // under mpirun every rank heartbeats from here on, so that a rank stopped while the others load or
    // plan ends the job too (every rank reaches this line: the heartbeat's communicator is made together)
    if (w->size > 1 && lz_watchdog_start() != LZ_OK) {
        fprintf(stderr, "lizard: error: %s\n", lz_error_message());
        return finish(2);
    }
    if (argc < 2) {
        usage(stderr);
        return finish(2);
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return finish(0);
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("lizard %s\n", LIZARD_VERSION);
        return finish(0);
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        if (!commands[i].every_rank && w->rank != 0)
            return finish(0); // one process is enough (and two would write the same files)
        lz_status s = commands[i].run(argc - 1, argv + 1);
        if (s != LZ_OK)
            print_error(commands[i].name);
        return finish(lz_status_exit_code(s));
    }
    fprintf(stderr, "lizard: error: unknown command '%s' (see lizard --help)\n", argv[1]);
    return finish(2);
}
