/* Unit tests for src/api/anthropic.c: request mapping and the streaming event order. */
#include <criterion/criterion.h>
#include <string.h>

#include "api/anthropic.h"
#include "base/alloc.h"
#include "base/buf.h"

static rp_status parse(const char *body, rp_req_type type, rp_chat_request *r, rp_api_error *e)
{
    rp_chat_request_init(r, type);
    return rp_anthropic_parse(body, strlen(body), type, r, e);
}

Test(anthropic, full_request)
{
    rp_chat_request r;
    rp_api_error e = {0};
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":9,\"system\":[{\"type\":\"text\",\"text\":\"sys\"}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\","
        "\"signature\":\"s\"},{\"type\":\"text\",\"text\":\"calling\"},{\"type\":\"tool_use\","
        "\"id\":\"t1\",\"name\":\"f\",\"input\":{\"a\":1}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
        "\"content\":[{\"type\":\"text\",\"text\":\"res\"}]},{\"type\":\"text\",\"text\":\"go\"}]}],"
        "\"stop_sequences\":[\"END\"],\"temperature\":0.2,\"top_p\":0.8,\"top_k\":5,"
        "\"tools\":[{\"name\":\"f\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"any\"},\"metadata\":{\"user_id\":\"u\"},\"stream\":true}";
    cr_assert_eq(parse(body, RP_REQ_MESSAGES, &r, &e), RP_OK, "%s", e.msg);
    cr_assert_eq(r.max_tokens, 9);
    cr_assert_eq(r.sampling.top_k, 5);
    cr_assert_str_eq(r.stop[0], "END");
    cr_assert_str_eq(r.tool_choice, "required");
    cr_assert(r.stream);
    /* system, user, assistant, tool, user */
    cr_assert_eq(json_array_size(r.messages), 5);
    const char *roles[] = {"system", "user", "assistant", "tool", "user"};
    for (int i = 0; i < 5; i++)
        cr_assert_str_eq(json_string_value(json_object_get(json_array_get(r.messages, i), "role")),
                         roles[i]);
    json_t *a = json_array_get(r.messages, 2);
    cr_assert_str_eq(json_string_value(json_object_get(a, "reasoning_content")), "hmm");
    cr_assert_str_eq(json_string_value(json_object_get(a, "content")), "calling");
    json_t *call = json_array_get(json_object_get(a, "tool_calls"), 0);
    cr_assert(json_is_object(json_object_get(json_object_get(call, "function"), "arguments")));
    json_t *tool = json_array_get(r.messages, 3);
    cr_assert_str_eq(json_string_value(json_object_get(tool, "tool_call_id")), "t1");
    cr_assert_str_eq(json_string_value(json_object_get(tool, "content")), "res");
    json_t *fn = json_object_get(json_array_get(r.tools, 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "name")), "f");
    cr_assert(json_is_object(json_object_get(fn, "parameters")));
    rp_chat_request_deinit(&r);
}

Test(anthropic, errors)
{
    struct {
        const char *body;
        rp_req_type type;
        rp_apierr kind;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", RP_REQ_MESSAGES,
         RP_APIERR_INVALID}, /* max_tokens required */
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
         "\"source\":{}}]}]}",
         RP_REQ_MESSAGES, RP_APIERR_UNSUPPORTED},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
         RP_REQ_MESSAGES, RP_APIERR_INVALID},
        {"{\"max_tokens\":\"5\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         RP_REQ_MESSAGES, RP_APIERR_INVALID},
        {"{\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         RP_REQ_MESSAGES, RP_APIERR_INVALID},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":"
         "\"user\",\"content\":\"x\"}]}",
         RP_REQ_MESSAGES, RP_APIERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_chat_request r;
        rp_api_error e = {0};
        cr_assert_neq(parse(cases[i].body, cases[i].type, &r, &e), RP_OK, "%s", cases[i].body);
        cr_assert_eq(e.kind, cases[i].kind, "%s: %s", cases[i].body, e.msg);
        rp_chat_request_deinit(&r);
    }
    rp_chat_request r;
    rp_api_error e = {0};
    cr_assert_eq(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                       RP_REQ_COUNT_TOKENS, &r, &e),
                 RP_OK);
    rp_chat_request_deinit(&r);
}

static rp_status collect(void *user, const char *event, const char *data, size_t len)
{
    rp_buf *b = user;
    rp_buf_puts(b, event);
    return rp_buf_putc(b, ' ');
}

