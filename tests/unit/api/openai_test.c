/* Unit tests for src/api/openai.c: request parsing, normalisation, errors, chunks. */
#include <criterion/criterion.h>
#include <string.h>

#include "api/openai.h"
#include "base/alloc.h"
#include "base/buf.h"

static rp_status chat(const char *body, rp_chat_request *r, rp_api_error *e)
{
    rp_chat_request_init(r, RP_REQ_CHAT);
    return rp_openai_parse_chat(body, strlen(body), r, e);
}

static void expect_error(const char *body, rp_apierr kind, const char *param)
{
    rp_chat_request r;
    rp_api_error e = {0};
    cr_assert_neq(chat(body, &r, &e), RP_OK, "%s", body);
    cr_assert_eq(e.kind, kind, "%s -> %d (%s)", body, e.kind, e.msg);
    if (param)
        cr_assert_str_eq(e.param, param, "%s", body);
    rp_chat_request_deinit(&r);
}

Test(openai, full_request)
{
    rp_chat_request r;
    rp_api_error e = {0};
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
        "\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}],"
        "\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.1,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
        "\"seed\":123,\"stop\":[\"x\",\"yy\"],\"n\":1,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":2,"
        "\"user\":\"u\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"parameters\":{}}}],\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,"
        "\"response_format\":{\"type\":\"json_object\"}}";
    cr_assert_eq(chat(body, &r, &e), RP_OK, "%s", e.msg);
    cr_assert_str_eq(r.model, "m");
    cr_assert_eq(r.max_tokens, 7);
    cr_assert_float_eq(r.sampling.temperature, 0.5f, 1e-6);
    cr_assert_eq(r.sampling.top_k, 40);
    cr_assert(r.sampling.has_seed);
    cr_assert_eq(r.sampling.seed, 123u);
    cr_assert_eq(r.n_stop, 2);
    cr_assert_str_eq(r.stop[1], "yy");
    cr_assert(r.stream && r.include_usage && r.logprobs && r.json_mode);
    cr_assert_eq(r.top_logprobs, 2);
    cr_assert_eq(r.parallel_tool_calls, 0);
    cr_assert_str_eq(r.tool_choice, "auto");
    cr_assert_eq(json_array_size(r.tools), 1);
    cr_assert_eq(json_array_size(r.messages), 4);
    json_t *m0 = json_array_get(r.messages, 0), *m1 = json_array_get(r.messages, 1);
    cr_assert_str_eq(json_string_value(json_object_get(m0, "role")), "system");
    cr_assert_str_eq(json_string_value(json_object_get(m1, "content")), "a\nb");
    json_t *call = json_array_get(json_object_get(json_array_get(r.messages, 2), "tool_calls"), 0);
    json_t *args = json_object_get(json_object_get(call, "function"), "arguments");
    cr_assert(json_is_object(args), "arguments parsed into an object");
    cr_assert_eq(json_integer_value(json_object_get(args, "x")), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(r.messages, 3),
                                                       "tool_call_id")),
                     "c1");
    rp_chat_request_deinit(&r);
}

Test(openai, defaults)
{
    rp_chat_request r;
    rp_api_error e = {0};
    cr_assert_eq(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"s\"}", &r,
                      &e),
                 RP_OK);
    cr_assert_null(r.model);
    cr_assert_eq(r.max_tokens, -1);
    cr_assert_eq(r.n_stop, 1);
    cr_assert_eq(r.stream, 0);
    cr_assert_eq(r.sampling.has_seed, 0);
    rp_chat_request_deinit(&r);
}

