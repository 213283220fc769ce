/* chat/jinja_value.c - Python-like values for the Jinja interpreter: containers, equality and
 * ordering, str()/repr() printing, json.dumps and conversion from jansson.
 */
#include "chat/jinja_value.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

int jv_str_dup(rp_arena *a, const char *s, size_t n, jv *out)
{
    if (n > UINT32_MAX)
        return -1;
    char *p = rp_arena_alloc(a, n + 1);
    if (!p)
        return -1;
    if (n)
        jv_copy(p, s, n);
    *out = jv_str(p, n);
    return 0;
}

int jv_list_new(rp_arena *a, size_t cap, jv *out)
{
    if (cap > ((size_t)1 << 28)) /* also keeps sizeof(jv) * cap from overflowing */
        return -1;
    jv_list *l = RP_ARENA_NEW(a, jv_list, 1);
    if (!l)
        return -1;
    if (cap) {
        l->items = RP_ARENA_NEW(a, jv, cap);
        if (!l->items)
            return -1;
        l->cap = cap;
    }
    *out = (jv){.type = JV_LIST, .u.l = l};
    return 0;
}

int jv_dict_new(rp_arena *a, size_t cap, jv *out)
{
    if (cap > ((size_t)1 << 28))
        return -1;
    jv_dict *d = RP_ARENA_NEW(a, jv_dict, 1);
    if (!d)
        return -1;
    if (cap) {
        d->keys = RP_ARENA_NEW(a, jv, cap);
        d->vals = RP_ARENA_NEW(a, jv, cap);
        if (!d->keys || !d->vals)
            return -1;
        d->cap = cap;
    }
    *out = (jv){.type = JV_DICT, .u.d = d};
    return 0;
}

int jv_list_push(rp_arena *a, jv_list *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jv *items = RP_ARENA_NEW(a, jv, cap);
        if (!items)
            return -1;
        if (l->n)
            jv_copy(items, l->items, l->n * sizeof(jv));
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = v;
    return 0;
}

jv *jv_dict_get(const jv_dict *d, jv key)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

jv *jv_dict_get_str(const jv_dict *d, const char *s, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].type == JV_STR && d->keys[i].n == n && memcmp(d->keys[i].u.s, s, n) == 0)
            return &d->vals[i];
    return NULL;
}

int jv_dict_set(rp_arena *a, jv_dict *d, jv key, jv val)
{
    jv *slot = jv_dict_get(d, key);
    if (slot) {
        *slot = val;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *keys = RP_ARENA_NEW(a, jv, cap);
        jv *vals = RP_ARENA_NEW(a, jv, cap);
        if (!keys || !vals)
            return -1;
        if (d->n) {
            jv_copy(keys, d->keys, d->n * sizeof(jv));
            jv_copy(vals, d->vals, d->n * sizeof(jv));
        }
        d->keys = keys;
        d->vals = vals;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return 0;
}

bool jv_truthy(jv v)
{
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.n > 0;
    case JV_LIST:
        return (v.flags & JV_F_GEN) || v.u.l->n > 0;
    case JV_DICT:
        return v.u.d->n > 0;
    default:
        return true;
    }
}

bool jv_equal(jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT)
            return a.u.i == b.u.i;
        return jv_num(a) == jv_num(b);
    }
    if (a.type != b.type)
        return false;
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.n == b.n && (a.n == 0 || memcmp(a.u.s, b.u.s, a.n) == 0);
    case JV_LIST:
        if ((a.flags | b.flags) & JV_F_GEN) /* iterators compare by identity */
            return a.u.l == b.u.l;
        if ((a.flags ^ b.flags) & (JV_F_RANGE | JV_F_VIEW)) /* range(2) != [0, 1] */
            return false;
        if ((a.flags & JV_F_TUPLE) != (b.flags & JV_F_TUPLE) || a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->items[i], b.u.l->items[i]))
                return false;
        return true;
    case JV_DICT:
    case JV_NS:
        if (a.u.d == b.u.d)
            return true;
        if (a.type == JV_NS || a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jv_dict_get(b.u.d, a.u.d->keys[i]);
            if (!o || !jv_equal(a.u.d->vals[i], *o))
                return false;
        }
        return true;
    default:
        return a.u.p == b.u.p;
    }
}

