/* chat/parse_xml.c - bodies of the XML-style tool-call formats, values typed by JSON schema.
 *
 *   rp_body_qwen3_xml  <function=NAME><parameter=K>V</parameter>...</function>  (qwen3_coder,
 *                      qwen3_xml, seed_oss); one newline around V is stripped
 *   rp_body_glm        NAME<arg_key>K</arg_key><arg_value>V</arg_value>...  (glm45, glm47;
 *                      also NAME\n{json})
 *   rp_body_minimax    <invoke name="NAME"><parameter name="K">V</parameter>...</invoke>...
 * The values are raw text; rp_typed_value turns each into JSON by the parameter's schema type
 * (string stays text; integer/number/boolean/null/object/array are decoded, falling back to
 * the text when they do not decode). Without a schema a value that decodes as a JSON number,
 * boolean, null, object or array is taken as that, anything else as a string.
 */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chat/parse_impl.h"

enum {
    T_STRING = 1,
    T_INTEGER = 2,
    T_NUMBER = 4,
    T_BOOLEAN = 8,
    T_OBJECT = 16,
    T_ARRAY = 32,
    T_NULL = 64
};

static int type_bit(const char *t)
{
    static const struct {
        const char *name;
        int bit;
    } map[] = {
        {"string", T_STRING}, {"integer", T_INTEGER}, {"number", T_NUMBER}, {"boolean", T_BOOLEAN},
        {"object", T_OBJECT}, {"array", T_ARRAY},     {"null", T_NULL},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(map); i++)
        if (strcmp(map[i].name, t) == 0) return map[i].bit;
    return 0;
}

static int schema_types(const json_t *schema, int depth)
{
    if (!json_is_object(schema) || depth > 4) return 0;
    int bits = 0;
    const json_t *t = json_object_get(schema, "type");
    if (json_is_string(t)) bits |= type_bit(json_string_value(t));
    size_t i;
    const json_t *el;
    if (json_is_array(t))
        json_array_foreach(t, i, el) if (json_is_string(el)) bits |=
            type_bit(json_string_value(el));
    static const char *const combos[] = {"anyOf", "oneOf", "allOf"};
    for (size_t k = 0; k < RP_ARRAY_LEN(combos); k++) {
        const json_t *arr = json_object_get(schema, combos[k]);
        json_array_foreach(arr, i, el) bits |= schema_types(el, depth + 1);
    }
    if (!bits && (json_object_get(schema, "properties"))) bits = T_OBJECT;
    if (!bits && json_object_get(schema, "items")) bits = T_ARRAY;
    return bits;
}

/* The schema of parameter `key` of function `fn` in an OpenAI or Anthropic tools array. */
static const json_t *param_schema(const json_t *tools, const char *fn, const char *key)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *f = json_object_get(t, "function");
        if (!json_is_object(f)) f = t;
        const json_t *name = json_object_get(f, "name");
        if (!json_is_string(name) || strcmp(json_string_value(name), fn) != 0) continue;
        const json_t *params = json_object_get(f, "parameters");
        if (!params) params = json_object_get(t, "input_schema");
        return json_object_get(json_object_get(params, "properties"), key);
    }
    return NULL;
}

static json_t *decode_any(const char *s, size_t n)
{
    json_error_t e;
    return json_loadb(s, n, JSON_DECODE_ANY, &e);
}

