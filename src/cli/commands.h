/* cli/commands.h - the rapid subcommands. Each lives in cmd_<name>.c and is listed in the
 * table in main.c. A command gets argv after its own name (argv[0] is the command name) and
 * returns the process exit status: 0 ok, 1 runtime failure, 2 usage error.
 */
#ifndef RP_CLI_COMMANDS_H
#define RP_CLI_COMMANDS_H

typedef int (*rp_cmd_fn)(int argc, char **argv);

typedef struct rp_cmd {
    const char *name;
    rp_cmd_fn run;
    const char *summary;
    const char *usage; /* printed by `rapid help NAME` */
} rp_cmd;

int rp_cmd_logits(int argc, char **argv);
int rp_cmd_generate(int argc, char **argv);
int rp_cmd_models(int argc, char **argv);
int rp_cmd_ls(int argc, char **argv);
int rp_cmd_info(int argc, char **argv);
int rp_cmd_recipe(int argc, char **argv);
int rp_cmd_pull(int argc, char **argv);
int rp_cmd_rm(int argc, char **argv);
int rp_cmd_alias(int argc, char **argv);
int rp_cmd_doctor(int argc, char **argv);
int rp_cmd_launch(int argc, char **argv);
int rp_cmd_chat(int argc, char **argv);
int rp_cmd_bench(int argc, char **argv);
int rp_cmd_quantize(int argc, char **argv);
int rp_cmd_tokenize(int argc, char **argv);
int rp_cmd_detokenize(int argc, char **argv);
int rp_cmd_perplexity(int argc, char **argv);
int rp_cmd_serve(int argc, char **argv);
int rp_cmd_template(int argc, char **argv);
int rp_cmd_parse(int argc, char **argv);

#endif
