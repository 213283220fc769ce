/* Unit tests for the chat/output_parser contract: names, ids, event order, errors, forced-call
 * prefixes, think-block detection, and parser choice from the real chat templates in
 * $RAPID_TEST_CACHE/llama.cpp/models/templates (fetched by scripts/setup.d/10-llamacpp-data.sh). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "chat/output_parser.h"

typedef struct rec {
    int n_events;
    int kinds[64];
    char ids[8][RP_TOOL_ID_MAX];
    int n_ids;
    rp_status fail_with; /* returned from the first TOOL_START when set */
} rec;

static rp_status record(void *user, const rp_parse_event *ev)
{
    rec *r = user;
    if (r->n_events < 64) r->kinds[r->n_events] = ev->kind;
    r->n_events++;
    if (ev->kind == RP_PARSE_TOOL_START) {
        if (r->fail_with != RP_OK) return r->fail_with;
        if (r->n_ids < 8) snprintf(r->ids[r->n_ids++], RP_TOOL_ID_MAX, "%s", ev->id);
    }
    return RP_OK;
}

/* Runs text through a parser into a message (stable ids unless random_ids). */
static json_t *parse(const char *tool, const char *reasoning, const char *text)
{
    rp_parse_collector *col = NULL;
    cr_assert_eq(rp_parse_collector_new(&col), RP_OK);
    rp_output_parser_config cfg = {.tool_parser = tool,
                                   .reasoning_parser = reasoning,
                                   .on_event = rp_parse_collector_event,
                                   .user = col};
    rp_output_parser *p = NULL;
    rp_err err = {0};
    cr_assert_eq(rp_output_parser_new(&cfg, &p, &err), RP_OK, "%s", err.msg);
    cr_assert_eq(rp_output_parser_feed(p, text, strlen(text), &err), RP_OK);
    cr_assert_eq(rp_output_parser_finish(p, &err), RP_OK);
    json_t *m = rp_parse_collector_message(col);
    rp_output_parser_free(p);
    rp_parse_collector_free(col);
    return m;
}

Test(output_parser, every_listed_name_constructs)
{
    rec r = {0};
    for (const char *const *n = rp_output_parser_tool_names(); *n; n++) {
        rp_output_parser_config cfg = {.tool_parser = *n, .on_event = record, .user = &r};
        rp_output_parser *p = NULL;
        cr_assert_eq(rp_output_parser_new(&cfg, &p, NULL), RP_OK, "%s", *n);
        cr_assert(rp_output_parser_has_tool(*n));
        rp_output_parser_free(p);
    }
    for (const char *const *n = rp_output_parser_reasoning_names(); *n; n++) {
        rp_output_parser_config cfg = {.reasoning_parser = *n, .on_event = record, .user = &r};
        rp_output_parser *p = NULL;
        cr_assert_eq(rp_output_parser_new(&cfg, &p, NULL), RP_OK, "%s", *n);
        cr_assert(rp_output_parser_has_reasoning(*n));
        rp_output_parser_free(p);
    }
}

Test(output_parser, unknown_name_is_not_found)
{
    rec r = {0};
    rp_err err = {0};
    rp_output_parser *p = NULL;
    rp_output_parser_config cfg = {.tool_parser = "hermes2", .on_event = record, .user = &r};
    cr_assert_eq(rp_output_parser_new(&cfg, &p, &err), RP_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "hermes2"));
    cfg = (rp_output_parser_config){.reasoning_parser = "qwen9", .on_event = record, .user = &r};
    cr_assert_eq(rp_output_parser_new(&cfg, &p, &err), RP_ERR_NOT_FOUND);
    cr_assert_null(p);
}

Test(output_parser, default_ids_are_call_and_24_alnum_and_distinct)
{
    rec r = {0};
    rp_output_parser_config cfg = {.tool_parser = "hermes", .on_event = record, .user = &r};
    rp_output_parser *p = NULL;
    cr_assert_eq(rp_output_parser_new(&cfg, &p, NULL), RP_OK);
    const char *t =
        "<tool_call>{\"name\":\"a\"}</tool_call><tool_call>{\"name\":\"b\"}</tool_call>";
    cr_assert_eq(rp_output_parser_feed(p, t, strlen(t), NULL), RP_OK);
    cr_assert_eq(rp_output_parser_finish(p, NULL), RP_OK);
    cr_assert_eq(rp_output_parser_n_calls(p), 2);
    rp_output_parser_free(p);
    cr_assert_eq(r.n_ids, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(strlen(r.ids[i]), 29, "%s", r.ids[i]);
        cr_assert_eq(strncmp(r.ids[i], "call_", 5), 0);
        for (int k = 5; k < 29; k++)
            cr_assert(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                             r.ids[i][k]));
    }
    cr_assert_str_neq(r.ids[0], r.ids[1]);
    /* order: START, ARGS, END per call, nothing else */
    int want[] = {RP_PARSE_TOOL_START, RP_PARSE_TOOL_ARGS, RP_PARSE_TOOL_END,
                  RP_PARSE_TOOL_START, RP_PARSE_TOOL_ARGS, RP_PARSE_TOOL_END};
    cr_assert_eq(r.n_events, 6);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(r.kinds[i], want[i]);
}

