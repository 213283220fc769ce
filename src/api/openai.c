/* api/openai.c - OpenAI requests into rp_chat_request, pipeline output into OpenAI JSON.
 *
 * Wire notes (what clients rely on):
 *  - chat.completion.chunk: the first chunk carries delta {"role":"assistant","content":""};
 *    each later one a content delta; the last one an empty delta and finish_reason. With
 *    stream_options.include_usage every chunk has "usage": null and one more chunk with
 *    "choices": [] carries the usage. The stream ends with "data: [DONE]".
 *  - text_completion chunks have the same object type as the non-streamed response.
 *  - n must be 1; echo and suffix are not supported; response_format text/json_object.
 */
#include "api/openai.h"

#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"

#define NOMEM(e) rp_api_error_set((e), RP_APIERR_INTERNAL, NULL, "out of memory")

/* ---- request parsing ---------------------------------------------------------------- */

/* Content as a string: a string, null, or an array of {"type":"text","text":...} parts
 * (joined with "\n"). Images and audio are refused with a clear message. */
static rp_status content_text(const json_t *content, const char *where, json_t **out,
                              rp_api_error *e)
{
    if (!content || json_is_null(content)) {
        *out = json_string("");
        return *out ? RP_OK : NOMEM(e);
    }
    if (json_is_string(content)) {
        *out = json_incref((json_t *)content);
        return RP_OK;
    }
    if (!json_is_array(content))
        return rp_api_error_set(e, RP_APIERR_INVALID, where,
                                "'%s' must be a string or an array of content parts", where);
    rp_buf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_object(part) || !type) {
            rp_buf_deinit(&b);
            return rp_api_error_set(e, RP_APIERR_INVALID, where,
                                    "each part of '%s' must be an object with a 'type'", where);
        }
        if (strcmp(type, "text") != 0) {
            rp_buf_deinit(&b);
            int media = !strcmp(type, "image_url") || !strcmp(type, "input_audio") ||
                        !strcmp(type, "file");
            return rp_api_error_set(e, media ? RP_APIERR_UNSUPPORTED : RP_APIERR_INVALID, where,
                                    media ? "content part type '%s' is not supported: this model "
                                            "takes text only"
                                          : "unknown content part type '%s'",
                                    type);
        }
        json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) {
            rp_buf_deinit(&b);
            return rp_api_error_set(e, RP_APIERR_INVALID, where,
                                    "a text part of '%s' needs a string 'text'", where);
        }
        if ((i > 0 && rp_buf_putc(&b, '\n') != RP_OK) ||
            rp_buf_append(&b, json_string_value(text), json_string_length(text)) != RP_OK) {
            rp_buf_deinit(&b);
            return NOMEM(e);
        }
    }
    *out = json_stringn(b.data ? b.data : "", b.len);
    rp_buf_deinit(&b);
    return *out ? RP_OK : NOMEM(e);
}

/* Tool-call arguments arrive as a JSON string; templates want the object. A string that is
 * not JSON is passed through unchanged (a model's malformed call, echoed back). */
static json_t *parse_arguments(const json_t *args)
{
    if (json_is_string(args)) {
        json_t *obj = json_loadb(json_string_value(args), json_string_length(args),
                                 JSON_DECODE_ANY, NULL);
        if (obj)
            return obj;
    }
    return args ? json_deep_copy(args) : json_object();
}

static rp_status tool_calls_copy(const json_t *calls, json_t *msg, rp_api_error *e)
{
    if (!json_is_array(calls))
        return rp_api_error_set(e, RP_APIERR_INVALID, "tool_calls", "'tool_calls' must be an array");
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(c) || !json_is_object(fn) || !name) {
            json_decref(out);
            return rp_api_error_set(e, RP_APIERR_INVALID, "tool_calls",
                                    "each tool call needs function.name");
        }
        json_t *id = json_object_get(c, "id");
        json_t *call = json_pack("{s:s, s:{s:s, s:o}}", "type", "function", "function", "name",
                                 name, "arguments", parse_arguments(json_object_get(fn, "arguments")));
        if (!call) {
            json_decref(out);
            return NOMEM(e);
        }
        if (json_is_string(id))
            json_object_set(call, "id", id);
        json_array_append_new(out, call);
    }
    json_object_set_new(msg, "tool_calls", out);
    return RP_OK;
}

