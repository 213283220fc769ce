/* chat/parse_json.c - bodies of the JSON tool-call formats.
 *
 *   rp_body_json_calls  one or more {"name": .., "arguments"|"parameters": {..}} objects, or
 *                       arrays of them, separated by whitespace, ',' or ';' (hermes, granite,
 *                       granite4, llama3_json, phi4_mini_json, xlam, jamba, hunyuan_a13b,
 *                       internlm, cohere_command3 with "tool_name")
 *   rp_body_mistral     [{..}] (pre-v11) or NAME[ARGS]{..} / NAME[CALL_ID]ID[ARGS]{..}
 *   rp_body_deepseek
 * <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜>
 *                       (deepseek_v3) and
 * <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}<｜tool▁call▁end｜> (deepseek_v31), any number of them
 *   rp_body_kimi        <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{..}
 *                       <|tool_call_end|>, any number of them
 * Arguments given as a JSON string holding an object are decoded; missing arguments are {}.
 */
#include <string.h>

#include "base/alloc.h"
#include "chat/parse_impl.h"

#define DS_CALL_BEGIN                                                                              \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "begin\xef\xbd\x9c>"
#define DS_CALL_END                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

/* One JSON value from the front of [s, end); *next is set past it. NULL when none parses. */
static json_t *load_prefix(const char *s, const char *end, const char **next)
{
    json_error_t e;
    json_t *v = json_loadb(s, (size_t)(end - s), JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &e);
    if (v) *next = s + e.position;
    return v;
}

rp_status rp_json_args_parse(const char *s, size_t n, json_t **out)
{
    const char *end = s + n;
    s = rp_skip_ws(s, end);
    while (end > s && (end[-1] == ' ' || end[-1] == '\n' || end[-1] == '\t' || end[-1] == '\r'))
        end--;
    if (s == end) {
        *out = json_object();
        return *out ? RP_OK : RP_ERR_NOMEM;
    }
    json_error_t e;
    json_t *v = json_loadb(s, (size_t)(end - s), JSON_DECODE_ANY, &e);
    if (v && json_is_string(v)) { /* arguments double-encoded as a string */
        json_t *inner = json_loadb(json_string_value(v), json_string_length(v), 0, &e);
        json_decref(v);
        v = inner;
    }
    if (!v || !json_is_object(v)) {
        json_decref(v);
        return RP_ERR_INVALID;
    }
    *out = v;
    return RP_OK;
}

/* Arguments member of a call object, as a new object reference; NULL when malformed. */
static json_t *call_args(json_t *obj)
{
    static const char *const keys[] = {"arguments", "parameters", "args", "input"};
    json_t *a = NULL;
    for (size_t i = 0; i < RP_ARRAY_LEN(keys) && !a; i++)
        a = json_object_get(obj, keys[i]);
    if (!a || json_is_null(a)) return json_object();
    if (json_is_object(a)) return json_incref(a);
    if (json_is_string(a)) {
        json_t *v = NULL;
        if (rp_json_args_parse(json_string_value(a), json_string_length(a), &v) == RP_OK) return v;
    }
    return NULL;
}

static rp_status push_call_object(json_t *obj, rp_calls *out)
{
    if (!json_is_object(obj)) return RP_ERR_INVALID;
    json_t *fn = json_object_get(obj, "function");
    if (json_is_object(fn)) /* {"type":"function","function":{"name":..,"arguments":..}} */
        obj = fn;
    json_t *name = json_object_get(obj, "name");
    if (!json_is_string(name)) name = json_object_get(obj, "tool_name");
    if (!json_is_string(name)) return RP_ERR_INVALID;
    json_t *args = call_args(obj);
    if (!args) return RP_ERR_INVALID;
    return rp_calls_push(out, json_string_value(name), json_string_length(name), args);
}

rp_status rp_body_json_calls(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    const char *p = s, *end = s + n;
    size_t n0 = out->n;
    rp_status st = RP_OK;
    for (;;) {
        while (p < end &&
               (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',' || *p == ';'))
            p++;
        if (p == end) break;
        if (*p != '{' && *p != '[') {
            st = RP_ERR_INVALID;
            break;
        }
        json_t *v = load_prefix(p, end, &p);
        if (!v) {
            st = RP_ERR_INVALID;
            break;
        }
        if (json_is_array(v)) {
            size_t i;
            json_t *el;
            json_array_foreach(v, i, el)
            {
                if ((st = push_call_object(el, out)) != RP_OK) break;
            }
            if (json_array_size(v) == 0) st = RP_ERR_INVALID;
        } else {
            st = push_call_object(v, out);
        }
        json_decref(v);
        if (st != RP_OK) break;
    }
    if (st == RP_OK && out->n == n0) st = RP_ERR_INVALID;
    if (st != RP_OK) rp_calls_truncate(out, n0);
    return st;
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
}

static bool valid_name(const char *s, const char *end)
{
    if (s == end) return false;
    for (; s < end; s++)
        if (!is_name_char(*s)) return false;
    return true;
}

/* Trims ASCII whitespace on both ends of [*s, *e). */
static void trim(const char **s, const char **e)
{
    *s = rp_skip_ws(*s, *e);
    while (*e > *s && (unsigned char)(*e)[-1] <= ' ')
        (*e)--;
}