int jv_compare(jv a, jv b, int *cmp)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT)
            *cmp = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        else
            *cmp = jv_num(a) < jv_num(b) ? -1 : jv_num(a) > jv_num(b);
        return 0;
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        size_t n = a.n < b.n ? a.n : b.n;
        int c = n ? memcmp(a.u.s, b.u.s, n) : 0;
        *cmp = c ? (c < 0 ? -1 : 1) : (a.n < b.n ? -1 : a.n > b.n);
        return 0;
    }
    if (a.type == JV_LIST && b.type == JV_LIST && !((a.flags | b.flags) & (JV_F_GEN | JV_F_RANGE | JV_F_VIEW)) &&
        (a.flags & JV_F_TUPLE) == (b.flags & JV_F_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->items[i], b.u.l->items[i]))
                continue;
            return jv_compare(a.u.l->items[i], b.u.l->items[i], cmp);
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return -1;
}

const char *jv_type_name(jv v)
{
    switch (v.type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        if (v.flags & JV_F_GEN)
            return "generator";
        if (v.flags & JV_F_RANGE)
            return "range";
        switch (v.flags & JV_F_VIEW) {
        case JV_F_KEYS: return "dict_keys";
        case JV_F_VALUES: return "dict_values";
        case JV_F_VIEW: return "dict_items";
        }
        return (v.flags & JV_F_TUPLE) ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    case JV_METHOD: return "method";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

/* ---- printing ---------------------------------------------------------------------------- */

int jv_write_float(rp_buf *b, double f)
{
    if (isnan(f))
        return rp_buf_puts(b, "nan") ? -1 : 0;
    if (isinf(f))
        return rp_buf_puts(b, f < 0 ? "-inf" : "inf") ? -1 : 0;
    /* Shortest digits that round-trip, then Python's repr layout. */
    char tmp[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", prec, f);
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1;
    char out[64];
    int o = 0;
    if (neg)
        out[o++] = '-';
    if (decpt > 16 || decpt < -3) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+',
                      exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -decpt; i++)
            out[o++] = '0';
        for (int i = 0; i < nd; i++)
            out[o++] = digits[i];
    } else {
        for (int i = 0; i < decpt; i++)
            out[o++] = i < nd ? digits[i] : '0';
        out[o++] = '.';
        if (nd > decpt)
            for (int i = decpt; i < nd; i++)
                out[o++] = digits[i];
        else
            out[o++] = '0';
    }
    return rp_buf_append(b, out, (size_t)o) ? -1 : 0;
}

static int write_str_repr(rp_buf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (rp_buf_putc(b, q))
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc = 0;
        if (c == (unsigned char)q || c == '\\') {
            char e[2] = {'\\', (char)c};
            rc = rp_buf_append(b, e, 2);
        } else if (c == '\n') {
            rc = rp_buf_puts(b, "\\n");
        } else if (c == '\r') {
            rc = rp_buf_puts(b, "\\r");
        } else if (c == '\t') {
            rc = rp_buf_puts(b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            rc = rp_buf_printf(b, "\\x%02x", c);
        } else if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
                   (unsigned char)s[i + 1] < 0xa0) { /* U+0080..U+009F are not printable */
            rc = rp_buf_printf(b, "\\x%02x", (unsigned char)s[i + 1]);
            i++;
        } else {
            rc = rp_buf_putc(b, (char)c);
        }
        if (rc)
            return -1;
    }
    return rp_buf_putc(b, q) ? -1 : 0;
}