Test(anthropic, event_order)
{
    rp_anthropic_stream s;
    rp_anthropic_stream_init(&s, "m", 4);
    rp_buf b = {0};
    rp_anthropic_stream_thinking(&s, "hm", 2, collect, &b);
    rp_anthropic_stream_text(&s, "a", 1, collect, &b);
    rp_anthropic_stream_text(&s, "b", 1, collect, &b);
    rp_anthropic_stream_tool_use(&s, "t1", "f", collect, &b);
    rp_anthropic_stream_tool_input(&s, "{\"x\":", 5, collect, &b);
    rp_gen_output done = {.finish = RP_GEN_FINISH_TOOL_CALLS, .n_completion = 3};
    rp_anthropic_stream_finish(&s, &done, collect, &b);
    cr_assert_str_eq(b.data,
                     "message_start content_block_start ping content_block_delta "
                     "content_block_stop content_block_start content_block_delta "
                     "content_block_delta content_block_stop content_block_start "
                     "content_block_delta content_block_stop message_delta message_stop ");
    rp_buf_deinit(&b);
}

Test(anthropic, empty_output_still_has_a_block)
{
    rp_anthropic_stream s;
    rp_anthropic_stream_init(&s, "m", 4);
    rp_buf b = {0};
    rp_gen_output done = {.finish = RP_GEN_FINISH_STOP};
    rp_anthropic_stream_finish(&s, &done, collect, &b);
    cr_assert_str_eq(b.data, "message_start content_block_start ping content_block_stop "
                             "message_delta message_stop ");
    cr_assert_str_eq(rp_anthropic_stop_reason(RP_GEN_FINISH_STOP_SEQUENCE), "stop_sequence");
    cr_assert_str_eq(rp_anthropic_stop_reason(RP_GEN_FINISH_LENGTH), "max_tokens");
    rp_buf_deinit(&b);
}

Test(anthropic, response_body)
{
    rp_gen_output done = {.finish = RP_GEN_FINISH_STOP_SEQUENCE, .stop_sequence = "END",
                          .n_prompt = 3, .n_completion = 2};
    rp_gen_message msg = {0};
    rp_buf_puts(&msg.content, "hi");
    char *s = rp_anthropic_response("m", &msg, &done);
    rp_gen_message_deinit(&msg);
    json_t *j = json_loads(s, 0, NULL);
    rp_free(s);
    cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "message");
    cr_assert_str_eq(json_string_value(json_object_get(j, "stop_reason")), "stop_sequence");
    cr_assert_str_eq(json_string_value(json_object_get(j, "stop_sequence")), "END");
    json_t *c = json_array_get(json_object_get(j, "content"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(c, "text")), "hi");
    json_decref(j);
}

Test(anthropic, tool_use_pieces)
{
    rp_gen_piece pcs[] = {
        {.kind = RP_PIECE_CONTENT, .text = "ok", .len = 2},
        {.kind = RP_PIECE_TOOL_START, .index = 0, .id = "toolu_1", .name = "f"},
        {.kind = RP_PIECE_TOOL_ARGS, .index = 0, .text = "{\"a\":1}", .len = 7},
        {.kind = RP_PIECE_TOOL_END, .index = 0},
    };
    rp_gen_output d = {.pieces = pcs, .n_pieces = 4};
    rp_anthropic_stream s;
    rp_anthropic_stream_init(&s, "m", 4);
    rp_buf b = {0};
    cr_assert_eq(rp_anthropic_stream_delta(&s, &d, collect, &b), RP_OK);
    rp_gen_output done = {.finish = RP_GEN_FINISH_TOOL_CALLS, .n_completion = 3};
    rp_anthropic_stream_finish(&s, &done, collect, &b);
    cr_assert_str_eq(b.data, "message_start content_block_start ping content_block_delta "
                             "content_block_stop content_block_start content_block_delta "
                             "content_block_stop message_delta message_stop ");
    rp_buf_deinit(&b);

    rp_gen_message m = {0};
    cr_assert_eq(rp_gen_message_add(&m, &d), RP_OK);
    char *body = rp_anthropic_response("m", &m, &done);
    json_t *j = json_loads(body, 0, NULL);
    rp_free(body);
    cr_assert_str_eq(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
    json_t *tu = json_array_get(json_object_get(j, "content"), 1);
    cr_assert_str_eq(json_string_value(json_object_get(tu, "type")), "tool_use");
    cr_assert_str_eq(json_string_value(json_object_get(tu, "id")), "toolu_1");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(tu, "input"), "a")), 1);
    json_decref(j);
    rp_gen_message_deinit(&m);
}
