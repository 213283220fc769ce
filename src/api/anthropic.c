/* api/anthropic.c - Anthropic Messages requests into rp_chat_request, output into events.
 * The mapping and the event order are documented in api/anthropic.h.
 */
#include "api/anthropic.h"

#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"

#define NOMEM(e) rp_api_error_set((e), RP_APIERR_INTERNAL, NULL, "out of memory")

/* ---- request parsing ---------------------------------------------------------------- */

static rp_status refuse_media(const char *type, rp_api_error *e)
{
    return rp_api_error_set(e, RP_APIERR_UNSUPPORTED, "content",
                            "%s content blocks are not supported: this model takes text only",
                            type);
}

/* Text of a string or of an array of text blocks (joined with "\n"). */
static rp_status blocks_text(const json_t *v, const char *where, rp_buf *b, rp_api_error *e)
{
    if (json_is_string(v))
        return rp_buf_append(b, json_string_value(v), json_string_length(v)) ? NOMEM(e) : RP_OK;
    if (!json_is_array(v))
        return rp_api_error_set(e, RP_APIERR_INVALID, where,
                                "'%s' must be a string or an array of text blocks", where);
    size_t i;
    json_t *blk;
    json_array_foreach(v, i, blk)
    {
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (type && (!strcmp(type, "image") || !strcmp(type, "document")))
            return refuse_media(type, e);
        json_t *text = json_object_get(blk, "text");
        if (!type || strcmp(type, "text") != 0 || !json_is_string(text))
            return rp_api_error_set(e, RP_APIERR_INVALID, where,
                                    "'%s' blocks must be {\"type\":\"text\",\"text\":...}", where);
        if ((b->len > 0 && rp_buf_putc(b, '\n')) ||
            rp_buf_append(b, json_string_value(text), json_string_length(text)))
            return NOMEM(e);
    }
    return RP_OK;
}

static rp_status append_message(json_t *msgs, const char *role, rp_buf *text, json_t *extra,
                                rp_api_error *e)
{
    json_t *m = json_pack("{s:s, s:s%}", "role", role, "content", text->data ? text->data : "",
                          text->len);
    if (!m) {
        json_decref(extra);
        return NOMEM(e);
    }
    if (extra) {
        json_object_update(m, extra);
        json_decref(extra);
    }
    json_array_append_new(msgs, m);
    return RP_OK;
}

static rp_status user_blocks(const json_t *blocks, json_t *msgs, rp_api_error *e)
{
    rp_buf text = {0};
    rp_status st = RP_OK;
    size_t i;
    json_t *blk;
    json_array_foreach(blocks, i, blk)
    {
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !type) {
            st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                  "each content block must be an object with a 'type'");
        } else if (!strcmp(type, "text")) {
            json_t *t = json_object_get(blk, "text");
            if (!json_is_string(t))
                st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                      "a text block needs a string 'text'");
            else if ((text.len > 0 && rp_buf_putc(&text, '\n')) ||
                     rp_buf_append(&text, json_string_value(t), json_string_length(t)))
                st = NOMEM(e);
        } else if (!strcmp(type, "tool_result")) {
            const char *id = json_string_value(json_object_get(blk, "tool_use_id"));
            json_t *c = json_object_get(blk, "content");
            rp_buf res = {0};
            if (!id)
                st = rp_api_error_set(e, RP_APIERR_INVALID, "tool_use_id",
                                      "a tool_result block needs a string 'tool_use_id'");
            else if (!c || (st = blocks_text(c, "content", &res, e)) == RP_OK)
                st = append_message(msgs, "tool", &res, json_pack("{s:s}", "tool_call_id", id), e);
            rp_buf_deinit(&res);
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            st = refuse_media(type, e);
        } else {
            st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                  "content block type '%s' is not valid in a user message", type);
        }
        if (st != RP_OK)
            break;
    }
    if (st == RP_OK && (text.len > 0 || json_array_size(blocks) == 0))
        st = append_message(msgs, "user", &text, NULL, e);
    rp_buf_deinit(&text);
    return st;
}