/* depth bounds self-referencing namespaces ({% set ns.me = ns %}) and deep nesting */
static int write_repr(rp_buf *b, jv v, int depth)
{
    if (depth > 200)
        return rp_buf_puts(b, "...") ? -1 : 0;
    switch (v.type) {
    case JV_STR:
        return write_str_repr(b, v.u.s, v.n);
    case JV_LIST: {
        if (v.flags & JV_F_GEN)
            return rp_buf_puts(b, "<generator object>") ? -1 : 0;
        if (v.flags & JV_F_RANGE) {
            const jv_list *l = v.u.l;
            if (l->range_step == 1)
                return rp_buf_printf(b, "range(%" PRId64 ", %" PRId64 ")", l->range_start, l->range_stop) ? -1 : 0;
            return rp_buf_printf(b, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")", l->range_start,
                                 l->range_stop, l->range_step) ? -1 : 0;
        }
        if (v.flags & JV_F_VIEW) { /* dict_keys([...]) */
            jv plain = v;
            plain.flags = 0;
            if (rp_buf_puts(b, jv_type_name(v)) || rp_buf_putc(b, '(') || write_repr(b, plain, depth + 1))
                return -1;
            return rp_buf_putc(b, ')') ? -1 : 0;
        }
        bool tup = v.flags & JV_F_TUPLE;
        if (rp_buf_putc(b, tup ? '(' : '['))
            return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && rp_buf_puts(b, ", "))
                return -1;
            if (write_repr(b, v.u.l->items[i], depth + 1))
                return -1;
        }
        if (tup && v.u.l->n == 1 && rp_buf_putc(b, ','))
            return -1;
        return rp_buf_putc(b, tup ? ')' : ']') ? -1 : 0;
    }
    case JV_DICT:
    case JV_NS: {
        if (v.type == JV_NS && rp_buf_puts(b, "<Namespace "))
            return -1;
        if (rp_buf_putc(b, '{'))
            return -1;
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i && rp_buf_puts(b, ", "))
                return -1;
            if (write_repr(b, v.u.d->keys[i], depth + 1) || rp_buf_puts(b, ": ") ||
                write_repr(b, v.u.d->vals[i], depth + 1))
                return -1;
        }
        if (rp_buf_putc(b, '}'))
            return -1;
        return v.type == JV_NS && rp_buf_putc(b, '>') ? -1 : 0;
    }
    case JV_UNDEF:
        return rp_buf_puts(b, "Undefined") ? -1 : 0;
    default:
        return jv_write_str(b, v);
    }
}

int jv_write_repr(rp_buf *b, jv v)
{
    return write_repr(b, v, 0);
}

int jv_write_str(rp_buf *b, jv v)
{
    switch (v.type) {
    case JV_UNDEF:
        return 0;
    case JV_NONE:
        return rp_buf_puts(b, "None") ? -1 : 0;
    case JV_BOOL:
        return rp_buf_puts(b, v.u.i ? "True" : "False") ? -1 : 0;
    case JV_INT:
        return rp_buf_printf(b, "%" PRId64, v.u.i) ? -1 : 0;
    case JV_FLOAT:
        return jv_write_float(b, v.u.f);
    case JV_STR:
        return rp_buf_append(b, v.u.s, v.n) ? -1 : 0;
    case JV_LIST:
        return jv_write_repr(b, v);
    case JV_DICT:
    case JV_NS:
        return jv_write_repr(b, v);
    case JV_FUNC:
        return rp_buf_puts(b, "<built-in function>") ? -1 : 0;
    case JV_MACRO:
        return rp_buf_puts(b, "<Macro>") ? -1 : 0;
    case JV_METHOD:
        return rp_buf_puts(b, "<built-in method>") ? -1 : 0;
    case JV_LOOP:
        return rp_buf_puts(b, "<LoopContext>") ? -1 : 0;
    }
    return 0;
}