static rp_status message_normalize(const json_t *m, json_t **out, rp_api_error *e)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !role)
        return rp_api_error_set(e, RP_APIERR_INVALID, "messages",
                                "each message must be an object with a string 'role'");
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    size_t r = 0;
    while (r < RP_ARRAY_LEN(roles) && strcmp(roles[r], role) != 0)
        r++;
    if (r == RP_ARRAY_LEN(roles))
        return rp_api_error_set(e, RP_APIERR_INVALID, "messages",
                                "unknown role '%s' (use system, developer, user, assistant or tool)",
                                role);
    json_t *content;
    rp_status st = content_text(json_object_get(m, "content"), "content", &content, e);
    if (st != RP_OK)
        return st;
    json_t *msg = json_pack("{s:s, s:o}", "role", r == 1 ? "system" : role, "content", content);
    if (!msg)
        return NOMEM(e);
    json_t *v;
    if ((v = json_object_get(m, "name")) && json_is_string(v))
        json_object_set(msg, "name", v);
    if (r == 3 && (v = json_object_get(m, "tool_calls")) && !json_is_null(v) &&
        (st = tool_calls_copy(v, msg, e)) != RP_OK) {
        json_decref(msg);
        return st;
    }
    if (r == 3 && ((v = json_object_get(m, "reasoning_content")) ||
                   (v = json_object_get(m, "reasoning"))) && json_is_string(v))
        json_object_set(msg, "reasoning_content", v);
    if (r == 4) {
        v = json_object_get(m, "tool_call_id");
        if (v && !json_is_string(v)) {
            json_decref(msg);
            return rp_api_error_set(e, RP_APIERR_INVALID, "tool_call_id",
                                    "'tool_call_id' must be a string");
        }
        if (v)
            json_object_set(msg, "tool_call_id", v);
    }
    *out = msg;
    return RP_OK;
}

static rp_status parse_messages(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return rp_api_error_set(e, RP_APIERR_INVALID, "messages",
                                "'messages' must be a non-empty array");
    r->messages = json_array();
    if (!r->messages)
        return NOMEM(e);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        json_t *norm = NULL;
        rp_status st = message_normalize(m, &norm, e);
        if (st != RP_OK)
            return st;
        json_array_append_new(r->messages, norm);
    }
    return RP_OK;
}

static rp_status parse_tools(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return rp_api_error_set(e, RP_APIERR_INVALID, "tools", "'tools' must be an array");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t)
        {
            json_t *fn = json_object_get(t, "function");
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!json_is_object(t) || !type || strcmp(type, "function") != 0 ||
                !json_is_string(json_object_get(fn, "name")))
                return rp_api_error_set(e, RP_APIERR_INVALID, "tools",
                                        "each tool must be {\"type\":\"function\",\"function\":"
                                        "{\"name\":...}}");
        }
        if (json_array_size(tools) > 0 && !(r->tools = json_deep_copy(tools)))
            return NOMEM(e);
    }
    json_t *choice = json_object_get(root, "tool_choice");
    const char *c = NULL;
    if (json_is_string(choice)) {
        c = json_string_value(choice);
        if (strcmp(c, "auto") && strcmp(c, "none") && strcmp(c, "required"))
            return rp_api_error_set(e, RP_APIERR_INVALID, "tool_choice",
                                    "'tool_choice' must be auto, none, required or a function");
    } else if (json_is_object(choice)) {
        c = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
        if (!c)
            return rp_api_error_set(e, RP_APIERR_INVALID, "tool_choice",
                                    "'tool_choice' object needs function.name");
    } else if (choice && !json_is_null(choice)) {
        return rp_api_error_set(e, RP_APIERR_INVALID, "tool_choice",
                                "'tool_choice' must be a string or an object");
    }
    if (c && !(r->tool_choice = rp_strdup(c)))
        return NOMEM(e);
    return rp_api_get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e);
}