static rp_status assistant_blocks(const json_t *blocks, json_t *msgs, rp_api_error *e)
{
    rp_buf text = {0}, thinking = {0};
    json_t *calls = json_array();
    rp_status st = RP_OK;
    size_t i;
    json_t *blk;
    json_array_foreach(blocks, i, blk)
    {
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !type) {
            st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                  "each content block must be an object with a 'type'");
        } else if (!strcmp(type, "text") || !strcmp(type, "thinking")) {
            int is_text = type[1] == 'e';
            json_t *t = json_object_get(blk, is_text ? "text" : "thinking");
            rp_buf *dst = is_text ? &text : &thinking;
            if (!json_is_string(t))
                st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                      "a %s block needs a string '%s'", type, type);
            else if ((dst->len > 0 && rp_buf_putc(dst, '\n')) ||
                     rp_buf_append(dst, json_string_value(t), json_string_length(t)))
                st = NOMEM(e);
        } else if (!strcmp(type, "tool_use")) {
            const char *id = json_string_value(json_object_get(blk, "id"));
            const char *name = json_string_value(json_object_get(blk, "name"));
            json_t *input = json_object_get(blk, "input");
            if (!id || !name || (input && !json_is_object(input)))
                st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                      "a tool_use block needs 'id', 'name' and an object 'input'");
            else
                json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", id,
                                                       "type", "function", "function", "name",
                                                       name, "arguments",
                                                       input ? json_deep_copy(input)
                                                             : json_object()));
        } else if (strcmp(type, "redacted_thinking") != 0) {
            st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                  "content block type '%s' is not valid in an assistant message",
                                  type);
        }
        if (st != RP_OK)
            break;
    }
    if (st == RP_OK) {
        json_t *extra = json_object();
        if (json_array_size(calls) > 0)
            json_object_set(extra, "tool_calls", calls);
        if (thinking.len > 0)
            json_object_set_new(extra, "reasoning_content",
                                json_stringn(thinking.data, thinking.len));
        st = append_message(msgs, "assistant", &text, extra, e);
    }
    json_decref(calls);
    rp_buf_deinit(&text);
    rp_buf_deinit(&thinking);
    return st;
}

static rp_status parse_messages(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    r->messages = json_array();
    if (!r->messages)
        return NOMEM(e);
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        rp_buf b = {0};
        rp_status st = blocks_text(sys, "system", &b, e);
        if (st == RP_OK)
            st = append_message(r->messages, "system", &b, NULL, e);
        rp_buf_deinit(&b);
        if (st != RP_OK)
            return st;
    }
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return rp_api_error_set(e, RP_APIERR_INVALID, "messages",
                                "'messages' must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
            return rp_api_error_set(e, RP_APIERR_INVALID, "messages",
                                    "each message needs a 'role' of user or assistant");
        rp_status st;
        if (json_is_string(c)) {
            rp_buf b = {0};
            st = rp_buf_append(&b, json_string_value(c), json_string_length(c))
                     ? NOMEM(e)
                     : append_message(r->messages, role, &b, NULL, e);
            rp_buf_deinit(&b);
        } else if (json_is_array(c)) {
            st = role[0] == 'u' ? user_blocks(c, r->messages, e)
                                : assistant_blocks(c, r->messages, e);
        } else {
            st = rp_api_error_set(e, RP_APIERR_INVALID, "content",
                                  "message 'content' must be a string or an array of blocks");
        }
        if (st != RP_OK)
            return st;
    }
    return RP_OK;
}

static rp_status parse_tools(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return rp_api_error_set(e, RP_APIERR_INVALID, "tools", "'tools' must be an array");
        json_t *out = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t)
        {
            const char *name = json_string_value(json_object_get(t, "name"));
            json_t *schema = json_object_get(t, "input_schema");
            json_t *desc = json_object_get(t, "description");
            if (!json_is_object(t) || !name || (schema && !json_is_object(schema))) {
                json_decref(out);
                return rp_api_error_set(e, RP_APIERR_INVALID, "tools",
                                        "each tool needs a 'name' and an object 'input_schema'");
            }
            json_t *fn = json_pack("{s:s, s:o}", "name", name, "parameters",
                                   schema ? json_incref(schema)
                                          : json_pack("{s:s}", "type", "object"));
            if (json_is_string(desc))
                json_object_set(fn, "description", desc);
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(out) > 0)
            r->tools = out;
        else
            json_decref(out);
    }
    json_t *choice = json_object_get(root, "tool_choice");
    if (choice && !json_is_null(choice)) {
        const char *type = json_string_value(json_object_get(choice, "type"));
        const char *c = NULL;
        if (!json_is_object(choice) || !type)
            return rp_api_error_set(e, RP_APIERR_INVALID, "tool_choice",
                                    "'tool_choice' must be an object with a 'type'");
        if (!strcmp(type, "auto") || !strcmp(type, "none"))
            c = type;
        else if (!strcmp(type, "any"))
            c = "required";
        else if (!strcmp(type, "tool"))
            c = json_string_value(json_object_get(choice, "name"));
        if (!c)
            return rp_api_error_set(e, RP_APIERR_INVALID, "tool_choice",
                                    "'tool_choice' must be auto, any, none or {type: tool, name}");
        int disable = 0;
        rp_status st = rp_api_get_bool(choice, "disable_parallel_tool_use", &disable, e);
        if (st != RP_OK)
            return st;
        r->parallel_tool_calls = !disable;
        if (!(r->tool_choice = rp_strdup(c)))
            return NOMEM(e);
    }
    return RP_OK;
}