static void fixed_id(void *user, int index, char *out, size_t cap)
{
    snprintf(out, cap, "%s%d", (const char *)user, index);
}

Test(output_parser, injected_id_generator)
{
    rp_parse_collector *col = NULL;
    cr_assert_eq(rp_parse_collector_new(&col), RP_OK);
    rp_output_parser_config cfg = {.tool_parser = "mistral",
                                   .on_event = rp_parse_collector_event,
                                   .user = col,
                                   .gen_id = fixed_id,
                                   .gen_id_user = "id-"};
    rp_output_parser *p = NULL;
    cr_assert_eq(rp_output_parser_new(&cfg, &p, NULL), RP_OK);
    const char *t = "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{\"x\":1}";
    cr_assert_eq(rp_output_parser_feed(p, t, strlen(t), NULL), RP_OK);
    cr_assert_eq(rp_output_parser_finish(p, NULL), RP_OK);
    json_t *m = rp_parse_collector_message(col);
    json_t *calls = json_object_get(m, "tool_calls");
    cr_assert_eq(json_array_size(calls), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(calls, 1), "id")), "id-1");
    json_decref(m);
    rp_output_parser_free(p);
    rp_parse_collector_free(col);
}

Test(output_parser, callback_error_stops_the_parser)
{
    rec r = {.fail_with = RP_ERR_CANCELLED};
    rp_output_parser_config cfg = {.tool_parser = "hermes", .on_event = record, .user = &r};
    rp_output_parser *p = NULL;
    rp_err err = {0};
    cr_assert_eq(rp_output_parser_new(&cfg, &p, NULL), RP_OK);
    const char *t = "<tool_call>{\"name\":\"a\"}</tool_call>";
    cr_assert_eq(rp_output_parser_feed(p, t, strlen(t), &err), RP_ERR_CANCELLED);
    cr_assert_eq(rp_output_parser_feed(p, "x", 1, &err), RP_ERR_CANCELLED);
    cr_assert_eq(rp_output_parser_finish(p, &err), RP_ERR_CANCELLED);
    rp_output_parser_free(p);
}

Test(output_parser, no_tool_parser_keeps_markup_as_content)
{
    json_t *m = parse(NULL, NULL, "<tool_call>{\"name\":\"a\"}</tool_call>");
    cr_assert_str_eq(json_string_value(json_object_get(m, "content")),
                     "<tool_call>{\"name\":\"a\"}</tool_call>");
    cr_assert_null(json_object_get(m, "tool_calls"));
    json_decref(m);
    m = parse("none", "none", "plain");
    cr_assert_str_eq(json_string_value(json_object_get(m, "content")), "plain");
    json_decref(m);
}

Test(output_parser, think_opened_from_prompt_tail)
{
    const char *qwen35 = "<|im_start|>assistant\n<think>\n";
    const char *qwen3_off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    cr_assert(rp_output_parser_think_opened("qwen3", qwen35, strlen(qwen35)));
    cr_assert_not(rp_output_parser_think_opened("qwen3", qwen3_off, strlen(qwen3_off)));
    cr_assert_not(rp_output_parser_think_opened(NULL, qwen35, strlen(qwen35)));
    const char *r1 = "<\xef\xbd\x9c"
                     "Assistant\xef\xbd\x9c><think>\n";
    cr_assert(rp_output_parser_think_opened("deepseek_r1", r1, strlen(r1)));
    const char *seed = "assistant\n<seed:think>";
    cr_assert(rp_output_parser_think_opened("seed_oss", seed, strlen(seed)));
    const char *gemma_off = "<|turn>model\n<|channel>thought\n<channel|>";
    cr_assert_not(rp_output_parser_think_opened("gemma4", gemma_off, strlen(gemma_off)));
}

