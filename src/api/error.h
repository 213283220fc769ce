/* api/error.h - the one table from errors to HTTP status codes and each API's error JSON.
 *
 * Every error a client can see is an rp_api_error: a kind (a row of the table in error.c),
 * the offending parameter when there is one, and a message that says what was wrong and
 * what to do. Code below the API reports rp_status values; rp_api_error_from_err turns them
 * into a kind. The server only asks this module for the status code and the body.
 *
 * Shapes:  OpenAI    {"error":{"message":M,"type":T,"param":P|null,"code":C|null}}
 *          Anthropic {"type":"error","error":{"type":T,"message":M}}
 *
 * Ownership: rp_api_error is a plain value. rp_api_error_json returns a heap string (rp_free).
 * Threading: any thread (the table is immutable).
 * Errors:    rp_api_error_json returns NULL only when memory runs out.
 */
#ifndef RP_API_ERROR_H
#define RP_API_ERROR_H

#include "base/status.h"

typedef enum rp_api_kind { RP_API_OPENAI = 0, RP_API_ANTHROPIC = 1 } rp_api_kind;

typedef enum rp_apierr {
    RP_APIERR_INVALID = 0,   /* 400: malformed JSON, wrong types, bad values, invalid UTF-8 */
    RP_APIERR_UNSUPPORTED,   /* 400: valid but not supported here (images, n > 1, ...) */
    RP_APIERR_CONTEXT,       /* 400: prompt over the context window */
    RP_APIERR_AUTH,          /* 401 */
    RP_APIERR_MODEL_NOT_FOUND, /* 404: unknown model name */
    RP_APIERR_NOT_FOUND,     /* 404: unknown route */
    RP_APIERR_METHOD,        /* 405 */
    RP_APIERR_TOO_LARGE,     /* 413: body over --max-request-bytes */
    RP_APIERR_OVERLOADED,    /* 503: the engine queue is full (Retry-After) */
    RP_APIERR_LOADING,       /* 503: the model is still loading */
    RP_APIERR_INTERNAL,      /* 500 */
    RP_APIERR_COUNT
} rp_apierr;

typedef struct rp_api_error {
    rp_apierr kind;
    char param[64]; /* "" when no single parameter is at fault */
    char msg[512];
} rp_api_error;

/* Stores kind, param (NULL: none) and a printf-style message; returns the rp_status the
 * kind corresponds to, so parsers write: return rp_api_error_set(e, RP_APIERR_INVALID, ...). */
rp_status rp_api_error_set(rp_api_error *e, rp_apierr kind, const char *param, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));
/* From an rp_err filled below the API (tokenizer, template, engine). */
void rp_api_error_from_err(rp_api_error *e, const rp_err *err);

int rp_api_error_http_status(rp_apierr kind);
rp_status rp_api_error_status(rp_apierr kind);
/* The type string each API uses for this kind ("invalid_request_error", ...). */
const char *rp_api_error_type(rp_api_kind api, rp_apierr kind);
char *rp_api_error_json(rp_api_kind api, const rp_api_error *e);

#endif
