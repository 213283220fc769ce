/* api/request.c - rp_chat_request lifetime and the wire helpers shared by both adapters. */
#include "api/request.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/clock.h"

void rp_chat_request_init(rp_chat_request *r, rp_req_type type)
{
    memset(r, 0, sizeof *r);
    r->type = type;
    r->api = (type == RP_REQ_MESSAGES || type == RP_REQ_COUNT_TOKENS) ? RP_API_ANTHROPIC
                                                                       : RP_API_OPENAI;
    r->max_tokens = -1;
    r->enable_thinking = -1;
    r->parallel_tool_calls = 1;
    rp_sampling_default(&r->sampling);
}

void rp_chat_request_deinit(rp_chat_request *r)
{
    if (!r)
        return;
    rp_free(r->model);
    json_decref(r->messages);
    json_decref(r->tools);
    rp_free(r->tool_choice);
    rp_free(r->prompt);
    rp_free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++)
        rp_free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* Length of the UTF-8 sequence starting at s (at most n bytes), 0 when malformed. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned min, cp;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, min = 0x80, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, min = 0x800, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

int rp_api_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(p + i, n - i);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

void rp_api_utf8_trim(char *s)
{
    size_t n = strlen(s), i = n;
    while (i > 0 && i > n - 4 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
        i--;
    if (i > 0 && (unsigned char)s[i - 1] >= 0xc0 && !utf8_seq((unsigned char *)s + i - 1, n - i + 1))
        s[i - 1] = '\0';
}

static int dump_cb(const char *buffer, size_t size, void *data)
{
    return rp_buf_append((rp_buf *)data, buffer, size) == RP_OK ? 0 : -1;
}

char *rp_api_json_dump(const json_t *j)
{
    rp_buf b = {0};
    if (json_dump_callback(j, dump_cb, &b, JSON_COMPACT | JSON_ENCODE_ANY) != 0 ||
        rp_buf_putc(&b, '\0') != RP_OK) {
        rp_buf_deinit(&b);
        return NULL;
    }
    return rp_buf_take(&b);
}

rp_status rp_api_parse_body(const char *body, size_t len, json_t **out, rp_api_error *e)
{
    *out = NULL;
    if (!rp_api_utf8_valid(body, len))
        return rp_api_error_set(e, RP_APIERR_INVALID, NULL,
                                "request body is not valid UTF-8; send JSON encoded as UTF-8");
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        return rp_api_error_set(e, RP_APIERR_INVALID, NULL,
                                "request body is not valid JSON: %s (line %d, column %d)",
                                jerr.text, jerr.line, jerr.column);
    if (!json_is_object(j)) {
        json_decref(j);
        return rp_api_error_set(e, RP_APIERR_INVALID, NULL,
                                "request body must be a JSON object");
    }
    *out = j;
    return RP_OK;
}

void rp_api_make_id(const char *prefix, char *out, size_t cap)
{
    unsigned char raw[12];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        uint64_t t = (uint64_t)rp_now_ns();
        for (size_t i = 0; i < sizeof raw; i++)
            raw[i] = (unsigned char)(t >> ((i % 8) * 8)) ^ (unsigned char)(i * 37);
    }
    char hex[25];
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    snprintf(out, cap, "%s%s", prefix, hex);
}

rp_status rp_api_get_number(const json_t *obj, const char *key, double lo, double hi, float *out,
                            rp_api_error *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return RP_OK;
    if (!json_is_number(v))
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' must be between %g and %g (got %g)",
                                key, lo, hi, d);
    *out = (float)d;
    return RP_OK;
}

rp_status rp_api_get_int(const json_t *obj, const char *key, long lo, long hi, long *out,
                         rp_api_error *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return RP_OK;
    if (!json_is_integer(v))
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' must be an integer", key);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return rp_api_error_set(e, RP_APIERR_INVALID, key,
                                "'%s' must be between %ld and %ld (got %lld)", key, lo, hi,
                                (long long)i);
    *out = (long)i;
    return RP_OK;
}

rp_status rp_api_get_bool(const json_t *obj, const char *key, int *out, rp_api_error *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return RP_OK;
    if (!json_is_boolean(v))
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return RP_OK;
}

rp_status rp_api_get_string(const json_t *obj, const char *key, const char **out,
                            rp_api_error *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return RP_OK;
    if (!json_is_string(v))
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' must be a string", key);
    *out = json_string_value(v);
    return RP_OK;
}

static rp_status add_stop(rp_chat_request *r, const char *key, const json_t *v, rp_api_error *e)
{
    if (!json_is_string(v))
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' must be a string or a list of strings",
                                key);
    if (json_string_length(v) == 0)
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' entries must not be empty", key);
    if (r->n_stop >= RP_MAX_STOP)
        return rp_api_error_set(e, RP_APIERR_INVALID, key, "'%s' holds more than %d strings", key,
                                RP_MAX_STOP);
    r->stop[r->n_stop] = rp_strndup(json_string_value(v), json_string_length(v));
    if (!r->stop[r->n_stop])
        return rp_api_error_set(e, RP_APIERR_INTERNAL, NULL, "out of memory");
    r->n_stop++;
    return RP_OK;
}

rp_status rp_api_get_stops(const json_t *obj, const char *key, rp_chat_request *r,
                           rp_api_error *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return RP_OK;
    if (!json_is_array(v))
        return add_stop(r, key, v, e);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s)
    {
        rp_status st = add_stop(r, key, s, e);
        if (st != RP_OK)
            return st;
    }
    return RP_OK;
}

rp_status rp_api_get_model(const json_t *obj, rp_chat_request *r, rp_api_error *e)
{
    const char *m = NULL;
    rp_status st = rp_api_get_string(obj, "model", &m, e);
    if (st != RP_OK || !m)
        return st;
    r->model = rp_strdup(m);
    return r->model ? RP_OK : rp_api_error_set(e, RP_APIERR_INTERNAL, NULL, "out of memory");
}