/* A JSON object at p (after whitespace); *next past it. */
static json_t *load_args_at(const char *p, const char *end, const char **next)
{
    p = rp_skip_ws(p, end);
    if (p == end || *p != '{') return NULL;
    json_t *v = load_prefix(p, end, next);
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

rp_status rp_body_mistral(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    const char *p = s, *end = s + n;
    p = rp_skip_ws(p, end);
    if (p < end && (*p == '[' || *p == '{')) return rp_body_json_calls(ctx, s, n, out);
    const char *args_m = rp_find(p, end, "[ARGS]");
    if (!args_m) return RP_ERR_INVALID;
    const char *name_end = rp_find(p, args_m, "[CALL_ID]");
    if (!name_end) name_end = args_m;
    const char *ns = p, *ne = name_end;
    trim(&ns, &ne);
    if (!valid_name(ns, ne)) return RP_ERR_INVALID;
    const char *next = NULL;
    json_t *args = load_args_at(args_m + 6, end, &next);
    if (!args) return RP_ERR_INVALID;
    if (rp_skip_ws(next, end) != end) {
        json_decref(args);
        return RP_ERR_INVALID;
    }
    return rp_calls_push(out, ns, (size_t)(ne - ns), args);
}

/* One DeepSeek call starting after DS_CALL_BEGIN; *next after its DS_CALL_END (or the end). */
static rp_status deepseek_one(const char *p, const char *end, const char **next, rp_calls *out)
{
    const char *sep = rp_find(p, end, DS_SEP);
    if (!sep) return RP_ERR_INVALID;
    const char *after = sep + strlen(DS_SEP), *q = rp_skip_ws(after, end);
    const char *ns, *ne;
    if (q < end && *q == '{') { /* v3.1: NAME<sep>{args} */
        ns = p;
        ne = sep;
    } else { /* v3: TYPE<sep>NAME\n```json\n{args}\n``` */
        ns = after;
        ne = after;
        while (ne < end && *ne != '\n' && *ne != '`' && *ne != '{')
            ne++;
        q = rp_skip_ws(ne, end);
        if (rp_has_prefix(q, end, "```json"))
            q += 7;
        else if (rp_has_prefix(q, end, "```"))
            q += 3;
    }
    trim(&ns, &ne);
    if (!valid_name(ns, ne)) return RP_ERR_INVALID;
    json_t *args = load_args_at(q, end, &q);
    if (!args) return RP_ERR_INVALID;
    q = rp_skip_ws(q, end);
    if (rp_has_prefix(q, end, "```")) q = rp_skip_ws(q + 3, end);
    if (rp_has_prefix(q, end, DS_CALL_END))
        q += strlen(DS_CALL_END);
    else if (q != end) {
        json_decref(args);
        return RP_ERR_INVALID;
    }
    *next = q;
    return rp_calls_push(out, ns, (size_t)(ne - ns), args);
}

rp_status rp_body_deepseek(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    const char *p = s, *end = s + n;
    size_t n0 = out->n;
    rp_status st = RP_OK;
    for (;;) {
        p = rp_skip_ws(p, end);
        if (p == end) break;
        if (!rp_has_prefix(p, end, DS_CALL_BEGIN)) {
            st = RP_ERR_INVALID;
            break;
        }
        if ((st = deepseek_one(p + strlen(DS_CALL_BEGIN), end, &p, out)) != RP_OK) break;
    }
    if (st == RP_OK && out->n == n0) st = RP_ERR_INVALID;
    if (st != RP_OK) rp_calls_truncate(out, n0);
    return st;
}

rp_status rp_body_kimi(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    static const char begin[] = "<|tool_call_begin|>", argb[] = "<|tool_call_argument_begin|>",
                      cend[] = "<|tool_call_end|>";
    const char *p = s, *end = s + n;
    size_t n0 = out->n;
    rp_status st = RP_OK;
    for (;;) {
        p = rp_skip_ws(p, end);
        if (p == end) break;
        st = RP_ERR_INVALID;
        if (!rp_has_prefix(p, end, begin)) break;
        p += strlen(begin);
        const char *a = rp_find(p, end, argb);
        if (!a) break;
        /* id "functions.NAME:IDX": the name sits between the prefix and the last ':' */
        const char *ns = p, *ne = a;
        trim(&ns, &ne);
        if (rp_has_prefix(ns, ne, "functions.")) ns += 10;
        const char *colon = ne;
        while (colon > ns && colon[-1] != ':')
            colon--;
        if (colon > ns) ne = colon - 1;
        if (!valid_name(ns, ne)) break;
        json_t *args = load_args_at(a + strlen(argb), end, &p);
        if (!args) break;
        p = rp_skip_ws(p, end);
        if (rp_has_prefix(p, end, cend))
            p += strlen(cend);
        else if (p != end) {
            json_decref(args);
            break;
        }
        if ((st = rp_calls_push(out, ns, (size_t)(ne - ns), args)) != RP_OK) break;
    }
    if (st == RP_OK && out->n == n0) st = RP_ERR_INVALID;
    if (st != RP_OK) rp_calls_truncate(out, n0);
    return st;
}
