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

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const rp_cmd g_commands[] = {
    {"version", cmd_version, "print the version", "rapid version"},
    {"help", cmd_help, "help on a command", "rapid help [COMMAND]"},
    {"parse", rp_cmd_parse, "raw model output -> assistant message (tool calls, reasoning)",
     "rapid parse [--tool-call-parser NAME] [--reasoning-parser NAME] [--tools TOOLS.json]\n"
     "            [--chunk N] [--think-opened] [--stable-ids] --text-file F\n"
     "tool-call parsers: hermes granite4 qwen3_coder qwen3_xml seed_oss llama3_json pythonic\n"
     "  llama4_pythonic lfm2 mistral deepseek_v3 deepseek_v31 kimi_k2 glm45 glm47 openai granite\n"
     "  phi4_mini_json minimax_m2 xlam jamba internlm hunyuan_a13b cohere_command3 gemma4\n"
     "reasoning parsers: qwen3 deepseek_r1 deepseek_v3 glm45 kimi_k2 minimax_m2 hunyuan_a13b\n"
     "  mistral seed_oss granite gemma4 cohere_command3 openai_gptoss\n"
     "--chunk N feeds N characters at a time through the streaming path; --think-opened: the\n"
     "prompt ended inside an open think block; --stable-ids: ids call_000..0, call_000..1"},
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
