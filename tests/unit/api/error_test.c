/* Unit tests for src/api/error.c: the status table and both error shapes. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "api/error.h"
#include "base/alloc.h"

static json_t *load(char *s)
{
    cr_assert_not_null(s);
    json_t *j = json_loads(s, 0, NULL);
    rp_free(s);
    cr_assert_not_null(j);
    return j;
}

Test(error, http_status_per_kind)
{
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_INVALID), 400);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_CONTEXT), 400);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_AUTH), 401);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_MODEL_NOT_FOUND), 404);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_NOT_FOUND), 404);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_METHOD), 405);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_TOO_LARGE), 413);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_OVERLOADED), 503);
    cr_assert_eq(rp_api_error_http_status(RP_APIERR_INTERNAL), 500);
    cr_assert_eq(rp_api_error_http_status((rp_apierr)999), 500);
}

Test(error, set_returns_status)
{
    rp_api_error e;
    cr_assert_eq(rp_api_error_set(&e, RP_APIERR_INVALID, "temperature", "bad %d", 3),
                 RP_ERR_INVALID);
    cr_assert_str_eq(e.msg, "bad 3");
    cr_assert_str_eq(e.param, "temperature");
    cr_assert_eq(rp_api_error_set(&e, RP_APIERR_CONTEXT, NULL, "x"), RP_ERR_LIMIT);
    cr_assert_str_eq(e.param, "");
}

Test(error, from_err)
{
    rp_err err;
    rp_api_error e;
    rp_err_set(&err, RP_ERR_LIMIT, "queue full");
    rp_api_error_from_err(&e, &err);
    cr_assert_eq(e.kind, RP_APIERR_OVERLOADED);
    cr_assert_str_eq(e.msg, "queue full");
    rp_err_set(&err, RP_ERR_BACKEND, "boom");
    rp_api_error_from_err(&e, &err);
    cr_assert_eq(e.kind, RP_APIERR_INTERNAL);
}

Test(error, openai_shape)
{
    rp_api_error e;
    rp_api_error_set(&e, RP_APIERR_CONTEXT, "messages", "too long");
    json_t *j = load(rp_api_error_json(RP_API_OPENAI, &e));
    json_t *err = json_object_get(j, "error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "message")), "too long");
    cr_assert_str_eq(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "param")), "messages");
    cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "context_length_exceeded");
    json_decref(j);
    rp_api_error_set(&e, RP_APIERR_INVALID, NULL, "bad");
    j = load(rp_api_error_json(RP_API_OPENAI, &e));
    err = json_object_get(j, "error");
    cr_assert(json_is_null(json_object_get(err, "param")));
    cr_assert(json_is_null(json_object_get(err, "code")));
    json_decref(j);
}

Test(error, anthropic_shape)
{
    rp_api_error e;
    rp_api_error_set(&e, RP_APIERR_AUTH, NULL, "no key");
    json_t *j = load(rp_api_error_json(RP_API_ANTHROPIC, &e));
    cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "error");
    json_t *err = json_object_get(j, "error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "type")), "authentication_error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "message")), "no key");
    json_decref(j);
    rp_api_error_set(&e, RP_APIERR_MODEL_NOT_FOUND, NULL, "m");
    cr_assert_str_eq(rp_api_error_type(RP_API_ANTHROPIC, e.kind), "not_found_error");
    cr_assert_str_eq(rp_api_error_type(RP_API_ANTHROPIC, RP_APIERR_OVERLOADED), "overloaded_error");
    cr_assert_str_eq(rp_api_error_type(RP_API_ANTHROPIC, RP_APIERR_TOO_LARGE), "request_too_large");
}

Test(error, message_cut_inside_utf8_stays_valid_json)
{
    rp_api_error e;
    char big[600];
    memset(big, 'a', sizeof big);
    memcpy(big + 509, "\xc3\xa9\xc3\xa9", 4); /* é straddles the 512-byte cut */
    big[599] = '\0';
    rp_api_error_set(&e, RP_APIERR_INVALID, NULL, "%s", big);
    json_t *j = load(rp_api_error_json(RP_API_ANTHROPIC, &e));
    cr_assert_not_null(json_object_get(json_object_get(j, "error"), "message"));
    json_decref(j);
}