int jv_to_str(rp_arena *a, jv v, jv *out)
{
    if (v.type == JV_STR) {
        *out = v;
        return 0;
    }
    if (v.type == JV_UNDEF) {
        *out = jv_str("", 0);
        return 0;
    }
    char small[32];
    rp_buf b = {0};
    if (jv_write_str(&b, v)) {
        rp_buf_deinit(&b);
        return -1;
    }
    (void)small;
    int rc = jv_str_dup(a, b.data ? b.data : "", b.len, out);
    rp_buf_deinit(&b);
    return rc;
}

/* ---- JSON -------------------------------------------------------------------------------- */

static int json_str(rp_buf *b, const char *s, size_t n)
{
    if (rp_buf_putc(b, '"'))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (rp_buf_append(b, s + run, i - run))
            return -1;
        run = i + 1;
        int rc;
        switch (c) {
        case '"': rc = rp_buf_puts(b, "\\\""); break;
        case '\\': rc = rp_buf_puts(b, "\\\\"); break;
        case '\n': rc = rp_buf_puts(b, "\\n"); break;
        case '\r': rc = rp_buf_puts(b, "\\r"); break;
        case '\t': rc = rp_buf_puts(b, "\\t"); break;
        case '\b': rc = rp_buf_puts(b, "\\b"); break;
        case '\f': rc = rp_buf_puts(b, "\\f"); break;
        default: rc = rp_buf_printf(b, "\\u%04x", c); break;
        }
        if (rc)
            return -1;
    }
    if (rp_buf_append(b, s + run, n - run))
        return -1;
    return rp_buf_putc(b, '"') ? -1 : 0;
}

typedef struct json_opts {
    const char *indent, *item_sep, *key_sep;
    bool sort_keys;
    const char **bad_type;
} json_opts;

static int json_newline(rp_buf *b, const json_opts *o, int level)
{
    if (!o->indent)
        return 0;
    if (rp_buf_putc(b, '\n'))
        return -1;
    for (int i = 0; i < level; i++)
        if (rp_buf_puts(b, o->indent))
            return -1;
    return 0;
}

static int json_float(rp_buf *b, double f)
{
    if (isnan(f))
        return rp_buf_puts(b, "NaN") ? -1 : 0;
    if (isinf(f))
        return rp_buf_puts(b, f < 0 ? "-Infinity" : "Infinity") ? -1 : 0;
    return jv_write_float(b, f);
}

/* A dict key as json.dumps writes it: str as is, numbers/bools/None converted. */
static int json_key(rp_buf *b, jv k, const json_opts *o)
{
    switch (k.type) {
    case JV_STR: return json_str(b, k.u.s, k.n);
    case JV_INT: return rp_buf_printf(b, "\"%" PRId64 "\"", k.u.i) ? -1 : 0;
    case JV_BOOL: return rp_buf_puts(b, k.u.i ? "\"true\"" : "\"false\"") ? -1 : 0;
    case JV_NONE: return rp_buf_puts(b, "\"null\"") ? -1 : 0;
    case JV_FLOAT:
        if (rp_buf_putc(b, '"') || json_float(b, k.u.f))
            return -1;
        return rp_buf_putc(b, '"') ? -1 : 0;
    default:
        *o->bad_type = jv_type_name(k);
        return -2;
    }
}

static int json_value(rp_buf *b, jv v, const json_opts *o, int level);