/* Sampling and limits shared by chat and completions. */
static rp_status parse_common(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    rp_sampling *s = &r->sampling;
    long v = -1, n = 1, seed = 0;
    rp_status st;
    if ((st = rp_api_get_model(root, r, e)) ||
        (st = rp_api_get_int(root, "max_tokens", 1, 1L << 30, &v, e)) ||
        (st = rp_api_get_int(root, "max_completion_tokens", 1, 1L << 30, &v, e)) ||
        (st = rp_api_get_number(root, "temperature", 0, 2, &s->temperature, e)) ||
        (st = rp_api_get_number(root, "top_p", 0, 1, &s->top_p, e)) ||
        (st = rp_api_get_number(root, "min_p", 0, 1, &s->min_p, e)) ||
        (st = rp_api_get_number(root, "presence_penalty", -2, 2, &s->presence_penalty, e)) ||
        (st = rp_api_get_number(root, "frequency_penalty", -2, 2, &s->frequency_penalty, e)) ||
        (st = rp_api_get_number(root, "repetition_penalty", 0.01, 10, &s->repetition_penalty, e)) ||
        (st = rp_api_get_int(root, "n", 1, 128, &n, e)) ||
        (st = rp_api_get_bool(root, "stream", &r->stream, e)) ||
        (st = rp_api_get_stops(root, "stop", r, e)))
        return st;
    r->max_tokens = (int)v;
    long k = -2;
    if ((st = rp_api_get_int(root, "top_k", -1, 1 << 20, &k, e)))
        return st;
    if (k != -2)
        s->top_k = k < 0 ? 0 : (int)k;
    json_t *jseed = json_object_get(root, "seed");
    if (jseed && !json_is_null(jseed)) {
        if (!json_is_integer(jseed))
            return rp_api_error_set(e, RP_APIERR_INVALID, "seed", "'seed' must be an integer");
        seed = (long)json_integer_value(jseed);
        s->seed = (uint64_t)seed;
        s->has_seed = 1;
    }
    if (n != 1)
        return rp_api_error_set(e, RP_APIERR_UNSUPPORTED, "n", "'n' must be 1 (got %ld)", n);
    const char *user = NULL;
    if ((st = rp_api_get_string(root, "user", &user, e)))
        return st;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return rp_api_error_set(e, RP_APIERR_INVALID, "stream_options",
                                    "'stream_options' must be an object");
        if ((st = rp_api_get_bool(so, "include_usage", &r->include_usage, e)))
            return st;
    }
    return RP_OK;
}

static rp_status parse_response_format(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    json_t *rf = json_object_get(root, "response_format");
    if (!rf || json_is_null(rf))
        return RP_OK;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !type)
        return rp_api_error_set(e, RP_APIERR_INVALID, "response_format",
                                "'response_format' must be an object with a 'type'");
    if (!strcmp(type, "json_object"))
        r->json_mode = 1;
    else if (strcmp(type, "text") != 0)
        return rp_api_error_set(e, RP_APIERR_UNSUPPORTED, "response_format",
                                "response_format type '%s' is not supported (use text or "
                                "json_object)",
                                type);
    return RP_OK;
}

rp_status rp_openai_parse_chat(const char *body, size_t len, rp_chat_request *r, rp_api_error *e)
{
    json_t *root;
    rp_status st = rp_api_parse_body(body, len, &root, e);
    if (st != RP_OK)
        return st;
    long top = 0;
    if (!(st = parse_common(root, r, e)) && !(st = parse_messages(root, r, e)) &&
        !(st = parse_tools(root, r, e)) && !(st = parse_response_format(root, r, e)) &&
        !(st = rp_api_get_bool(root, "logprobs", &r->logprobs, e)) &&
        !(st = rp_api_get_int(root, "top_logprobs", 0, RP_MAX_TOP_LOGPROBS, &top, e))) {
        r->top_logprobs = (int)top;
        if (top > 0 && !r->logprobs)
            st = rp_api_error_set(e, RP_APIERR_INVALID, "top_logprobs",
                                  "'top_logprobs' needs 'logprobs': true");
    }
    json_decref(root);
    return st;
}

