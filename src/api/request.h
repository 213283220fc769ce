/* api/request.h - the internal chat request both adapters produce, and small wire helpers.
 *
 * The OpenAI adapter (api/openai.c) and the Anthropic adapter (api/anthropic.c) each turn a
 * request body into one rp_chat_request; the pipeline (api/pipeline.c) only ever sees this
 * struct. Messages and tools are kept as JSON in the shape chat templates expect
 * (transformers' apply_chat_template): role, content as a string, assistant tool_calls with
 * arguments already parsed into objects, tool_call_id on tool results, reasoning_content.
 *
 * Ownership: rp_chat_request_init/deinit; every pointer inside is owned by the request
 *            (strings rp_alloc'd, JSON values hold one reference).
 * Threading: a request belongs to one thread.
 * Errors:    helpers return RP_ERR_NOMEM.
 */
#ifndef RP_API_REQUEST_H
#define RP_API_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api/error.h"
#include "engine/engine.h"

#define RP_MAX_STOP 16

typedef enum rp_req_type {
    RP_REQ_CHAT = 0,     /* OpenAI /v1/chat/completions */
    RP_REQ_COMPLETION,   /* OpenAI /v1/completions */
    RP_REQ_MESSAGES,     /* Anthropic /v1/messages */
    RP_REQ_COUNT_TOKENS, /* Anthropic /v1/messages/count_tokens */
} rp_req_type;

typedef struct rp_chat_request {
    rp_req_type type;
    rp_api_kind api;
    char *model;      /* as sent; NULL when absent */
    json_t *messages; /* template-ready array (chat, messages, count_tokens) */
    json_t *tools;    /* template-ready OpenAI function tools; NULL when none */
    char *tool_choice; /* "auto" | "none" | "required" | a function name; NULL: auto */
    int parallel_tool_calls;
    int enable_thinking; /* -1: not said; 0/1 go to the template as enable_thinking */
    char *prompt;        /* completions: prompt text (or NULL when given as ids) */
    int32_t *prompt_ids; /* completions: prompt as token ids */
    int n_prompt_ids;
    int stream;
    int include_usage; /* OpenAI stream_options.include_usage */
    int max_tokens;    /* -1: not given (until the context is full) */
    rp_sampling sampling;
    char *stop[RP_MAX_STOP];
    int n_stop;
    int logprobs;     /* 1: return per-token logprobs */
    int top_logprobs; /* alternatives per token (0..RP_MAX_TOP_LOGPROBS) */
    int json_mode;    /* response_format json_object (accepted; no grammar yet) */
} rp_chat_request;

void rp_chat_request_init(rp_chat_request *r, rp_req_type type);
void rp_chat_request_deinit(rp_chat_request *r);

/* 1 when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF). */
int rp_api_utf8_valid(const char *s, size_t n);
/* Cuts a NUL-terminated string before a trailing incomplete UTF-8 sequence. */
void rp_api_utf8_trim(char *s);
/* Compact JSON as a heap string (rp_free); NULL on OOM. Independent of jansson's allocator. */
char *rp_api_json_dump(const json_t *j);
/* Parses a request body: checks UTF-8, then strict JSON, then that it is an object.
 * On success *out holds a new reference. */
rp_status rp_api_parse_body(const char *body, size_t len, json_t **out, rp_api_error *e);
/* Field readers. An absent key or JSON null leaves *out untouched and returns RP_OK; a wrong
 * type or a value outside [lo, hi] is RP_ERR_INVALID naming the field. */
rp_status rp_api_get_number(const json_t *obj, const char *key, double lo, double hi, float *out,
                            rp_api_error *e);
rp_status rp_api_get_int(const json_t *obj, const char *key, long lo, long hi, long *out,
                         rp_api_error *e);
rp_status rp_api_get_bool(const json_t *obj, const char *key, int *out, rp_api_error *e);
rp_status rp_api_get_string(const json_t *obj, const char *key, const char **out,
                            rp_api_error *e);
/* Stop strings: a string or an array of non-empty strings (at most RP_MAX_STOP). */
rp_status rp_api_get_stops(const json_t *obj, const char *key, rp_chat_request *r,
                           rp_api_error *e);
/* Copies "model" (string) into r->model. */
rp_status rp_api_get_model(const json_t *obj, rp_chat_request *r, rp_api_error *e);
/* Writes a random id like "chatcmpl-<24 hex>" into out (prefix + 24 chars + NUL). */
void rp_api_make_id(const char *prefix, char *out, size_t cap);

#endif
