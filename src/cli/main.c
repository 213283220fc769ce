/* cli/main.c - the rapid binary: global flags, then one subcommand from the table below.
 *
 * Only main() decides the exit status; commands return it. Run `rapid help` for the list.
 */
#include <stdio.h>
#include <string.h>

#include "base/cpu.h"
#include "base/log.h"
#include "base/status.h"
#include "cli/commands.h"
#include "cli/model_bench.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const rp_cmd g_commands[] = {
    {"logits", rp_cmd_logits, "write float32 logits for token ids",
     "rapid logits --model DIR --ids 1,2,3 --out FILE [--threads N] [--ref-kernels]\n"
     "  FILE gets one row of vocab_size little-endian float32 per input position."},
    {"generate", rp_cmd_generate, "generate token ids from token ids",
     "rapid generate --model DIR --ids 1,2,3 --max-tokens N [--temperature T] [--top-k K]\n"
     "               [--top-p P] [--min-p P] [--seed S] [--threads N] [--ignore-eos]\n"
     "  Greedy unless --temperature is given; prints the generated ids on one line."},
    {"bench", rp_model_bench_main, "benchmark prefill and decode of a model",
     "rapid bench --model DIR [--prompt N] [--gen N] [--threads N] [--json]\n"
     "  Reports prefill and decode tok/s and decode as a share of the memory-bandwidth bound\n"
     "  (tok/s x bytes read per token / read bandwidth measured in the same run)."},
    {"quantize", rp_cmd_quantize, "write an MLX-layout 4/8-bit quantized checkpoint",
     "rapid quantize --model DIR --bits 4|8 [--group-size 32|64|128] --out DIR2\n"
     "  Quantizes every linear layer, the embedding and lm_head (affine, per group), as\n"
     "  mlx_lm.convert -q does; the output loads anywhere a checkpoint does."},
    {"version", cmd_version, "print the version", "rapid version"},
    {"help", cmd_help, "help on a command", "rapid help [COMMAND]"},
    {"tokenize", rp_cmd_tokenize, "print the token ids of a text (JSON array)",
     "rapid tokenize --tokenizer PATH (--text-file FILE | --text STRING) [--add-special]\n"
     "  PATH: a tokenizer.json, a model directory or a .gguf file"},
    {"detokenize", rp_cmd_detokenize, "print the text of token ids",
     "rapid detokenize --tokenizer PATH --ids 1,2,3 [--skip-special]"},
};

static const rp_cmd *find_command(const char *name)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(g_commands); i++)
        if (strcmp(g_commands[i].name, name) == 0)
            return &g_commands[i];
    return NULL;
}

static void print_overview(FILE *f)
{
    fprintf(f, "rapid %s - a local LLM inference server\n\nusage: rapid COMMAND [ARGS]\n\n"
               "commands:\n",
            RP_VERSION);
    for (size_t i = 0; i < RP_ARRAY_LEN(g_commands); i++)
        fprintf(f, "  %-12s %s\n", g_commands[i].name, g_commands[i].summary);
    fprintf(f, "\nrun 'rapid help COMMAND' for a command's options\n");
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stdout);
        return 0;
    }
    const rp_cmd *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "rapid: unknown command '%s' (see 'rapid help')\n", argv[1]);
        return 2;
    }
    printf("%s\n\n%s\n", c->summary, c->usage);
    return 0;
}

static int cmd_version(int argc, char **argv)
{
    printf("rapid %s (%s)\n", RP_VERSION, rp_isa_name(rp_cpu()->isa));
    return 0;
}

int main(int argc, char **argv)
{
    rp_cpu_detect();
    if (argc < 2) {
        print_overview(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
        return cmd_version(0, NULL);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return cmd_help(1, argv + 1);
    const rp_cmd *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "rapid: unknown command '%s'; run 'rapid help' for the list\n", argv[1]);
        return 2;
    }
    return c->run(argc - 1, argv + 1);
}