static rp_status parse_thinking(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    json_t *th = json_object_get(root, "thinking");
    if (!th || json_is_null(th))
        return RP_OK;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
        return rp_api_error_set(e, RP_APIERR_INVALID, "thinking",
                                "'thinking' must be {\"type\":\"enabled\"|\"disabled\"}");
    r->enable_thinking = type[0] == 'e';
    return RP_OK;
}

rp_status rp_anthropic_parse(const char *body, size_t len, rp_req_type type, rp_chat_request *r,
                             rp_api_error *e)
{
    json_t *root;
    rp_status st = rp_api_parse_body(body, len, &root, e);
    if (st != RP_OK)
        return st;
    rp_sampling *s = &r->sampling;
    long max_tokens = -1, top_k = -1;
    json_t *meta = json_object_get(root, "metadata");
    if ((st = rp_api_get_model(root, r, e)) ||
        (st = rp_api_get_int(root, "max_tokens", 1, 1L << 30, &max_tokens, e)) ||
        (st = rp_api_get_number(root, "temperature", 0, 1, &s->temperature, e)) ||
        (st = rp_api_get_number(root, "top_p", 0, 1, &s->top_p, e)) ||
        (st = rp_api_get_int(root, "top_k", 0, 1 << 20, &top_k, e)) ||
        (st = rp_api_get_bool(root, "stream", &r->stream, e)) ||
        (st = rp_api_get_stops(root, "stop_sequences", r, e)) ||
        (st = parse_messages(root, r, e)) || (st = parse_tools(root, r, e)) ||
        (st = parse_thinking(root, r, e)))
        goto out;
    if (meta && !json_is_null(meta) && !json_is_object(meta)) {
        st = rp_api_error_set(e, RP_APIERR_INVALID, "metadata", "'metadata' must be an object");
        goto out;
    }
    if (type == RP_REQ_MESSAGES && max_tokens < 0) {
        st = rp_api_error_set(e, RP_APIERR_INVALID, "max_tokens",
                              "max_tokens: Field required");
        goto out;
    }
    if (json_is_array(json_object_get(root, "stop_sequences")) == 0 &&
        json_is_string(json_object_get(root, "stop_sequences"))) {
        st = rp_api_error_set(e, RP_APIERR_INVALID, "stop_sequences",
                              "'stop_sequences' must be an array of strings");
        goto out;
    }
    json_t *seed = json_object_get(root, "seed"); /* an extension: Anthropic has no seed */
    if (json_is_integer(seed)) {
        s->seed = (uint64_t)json_integer_value(seed);
        s->has_seed = 1;
    }
    r->max_tokens = (int)max_tokens;
    if (top_k >= 0)
        s->top_k = (int)top_k;
out:
    json_decref(root);
    return st;
}

/* ---- responses ------------------------------------------------------------------------ */

const char *rp_anthropic_stop_reason(rp_gen_finish f)
{
    switch (f) {
    case RP_GEN_FINISH_LENGTH: return "max_tokens";
    case RP_GEN_FINISH_STOP_SEQUENCE: return "stop_sequence";
    case RP_GEN_FINISH_TOOL_CALLS: return "tool_use";
    default: return "end_turn";
    }
}

static json_t *stop_seq_json(const rp_gen_output *d)
{
    return d->finish == RP_GEN_FINISH_STOP_SEQUENCE && d->stop_sequence
               ? json_string(d->stop_sequence)
               : json_null();
}

static char *dump_steal(json_t *j)
{
    char *s = j ? rp_api_json_dump(j) : NULL;
    json_decref(j);
    return s;
}