static rp_status parse_prompt(const json_t *root, rp_chat_request *r, rp_api_error *e)
{
    json_t *p = json_object_get(root, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0); /* a batch of one */
    if (json_is_string(p)) {
        r->prompt = rp_strndup(json_string_value(p), json_string_length(p));
        return r->prompt ? RP_OK : NOMEM(e);
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return rp_api_error_set(e, RP_APIERR_INVALID, "prompt",
                                "'prompt' must be a string or a non-empty list of token ids "
                                "(one prompt per request)");
    size_t n = json_array_size(p);
    r->prompt_ids = rp_alloc(n * sizeof(int32_t));
    if (!r->prompt_ids)
        return NOMEM(e);
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(p, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > INT32_MAX)
            return rp_api_error_set(e, RP_APIERR_INVALID, "prompt",
                                    "'prompt' lists must hold non-negative token ids");
        r->prompt_ids[i] = (int32_t)json_integer_value(id);
    }
    r->n_prompt_ids = (int)n;
    return RP_OK;
}

rp_status rp_openai_parse_completion(const char *body, size_t len, rp_chat_request *r,
                                     rp_api_error *e)
{
    json_t *root;
    rp_status st = rp_api_parse_body(body, len, &root, e);
    if (st != RP_OK)
        return st;
    int echo = 0;
    long lp = -1;
    if (!(st = parse_common(root, r, e)) && !(st = parse_prompt(root, r, e)) &&
        !(st = rp_api_get_bool(root, "echo", &echo, e)) &&
        !(st = rp_api_get_int(root, "logprobs", 0, 5, &lp, e))) {
        if (echo)
            st = rp_api_error_set(e, RP_APIERR_UNSUPPORTED, "echo", "'echo': true is not supported");
        else if (json_is_string(json_object_get(root, "suffix")))
            st = rp_api_error_set(e, RP_APIERR_UNSUPPORTED, "suffix", "'suffix' is not supported");
        if (lp >= 0) {
            r->logprobs = 1;
            r->top_logprobs = (int)lp;
        }
    }
    json_decref(root);
    return st;
}

/* ---- responses ------------------------------------------------------------------------ */

const char *rp_openai_finish_reason(rp_gen_finish f)
{
    switch (f) {
    case RP_GEN_FINISH_LENGTH: return "length";
    case RP_GEN_FINISH_TOOL_CALLS: return "tool_calls";
    default: return "stop";
    }
}

static json_t *usage_json(const rp_gen_output *d)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", d->n_prompt, "completion_tokens",
                     d->n_completion, "total_tokens", d->n_prompt + d->n_completion);
}

/* Completion-style logprobs from chat-style entries: tokens, token_logprobs, top_logprobs. */
static json_t *completion_logprobs(json_t *entries)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array();
    size_t i;
    json_t *en;
    json_array_foreach(entries, i, en)
    {
        json_array_append(tokens, json_object_get(en, "token"));
        json_array_append(lps, json_object_get(en, "logprob"));
        json_t *alt = json_object();
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(en, "top_logprobs"), k, t)
            json_object_set(alt, json_string_value(json_object_get(t, "token")),
                            json_object_get(t, "logprob"));
        json_array_append_new(tops, alt);
    }
    return json_pack("{s:o, s:o, s:o, s:[]}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset");
}

static json_t *logprobs_json(rp_req_type type, json_t *entries)
{
    if (!entries)
        return json_null();
    if (type == RP_REQ_COMPLETION)
        return completion_logprobs(entries);
    return json_pack("{s:O}", "content", entries);
}

