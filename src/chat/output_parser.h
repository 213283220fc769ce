/* chat/output_parser.h - incremental model-output parsers: tool calls and reasoning.
 *
 * The server feeds the detokenized text of one generation, chunk by chunk as it streams, and
 * receives events through a callback: content delta, reasoning delta, tool call start (index,
 * id, name), tool-call arguments delta, tool call end. Formats are named as vLLM's
 * --tool-call-parser / --reasoning-parser flags name them ("hermes", "qwen3_coder", "openai",
 * "qwen3", "deepseek_r1", ...); rp_output_parser_tool_names() lists them.
 *
 * Guarantees (for every chunking of the same text, the events assemble to the same message):
 *   - markup is never emitted as content or reasoning when a call parses;
 *   - a call is announced only once its whole body has parsed, so TOOL_START is always
 *     followed by ARGS deltas that concatenate to one valid JSON object text, then TOOL_END;
 *   - a malformed or truncated call is emitted as content verbatim (markers included): text is
 *     never dropped, except whitespace that only separates calls/reasoning from each other;
 *   - a marker split across chunks is recognised; text that might start a marker is held back
 *     until the next chunk (or finish) decides it;
 *   - content and reasoning deltas never split a UTF-8 sequence when the chunks fed do not.
 * Arguments therefore arrive in one delta per call, when the call closes (not token by token).
 *
 * State diagram (the generic machine; new() starts in REASONING when think_opened):
 *
 *   CONTENT --reasoning start marker--> REASONING --reasoning end marker--> CONTENT
 *     |   ^
 *     |   +-- CALL ends (its close marker outside strings/values, or the end of its balanced
 *     |       value): body parsed -> TOOL_START, ARGS, TOOL_END per call; else raw -> CONTENT
 *     +--> CALL   on a region opener ("<tool_call>", "[TOOL_CALLS]", "{" at the start, ...)
 *   finish(): REASONING flushes as reasoning; CALL parses what it holds (malformed -> CONTENT).
 *   Harmony ("openai" / "openai_gptoss") runs its own machine (parse_harmony.h): analysis
 *   channel -> reasoning, final/commentary text -> content, to=functions.X -> tool call.
 *
 * How the server uses it (one parser per choice of one request):
 *   names      --tool-call-parser / --reasoning-parser flags, else rp_output_parser_detect()
 *              on the chat template and config.json model_type (log the choice).
 *   tools      tool_choice "none" or no tools: tool_parser NULL (reasoning still separated);
 *              "auto": the chosen parser; "required" / named: also append
 *              rp_output_parser_call_prefix(tool, NULL | name) to the rendered prompt and feed
 *              that same prefix to the parser before the first generated text (so the reply
 *              starts inside a call); if the prompt ended inside a think block, close it first
 *              (append the reasoning end marker, e.g. "</think>\n\n", before the prefix).
 *              After finish, n_calls == 0 under required/named means the model broke the
 *              format: answer with an error (or retry), never with a call-less success.
 *   thinking   think_opened = rp_output_parser_think_opened(reasoning, prompt, prompt_len).
 *   feed       every detokenized piece, then finish() once. Detokenize with special tokens
 *              kept as text (the markers "<|python_tag|>", "[TOOL_CALLS]", "<|channel|>", ...
 *              are special tokens) but without the EOS / stop token and stop strings.
 *   OpenAI     CONTENT -> delta.content; REASONING -> delta.reasoning_content;
 *              TOOL_START -> delta.tool_calls[{index, id, type:"function",
 *              function:{name, arguments:""}}]; TOOL_ARGS -> delta.tool_calls[{index,
 *              function:{arguments:text}}]; TOOL_END -> nothing; finish_reason "tool_calls"
 *              when n_calls > 0. Non-streaming: rp_parse_collector_message() is the message.
 *   Anthropic  REASONING -> a thinking block (thinking_delta); CONTENT -> a text block
 *              (text_delta); TOOL_START -> close the open block, content_block_start
 *              {type:"tool_use", id, name, input:{}}; TOOL_ARGS -> input_json_delta
 *              partial_json; TOOL_END -> content_block_stop; stop_reason "tool_use" when
 *              n_calls > 0. Use gen_id for "toolu_..." ids there.
 *
 * Ownership: rp_output_parser_new resolves the names (keeps no pointer to them) and takes a
 *            reference on cfg->tools (released by rp_output_parser_free). Event text pointers
 *            are borrowed for the callback only.
 * Threading: one parser per generation, used by one thread at a time.
 * Errors:    RP_ERR_NOT_FOUND (unknown parser name), RP_ERR_NOMEM, or whatever status the event
 *            callback returns (feeding stops there; the parser must then only be freed).
 *            Malformed model output is never an error: it becomes content.
 */
#ifndef RP_CHAT_OUTPUT_PARSER_H
#define RP_CHAT_OUTPUT_PARSER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef struct rp_output_parser rp_output_parser;