Test(openai, errors)
{
    expect_error("{", RP_APIERR_INVALID, "");
    expect_error("[1]", RP_APIERR_INVALID, "");
    expect_error("{\"messages\":\"hi\"}", RP_APIERR_INVALID, "messages");
    expect_error("{\"messages\":[]}", RP_APIERR_INVALID, "messages");
    expect_error("{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", RP_APIERR_INVALID,
                 "messages");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", RP_APIERR_INVALID,
                 "content");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                 "\"image_url\":{\"url\":\"x\"}}]}]}",
                 RP_APIERR_UNSUPPORTED, "content");
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[512];
    const char *bad[][2] = {
        {"\"temperature\":\"hot\"", "temperature"}, {"\"temperature\":3", "temperature"},
        {"\"max_tokens\":0", "max_tokens"},         {"\"max_tokens\":1.5", "max_tokens"},
        {"\"stop\":5", "stop"},                     {"\"stop\":[\"\"]", "stop"},
        {"\"seed\":\"x\"", "seed"},                 {"\"stream\":1", "stream"},
        {"\"tools\":{}", "tools"},                  {"\"tool_choice\":\"maybe\"", "tool_choice"},
        {"\"top_logprobs\":3", "top_logprobs"},     {"\"model\":3", "model"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{%s,%s}", m, bad[i][0]);
        expect_error(body, RP_APIERR_INVALID, bad[i][1]);
    }
    snprintf(body, sizeof body, "{%s,\"n\":2}", m);
    expect_error(body, RP_APIERR_UNSUPPORTED, "n");
    snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_schema\"}}", m);
    expect_error(body, RP_APIERR_UNSUPPORTED, "response_format");
}

Test(openai, invalid_utf8)
{
    rp_chat_request r;
    rp_api_error e = {0};
    cr_assert_neq(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", &r, &e), RP_OK);
    cr_assert(strstr(e.msg, "UTF-8"));
    rp_chat_request_deinit(&r);
}

Test(openai, completion_prompts)
{
    rp_chat_request r;
    rp_api_error e = {0};
    rp_chat_request_init(&r, RP_REQ_COMPLETION);
    const char *b1 = "{\"prompt\":\"once\",\"max_tokens\":3}";
    cr_assert_eq(rp_openai_parse_completion(b1, strlen(b1), &r, &e), RP_OK);
    cr_assert_str_eq(r.prompt, "once");
    rp_chat_request_deinit(&r);
    rp_chat_request_init(&r, RP_REQ_COMPLETION);
    const char *b2 = "{\"prompt\":[1,2,3]}";
    cr_assert_eq(rp_openai_parse_completion(b2, strlen(b2), &r, &e), RP_OK);
    cr_assert_eq(r.n_prompt_ids, 3);
    cr_assert_eq(r.prompt_ids[2], 3);
    rp_chat_request_deinit(&r);
    rp_chat_request_init(&r, RP_REQ_COMPLETION);
    const char *b3 = "{\"prompt\":\"x\",\"echo\":true}";
    cr_assert_neq(rp_openai_parse_completion(b3, strlen(b3), &r, &e), RP_OK);
    cr_assert_eq(e.kind, RP_APIERR_UNSUPPORTED);
    rp_chat_request_deinit(&r);
    rp_chat_request_init(&r, RP_REQ_COMPLETION);
    const char *b4 = "{\"prompt\":[1,-2]}";
    cr_assert_neq(rp_openai_parse_completion(b4, strlen(b4), &r, &e), RP_OK);
    rp_chat_request_deinit(&r);
}

static rp_status collect(void *user, const char *event, const char *data, size_t len)
{
    rp_buf *b = user;
    rp_buf_append(b, data, len);
    return rp_buf_putc(b, '\n');
}

Test(openai, stream_chunks)
{
    rp_chat_request r;
    rp_chat_request_init(&r, RP_REQ_CHAT);
    r.include_usage = 1;
    rp_openai_stream s;
    rp_openai_stream_init(&s, &r, "m", "fp");
    rp_buf b = {0};
    rp_gen_piece pc = {.kind = RP_PIECE_CONTENT, .text = "hi", .len = 2};
    rp_gen_output d = {.text = "hi", .len = 2, .pieces = &pc, .n_pieces = 1};
    cr_assert_eq(rp_openai_stream_delta(&s, &d, collect, &b), RP_OK);
    rp_gen_output done = {.finish = RP_GEN_FINISH_LENGTH, .n_prompt = 3, .n_completion = 1};
    cr_assert_eq(rp_openai_stream_finish(&s, &done, collect, &b), RP_OK);
    /* role chunk, content chunk, finish chunk, usage chunk, [DONE] */
    char *lines[8];
    int n = 0;
    for (char *p = strtok(b.data, "\n"); p && n < 8; p = strtok(NULL, "\n"))
        lines[n++] = p;
    cr_assert_eq(n, 5);
    cr_assert(strstr(lines[0], "\"role\":\"assistant\""));
    cr_assert(strstr(lines[1], "\"content\":\"hi\""));
    cr_assert(strstr(lines[2], "\"finish_reason\":\"length\""));
    cr_assert(strstr(lines[3], "\"choices\":[]") && strstr(lines[3], "\"total_tokens\":4"));
    cr_assert_str_eq(lines[4], "[DONE]");
    rp_buf_deinit(&b);
    rp_chat_request_deinit(&r);
}

Test(openai, response_body)
{
    rp_chat_request r;
    rp_chat_request_init(&r, RP_REQ_CHAT);
    rp_gen_output done = {.finish = RP_GEN_FINISH_STOP_SEQUENCE, .n_prompt = 5, .n_completion = 2};
    rp_gen_message msg = {0};
    rp_buf_puts(&msg.content, "ab");
    char *s = rp_openai_response(&r, "m", "fp", &msg, &done);
    rp_gen_message_deinit(&msg);
    json_t *j = json_loads(s, 0, NULL);
    rp_free(s);
    cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "stop");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "message"), "content")),
                     "ab");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 7);
    cr_assert_str_eq(json_string_value(json_object_get(j, "system_fingerprint")), "fp");
    json_decref(j);
    rp_chat_request_deinit(&r);
}