static json_t *message_json(const rp_gen_message *m)
{
    int calls = json_array_size(m->tool_calls) > 0;
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    if (!msg)
        return NULL;
    json_object_set_new(msg, "content",
                        m->content.len || !calls
                            ? json_stringn(m->content.data ? m->content.data : "", m->content.len)
                            : json_null());
    if (m->reasoning.len)
        json_object_set_new(msg, "reasoning_content",
                            json_stringn(m->reasoning.data, m->reasoning.len));
    if (calls)
        json_object_set(msg, "tool_calls", m->tool_calls);
    return msg;
}

char *rp_openai_response(const rp_chat_request *req, const char *model, const char *fingerprint,
                         const rp_gen_message *msg, const rp_gen_output *done)
{
    int chat = req->type == RP_REQ_CHAT;
    char id[48];
    rp_api_make_id(chat ? "chatcmpl-" : "cmpl-", id, sizeof id);
    const char *text = msg->content.data ? msg->content.data : "";
    json_t *choice;
    if (chat)
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", message_json(msg),
                           "logprobs", logprobs_json(req->type, msg->logprobs), "finish_reason",
                           rp_openai_finish_reason(done->finish));
    else
        choice = json_pack("{s:i, s:s%, s:o, s:s}", "index", 0, "text", text, msg->content.len,
                           "logprobs", logprobs_json(req->type, msg->logprobs), "finish_reason",
                           rp_openai_finish_reason(done->finish));
    json_t *root = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o}", "id", id, "object",
                             chat ? "chat.completion" : "text_completion", "created",
                             (json_int_t)time(NULL), "model", model, "system_fingerprint",
                             fingerprint, "choices", choice, "usage", usage_json(done));
    char *s = root ? rp_api_json_dump(root) : NULL;
    json_decref(root);
    return s;
}

void rp_openai_stream_init(rp_openai_stream *s, const rp_chat_request *req, const char *model,
                           const char *fingerprint)
{
    memset(s, 0, sizeof *s);
    s->type = req->type;
    rp_api_make_id(req->type == RP_REQ_CHAT ? "chatcmpl-" : "cmpl-", s->id, sizeof s->id);
    s->created = (long)time(NULL);
    s->model = model;
    s->fingerprint = fingerprint;
    s->include_usage = req->include_usage;
}

/* One chunk with a single choice (or none when choice is NULL) and, with include_usage,
 * the usage field (null unless given). Steals choice and usage. */
static rp_status emit_chunk(rp_openai_stream *s, json_t *choice, json_t *usage,
                            rp_api_emit_fn emit, void *user)
{
    int chat = s->type == RP_REQ_CHAT;
    json_t *root = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[]}", "id", s->id, "object",
                             chat ? "chat.completion.chunk" : "text_completion", "created",
                             (json_int_t)s->created, "model", s->model, "system_fingerprint",
                             s->fingerprint, "choices");
    if (!root) {
        json_decref(choice);
        json_decref(usage);
        return RP_ERR_NOMEM;
    }
    if (choice)
        json_array_append_new(json_object_get(root, "choices"), choice);
    if (s->include_usage)
        json_object_set_new(root, "usage", usage ? usage : json_null());
    else
        json_decref(usage);
    char *text = rp_api_json_dump(root);
    json_decref(root);
    if (!text)
        return RP_ERR_NOMEM;
    rp_status st = emit(user, NULL, text, strlen(text));
    rp_free(text);
    return st;
}

/* A choice for one chunk; delta (chat only, stolen) gets the role on the first chunk. */
static json_t *chunk_choice(rp_openai_stream *s, json_t *delta, const char *text, size_t len,
                            json_t *logprobs, const char *finish)
{
    json_t *fr = finish ? json_string(finish) : json_null();
    if (s->type != RP_REQ_CHAT) {
        json_decref(delta);
        return json_pack("{s:i, s:s%, s:o, s:o}", "index", 0, "text", text ? text : "", len,
                         "logprobs", logprobs_json(s->type, logprobs), "finish_reason", fr);
    }
    if (!delta)
        delta = json_object();
    if (!s->sent_first) {
        json_object_set_new(delta, "role", json_string("assistant"));
        s->sent_first = 1;
    }
    return json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs",
                     logprobs_json(s->type, logprobs), "finish_reason", fr);
}

