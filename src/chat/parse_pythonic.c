/* chat/parse_pythonic.c - bodies written as calls with literal arguments.
 *
 *   rp_body_pythonic  [f(a=1, b="x"), g()] or f(a=1): keyword arguments only, values Python
 *                     literals (str with '' or "" and escapes, int, float, True/False/None,
 *                     list, tuple -> array, dict) (pythonic, llama4_pythonic, lfm2)
 *   rp_body_gemma4    call:NAME{key:VALUE,...}: strings between <|"|> delimiters, bare or
 *                     quoted keys, numbers, true/false/null, {...} and [...] (gemma4)
 * A recursive-descent parser over a cursor; nesting is capped at MAX_DEPTH so hostile input
 * cannot exhaust the stack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "chat/parse_impl.h"

#define MAX_DEPTH 64
#define GEMMA_Q "<|\"|>"

typedef struct cur {
    const char *p, *end;
    int depth;
} cur;

static void skip_ws(cur *c)
{
    c->p = rp_skip_ws(c->p, c->end);
}

static bool eat(cur *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static bool is_ident(char ch, bool first)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
           (!first && ((ch >= '0' && ch <= '9') || ch == '.' || ch == '-'));
}

static int hexval(char h)
{
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
}

static rp_status put_utf8(rp_buf *b, unsigned long cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return rp_buf_append(b, u, n);
}

/* \xHH, \uHHHH, \UHHHHHHHH: n hex digits after the letter. */
static bool escape_hex(cur *c, int n, unsigned long *cp)
{
    if (c->end - c->p < n) return false;
    unsigned long v = 0;
    for (int i = 0; i < n; i++) {
        int h = hexval(c->p[i]);
        if (h < 0) return false;
        v = v * 16 + (unsigned long)h;
    }
    c->p += n;
    *cp = v;
    return v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF);
}

static bool escape_char(cur *c, rp_buf *b)
{
    char e = *c->p++;
    static const char from[] = "ntr0\\'\"abfv", to[] = "\n\t\r\0\\'\"\a\b\f\v";
    const char *k = memchr(from, e, sizeof from - 1);
    if (k) return rp_buf_putc(b, to[k - from]) == RP_OK;
    unsigned long cp;
    if (e == 'x' || e == 'u' || e == 'U')
        return escape_hex(c, e == 'x' ? 2 : e == 'u' ? 4 : 8, &cp) && put_utf8(b, cp) == RP_OK;
    if (e == '\n') return true; /* line continuation */
    return rp_buf_putc(b, '\\') == RP_OK && rp_buf_putc(b, e) == RP_OK;
}

static json_t *py_string(cur *c)
{
    char q = *c->p;
    bool triple = c->end - c->p >= 3 && c->p[1] == q && c->p[2] == q;
    c->p += triple ? 3 : 1;
    rp_buf b = {0};
    json_t *out = NULL;
    while (c->p < c->end) {
        char ch = *c->p;
        if (ch == q && (!triple || (c->end - c->p >= 3 && c->p[1] == q && c->p[2] == q))) {
            c->p += triple ? 3 : 1;
            out = json_stringn(b.data ? b.data : "", b.len);
            break;
        }
        if (ch == '\n' && !triple) break;
        c->p++;
        if (ch == '\\') {
            if (c->p == c->end || !escape_char(c, &b)) break;
        } else if (rp_buf_putc(&b, ch) != RP_OK) {
            break;
        }
    }
    rp_buf_deinit(&b);
    return out;
}

/* int or float, JSON-style plus a leading '+'; *ok false when no number is here. */
static json_t *number(cur *c, const char *stop)
{
    const char *s = c->p;
    if (s < c->end && (*s == '+' || *s == '-')) s++;
    const char *e = s;
    bool is_float = false;
    while (e < c->end && ((*e >= '0' && *e <= '9') || *e == '.' || *e == 'e' || *e == 'E' ||
                          ((*e == '+' || *e == '-') && (e[-1] == 'e' || e[-1] == 'E')))) {
        if (*e == '.' || *e == 'e' || *e == 'E') is_float = true;
        e++;
    }
    if (e == s || (e < c->end && !strchr(stop, *e) && (unsigned char)*e > ' ')) return NULL;
    char tmp[64];
    size_t n = (size_t)(e - c->p);
    if (n >= sizeof tmp) return NULL;
    memcpy(tmp, c->p, n);
    tmp[n] = '\0';
    char *te;
    json_t *v = NULL;
    if (!is_float) {
        long long ll = strtoll(tmp, &te, 10);
        if (*te == '\0') v = json_integer(ll);
    }
    if (!v) {
        double d = strtod(tmp, &te);
        if (*te == '\0') v = json_real(d);
    }
    if (v) c->p = e;
    return v;
}