static bool eq_nocase(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

/* Decodes v as one of the types in bits (besides string); NULL when none fits. */
static json_t *decode_typed(int bits, const char *v, size_t n)
{
    if ((bits & T_NULL) && (eq_nocase(v, n, "null") || eq_nocase(v, n, "none"))) return json_null();
    if ((bits & T_BOOLEAN) && eq_nocase(v, n, "true")) return json_true();
    if ((bits & T_BOOLEAN) && eq_nocase(v, n, "false")) return json_false();
    if (bits & (T_INTEGER | T_NUMBER | T_OBJECT | T_ARRAY)) {
        json_t *j = decode_any(v, n);
        if (!j && (bits & (T_OBJECT | T_ARRAY))) j = rp_py_literal(v, n);
        if (j) {
            bool ok = ((bits & T_INTEGER) && json_is_integer(j)) ||
                      ((bits & T_NUMBER) && json_is_number(j)) ||
                      ((bits & T_OBJECT) && json_is_object(j)) ||
                      ((bits & T_ARRAY) && json_is_array(j));
            if (ok) return j;
            json_decref(j);
        }
    }
    return NULL;
}

json_t *rp_typed_value(const json_t *tools, const char *fn, const char *key, const char *v,
                       size_t n)
{
    const json_t *schema = param_schema(tools, fn, key);
    int bits = schema_types(schema, 0);
    const char *ts = rp_skip_ws(v, v + n), *te = v + n;
    while (te > ts && (unsigned char)te[-1] <= ' ')
        te--;
    size_t tn = (size_t)(te - ts);
    if (!bits) { /* no schema: JSON scalars and containers decode, the rest is text */
        json_t *j = decode_any(ts, tn);
        if (j && !json_is_string(j)) return j;
        json_decref(j);
        return json_stringn(v, n);
    }
    if (bits != T_STRING) {
        json_t *j = decode_typed(bits, ts, tn);
        if (j) return j;
    }
    if (!(bits & T_STRING)) { /* the schema forbids a string: take any JSON it decodes to */
        json_t *j = decode_any(ts, tn);
        if (j) return j;
    }
    return json_stringn(v, n);
}

/* Adds key -> typed(value) to args. RP_ERR_INVALID for a value that is not UTF-8. */
static rp_status add_param(const rp_body_ctx *ctx, json_t *args, const char *fn, const char *ks,
                           const char *ke, const char *vs, const char *ve, bool strip_nl)
{
    while (ks < ke && (unsigned char)*ks <= ' ')
        ks++;
    while (ke > ks && (unsigned char)ke[-1] <= ' ')
        ke--;
    if (ks == ke) return RP_ERR_INVALID;
    if (strip_nl && vs < ve && *vs == '\n') vs++;
    if (strip_nl && ve > vs && ve[-1] == '\n') ve--;
    char *key = rp_strndup(ks, (size_t)(ke - ks));
    if (!key) return RP_ERR_NOMEM;
    json_t *val = rp_typed_value(ctx->tools, fn, key, vs, (size_t)(ve - vs));
    rp_status st = RP_ERR_INVALID;
    if (val && json_object_set_new(args, key, val) == 0) st = RP_OK;
    rp_free(key);
    return st;
}

/* <function=NAME> params </function>; *pp advanced past it. */
static rp_status qwen_function(const rp_body_ctx *ctx, const char **pp, const char *end,
                               rp_calls *out)
{
    const char *p = *pp + strlen("<function=");
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt || gt == p) return RP_ERR_INVALID;
    char *name = rp_strndup(p, (size_t)(gt - p));
    json_t *args = json_object();
    rp_status st = name && args ? RP_OK : RP_ERR_NOMEM;
    p = gt + 1;
    while (st == RP_OK) {
        p = rp_skip_ws(p, end);
        if (p == end) { /* tolerated: </function> missing at the end of a closed body */
            st = ctx->truncated ? RP_ERR_INVALID : RP_OK;
            break;
        }
        if (rp_has_prefix(p, end, "</function>")) {
            p += strlen("</function>");
            break;
        }
        if (!rp_has_prefix(p, end, "<parameter=")) {
            st = RP_ERR_INVALID;
            break;
        }
        const char *ks = p + strlen("<parameter="), *ke = memchr(ks, '>', (size_t)(end - ks));
        if (!ke) {
            st = RP_ERR_INVALID;
            break;
        }
        const char *vs = ke + 1, *ve = rp_find(vs, end, "</parameter>");
        const char *resume = ve ? ve + strlen("</parameter>") : NULL;
        if (!ve) { /* tolerated: a missing </parameter> before the next tag */
            ve = rp_find(vs, end, "<parameter=");
            const char *fe = rp_find(vs, end, "</function>");
            if (!ve || (fe && fe < ve)) ve = fe ? fe : end;
            if (ve == end && ctx->truncated) {
                st = RP_ERR_INVALID;
                break;
            }
            resume = ve;
        }
        st = add_param(ctx, args, name, ks, ke, vs, ve, true);
        p = resume;
    }
    if (st == RP_OK) {
        st = rp_calls_push(out, name, strlen(name), args);
        args = NULL;
    }
    json_decref(args);
    rp_free(name);
    *pp = p;
    return st;
}

rp_status rp_body_qwen3_xml(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    const char *p = s, *end = s + n;
    size_t n0 = out->n;
    rp_status st = RP_OK;
    for (;;) {
        p = rp_skip_ws(p, end);
        if (p == end) break;
        if (!rp_has_prefix(p, end, "<function=")) {
            st = RP_ERR_INVALID;
            break;
        }
        if ((st = qwen_function(ctx, &p, end, out)) != RP_OK) break;
    }
    if (st == RP_OK && out->n == n0) st = RP_ERR_INVALID;
    if (st != RP_OK) rp_calls_truncate(out, n0);
    return st;
}

