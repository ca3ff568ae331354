/* commands.h - the CLI's commands; each parses its own flags from its option
 * table (cli_options.h) and returns a status; main() maps it to an exit code. */
#ifndef LZ_COMMANDS_H
#define LZ_COMMANDS_H

#include "error.h" // lz_status

/* argv[0] is the command name ("forward"). */
lz_status lz_cmd_forward(int argc, char **argv);
lz_status lz_cmd_generate(int argc, char **argv);
lz_status lz_cmd_init(int argc, char **argv);
lz_status lz_cmd_info(int argc, char **argv);
lz_status lz_cmd_tokenize(int argc, char **argv);
lz_status lz_cmd_bench(int argc, char **argv);
lz_status lz_cmd_plan(int argc, char **argv);
lz_status lz_cmd_distill(int argc, char **argv);
lz_status lz_cmd_finetune(int argc, char **argv);
lz_status lz_cmd_eval(int argc, char **argv);
lz_status lz_cmd_serve(int argc, char **argv);

#endif
