/* api/anthropic.h - the Anthropic Messages wire format: /v1/messages, count_tokens, models.
 *
 * Parsing maps Anthropic's shapes onto the template-ready rp_chat_request: system (string or
 * text blocks) becomes a leading system message; user tool_result blocks become "tool"
 * messages (before the user's own text); assistant tool_use blocks become tool_calls with the
 * input object as arguments; thinking blocks become reasoning_content; images and documents
 * are refused with a clear error. Tools {name, description, input_schema} become OpenAI
 * function tools; tool_choice auto/any/tool/none becomes auto/required/<name>/none.
 *
 * Streaming event order (what the SDK's stream accumulator expects):
 *   message_start, then per content block: content_block_start, (ping after the first),
 *   content_block_delta* (text_delta | thinking_delta | input_json_delta),
 *   content_block_stop; then message_delta (stop_reason, stop_sequence, usage), message_stop.
 *   A failure mid-stream sends an "error" event instead of message_delta/message_stop.
 *
 * Ownership: as api/openai.h. Threading: any thread; a stream state belongs to one.
 * Errors:    parse: RP_ERR_INVALID / RP_ERR_UNSUPPORTED with the rp_api_error filled.
 */
#ifndef RP_API_ANTHROPIC_H
#define RP_API_ANTHROPIC_H

#include "api/openai.h"
#include "api/pipeline.h"
#include "api/request.h"

/* type RP_REQ_MESSAGES requires max_tokens; RP_REQ_COUNT_TOKENS does not. */
rp_status rp_anthropic_parse(const char *body, size_t len, rp_req_type type,
                             rp_chat_request *out, rp_api_error *e);

char *rp_anthropic_response(const char *model, const rp_gen_message *msg,
                            const rp_gen_output *done);
char *rp_anthropic_count_json(int n_tokens);

typedef enum rp_anthropic_block {
    RP_ANTHROPIC_NONE = 0,
    RP_ANTHROPIC_TEXT,
    RP_ANTHROPIC_THINKING,
    RP_ANTHROPIC_TOOL_USE,
} rp_anthropic_block;

typedef struct rp_anthropic_stream {
    char id[48];
    const char *model; /* borrowed */
    int n_prompt;
    int started;
    int index;               /* of the open block, or of the next one */
    rp_anthropic_block open; /* the open block, NONE between blocks */
    int pinged;
} rp_anthropic_stream;

void rp_anthropic_stream_init(rp_anthropic_stream *s, const char *model, int n_prompt);
/* message_start (once). Called by the other stream functions as needed. */
rp_status rp_anthropic_stream_start(rp_anthropic_stream *s, rp_api_emit_fn emit, void *user);
rp_status rp_anthropic_stream_text(rp_anthropic_stream *s, const char *text, size_t len,
                                   rp_api_emit_fn emit, void *user);
rp_status rp_anthropic_stream_thinking(rp_anthropic_stream *s, const char *text, size_t len,
                                       rp_api_emit_fn emit, void *user);
/* Opens a tool_use block; arguments follow as input_json_delta fragments. */
rp_status rp_anthropic_stream_tool_use(rp_anthropic_stream *s, const char *id, const char *name,
                                       rp_api_emit_fn emit, void *user);
rp_status rp_anthropic_stream_tool_input(rp_anthropic_stream *s, const char *json_part,
                                         size_t len, rp_api_emit_fn emit, void *user);
/* Closes the open block (content_block_stop), if any. */
rp_status rp_anthropic_stream_end_block(rp_anthropic_stream *s, rp_api_emit_fn emit, void *user);
/* Every piece of a delta, in order: thinking, text, tool_use blocks. */
rp_status rp_anthropic_stream_delta(rp_anthropic_stream *s, const rp_gen_output *d,
                                    rp_api_emit_fn emit, void *user);
rp_status rp_anthropic_stream_finish(rp_anthropic_stream *s, const rp_gen_output *done,
                                     rp_api_emit_fn emit, void *user);

/* "end_turn", "max_tokens", "stop_sequence", "tool_use". */
const char *rp_anthropic_stop_reason(rp_gen_finish f);

char *rp_anthropic_models_json(const char *const *names, int n);
char *rp_anthropic_model_json(const char *name);

#endif
