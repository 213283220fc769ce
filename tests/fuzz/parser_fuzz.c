/* tests/fuzz/parser_fuzz.c - libFuzzer targets for chat/output_parser, one per parser family.
 *
 * Built once per family with -DRP_FUZZ_FAMILY=N (scripts/fuzz-parsers.sh builds
 * build-fuzz/parser_fuzz_<family>); the family fixes the set of tool-call formats byte 0 picks
 * from, so each target spends its whole run on one body parser:
 *   0 json      JSON bodies (parse_json.c): hermes, granite4, llama3_json, mistral, deepseek_v3,
 *               deepseek_v31, kimi_k2, granite, phi4_mini_json, xlam, jamba, internlm,
 *               hunyuan_a13b, cohere_command3
 *   1 xml       schema-typed XML bodies (parse_xml.c): qwen3_coder, qwen3_xml, seed_oss, glm45,
 *               glm47, minimax_m2
 *   2 pythonic  Python-call / Gemma 4 literal bodies (parse_pythonic.c): pythonic,
 *               llama4_pythonic, lfm2, gemma4
 *   3 harmony   gpt-oss Harmony channels (parse_harmony.c): openai
 *   4 reasoning no tool parser: only the reasoning machine (every reasoning parser)
 * Without RP_FUZZ_FAMILY every tool parser is reachable (byte 0 over the whole list).
 * Input: byte 0 picks the tool-call parser, byte 1 the reasoning parser (bit 7: think_opened,
 * bit 6: pass a tools schema), byte 2 seeds the chunking; the rest is the model text. The
 * environment variable RP_FUZZ_TOOL pins the tool parser. Checks: no crash, leak or UB
 * (ASan/UBSan); the text fed whole and fed in random byte-sized chunks assemble the same
 * message; every call's arguments are a JSON object string; valid UTF-8 input loses no
 * non-whitespace byte when no call parsed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chat/output_parser.h"

static const char *g_pinned_tool; /* fuzzer-only state, set once in LLVMFuzzerInitialize */

#ifdef RP_FUZZ_FAMILY
static const char *const k_families[][16] = {
    {"hermes", "granite4", "llama3_json", "mistral", "deepseek_v3", "deepseek_v31", "kimi_k2",
     "granite", "phi4_mini_json", "xlam", "jamba", "internlm", "hunyuan_a13b", "cohere_command3",
     NULL},
    {"qwen3_coder", "qwen3_xml", "seed_oss", "glm45", "glm47", "minimax_m2", NULL},
    {"pythonic", "llama4_pythonic", "lfm2", "gemma4", NULL},
    {"openai", NULL},
    {NULL},
};
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_pinned_tool = getenv("RP_FUZZ_TOOL");
    return 0;
}

static void stable_id(void *user, int index, char *out, size_t cap)
{
    snprintf(out, cap, "call_%024d", index);
}

static size_t count(const char *const *names)
{
    size_t n = 0;
    while (names[n])
        n++;
    return n;
}

/* Strict UTF-8 (no overlongs, surrogates, NUL or code points above U+10FFFF), as jansson. */
static bool valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || c == 0 || c == 0xC0 || c == 0xC1 || c > 0xF4) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        uint8_t c1 = k > 1 ? s[i + 1] : 0;
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
            (c == 0xF4 && c1 >= 0x90))
            return false;
        i += k;
    }
    return true;
}

static json_t *run(const rp_output_parser_config *base, const char *text, size_t n, unsigned seed)
{
    rp_parse_collector *col = NULL;
    if (rp_parse_collector_new(&col) != RP_OK) abort();
    rp_output_parser_config cfg = *base;
    cfg.on_event = rp_parse_collector_event;
    cfg.user = col;
    rp_output_parser *p = NULL;
    if (rp_output_parser_new(&cfg, &p, NULL) != RP_OK) abort();
    size_t off = 0;
    while (off < n) {
        size_t step = n - off;
        if (seed) {
            seed = seed * 1103515245u + 12345u;
            step = 1 + (seed >> 16) % 9;
            if (step > n - off) step = n - off;
        }
        if (rp_output_parser_feed(p, text + off, step, NULL) != RP_OK)
            abort(); /* the collector rejects a wrong event order */
        off += step;
    }
    if (rp_output_parser_finish(p, NULL) != RP_OK) abort();
    json_t *m = rp_parse_collector_message(col);
    rp_output_parser_free(p);
    rp_parse_collector_free(col);
    return m;
}

static size_t non_ws(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++)
        n += !(*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t');
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    const char *const *tools = rp_output_parser_tool_names();
    const char *const *reasons = rp_output_parser_reasoning_names();
    size_t n_tools = count(tools), n_reasons = count(reasons);
    json_t *schema = NULL;
    if (data[1] & 0x40) {
        json_error_t e;
        schema = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                            "{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
                            "\"object\"},\"c\":{\"type\":[\"string\",\"null\"]},\"d\":{\"type\":"
                            "\"array\"},\"e\":{\"type\":\"boolean\"}}}}}]",
                            0, &e);
    }
#ifdef RP_FUZZ_FAMILY
    tools = k_families[RP_FUZZ_FAMILY];
    n_tools = count(tools);
    const char *tool = n_tools ? tools[data[0] % n_tools] : NULL;
#else
    const char *tool = tools[data[0] % (n_tools + 1)];
#endif
    rp_output_parser_config cfg = {
        .tool_parser = g_pinned_tool ? g_pinned_tool : tool,
        .reasoning_parser = reasons[(data[1] & 0x3F) % (n_reasons + 1)],
        .think_opened = (data[1] & 0x80) != 0,
        .tools = schema,
        .gen_id = stable_id,
    };
    const char *text = (const char *)data + 3;
    size_t n = size - 3;
    json_t *whole = run(&cfg, text, n, 0);
    json_t *chunked = run(&cfg, text, n, data[2] | 1u);
    bool utf8 = valid_utf8(data + 3, n);
    if (utf8) {
        if (!whole || !chunked || !json_equal(whole, chunked)) {
            char *a = whole ? json_dumps(whole, JSON_COMPACT) : NULL;
            char *b = chunked ? json_dumps(chunked, JSON_COMPACT) : NULL;
            fprintf(stderr, "streaming differs (%s / %s):\n whole:   %s\n chunked: %s\n",
                    cfg.tool_parser ? cfg.tool_parser : "-",
                    cfg.reasoning_parser ? cfg.reasoning_parser : "-", a ? a : "NULL",
                    b ? b : "NULL");
            abort();
        }
        json_t *calls = json_object_get(whole, "tool_calls");
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c)
        {
            const char *args =
                json_string_value(json_object_get(json_object_get(c, "function"), "arguments"));
            json_error_t e;
            json_t *a = args ? json_loads(args, 0, &e) : NULL;
            if (!json_is_object(a)) abort();
            json_decref(a);
        }
        /* without calls or reasoning, every visible byte of the input is in the content
         * (formats that strip markup or route channels excepted) */
        const char *t = cfg.tool_parser;
        if (json_array_size(calls) == 0 && !cfg.reasoning_parser &&
            !(t && (strcmp(t, "openai") == 0 || strcmp(t, "cohere_command3") == 0))) {
            char *in = rp_strndup(text, n);
            size_t want = non_ws(in);
            size_t got = non_ws(json_string_value(json_object_get(whole, "content")));
            rp_free(in);
            if (want != got) abort();
        }
    }
    json_decref(whole);
    json_decref(chunked);
    json_decref(schema);
    return 0;
}
