/* api/error.c - the error table: kind -> HTTP status, rp_status, OpenAI type/code,
 * Anthropic type. Adding an error means adding a row here and nowhere else.
 */
#include "api/error.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/request.h"
#include "base/alloc.h"

typedef struct err_row {
    rp_apierr kind;
    int http;
    rp_status status;
    const char *openai_type;
    const char *openai_code; /* NULL: JSON null */
    const char *anthropic_type;
} err_row;

static const err_row g_rows[RP_APIERR_COUNT] = {
    {RP_APIERR_INVALID, 400, RP_ERR_INVALID, "invalid_request_error", NULL,
     "invalid_request_error"},
    {RP_APIERR_UNSUPPORTED, 400, RP_ERR_UNSUPPORTED, "invalid_request_error", "unsupported",
     "invalid_request_error"},
    {RP_APIERR_CONTEXT, 400, RP_ERR_LIMIT, "invalid_request_error", "context_length_exceeded",
     "invalid_request_error"},
    {RP_APIERR_AUTH, 401, RP_ERR_AUTH, "authentication_error", "invalid_api_key",
     "authentication_error"},
    {RP_APIERR_MODEL_NOT_FOUND, 404, RP_ERR_NOT_FOUND, "invalid_request_error",
     "model_not_found", "not_found_error"},
    {RP_APIERR_NOT_FOUND, 404, RP_ERR_NOT_FOUND, "invalid_request_error", "not_found",
     "not_found_error"},
    {RP_APIERR_METHOD, 405, RP_ERR_INVALID, "invalid_request_error", "method_not_allowed",
     "invalid_request_error"},
    {RP_APIERR_TOO_LARGE, 413, RP_ERR_LIMIT, "invalid_request_error", "request_too_large",
     "request_too_large"},
    {RP_APIERR_OVERLOADED, 503, RP_ERR_LIMIT, "server_error", "overloaded", "overloaded_error"},
    {RP_APIERR_LOADING, 503, RP_AGAIN, "server_error", "model_loading", "overloaded_error"},
    {RP_APIERR_INTERNAL, 500, RP_ERR_BACKEND, "server_error", "internal_error", "api_error"},
};

static const err_row *row(rp_apierr kind)
{
    return (unsigned)kind < RP_APIERR_COUNT ? &g_rows[kind] : &g_rows[RP_APIERR_INTERNAL];
}

rp_status rp_api_error_set(rp_api_error *e, rp_apierr kind, const char *param, const char *fmt,
                           ...)
{
    if (e) {
        e->kind = kind;
        snprintf(e->param, sizeof e->param, "%s", param ? param : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        rp_api_utf8_trim(e->msg); /* a cut inside a UTF-8 sequence would make bad JSON */
    }
    return row(kind)->status;
}

void rp_api_error_from_err(rp_api_error *e, const rp_err *err)
{
    rp_apierr kind;
    switch (err->code) {
    case RP_ERR_INVALID: kind = RP_APIERR_INVALID; break;
    case RP_ERR_UNSUPPORTED: kind = RP_APIERR_UNSUPPORTED; break;
    case RP_ERR_NOT_FOUND: kind = RP_APIERR_MODEL_NOT_FOUND; break;
    case RP_ERR_LIMIT: kind = RP_APIERR_OVERLOADED; break; /* below the API: the queue */
    case RP_ERR_AUTH: kind = RP_APIERR_AUTH; break;
    default: kind = RP_APIERR_INTERNAL; break;
    }
    rp_api_error_set(e, kind, NULL, "%s", err->msg[0] ? err->msg : rp_status_str(err->code));
}

int rp_api_error_http_status(rp_apierr kind) { return row(kind)->http; }
rp_status rp_api_error_status(rp_apierr kind) { return row(kind)->status; }

const char *rp_api_error_type(rp_api_kind api, rp_apierr kind)
{
    return api == RP_API_ANTHROPIC ? row(kind)->anthropic_type : row(kind)->openai_type;
}

char *rp_api_error_json(rp_api_kind api, const rp_api_error *e)
{
    const err_row *r = row(e->kind);
    json_t *body;
    if (api == RP_API_ANTHROPIC) {
        body = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                         r->anthropic_type, "message", e->msg);
    } else {
        body = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->msg, "type",
                         r->openai_type, "param", e->param[0] ? json_string(e->param) : json_null(),
                         "code", r->openai_code ? json_string(r->openai_code) : json_null());
    }
    if (!body) /* e.g. a message cut inside a UTF-8 sequence: say it without the message */
        body = json_pack("{s:{s:s, s:s}}", "error", "message", "error", "type", r->openai_type);
    char *out = body ? rp_api_json_dump(body) : NULL;
    json_decref(body);
    return out;
}