static json_t *piece_delta(const rp_gen_piece *pc)
{
    switch (pc->kind) {
    case RP_PIECE_CONTENT: return json_pack("{s:s%}", "content", pc->text, pc->len);
    case RP_PIECE_REASONING: return json_pack("{s:s%}", "reasoning_content", pc->text, pc->len);
    case RP_PIECE_TOOL_START:
        return json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", pc->index,
                         "id", pc->id, "type", "function", "function", "name", pc->name,
                         "arguments", "");
    case RP_PIECE_TOOL_ARGS:
        return json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", pc->index, "function",
                         "arguments", pc->text, pc->len);
    default: return NULL;
    }
}

rp_status rp_openai_stream_delta(rp_openai_stream *s, const rp_gen_output *d, rp_api_emit_fn emit,
                                 void *user)
{
    rp_status st = RP_OK;
    if (s->type == RP_REQ_CHAT && !s->sent_first) /* role first, as OpenAI does */
        st = emit_chunk(s, chunk_choice(s, json_pack("{s:s}", "content", ""), NULL, 0, NULL, NULL),
                        NULL, emit, user);
    if (s->type != RP_REQ_CHAT) {
        if (st == RP_OK && (d->len > 0 || d->logprobs))
            st = emit_chunk(s, chunk_choice(s, NULL, d->text, d->len, d->logprobs, NULL), NULL,
                            emit, user);
        return st;
    }
    json_t *logprobs = d->logprobs; /* rides on the first chunk of this step */
    for (int i = 0; i < d->n_pieces && st == RP_OK; i++) {
        json_t *delta = piece_delta(&d->pieces[i]);
        if (!delta)
            continue;
        st = emit_chunk(s, chunk_choice(s, delta, NULL, 0, logprobs, NULL), NULL, emit, user);
        logprobs = NULL;
    }
    if (st == RP_OK && logprobs)
        st = emit_chunk(s, chunk_choice(s, NULL, NULL, 0, logprobs, NULL), NULL, emit, user);
    return st;
}

rp_status rp_openai_stream_finish(rp_openai_stream *s, const rp_gen_output *done,
                                  rp_api_emit_fn emit, void *user)
{
    rp_status st = RP_OK;
    if (done->finish == RP_GEN_FINISH_ERROR) {
        char *err = rp_api_error_json(RP_API_OPENAI, &done->err);
        st = err ? emit(user, NULL, err, strlen(err)) : RP_ERR_NOMEM;
        rp_free(err);
    } else {
        st = emit_chunk(s, chunk_choice(s, NULL, "", 0, NULL,
                                        rp_openai_finish_reason(done->finish)),
                        NULL, emit, user);
        if (st == RP_OK && s->include_usage)
            st = emit_chunk(s, NULL, usage_json(done), emit, user);
    }
    if (st == RP_OK)
        st = emit(user, NULL, "[DONE]", 6);
    return st;
}

static json_t *model_obj(const char *name)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", name, "object", "model", "created",
                     (json_int_t)time(NULL), "owned_by", "rapid");
}

char *rp_openai_models_json(const char *const *names, int n)
{
    json_t *data = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(data, model_obj(names[i]));
    json_t *root = json_pack("{s:s, s:o}", "object", "list", "data", data);
    char *s = root ? rp_api_json_dump(root) : NULL;
    json_decref(root);
    return s;
}

char *rp_openai_model_json(const char *name)
{
    json_t *m = model_obj(name);
    char *s = m ? rp_api_json_dump(m) : NULL;
    json_decref(m);
    return s;
}