static json_t *py_value(cur *c);

/* Items up to `close`; a dict when is_dict. */
static json_t *py_container(cur *c, char close, bool is_dict)
{
    c->p++;
    json_t *out = is_dict ? json_object() : json_array();
    while (out) {
        if (eat(c, close)) return out;
        json_t *k = py_value(c);
        if (!k) break;
        if (is_dict) {
            json_t *v = eat(c, ':') ? py_value(c) : NULL;
            char num[32] = "";
            if (json_is_integer(k))
                snprintf(num, sizeof num, "%lld", (long long)json_integer_value(k));
            const char *ks = json_is_string(k) ? json_string_value(k) : num[0] ? num : NULL;
            int rc = v && ks ? json_object_set_new(out, ks, v) : (json_decref(v), -1);
            json_decref(k);
            if (rc != 0) break;
        } else if (json_array_append_new(out, k) != 0) {
            break;
        }
        if (!eat(c, ',')) {
            if (eat(c, close)) return out;
            break;
        }
    }
    json_decref(out);
    return NULL;
}

static json_t *py_value(cur *c)
{
    skip_ws(c);
    if (c->p == c->end || ++c->depth > MAX_DEPTH) return NULL;
    json_t *v = NULL;
    char ch = *c->p;
    if (ch == '\'' || ch == '"')
        v = py_string(c);
    else if (ch == '[')
        v = py_container(c, ']', false);
    else if (ch == '(')
        v = py_container(c, ')', false);
    else if (ch == '{')
        v = py_container(c, '}', true);
    else if (is_ident(ch, true)) {
        static const struct {
            const char *word;
            int kind;
        } words[] = {
            {"True", 1}, {"true", 1}, {"False", 2}, {"false", 2}, {"None", 3}, {"null", 3},
        };
        const char *e = c->p;
        while (e < c->end && is_ident(*e, false))
            e++;
        for (size_t i = 0; i < RP_ARRAY_LEN(words); i++)
            if ((size_t)(e - c->p) == strlen(words[i].word) &&
                memcmp(c->p, words[i].word, (size_t)(e - c->p)) == 0) {
                v = words[i].kind == 1   ? json_true()
                    : words[i].kind == 2 ? json_false()
                                         : json_null();
                c->p = e;
            }
    } else {
        v = number(c, ",)]}:");
    }
    c->depth--;
    return v;
}