static int json_dict(rp_buf *b, const jv_dict *d, const json_opts *o, int level)
{
    if (d->n == 0)
        return rp_buf_puts(b, "{}") ? -1 : 0;
    size_t order_small[32];
    size_t *order = order_small;
    if (d->n > 32) {
        order = rp_alloc(d->n * sizeof(size_t));
        if (!order)
            return -1;
    }
    for (size_t i = 0; i < d->n; i++)
        order[i] = i;
    int rc = 0;
    if (o->sort_keys) { /* insertion sort keeps it stable and simple; dicts here are small */
        for (size_t i = 1; i < d->n && rc == 0; i++) {
            size_t x = order[i], j = i;
            while (j > 0) {
                int c;
                if (jv_compare(d->keys[order[j - 1]], d->keys[x], &c)) {
                    rc = -3;
                    break;
                }
                if (c <= 0)
                    break;
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
    }
    if (rc == 0)
        rc = rp_buf_putc(b, '{') ? -1 : 0;
    for (size_t i = 0; i < d->n && rc == 0; i++) {
        if (i && rp_buf_puts(b, o->item_sep)) {
            rc = -1;
            break;
        }
        if (json_newline(b, o, level + 1)) {
            rc = -1;
            break;
        }
        rc = json_key(b, d->keys[order[i]], o);
        if (rc == 0 && rp_buf_puts(b, o->key_sep))
            rc = -1;
        if (rc == 0)
            rc = json_value(b, d->vals[order[i]], o, level + 1);
    }
    if (rc == 0 && (json_newline(b, o, level) || rp_buf_putc(b, '}')))
        rc = -1;
    if (order != order_small)
        rp_free(order);
    return rc;
}

static int json_value(rp_buf *b, jv v, const json_opts *o, int level)
{
    if (level > 1000) {
        *o->bad_type = "nesting deeper than 1000 levels";
        return -2;
    }
    switch (v.type) {
    case JV_NONE: return rp_buf_puts(b, "null") ? -1 : 0;
    case JV_BOOL: return rp_buf_puts(b, v.u.i ? "true" : "false") ? -1 : 0;
    case JV_INT: return rp_buf_printf(b, "%" PRId64, v.u.i) ? -1 : 0;
    case JV_FLOAT: return json_float(b, v.u.f);
    case JV_STR: return json_str(b, v.u.s, v.n);
    case JV_LIST: {
        if (v.flags & (JV_F_GEN | JV_F_RANGE | JV_F_VIEW)) {
            *o->bad_type = jv_type_name(v);
            return -2;
        }
        if (v.u.l->n == 0)
            return rp_buf_puts(b, "[]") ? -1 : 0;
        if (rp_buf_putc(b, '['))
            return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && rp_buf_puts(b, o->item_sep))
                return -1;
            if (json_newline(b, o, level + 1))
                return -1;
            int rc = json_value(b, v.u.l->items[i], o, level + 1);
            if (rc)
                return rc;
        }
        if (json_newline(b, o, level))
            return -1;
        return rp_buf_putc(b, ']') ? -1 : 0;
    }
    case JV_DICT:
        return json_dict(b, v.u.d, o, level);
    default:
        *o->bad_type = jv_type_name(v);
        return -2;
    }
}

int jv_write_json(rp_buf *b, jv v, const char *indent, const char *item_sep, const char *key_sep,
                  bool sort_keys, const char **bad_type)
{
    json_opts o = {
        .indent = indent,
        .item_sep = item_sep ? item_sep : (indent ? "," : ", "),
        .key_sep = key_sep ? key_sep : ": ",
        .sort_keys = sort_keys,
        .bad_type = bad_type,
    };
    return json_value(b, v, &o, 0);
}

int jv_from_json(rp_arena *a, const json_t *j, jv *out)
{
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_TRUE: *out = jv_bool(true); return 0;
    case JSON_FALSE: *out = jv_bool(false); return 0;
    case JSON_INTEGER: *out = jv_int(json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_STRING: return jv_str_dup(a, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (jv_list_new(a, n, out))
            return -1;
        for (size_t i = 0; i < n; i++) {
            jv item;
            if (jv_from_json(a, json_array_get(j, i), &item))
                return -1;
            out->u.l->items[out->u.l->n++] = item;
        }
        return 0;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        if (jv_dict_new(a, n, out))
            return -1;
        const char *key;
        size_t klen;
        json_t *val;
        jv_dict *d = out->u.d;
        json_object_keylen_foreach((json_t *)j, key, klen, val)
        {
            jv k, v;
            if (jv_str_dup(a, key, klen, &k) || jv_from_json(a, val, &v))
                return -1;
            d->keys[d->n] = k;
            d->vals[d->n] = v;
            d->n++;
        }
        return 0;
    }
    }
    *out = jv_none();
    return 0;
}