/* tool_choice required/named: the prefix opens a call; the model's continuation completes it. */
Test(output_parser, forced_call_prefix_round_trips)
{
    static const struct {
        const char *tool, *cont;
    } cases[] = {
        {"hermes", "{\"city\": \"Paris\"}}\n</tool_call>"},
        {"granite4", "{\"city\": \"Paris\"}}\n</tool_call>"},
        {"qwen3_coder", "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"},
        {"seed_oss", "<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>"},
        {"llama3_json", "{\"city\": \"Paris\"}}"},
        {"pythonic", "city=\"Paris\")]"},
        {"llama4_pythonic", "city=\"Paris\")]"},
        {"lfm2", "city=\"Paris\")]<|tool_call_end|>"},
        {"mistral", "{\"city\": \"Paris\"}"},
        {"deepseek_v3", "{\"city\": \"Paris\"}\n```<\xef\xbd\x9ctool\xe2\x96\x81"
                        "call\xe2\x96\x81"
                        "end\xef\xbd\x9c>"},
        {"deepseek_v31", "{\"city\": \"Paris\"}"},
        {"kimi_k2", "{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>"},
        {"glm45", "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"},
        {"glm47", "<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"},
        {"openai", "{\"city\": \"Paris\"}<|call|>"},
        {"granite", "{\"city\": \"Paris\"}}]"},
        {"phi4_mini_json", "{\"city\": \"Paris\"}}]"},
        {"minimax_m2",
         "<parameter name=\"city\">Paris</parameter>\n</invoke>\n</minimax:tool_call>"},
        {"xlam", "{\"city\": \"Paris\"}}]"},
        {"jamba", "{\"city\": \"Paris\"}}]</tool_calls>"},
        {"internlm", "{\"city\": \"Paris\"}}<|action_end|>"},
        {"hunyuan_a13b", "{\"city\": \"Paris\"}}]</tool_calls>"},
        {"cohere_command3", "{\"city\": \"Paris\"}}]<|END_ACTION|>"},
        {"gemma4", "city:<|\"|>Paris<|\"|>}<tool_call|>"},
    };
    size_t n_names = 0;
    for (const char *const *n = rp_output_parser_tool_names(); *n; n++)
        n_names++;
    cr_assert_eq(RP_ARRAY_LEN(cases) + 1, n_names, "a format lacks a forced-call case");
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        char *prefix = NULL;
        cr_assert_eq(rp_output_parser_call_prefix(cases[i].tool, "get_weather", &prefix, NULL),
                     RP_OK, "%s", cases[i].tool);
        size_t n = strlen(prefix) + strlen(cases[i].cont) + 1;
        char *text = rp_alloc(n);
        snprintf(text, n, "%s%s", prefix, cases[i].cont);
        json_t *m = parse(cases[i].tool, NULL, text);
        json_t *call = json_array_get(json_object_get(m, "tool_calls"), 0);
        json_t *fn = json_object_get(call, "function");
        cr_expect_str_eq(json_string_value(json_object_get(fn, "name")), "get_weather", "%s: %s",
                         cases[i].tool, text);
        cr_expect_str_eq(json_string_value(json_object_get(fn, "arguments")),
                         "{\"city\":\"Paris\"}", "%s", cases[i].tool);
        cr_expect(json_is_null(json_object_get(m, "content")), "%s", cases[i].tool);
        json_decref(m);
        rp_free(text);
        rp_free(prefix);
        cr_assert_eq(rp_output_parser_call_prefix(cases[i].tool, NULL, &prefix, NULL), RP_OK);
        cr_assert_gt(strlen(prefix), 0);
        rp_free(prefix);
    }
    char *prefix = NULL;
    cr_assert_eq(rp_output_parser_call_prefix("hermes", "bad\"name", &prefix, NULL),
                 RP_ERR_INVALID);
}