char *rp_anthropic_response(const char *model, const rp_gen_message *msg,
                            const rp_gen_output *done)
{
    char id[48];
    rp_api_make_id("msg_", id, sizeof id);
    json_t *content = json_array();
    if (msg->reasoning.len)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:s}", "type", "thinking",
                                                 "thinking", msg->reasoning.data,
                                                 msg->reasoning.len, "signature", ""));
    if (msg->content.len || !json_array_size(msg->tool_calls))
        json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text", "text",
                                                 msg->content.data ? msg->content.data : "",
                                                 msg->content.len));
    size_t i;
    json_t *call;
    json_array_foreach(msg->tool_calls, i, call)
    {
        json_t *fn = json_object_get(call, "function");
        json_t *args = json_object_get(fn, "arguments");
        json_t *input = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        json_array_append_new(content, json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                                                 json_object_get(call, "id"), "name",
                                                 json_object_get(fn, "name"), "input",
                                                 json_is_object(input) ? input : json_object()));
        if (input && !json_is_object(input))
            json_decref(input);
    }
    return dump_steal(json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:{s:i, s:i}}", "id", id,
                                "type", "message", "role", "assistant", "model", model, "content",
                                content, "stop_reason", rp_anthropic_stop_reason(done->finish),
                                "stop_sequence", stop_seq_json(done), "usage", "input_tokens",
                                done->n_prompt, "output_tokens", done->n_completion));
}

char *rp_anthropic_count_json(int n_tokens)
{
    return dump_steal(json_pack("{s:i}", "input_tokens", n_tokens));
}

/* Emits one event whose data is j (stolen); the event name is j's "type". */
static rp_status emit_event(json_t *j, rp_api_emit_fn emit, void *user)
{
    if (!j)
        return RP_ERR_NOMEM;
    const char *type = json_string_value(json_object_get(j, "type"));
    char name[48];
    snprintf(name, sizeof name, "%s", type ? type : "message");
    char *s = dump_steal(j);
    if (!s)
        return RP_ERR_NOMEM;
    rp_status st = emit(user, name, s, strlen(s));
    rp_free(s);
    return st;
}

void rp_anthropic_stream_init(rp_anthropic_stream *s, const char *model, int n_prompt)
{
    memset(s, 0, sizeof *s);
    rp_api_make_id("msg_", s->id, sizeof s->id);
    s->model = model;
    s->n_prompt = n_prompt;
}

rp_status rp_anthropic_stream_start(rp_anthropic_stream *s, rp_api_emit_fn emit, void *user)
{
    if (s->started)
        return RP_OK;
    s->started = 1;
    return emit_event(json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:i, s:i}}}",
                                "type", "message_start", "message", "id", s->id, "type",
                                "message", "role", "assistant", "model", s->model, "content",
                                "stop_reason", "stop_sequence", "usage", "input_tokens",
                                s->n_prompt, "output_tokens", 0),
                      emit, user);
}

static rp_status close_block(rp_anthropic_stream *s, rp_api_emit_fn emit, void *user)
{
    if (s->open == RP_ANTHROPIC_NONE)
        return RP_OK;
    s->open = RP_ANTHROPIC_NONE;
    return emit_event(json_pack("{s:s, s:i}", "type", "content_block_stop", "index", s->index++),
                      emit, user);
}

/* Opens a block of `kind` unless one is open already; block is its content_block (stolen). */
static rp_status open_block(rp_anthropic_stream *s, rp_anthropic_block kind, json_t *block,
                            rp_api_emit_fn emit, void *user)
{
    rp_status st = rp_anthropic_stream_start(s, emit, user);
    if (st == RP_OK && s->open == kind && kind != RP_ANTHROPIC_TOOL_USE) {
        json_decref(block);
        return RP_OK;
    }
    if (st == RP_OK)
        st = close_block(s, emit, user);
    if (st != RP_OK) {
        json_decref(block);
        return st;
    }
    s->open = kind;
    st = emit_event(json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", s->index,
                              "content_block", block),
                    emit, user);
    if (st == RP_OK && !s->pinged) {
        s->pinged = 1;
        st = emit_event(json_pack("{s:s}", "type", "ping"), emit, user);
    }
    return st;
}

static rp_status block_delta(rp_anthropic_stream *s, const char *dtype, const char *field,
                             const char *text, size_t len, rp_api_emit_fn emit, void *user)
{
    return emit_event(json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta",
                                "index", s->index, "delta", "type", dtype, field, text, len),
                      emit, user);
}

rp_status rp_anthropic_stream_text(rp_anthropic_stream *s, const char *text, size_t len,
                                   rp_api_emit_fn emit, void *user)
{
    rp_status st = open_block(s, RP_ANTHROPIC_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""),
                              emit, user);
    if (st != RP_OK || len == 0)
        return st;
    return block_delta(s, "text_delta", "text", text, len, emit, user);
}