typedef enum rp_parse_event_kind {
    RP_PARSE_CONTENT = 0, /* text: a piece of the assistant's visible content */
    RP_PARSE_REASONING,   /* text: a piece of reasoning (reasoning_content / thinking block) */
    RP_PARSE_TOOL_START,  /* index, id, name: a new call (OpenAI delta with id+type+name) */
    RP_PARSE_TOOL_ARGS,   /* index, text: a fragment of function.arguments (JSON text) */
    RP_PARSE_TOOL_END,    /* index: the call is complete (Anthropic content_block_stop) */
} rp_parse_event_kind;

typedef struct rp_parse_event {
    rp_parse_event_kind kind;
    int index;        /* tool call index, 0-based in order of appearance (TOOL_* only) */
    const char *text; /* CONTENT/REASONING/TOOL_ARGS: the delta (not NUL-terminated) */
    size_t len;
    const char *id;   /* TOOL_START: see rp_tool_id_fn (NUL-terminated) */
    const char *name; /* TOOL_START: function name (NUL-terminated) */
} rp_parse_event;

/* Receives every event; a non-RP_OK return stops the parser and is returned by feed/finish. */
typedef rp_status (*rp_parse_event_fn)(void *user, const rp_parse_event *ev);

/* Writes a NUL-terminated tool-call id (at most cap-1 bytes) for call number `index`.
 * Inject a deterministic one in tests; NULL selects "call_" + 24 random [A-Za-z0-9], except
 * for "mistral": 9 random [A-Za-z0-9], the only ids Mistral's chat templates accept back. */
typedef void (*rp_tool_id_fn)(void *user, int index, char *out, size_t cap);

#define RP_TOOL_ID_MAX 64

typedef struct rp_output_parser_config {
    const char *tool_parser;      /* NULL, "" or "none": no tool-call parsing (tool_choice none) */
    const char *reasoning_parser; /* NULL, "" or "none": no reasoning separation */
    const json_t *tools;          /* the request's "tools" array (OpenAI or Anthropic shape), to
                                     type XML-style parameter values by schema; may be NULL */
    bool think_opened;            /* the rendered prompt ends inside an open think block (see
                                     rp_output_parser_think_opened): output starts as reasoning */
    rp_parse_event_fn on_event;   /* required */
    void *user;
    rp_tool_id_fn gen_id; /* optional */
    void *gen_id_user;
} rp_output_parser_config;

rp_status rp_output_parser_new(const rp_output_parser_config *cfg, rp_output_parser **out,
                               rp_err *err);
/* Feeds the next chunk of model output (any size, including 0). */
rp_status rp_output_parser_feed(rp_output_parser *p, const char *text, size_t len, rp_err *err);
/* End of output: flushes held-back text and any open call. Call once; feed no more after. */
rp_status rp_output_parser_finish(rp_output_parser *p, rp_err *err);
void rp_output_parser_free(rp_output_parser *p);

/* Number of tool calls emitted so far (finish_reason "tool_calls" / stop_reason "tool_use"). */
int rp_output_parser_n_calls(const rp_output_parser *p);

/* Known names, NULL-terminated static lists (aliases included). */
const char *const *rp_output_parser_tool_names(void);
const char *const *rp_output_parser_reasoning_names(void);
bool rp_output_parser_has_tool(const char *name);
bool rp_output_parser_has_reasoning(const char *name);

/* Picks parser names for a model from its chat template text and/or config.json model_type
 * (either may be NULL). Writes static names, or NULL where nothing matched. */
void rp_output_parser_detect(const char *chat_template, const char *model_type,
                             const char **tool_parser, const char **reasoning_parser);

/* True when `prompt` (the rendered prompt) ends inside a reasoning block that the template
 * opened, e.g. Qwen3.5 / DeepSeek-R1 "...<think>\n": pass it as cfg.think_opened. */
bool rp_output_parser_think_opened(const char *reasoning_parser, const char *prompt, size_t len);

/* The marker that ends a reasoning block of this format ("</think>" for qwen3), "" when it has
 * none or the name is unknown / NULL. Static. */
const char *rp_output_parser_reasoning_close(const char *reasoning_parser);

/* For tool_choice "required" / named: text to append to the rendered prompt (and to feed to the
 * parser before the model's first token) that opens a call in this format, naming `name` when
 * not NULL (every format has one). Heap string (rp_free) in *out. Errors: RP_ERR_NOT_FOUND
 * (unknown parser), RP_ERR_INVALID (a name outside [A-Za-z0-9_.-]), RP_ERR_NOMEM. */
rp_status rp_output_parser_call_prefix(const char *tool_parser, const char *name, char **out,
                                       rp_err *err);

/* ---- Assembling a whole message from events (non-streaming responses, `rapid parse`). ---- */

typedef struct rp_parse_collector rp_parse_collector;

rp_status rp_parse_collector_new(rp_parse_collector **out);
void rp_parse_collector_free(rp_parse_collector *c);
/* An rp_parse_event_fn: pass the collector as `user`. Checks the event order. */
rp_status rp_parse_collector_event(void *collector, const rp_parse_event *ev);
/* New reference: {"role":"assistant","content":str|null,"reasoning_content":str|null,
 * "tool_calls":[{"id","type":"function","function":{"name","arguments":str}}]} (tool_calls
 * only when there are calls). NULL on OOM, or when the text fed was not valid UTF-8. */
json_t *rp_parse_collector_message(const rp_parse_collector *c);

#endif