/* A tool call through the pieces: stream deltas and the assembled message. */
Test(openai, tool_call_pieces)
{
    rp_gen_piece pcs[] = {
        {.kind = RP_PIECE_REASONING, .text = "think", .len = 5},
        {.kind = RP_PIECE_TOOL_START, .index = 0, .id = "call_1", .name = "f"},
        {.kind = RP_PIECE_TOOL_ARGS, .index = 0, .text = "{\"a\":", .len = 5},
        {.kind = RP_PIECE_TOOL_ARGS, .index = 0, .text = "1}", .len = 2},
        {.kind = RP_PIECE_TOOL_END, .index = 0},
    };
    rp_gen_output d = {.pieces = pcs, .n_pieces = 5, .text = "", .len = 0};
    rp_chat_request r;
    rp_chat_request_init(&r, RP_REQ_CHAT);
    rp_openai_stream s;
    rp_openai_stream_init(&s, &r, "m", "fp");
    rp_buf b = {0};
    cr_assert_eq(rp_openai_stream_delta(&s, &d, collect, &b), RP_OK);
    cr_assert(strstr(b.data, "\"reasoning_content\":\"think\""));
    cr_assert(strstr(b.data, "\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
                             "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]"));
    cr_assert(strstr(b.data, "\"arguments\":\"1}\""));
    rp_buf_deinit(&b);

    rp_gen_message m = {0};
    cr_assert_eq(rp_gen_message_add(&m, &d), RP_OK);
    rp_gen_output done = {.finish = RP_GEN_FINISH_TOOL_CALLS, .n_prompt = 1, .n_completion = 1};
    char *body = rp_openai_response(&r, "m", "fp", &m, &done);
    json_t *j = json_loads(body, 0, NULL);
    rp_free(body);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(c, "message");
    cr_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "tool_calls");
    cr_assert(json_is_null(json_object_get(msg, "content")));
    cr_assert_str_eq(json_string_value(json_object_get(msg, "reasoning_content")), "think");
    json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "arguments")), "{\"a\":1}");
    json_decref(j);
    rp_gen_message_deinit(&m);
    rp_chat_request_deinit(&r);
}