json_t *rp_py_literal(const char *s, size_t n)
{
    cur c = {s, s + n, 0};
    json_t *v = py_value(&c);
    skip_ws(&c);
    if (v && c.p != c.end) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* NAME(k=v, ...) at the cursor. */
static rp_status py_call(cur *c, rp_calls *out)
{
    skip_ws(c);
    const char *ns = c->p;
    if (c->p == c->end || !is_ident(*c->p, true)) return RP_ERR_INVALID;
    while (c->p < c->end && is_ident(*c->p, false))
        c->p++;
    const char *ne = c->p;
    if (!eat(c, '(')) return RP_ERR_INVALID;
    json_t *args = json_object();
    if (!args) return RP_ERR_NOMEM;
    rp_status st = RP_ERR_INVALID;
    for (;;) {
        if (eat(c, ')')) {
            st = RP_OK;
            break;
        }
        skip_ws(c);
        const char *ks = c->p;
        while (c->p < c->end && is_ident(*c->p, c->p == ks))
            c->p++;
        const char *ke = c->p;
        if (ks == ke || !eat(c, '=')) break;
        json_t *v = py_value(c);
        char *key = rp_strndup(ks, (size_t)(ke - ks));
        int rc = v && key ? json_object_set_new(args, key, v) : (json_decref(v), -1);
        rp_free(key);
        if (rc != 0) break;
        if (!eat(c, ',')) {
            st = eat(c, ')') ? RP_OK : RP_ERR_INVALID;
            break;
        }
    }
    if (st != RP_OK) {
        json_decref(args);
        return st;
    }
    return rp_calls_push(out, ns, (size_t)(ne - ns), args);
}

rp_status rp_body_pythonic(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    cur c = {s, s + n, 0};
    size_t n0 = out->n;
    bool bracket = eat(&c, '[');
    rp_status st = RP_OK;
    for (;;) {
        if (bracket && eat(&c, ']')) break;
        if ((st = py_call(&c, out)) != RP_OK) break;
        if (eat(&c, ',')) continue;
        if (bracket && !eat(&c, ']')) st = RP_ERR_INVALID;
        break;
    }
    skip_ws(&c);
    if (st == RP_OK && (c.p != c.end || out->n == n0)) st = RP_ERR_INVALID;
    if (st != RP_OK) rp_calls_truncate(out, n0);
    return st;
}

/* ---- Gemma 4 ---- */

static json_t *gemma_value(cur *c);

/* A key: <|"|>text<|"|> or bare text up to ':'. */
static char *gemma_key(cur *c)
{
    skip_ws(c);
    if (rp_has_prefix(c->p, c->end, GEMMA_Q)) {
        const char *s = c->p + strlen(GEMMA_Q), *e = rp_find(s, c->end, GEMMA_Q);
        if (!e) return NULL;
        c->p = e + strlen(GEMMA_Q);
        return rp_strndup(s, (size_t)(e - s));
    }
    const char *s = c->p;
    while (c->p < c->end && *c->p != ':' && *c->p != ',' && *c->p != '}' && *c->p != '{')
        c->p++;
    const char *e = c->p;
    while (e > s && (unsigned char)e[-1] <= ' ')
        e--;
    return e > s ? rp_strndup(s, (size_t)(e - s)) : NULL;
}

static json_t *gemma_container(cur *c, bool is_dict)
{
    char close = is_dict ? '}' : ']';
    c->p++;
    json_t *out = is_dict ? json_object() : json_array();
    while (out) {
        if (eat(c, close)) return out;
        int rc = -1;
        if (is_dict) {
            char *k = gemma_key(c);
            json_t *v = k && eat(c, ':') ? gemma_value(c) : NULL;
            rc = v ? json_object_set_new(out, k, v) : -1;
            rp_free(k);
        } else {
            json_t *v = gemma_value(c);
            rc = v ? json_array_append_new(out, v) : -1;
        }
        if (rc != 0) break;
        if (!eat(c, ',')) {
            if (eat(c, close)) return out;
            break;
        }
    }
    json_decref(out);
    return NULL;
}

static json_t *gemma_value(cur *c)
{
    skip_ws(c);
    if (c->p == c->end || ++c->depth > MAX_DEPTH) return NULL;
    json_t *v = NULL;
    if (rp_has_prefix(c->p, c->end, GEMMA_Q)) {
        const char *s = c->p + strlen(GEMMA_Q), *e = rp_find(s, c->end, GEMMA_Q);
        if (e) {
            v = json_stringn(s, (size_t)(e - s));
            c->p = e + strlen(GEMMA_Q);
        }
    } else if (*c->p == '{' || *c->p == '[') {
        v = gemma_container(c, *c->p == '{');
    } else { /* bare token: true/false/null/number, else text */
        const char *s = c->p;
        while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']')
            c->p++;
        const char *e = c->p;
        while (e > s && (unsigned char)e[-1] <= ' ')
            e--;
        json_error_t err;
        size_t n = (size_t)(e - s);
        if (n == 4 && memcmp(s, "None", 4) == 0) /* the template prints Python's None/True */
            v = json_null();
        else if (n == 4 && memcmp(s, "True", 4) == 0)
            v = json_true();
        else if (n == 5 && memcmp(s, "False", 5) == 0)
            v = json_false();
        else if (e > s && !(v = json_loadb(s, n, JSON_DECODE_ANY, &err)))
            v = json_stringn(s, n);
    }
    c->depth--;
    return v;
}

rp_status rp_body_gemma4(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out)
{
    cur c = {s, s + n, 0};
    size_t n0 = out->n;
    rp_status st = RP_OK;
    for (;;) {
        skip_ws(&c);
        if (c.p == c.end) break;
        st = RP_ERR_INVALID;
        if (!rp_has_prefix(c.p, c.end, "call:")) break;
        c.p += 5;
        const char *ns = c.p;
        while (c.p < c.end && *c.p != '{')
            c.p++;
        const char *ne = c.p;
        while (ne > ns && (unsigned char)ne[-1] <= ' ')
            ne--;
        if (c.p == c.end || ne == ns) break;
        json_t *args = gemma_container(&c, true);
        if (!args) break;
        if ((st = rp_calls_push(out, ns, (size_t)(ne - ns), args)) != RP_OK) break;
    }
    if (st == RP_OK && out->n == n0) st = RP_ERR_INVALID;
    if (st != RP_OK) rp_calls_truncate(out, n0);
    return st;
}