rp_status rp_anthropic_stream_thinking(rp_anthropic_stream *s, const char *text, size_t len,
                                       rp_api_emit_fn emit, void *user)
{
    rp_status st = open_block(s, RP_ANTHROPIC_THINKING,
                              json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "",
                                        "signature", ""),
                              emit, user);
    if (st != RP_OK || len == 0)
        return st;
    return block_delta(s, "thinking_delta", "thinking", text, len, emit, user);
}

rp_status rp_anthropic_stream_tool_use(rp_anthropic_stream *s, const char *id, const char *name,
                                       rp_api_emit_fn emit, void *user)
{
    return open_block(s, RP_ANTHROPIC_TOOL_USE,
                      json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", id, "name",
                                name, "input"),
                      emit, user);
}

rp_status rp_anthropic_stream_tool_input(rp_anthropic_stream *s, const char *json_part,
                                         size_t len, rp_api_emit_fn emit, void *user)
{
    if (s->open != RP_ANTHROPIC_TOOL_USE)
        return RP_ERR_INVALID;
    return block_delta(s, "input_json_delta", "partial_json", json_part, len, emit, user);
}

rp_status rp_anthropic_stream_end_block(rp_anthropic_stream *s, rp_api_emit_fn emit, void *user)
{
    return close_block(s, emit, user);
}

rp_status rp_anthropic_stream_delta(rp_anthropic_stream *s, const rp_gen_output *d,
                                    rp_api_emit_fn emit, void *user)
{
    rp_status st = RP_OK;
    for (int i = 0; i < d->n_pieces && st == RP_OK; i++) {
        const rp_gen_piece *pc = &d->pieces[i];
        switch (pc->kind) {
        case RP_PIECE_CONTENT: st = rp_anthropic_stream_text(s, pc->text, pc->len, emit, user); break;
        case RP_PIECE_REASONING:
            st = rp_anthropic_stream_thinking(s, pc->text, pc->len, emit, user);
            break;
        case RP_PIECE_TOOL_START: st = rp_anthropic_stream_tool_use(s, pc->id, pc->name, emit, user); break;
        case RP_PIECE_TOOL_ARGS:
            st = rp_anthropic_stream_tool_input(s, pc->text, pc->len, emit, user);
            break;
        case RP_PIECE_TOOL_END: st = close_block(s, emit, user); break;
        }
    }
    return st;
}

rp_status rp_anthropic_stream_finish(rp_anthropic_stream *s, const rp_gen_output *done,
                                     rp_api_emit_fn emit, void *user)
{
    rp_status st = rp_anthropic_stream_start(s, emit, user);
    if (st != RP_OK)
        return st;
    if (done->finish == RP_GEN_FINISH_ERROR) {
        char *err = rp_api_error_json(RP_API_ANTHROPIC, &done->err);
        st = err ? emit(user, "error", err, strlen(err)) : RP_ERR_NOMEM;
        rp_free(err);
        return st;
    }
    if (s->index == 0 && s->open == RP_ANTHROPIC_NONE) /* no output at all: one empty block */
        st = rp_anthropic_stream_text(s, "", 0, emit, user);
    if (st == RP_OK)
        st = close_block(s, emit, user);
    if (st == RP_OK)
        st = emit_event(json_pack("{s:s, s:{s:s, s:o}, s:{s:i}}", "type", "message_delta", "delta",
                                  "stop_reason", rp_anthropic_stop_reason(done->finish),
                                  "stop_sequence", stop_seq_json(done), "usage", "output_tokens",
                                  done->n_completion),
                        emit, user);
    if (st == RP_OK)
        st = emit_event(json_pack("{s:s}", "type", "message_stop"), emit, user);
    return st;
}

static json_t *model_obj(const char *name)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "type", "model", "id", name, "display_name", name,
                     "created_at", "2026-01-01T00:00:00Z");
}

char *rp_anthropic_models_json(const char *const *names, int n)
{
    json_t *data = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(data, model_obj(names[i]));
    return dump_steal(json_pack("{s:o, s:b, s:s?, s:s?}", "data", data, "has_more", 0, "first_id",
                                n > 0 ? names[0] : NULL, "last_id", n > 0 ? names[n - 1] : NULL));
}

char *rp_anthropic_model_json(const char *name) { return dump_steal(model_obj(name)); }