rp_status rp_body_glm(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    const char *p = rp_skip_ws(s, s + n), *end = s + n;
    const char *ne = p;
    while (ne < end && *ne != '\n' && *ne != '<' && *ne != '{')
        ne++;
    const char *ns = p, *nend = ne;
    while (nend > ns && (unsigned char)nend[-1] <= ' ')
        nend--;
    if (ns == nend) return RP_ERR_INVALID;
    char *name = rp_strndup(ns, (size_t)(nend - ns));
    if (!name) return RP_ERR_NOMEM;
    json_t *args = NULL;
    rp_status st = RP_OK;
    p = rp_skip_ws(ne, end);
    if (p < end && *p == '{') { /* NAME\n{json arguments} */
        st = rp_json_args_parse(p, (size_t)(end - p), &args);
        goto out;
    }
    if (!(args = json_object())) {
        st = RP_ERR_NOMEM;
        goto out;
    }
    while (st == RP_OK) {
        p = rp_skip_ws(p, end);
        if (p == end) break;
        const char *ks = NULL, *ke = NULL, *vs = NULL, *ve = NULL;
        st = RP_ERR_INVALID;
        if (!rp_has_prefix(p, end, "<arg_key>")) break;
        ks = p + strlen("<arg_key>");
        if (!(ke = rp_find(ks, end, "</arg_key>"))) break;
        p = rp_skip_ws(ke + strlen("</arg_key>"), end);
        if (!rp_has_prefix(p, end, "<arg_value>")) break;
        vs = p + strlen("<arg_value>");
        if (!(ve = rp_find(vs, end, "</arg_value>"))) break;
        p = ve + strlen("</arg_value>");
        st = add_param(ctx, args, name, ks, ke, vs, ve, false);
    }
out:
    if (st == RP_OK) {
        st = rp_calls_push(out, name, strlen(name), args);
        args = NULL;
    }
    json_decref(args);
    rp_free(name);
    return st;
}

/* name="X" / name=X up to '>'; returns the position after '>' or NULL. */
static const char *attr_name(const char *p, const char *end, const char **ns, const char **ne)
{
    p = rp_skip_ws(p, end);
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt) return NULL;
    const char *a = p, *b = gt;
    if (a < b && (*a == '"' || *a == '\'')) a++;
    if (b > a && (b[-1] == '"' || b[-1] == '\'')) b--;
    if (a >= b) return NULL;
    *ns = a;
    *ne = b;
    return gt + 1;
}

static rp_status minimax_invoke(const rp_body_ctx *ctx, const char **pp, const char *end,
                                rp_calls *out)
{
    const char *ns, *ne;
    const char *p = attr_name(*pp + strlen("<invoke name="), end, &ns, &ne);
    if (!p) return RP_ERR_INVALID;
    char *name = rp_strndup(ns, (size_t)(ne - ns));
    json_t *args = json_object();
    rp_status st = name && args ? RP_OK : RP_ERR_NOMEM;
    while (st == RP_OK) {
        p = rp_skip_ws(p, end);
        if (p == end) { /* tolerated: </invoke> missing at the end of a closed body */
            st = ctx->truncated ? RP_ERR_INVALID : RP_OK;
            break;
        }
        if (rp_has_prefix(p, end, "</invoke>")) {
            p += strlen("</invoke>");
            break;
        }
        const char *ks, *ke, *vs, *ve;
        st = RP_ERR_INVALID;
        if (!rp_has_prefix(p, end, "<parameter name=")) break;
        if (!(vs = attr_name(p + strlen("<parameter name="), end, &ks, &ke))) break;
        if (!(ve = rp_find(vs, end, "</parameter>"))) break;
        p = ve + strlen("</parameter>");
        st = add_param(ctx, args, name, ks, ke, vs, ve, true);
    }
    if (st == RP_OK) {
        st = rp_calls_push(out, name, strlen(name), args);
        args = NULL;
    }
    json_decref(args);
    rp_free(name);
    *pp = p;
    return st;
}

rp_status rp_body_minimax(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    const char *p = s, *end = s + n;
    size_t n0 = out->n;
    rp_status st = RP_OK;
    for (;;) {
        p = rp_skip_ws(p, end);
        if (p == end) break;
        if (!rp_has_prefix(p, end, "<invoke name=")) {
            st = RP_ERR_INVALID;
            break;
        }
        if ((st = minimax_invoke(ctx, &p, end, out)) != RP_OK) break;
    }
    if (st == RP_OK && out->n == n0) st = RP_ERR_INVALID;
    if (st != RP_OK) rp_calls_truncate(out, n0);
    return st;
}
