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
    /* for users */
    {"serve", rp_cmd_serve, "serve a model over the OpenAI and Anthropic APIs",
     "rapid serve [MODEL] [--host H] [--port P] [--api-key KEY] [--max-request-bytes N]\n"
     "            [--cors-origins LIST] [--log-level L] [--served-model-name NAME]\n"
     "            [--threads N] [--max-queue N] [--tool-call-parser NAME]\n"
     "            [--reasoning-parser NAME] [--kv-cache-mb N]\n"
     "            [--kv-cache-dtype f32|bf16|f16|int8|int4] [--max-num-seqs N]\n"
     "            [--prefill-chunk N] [--speculative-tokens N] [--device cpu|cuda|auto]\n"
     "            [--gpu-memory-fraction F]\n"
     "  flags fall back to RAPID_HOST, RAPID_PORT, RAPID_API_KEY, ... (see README)"},
    {"chat", rp_cmd_chat, "chat with a running server in the terminal",
     "rapid chat [MODEL] [--url URL] [--system TEXT] [--no-think]\n"
     "  in the chat: /help /reset /system TEXT /think /no-think /save FILE /exit\n"
     "  Without --url (or RAPID_URL) and no server at 127.0.0.1:8000, it starts one for\n"
     "  MODEL (default: the embedded model) and stops it on exit."},
    {"models", rp_cmd_models, "list catalog models and aliases (downloaded, size, memory)",
     "rapid models [--json]"},
    {"ls", rp_cmd_ls, "list downloaded models", "rapid ls [--json]"},
    {"info", rp_cmd_info, "architecture, parameters and memory of a model",
     "rapid info MODEL [--context N] [--json]\n  MODEL: alias, directory or org/name"},
    {"recipe", rp_cmd_recipe, "recommend models for this machine's memory",
     "rapid recipe [--memory GB] [--json]"},
    {"pull", rp_cmd_pull, "download a model from the Hugging Face hub",
     "rapid pull MODEL [--revision REV] [--quiet]\n"
     "  env: HF_ENDPOINT (hub URL), HF_TOKEN (gated/private repos), HF_HOME (cache)"},
    {"rm", rp_cmd_rm, "delete a downloaded model", "rapid rm MODEL"},
    {"alias", rp_cmd_alias, "manage your model aliases (~/.config/rapid/aliases.json)",
     "rapid alias set NAME TARGET | rapid alias rm NAME | rapid alias list"},
    {"doctor", rp_cmd_doctor, "check this machine and rapid's setup",
     "rapid doctor [--port N] [--no-smoke]"},
    {"launch", rp_cmd_launch, "point a coding agent at the local server",
     "rapid launch AGENT|list [--url URL] [--model NAME] [--dry-run] [--no-check]\n"
     "  AGENT: claude-code, codex, aider, opencode, continue"},
    {"bench", rp_cmd_bench, "benchmark a model in-process, or a running server",
     "rapid bench --model DIR [--prompt N] [--gen N] [--threads N] [--streams 1,4,16]\n"
     "            [--temperature T] [--top-p P] [--prefix-cache N] [--json]\n"
     "  Reports prefill and decode tok/s and decode as a share of the memory-bandwidth bound\n"
     "  (tok/s x bytes read per token / read bandwidth measured in the same run); --streams:\n"
     "  aggregate decode of concurrent streams, greedy unless --temperature is given.\n"
     "rapid bench [--url URL] [--model NAME] [--prompt-tokens N] [--max-tokens N]\n"
     "            [--concurrency N] [--runs N] [--json]\n"
     "  Against a running server (default http://127.0.0.1:8000): TTFT, prefill and decode\n"
     "  tok/s per run, and the aggregate of N concurrent streams."},
    /* tools: stable interfaces for tests, checks and model work */
    {"generate", rp_cmd_generate, "generate token ids from token ids",
     "rapid generate --model DIR --ids 1,2,3 --max-tokens N [--temperature T] [--top-k K]\n"
     "               [--top-p P] [--min-p P] [--seed S] [--threads N] [--ignore-eos]\n"
     "               [--speculative-tokens N] [--kv-cache-dtype f32|bf16|f16|int8|int4]\n"
     "  Greedy unless --temperature is given; prints the generated ids on one line."},
    {"logits", rp_cmd_logits, "write float32 logits for token ids",
     "rapid logits --model DIR --ids 1,2,3 --out FILE [--threads N] [--ref-kernels]\n"
     "  FILE gets one row of vocab_size little-endian float32 per input position."},
    {"perplexity", rp_cmd_perplexity, "perplexity of a model on a text file",
     "rapid perplexity --model DIR --text-file FILE [--ctx N] [--threads N] [--ref-kernels]\n"
     "                 [--json]\n"
     "  Pieces of CTX-1 tokens (default: the model's context), each scored from an empty\n"
     "  cache as [BOS] + piece; prints exp(mean NLL) over every piece token."},
    {"tokenize", rp_cmd_tokenize, "print the token ids of a text (JSON array)",
     "rapid tokenize --tokenizer PATH (--text-file FILE | --text STRING) [--add-special]\n"
     "  PATH: a tokenizer.json, a model directory or a .gguf file"},
    {"detokenize", rp_cmd_detokenize, "print the text of token ids",
     "rapid detokenize --tokenizer PATH --ids 1,2,3 [--skip-special]"},
    {"template", rp_cmd_template, "render a chat template against a JSON context",
     "rapid template (--template FILE.jinja | --model DIR) [--context CTX.json] [--now SECONDS]"},
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
    {"quantize", rp_cmd_quantize, "write an MLX-layout 4/8-bit quantized checkpoint",
     "rapid quantize --model DIR --bits 4|8 [--group-size 32|64|128] --out DIR2\n"
     "  Quantizes every linear layer, the embedding and lm_head (affine, per group), as\n"
     "  mlx_lm.convert -q does; the output loads anywhere a checkpoint does."},
    {"version", cmd_version, "print the version", "rapid version"},
    {"help", cmd_help, "help on a command", "rapid help [COMMAND]"},
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