Test(output_parser, detects_parsers_from_real_templates)
{
    static const struct {
        const char *file, *tool, *reasoning;
    } cases[] = {
        {"Qwen-Qwen3-0.6B", "hermes", "qwen3"},
        {"Qwen-Qwen2.5-7B-Instruct", "hermes", NULL},
        {"Qwen3-Coder", "qwen3_coder", NULL},
        {"Qwen3.5-4B", "qwen3_coder", "qwen3"},
        {"openai-gpt-oss-120b", "openai", "openai_gptoss"},
        {"MiniMax-M2", "minimax_m2", "minimax_m2"},
        {"ByteDance-Seed-OSS", "seed_oss", "seed_oss"},
        {"Kimi-K2-Thinking", "kimi_k2", "kimi_k2"},
        {"moonshotai-Kimi-K2", "kimi_k2", NULL},
        {"GLM-4.6", "glm45", "glm45"},
        {"GLM-4.7-Flash", "glm47", "glm45"},
        {"google-gemma-4-31B-it", "gemma4", "gemma4"},
        {"Mistral-Small-3.2-24B-Instruct-2506", "mistral", NULL},
        {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral", "mistral"},
        {"LFM2-8B-A1B", "lfm2", NULL},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "cohere_command3", "cohere_command3"},
        {"ibm-granite-granite-3.3-2B-Instruct", "granite", "granite"},
        {"meta-llama-Llama-3.1-8B-Instruct", "llama3_json", NULL},
        {"meta-llama-Llama-3.2-3B-Instruct", "llama3_json", NULL},
        {"deepseek-ai-DeepSeek-V3.1", "deepseek_v31", "deepseek_r1"},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek_v3", "deepseek_r1"},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes", NULL},
        {"fireworks-ai-llama-3-firefunction-v2", "phi4_mini_json", NULL},
    };
    const char *cache = getenv("RAPID_TEST_CACHE");
    char dir[4096];
    if (cache)
        snprintf(dir, sizeof dir, "%s/llama.cpp/models/templates", cache);
    else
        snprintf(dir, sizeof dir, "%s/.cache/rapid-test/llama.cpp/models/templates",
                 getenv("HOME") ? getenv("HOME") : "");
    cr_assert(rp_path_is_dir(dir), "templates missing at %s: run scripts/test-setup.sh", dir);
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s.jinja", dir, cases[i].file);
        char *tpl = NULL;
        size_t len = 0;
        rp_err err = {0};
        cr_assert_eq(rp_file_read(path, &tpl, &len, &err), RP_OK, "%s", err.msg);
        const char *tool = NULL, *reasoning = NULL;
        rp_output_parser_detect(tpl, NULL, &tool, &reasoning);
        cr_expect_str_eq(tool ? tool : "(none)", cases[i].tool, "%s", cases[i].file);
        cr_expect_str_eq(reasoning ? reasoning : "(none)",
                         cases[i].reasoning ? cases[i].reasoning : "(none)", "%s", cases[i].file);
        rp_free(tpl);
    }
    const char *tool = NULL, *reasoning = NULL;
    rp_output_parser_detect(NULL, "gpt_oss", &tool, &reasoning);
    cr_assert_str_eq(tool, "openai");
    cr_assert_str_eq(reasoning, "openai_gptoss");
    rp_output_parser_detect("{{ messages }}", "qwen3_moe", &tool, &reasoning);
    cr_assert_str_eq(tool, "hermes");
    rp_output_parser_detect(NULL, "unknown_arch", &tool, &reasoning);
    cr_assert_null(tool);
    cr_assert_null(reasoning);
}

Test(output_parser, byte_split_utf8_marker_is_recognised)
{
    /* the DeepSeek markers are multi-byte: cut inside their UTF-8 sequences */
    const char *t = "<\xef\xbd\x9ctool\xe2\x96\x81"
                    "calls\xe2\x96\x81"
                    "begin\xef\xbd\x9c>"
                    "<\xef\xbd\x9ctool\xe2\x96\x81"
                    "call\xe2\x96\x81"
                    "begin\xef\xbd\x9c>f"
                    "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>{}";
    size_t n = strlen(t);
    for (size_t cut = 1; cut < n; cut++) {
        rp_parse_collector *col = NULL;
        cr_assert_eq(rp_parse_collector_new(&col), RP_OK);
        rp_output_parser_config cfg = {
            .tool_parser = "deepseek_v31", .on_event = rp_parse_collector_event, .user = col};
        rp_output_parser *p = NULL;
        cr_assert_eq(rp_output_parser_new(&cfg, &p, NULL), RP_OK);
        cr_assert_eq(rp_output_parser_feed(p, t, cut, NULL), RP_OK);
        cr_assert_eq(rp_output_parser_feed(p, t + cut, n - cut, NULL), RP_OK);
        cr_assert_eq(rp_output_parser_finish(p, NULL), RP_OK);
        cr_assert_eq(rp_output_parser_n_calls(p), 1, "cut %zu", cut);
        rp_output_parser_free(p);
        rp_parse_collector_free(col);
    }
}
