/* cli/args.h - long-option parsing shared by the subcommands.
 *
 * Options are "--name VALUE", "--name=VALUE" or flags "--name". Anything else is positional
 * and collected in order. Unknown options and missing values are usage errors with a message
 * on stderr naming the option.
 */
#ifndef RP_CLI_ARGS_H
#define RP_CLI_ARGS_H

typedef struct rp_opt {
    const char *name;   /* without the leading "--" */
    const char **value; /* set for options taking a value; NULL for flags */
    int *flag;          /* set to 1 for flags */
} rp_opt;

/* Returns 0, or 2 (usage error, message printed). positional receives up to max_positional
 * pointers into argv; *n_positional their count. argv[0] (the command name) is skipped. */
int rp_args_parse(int argc, char **argv, const rp_opt *opts, int n_opts, const char **positional,
                  int max_positional, int *n_positional);

/* Parses "1,2,3" into a heap array (rp_free). Returns 0 ok, -1 on a malformed list. */
int rp_args_parse_ids(const char *s, int **out_ids, int *out_n);

/* Strict numeric parses; return 0 ok, -1 on garbage. */
int rp_args_int(const char *s, long *out);
int rp_args_float(const char *s, double *out);

#endif
