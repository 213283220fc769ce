/* api/openai.h - the OpenAI wire format: /v1/chat/completions, /v1/completions, /v1/models.
 *
 * Parsing turns a request body into an rp_chat_request (messages normalised for templates:
 * content-part arrays joined, developer -> system, tool-call arguments parsed from their JSON
 * strings into objects). Writing turns pipeline output into chat.completion(.chunk) and
 * text_completion objects; streamed chunks go out through an emit callback the server frames
 * as SSE ("data: <json>\n\n", then "data: [DONE]").
 *
 * Ownership: parse fills a caller-initialised request (deinit it on any return). Returned
 *            strings are heap (rp_free).
 * Threading: any thread; a stream state belongs to one.
 * Errors:    parse: RP_ERR_INVALID / RP_ERR_UNSUPPORTED with the rp_api_error filled.
 */
#ifndef RP_API_OPENAI_H
#define RP_API_OPENAI_H

#include <stddef.h>

#include "api/pipeline.h"
#include "api/request.h"

/* event: NULL for OpenAI; data: one JSON text (or "[DONE]"). */
typedef rp_status (*rp_api_emit_fn)(void *user, const char *event, const char *data, size_t len);

rp_status rp_openai_parse_chat(const char *body, size_t len, rp_chat_request *out,
                               rp_api_error *e);
rp_status rp_openai_parse_completion(const char *body, size_t len, rp_chat_request *out,
                                     rp_api_error *e);

/* Non-streaming response body for a finished generation (chat or completion). */
char *rp_openai_response(const rp_chat_request *req, const char *model, const char *fingerprint,
                         const rp_gen_message *msg, const rp_gen_output *done);

typedef struct rp_openai_stream {
    char id[48];
    long created;
    const char *model;       /* borrowed for the stream's life */
    const char *fingerprint; /* borrowed */
    rp_req_type type;
    int include_usage;
    int sent_first;
} rp_openai_stream;

void rp_openai_stream_init(rp_openai_stream *s, const rp_chat_request *req, const char *model,
                           const char *fingerprint);
/* One chunk per piece: delta.content, delta.reasoning_content, delta.tool_calls. */
rp_status rp_openai_stream_delta(rp_openai_stream *s, const rp_gen_output *d, rp_api_emit_fn emit,
                                 void *user);
/* The final chunk (finish_reason), the usage chunk when asked for, then [DONE]. An ERROR
 * finish sends an error object instead of the final chunk. */
rp_status rp_openai_stream_finish(rp_openai_stream *s, const rp_gen_output *done,
                                  rp_api_emit_fn emit, void *user);

/* GET /v1/models (names[0..n)) and GET /v1/models/{id}. */
char *rp_openai_models_json(const char *const *names, int n);
char *rp_openai_model_json(const char *name);

/* "stop", "length", "tool_calls" (cancelled and error report "stop"). */
const char *rp_openai_finish_reason(rp_gen_finish f);

#endif
