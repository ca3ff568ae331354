/* main.c - the `lizard` binary: picks a command, runs it, turns its status
 * into an exit code (2 = bad input, 1 = internal) with a one-line error. */
#include <stdio.h>  // fprintf
#include <string.h> // strcmp

#include "commands.h" // lz_cmd_*
#include "error.h"    // lz_error_message

typedef struct {
    const char *name;
    lz_status (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"forward", lz_cmd_forward, "run a prompt, write the logits of every position (.npy)"},
    {"generate", lz_cmd_generate, "continue a prompt token by token"},
    {"bench", lz_cmd_bench, "prompt and decode throughput beside the device's ceilings"},
    {"info", lz_cmd_info, "describe a model folder: layer kinds, parameters, state bytes"},
    {"tokenize", lz_cmd_tokenize, "text -> token ids and back with the model's tokenizer.json"},
    {"init", lz_cmd_init, "write a random-weight model of a named shape (tiny-hybrid, llama3-8b-*, ...)"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *out) {
    fprintf(out, "usage: lizard <command> [flags]   (lizard <command> --help for its flags)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("lizard %s\n", LIZARD_VERSION);
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        lz_status s = commands[i].run(argc - 1, argv + 1);
        if (s != LZ_OK)
            fprintf(stderr, "lizard: error: %s\n", lz_error_message());
        return lz_status_exit_code(s);
    }
    fprintf(stderr, "lizard: error: unknown command '%s' (see lizard --help)\n", argv[1]);
    return 2;
}
