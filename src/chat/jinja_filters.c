/* chat/jinja_filters.c - Jinja2's built-in filters and tests, with transformers' tojson.
 *
 * Each filter takes the value, binds its arguments by Jinja2's parameter names (so keyword
 * calls such as tojson(indent=2) and map(attribute='name') work) and follows the Python
 * implementation in jinja2/filters.py and jinja2/tests.py, including how it treats Undefined.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/jinja_eval.h"

typedef int (*filter_fn)(jrender *r, jv v, const jargs *args, jv *out);

#define BIND(fname, ...)                                                                       \
    static const char *const names_[] = {__VA_ARGS__};                                         \
    jv a[RP_ARRAY_LEN(names_)];                                                                \
    unsigned present;                                                                          \
    if (jr_bind(r, fname, args, names_, RP_ARRAY_LEN(names_), a, &present))                    \
        return -1

static int no_args(jrender *r, const char *fname, const jargs *args)
{
    if (args->n_pos || args->n_kw)
        return jr_fail(r, "TypeError: %s() takes no arguments", fname);
    return 0;
}

static int to_str(jrender *r, jv v, jv *out)
{
    if (v.flags & JV_F_UNSAFE)
        return jr_undefined_error(r, v);
    return jr_str(r, v, out);
}

/* ---- attribute paths (make_attrgetter) --------------------------------------------------- */

static int get_path(jrender *r, jv obj, jv attr, jv *out)
{
    if (attr.type == JV_INT) {
        return jr_getitem(r, obj, attr, out);
    }
    if (attr.type != JV_STR)
        return jr_getitem(r, obj, attr, out);
    const char *s = attr.u.s, *e = s + attr.n;
    while (1) {
        const char *dot = memchr(s, '.', (size_t)(e - s));
        const char *pe = dot ? dot : e;
        bool digits = pe > s;
        for (const char *q = s; q < pe; q++)
            if (!isdigit((unsigned char)*q))
                digits = false;
        jv key = digits ? jv_int(strtoll(s, NULL, 10)) : jv_str(s, (size_t)(pe - s));
        if (jr_getitem(r, obj, key, &obj))
            return -1;
        if (!dot)
            break;
        s = dot + 1;
    }
    *out = obj;
    return 0;
}

static jv lower_key(jrender *r, jv v, bool case_sensitive)
{
    if (case_sensitive || v.type != JV_STR)
        return v;
    jv o;
    return rp_jinja_str_case(r, v, 'l', &o) ? v : o;
}

/* ---- stable sort ------------------------------------------------------------------------- */

typedef struct kv {
    jv key, val;
} kv;

/* eq_first: keys are compared as one-element lists, as do_sort's multi-attribute getter makes
 * them: equal keys (Undefined == Undefined) never reach "<". */
static int merge_sort(jrender *r, kv *a, kv *tmp, size_t n, bool reverse, bool eq_first)
{
    if (n < 2)
        return 0;
    size_t h = n / 2;
    if (merge_sort(r, a, tmp, h, reverse, eq_first) || merge_sort(r, a + h, tmp, n - h, reverse, eq_first))
        return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = 0;
        if (!(eq_first && jv_equal(a[j].key, a[i].key)) && jv_compare(a[j].key, a[i].key, &c))
            return jr_fail(r, "TypeError: '<' not supported between instances of '%s' and '%s'",
                           jv_type_name(a[j].key), jv_type_name(a[i].key));
        if (reverse ? c > 0 : c < 0)
            tmp[k++] = a[j++];
        else
            tmp[k++] = a[i++];
    }
    while (i < h)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    jv_copy(a, tmp, n * sizeof(kv));
    return 0;
}

static int sort_kv(jrender *r, kv *items, size_t n, bool reverse, bool eq_first)
{
    kv *tmp = RP_ARENA_NEW(r->a, kv, n ? n : 1);
    if (!tmp)
        return jr_nomem(r);
    return merge_sort(r, items, tmp, n, reverse, eq_first);
}

static int list_of(jrender *r, jv v, jv_list **out)
{
    return jr_iter_list(r, v, out);
}

/* For filters that Jinja2 writes as generators (map, select, unique, batch, slice, items):
 * when v cannot be iterated the error comes only when the result is consumed. Returns true
 * when *out is such a deferred-error iterator (the filter returns it as is). */
static bool lazy_fail(jrender *r, jv v, const char *msg, jv *out)
{
    bool iterable = v.type == JV_STR || v.type == JV_LIST || v.type == JV_DICT ||
                    (v.type == JV_UNDEF && !(v.flags & JV_F_UNSAFE));
    if (!msg && v.type == JV_LIST && (v.flags & JV_F_GEN) && v.u.l->lazy_error)
        msg = v.u.l->lazy_error; /* a generator over a failing generator fails when consumed */
    else if (iterable && !msg)
        return false;
    char *m = rp_arena_alloc(r->a, 96);
    if (jv_list_new(r->a, 0, out) || !m)
        return false; /* out of memory: let the eager path report it */
    if (msg)
        snprintf(m, 96, "%s", msg);
    else
        snprintf(m, 96, "TypeError: '%s' object is not iterable", jv_type_name(v));
    out->flags = JV_F_GEN;
    out->u.l->lazy_error = m;
    return true;
}

static int new_list(jrender *r, size_t cap, jv *out)
{
    return jv_list_new(r->a, cap, out) ? jr_nomem(r) : 0;
}

/* ---- filters ----------------------------------------------------------------------------- */

static int f_tojson(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    char ind[64];
    const char *indent = NULL;
    if ((present & 2) && a[1].type != JV_NONE) {
        if (a[1].type == JV_INT) {
            int64_t n = a[1].u.i < 0 ? 0 : a[1].u.i > 60 ? 60 : a[1].u.i;
            memset(ind, ' ', (size_t)n);
            ind[n] = 0;
            indent = ind;
        } else if (a[1].type == JV_STR) {
            char *s = rp_arena_strndup(r->a, a[1].u.s, a[1].n);
            if (!s)
                return jr_nomem(r);
            indent = s;
        } else {
            return jr_fail(r, "TypeError: indent must be an int or a str");
        }
    }
    const char *item_sep = NULL, *key_sep = NULL;
    if ((present & 4) && a[2].type != JV_NONE) {
        if (a[2].type != JV_LIST || a[2].u.l->n != 2 || a[2].u.l->items[0].type != JV_STR ||
            a[2].u.l->items[1].type != JV_STR)
            return jr_fail(r, "ValueError: separators must be a (item_separator, key_separator) pair");
        item_sep = rp_arena_strndup(r->a, a[2].u.l->items[0].u.s, a[2].u.l->items[0].n);
        key_sep = rp_arena_strndup(r->a, a[2].u.l->items[1].u.s, a[2].u.l->items[1].n);
        if (!item_sep || !key_sep)
            return jr_nomem(r);
    }
    rp_buf b = {0};
    const char *bad = NULL;
    int rc = jv_write_json(&b, v, indent, item_sep, key_sep, (present & 8) && jv_truthy(a[3]), &bad);
    if (rc == 0 && (present & 1) && jv_truthy(a[0])) {
        /* ensure_ascii: escape everything above 0x7f as \uXXXX (surrogate pairs beyond BMP) */
        rp_buf e = {0};
        for (size_t i = 0; i < b.len && rc == 0;) {
            unsigned char c = (unsigned char)b.data[i];
            if (c < 0x80) {
                rc = rp_buf_putc(&e, (char)c);
                i++;
                continue;
            }
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)b.data + i,
                                                  (utf8proc_ssize_t)(b.len - i), &cp);
            if (k <= 0) {
                cp = c;
                k = 1;
            }
            if (cp >= 0x10000) {
                cp -= 0x10000;
                rc = rp_buf_printf(&e, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                rc = rp_buf_printf(&e, "\\u%04x", cp);
            }
            i += (size_t)k;
        }
        rp_buf_deinit(&b);
        b = e;
    }
    if (rc == -2) {
        rp_buf_deinit(&b);
        return jr_fail(r, "TypeError: Object of type %s is not JSON serializable", bad ? bad : "object");
    }
    if (rc == -3) {
        rp_buf_deinit(&b);
        return jr_fail(r, "TypeError: '<' not supported between dict keys of different types");
    }
    if (rc) {
        rp_buf_deinit(&b);
        return jr_nomem(r);
    }
    rc = jv_str_dup(r->a, b.data ? b.data : "", b.len, out);
    rp_buf_deinit(&b);
    return rc ? jr_nomem(r) : 0;
}

static int f_default(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("default", "default_value", "boolean");
    jv def = (present & 1) ? a[0] : jv_str("", 0);
    *out = (v.type == JV_UNDEF || ((present & 2) && jv_truthy(a[1]) && !jv_truthy(v))) ? def : v;
    return 0;
}

static int f_length(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "length", args))
        return -1;
    switch (v.type) {
    case JV_UNDEF: *out = jv_int(0); return (v.flags & JV_F_UNSAFE) ? jr_undefined_error(r, v) : 0;
    case JV_STR: *out = jv_int((int64_t)rp_jinja_utf8_len(v.u.s, v.n)); return 0;
    case JV_LIST:
        if (v.flags & JV_F_GEN)
            return jr_fail(r, "TypeError: object of type 'generator' has no len()");
        *out = jv_int((int64_t)v.u.l->n);
        return 0;
    case JV_DICT: *out = jv_int((int64_t)v.u.d->n); return 0;
    default: return jr_fail(r, "TypeError: object of type '%s' has no len()", jv_type_name(v));
    }
}

static int f_string(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "string", args))
        return -1;
    return to_str(r, v, out);
}

static int f_case(jrender *r, jv v, const jargs *args, jv *out, const char *name, int mode)
{
    if (no_args(r, name, args))
        return -1;
    jv s;
    if (to_str(r, v, &s))
        return -1;
    return rp_jinja_str_case(r, s, mode, out);
}

static int f_upper(jrender *r, jv v, const jargs *args, jv *out) { return f_case(r, v, args, out, "upper", 'u'); }
static int f_lower(jrender *r, jv v, const jargs *args, jv *out) { return f_case(r, v, args, out, "lower", 'l'); }
static int f_capitalize(jrender *r, jv v, const jargs *args, jv *out) { return f_case(r, v, args, out, "capitalize", 'c'); }

/* Jinja2's title: words start after any of "-", whitespace, "(", "{", "[", "<". */
static int f_title(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "title", args))
        return -1;
    jv s;
    if (to_str(r, v, &s))
        return -1;
    rp_buf b = {0};
    bool start = true;
    for (size_t i = 0; i < s.n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s.u.s + i, (utf8proc_ssize_t)(s.n - i), &c);
        if (k <= 0) {
            c = (unsigned char)s.u.s[i];
            k = 1;
        }
        i += (size_t)k;
        bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' ||
                   (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
                   c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
                   c == 0x202f || c == 0x205f || c == 0x3000;
        utf8proc_int32_t o = sep ? c : start ? utf8proc_toupper(c) : utf8proc_tolower(c);
        start = sep;
        utf8proc_uint8_t u[4];
        utf8proc_ssize_t nb = utf8proc_encode_char(o, u);
        if (rp_buf_append(&b, u, (size_t)nb)) {
            rp_buf_deinit(&b);
            return jr_nomem(r);
        }
    }
    int rc = jv_str_dup(r->a, b.data ? b.data : "", b.len, out);
    rp_buf_deinit(&b);
    return rc ? jr_nomem(r) : 0;
}

static int f_trim(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("trim", "chars");
    jv s;
    if (to_str(r, v, &s))
        return -1;
    return rp_jinja_str_strip(r, s, (present & 1) ? a[0] : jv_none(), 'b', out);
}

static int f_replace(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("replace", "old", "new", "count");
    jv s, o, n;
    if (to_str(r, v, &s) || to_str(r, a[0], &o) || to_str(r, a[1], &n))
        return -1;
    int64_t count = (present & 4) && a[2].type == JV_INT ? a[2].u.i : -1;
    return rp_jinja_str_replace(r, s, o, n, count, out);
}

static int f_join(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("join", "d", "attribute");
    jv sep = jv_str("", 0);
    if ((present & 1) && to_str(r, a[0], &sep))
        return -1;
    jv_list *items;
    if (list_of(r, v, &items))
        return -1;
    rp_buf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        jv it = items->items[i], s;
        if ((present & 2) && get_path(r, it, a[1], &it)) {
            rp_buf_deinit(&b);
            return -1;
        }
        if (to_str(r, it, &s)) {
            rp_buf_deinit(&b);
            return -1;
        }
        if ((i && rp_buf_append(&b, sep.u.s, sep.n)) || rp_buf_append(&b, s.u.s, s.n)) {
            rp_buf_deinit(&b);
            return jr_nomem(r);
        }
        if (b.len > r->out_limit) {
            rp_buf_deinit(&b);
            return jr_fail(r, "MemoryError: joined string too large");
        }
    }
    int rc = jv_str_dup(r->a, b.data ? b.data : "", b.len, out);
    rp_buf_deinit(&b);
    return rc ? jr_nomem(r) : 0;
}

static int f_first(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "first", args))
        return -1;
    if (v.type == JV_LIST && (v.flags & JV_F_GEN)) { /* next(iter(gen)) takes one item */
        jv_list *g = v.u.l;
        if (g->lazy_error)
            return jr_fail(r, "%s", g->lazy_error);
        *out = g->pos < g->n ? g->items[g->pos++] : jv_undef("No first item, sequence was empty.");
        return 0;
    }
    jv_list *items;
    if (list_of(r, v, &items))
        return -1;
    *out = items->n ? items->items[0] : jv_undef("No first item, sequence was empty.");
    return 0;
}

static int f_last(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "last", args))
        return -1;
    if (v.type == JV_LIST && (v.flags & JV_F_GEN)) /* last() calls reversed() */
        return jr_fail(r, "TypeError: 'generator' object is not reversible");
    jv_list *items;
    if (list_of(r, v, &items))
        return -1;
    *out = items->n ? items->items[items->n - 1] : jv_undef("No last item, sequence was empty.");
    return 0;
}

static int copy_list(jrender *r, jv_list *items, jv *out)
{
    if (new_list(r, items->n, out))
        return -1;
    jv_copy(out->u.l->items, items->items, items->n * sizeof(jv));
    out->u.l->n = items->n;
    return 0;
}

static int f_list(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "list", args))
        return -1;
    jv_list *items;
    if (list_of(r, v, &items))
        return -1;
    return copy_list(r, items, out);
}

static int f_reverse(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "reverse", args))
        return -1;
    jv_list *items;
    if (list_of(r, v, &items))
        return -1;
    if (v.type == JV_STR) {
        char *p = rp_arena_alloc(r->a, v.n + 1);
        if (!p)
            return jr_nomem(r);
        size_t o = 0;
        for (size_t i = items->n; i-- > 0;) {
            jv_copy(p + o, items->items[i].u.s, items->items[i].n);
            o += items->items[i].n;
        }
        *out = jv_str(p, o);
        return 0;
    }
    if (new_list(r, items->n, out))
        return -1;
    for (size_t i = 0; i < items->n; i++)
        out->u.l->items[i] = items->items[items->n - 1 - i];
    out->u.l->n = items->n;
    if ((v.type == JV_LIST && !(v.flags & JV_F_GEN)) || v.type == JV_DICT)
        out->flags = JV_F_GEN; /* reversed() is an iterator */
    return 0;
}

static int f_items(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "items", args))
        return -1;
    if (v.type == JV_UNDEF) { /* an empty generator */
        if (new_list(r, 0, out))
            return -1;
        out->flags = JV_F_GEN;
        return 0;
    }
    if (v.type != JV_DICT)
        return lazy_fail(r, v, "TypeError: Can only get item pairs from a mapping.", out) ? 0 : jr_nomem(r);
    static const jargs none = {0};
    if (rp_jinja_call_method(r, v, "items", &none, out))
        return -1;
    out->flags = JV_F_GEN;
    return 0;
}

static int f_dictsort(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (v.type != JV_DICT)
        return jr_fail(r, "TypeError: dictsort expects a mapping");
    bool by_value = false;
    if ((present & 2)) {
        if (a[1].type == JV_STR && a[1].n == 5 && memcmp(a[1].u.s, "value", 5) == 0)
            by_value = true;
        else if (!(a[1].type == JV_STR && a[1].n == 3 && memcmp(a[1].u.s, "key", 3) == 0))
            return jr_fail(r, "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    }
    size_t n = v.u.d->n;
    kv *items = RP_ARENA_NEW(r->a, kv, n ? n : 1);
    if (!items)
        return jr_nomem(r);
    bool cs = (present & 1) && jv_truthy(a[0]);
    for (size_t i = 0; i < n; i++) {
        jv pair;
        if (new_list(r, 2, &pair))
            return -1;
        pair.flags = JV_F_TUPLE;
        pair.u.l->items[0] = v.u.d->keys[i];
        pair.u.l->items[1] = v.u.d->vals[i];
        pair.u.l->n = 2;
        items[i].key = lower_key(r, by_value ? v.u.d->vals[i] : v.u.d->keys[i], cs);
        items[i].val = pair;
    }
    if (sort_kv(r, items, n, (present & 4) && jv_truthy(a[2]), false) || new_list(r, n, out))
        return -1;
    for (size_t i = 0; i < n; i++)
        out->u.l->items[i] = items[i].val;
    out->u.l->n = n;
    return 0;
}

static int f_sort(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("sort", "reverse", "case_sensitive", "attribute");
    jv_list *l;
    if (list_of(r, v, &l))
        return -1;
    kv *items = RP_ARENA_NEW(r->a, kv, l->n ? l->n : 1);
    if (!items)
        return jr_nomem(r);
    bool cs = (present & 2) && jv_truthy(a[1]);
    for (size_t i = 0; i < l->n; i++) {
        jv k = l->items[i];
        if ((present & 4) && a[2].type != JV_NONE && get_path(r, k, a[2], &k))
            return -1;
        items[i].key = lower_key(r, k, cs);
        items[i].val = l->items[i];
    }
    if (sort_kv(r, items, l->n, (present & 1) && jv_truthy(a[0]), true) || new_list(r, l->n, out))
        return -1;
    for (size_t i = 0; i < l->n; i++)
        out->u.l->items[i] = items[i].val;
    out->u.l->n = l->n;
    return 0;
}

static int f_unique(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("unique", "case_sensitive", "attribute");
    if (lazy_fail(r, v, NULL, out))
        return 0;
    jv_list *l;
    if (list_of(r, v, &l) || new_list(r, 0, out))
        return -1;
    jv seen;
    if (new_list(r, 0, &seen))
        return -1;
    bool cs = (present & 1) && jv_truthy(a[0]);
    for (size_t i = 0; i < l->n; i++) {
        jv k = l->items[i];
        if ((present & 2) && a[1].type != JV_NONE && get_path(r, k, a[1], &k))
            return -1;
        k = lower_key(r, k, cs);
        if (jr_charge(r, seen.u.l->n))
            return -1;
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++)
            dup = jv_equal(seen.u.l->items[j], k);
        if (dup)
            continue;
        if (jv_list_push(r->a, seen.u.l, k) || jv_list_push(r->a, out->u.l, l->items[i]))
            return jr_nomem(r);
    }
    out->flags = JV_F_GEN;
    return 0;
}

static int minmax(jrender *r, jv v, const jargs *args, jv *out, bool want_max)
{
    BIND(want_max ? "max" : "min", "case_sensitive", "attribute");
    jv_list *l;
    if (list_of(r, v, &l))
        return -1;
    if (l->n == 0) {
        *out = jv_undef("No aggregated item, sequence was empty.");
        return 0;
    }
    bool cs = (present & 1) && jv_truthy(a[0]);
    jv best = l->items[0], best_key = best;
    if ((present & 2) && a[1].type != JV_NONE && get_path(r, best, a[1], &best_key))
        return -1;
    best_key = lower_key(r, best_key, cs);
    for (size_t i = 1; i < l->n; i++) {
        jv k = l->items[i];
        if ((present & 2) && a[1].type != JV_NONE && get_path(r, k, a[1], &k))
            return -1;
        k = lower_key(r, k, cs);
        int c;
        if (jv_compare(k, best_key, &c))
            return jr_fail(r, "TypeError: '%s' not supported between instances of '%s' and '%s'",
                           want_max ? ">" : "<", jv_type_name(k), jv_type_name(best_key));
        if (want_max ? c > 0 : c < 0) {
            best = l->items[i];
            best_key = k;
        }
    }
    *out = best;
    return 0;
}

static int f_max(jrender *r, jv v, const jargs *args, jv *out) { return minmax(r, v, args, out, true); }
static int f_min(jrender *r, jv v, const jargs *args, jv *out) { return minmax(r, v, args, out, false); }

static int f_sum(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("sum", "attribute", "start");
    jv_list *l;
    if (list_of(r, v, &l))
        return -1;
    jv acc = (present & 2) ? a[1] : jv_int(0);
    for (size_t i = 0; i < l->n; i++) {
        jv it = l->items[i];
        if ((present & 1) && a[0].type != JV_NONE && get_path(r, it, a[0], &it))
            return -1;
        if (jr_binop(r, OP_ADD, acc, it, &acc))
            return -1;
    }
    *out = acc;
    return 0;
}

/* Parses a Python int literal (with optional sign, underscores, whitespace). */
static bool parse_int(jv s, int base, int64_t *out)
{
    char buf[128];
    size_t n = 0;
    for (size_t i = 0; i < s.n && n < sizeof buf - 1; i++)
        if (s.u.s[i] != '_')
            buf[n++] = s.u.s[i];
    buf[n] = 0;
    char *p = buf;
    while (isspace((unsigned char)*p))
        p++;
    if (!*p)
        return false;
    char *end;
    long long v = strtoll(p, &end, base);
    while (isspace((unsigned char)*end))
        end++;
    if (*end || end == p)
        return false;
    *out = v;
    return true;
}

static bool parse_float(jv s, double *out)
{
    char buf[128];
    if (s.n == 0 || s.n >= sizeof buf)
        return false;
    jv_copy(buf, s.u.s, s.n);
    buf[s.n] = 0;
    char *p = buf;
    while (isspace((unsigned char)*p))
        p++;
    char *end;
    double v = strtod(p, &end);
    while (isspace((unsigned char)*end))
        end++;
    if (*end || end == p)
        return false;
    *out = v;
    return true;
}

static int f_int(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("int", "default", "base");
    if (v.type == JV_UNDEF) /* int(Undefined) raises UndefinedError, which do_int does not catch */
        return jr_undefined_error(r, v);
    jv def = (present & 1) ? a[0] : jv_int(0);
    int base = (present & 2) && a[1].type == JV_INT ? (int)a[1].u.i : 10;
    switch (v.type) {
    case JV_INT:
    case JV_BOOL:
        *out = jv_int(v.u.i);
        return 0;
    case JV_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f))
            *out = def;
        else
            *out = jv_int((int64_t)v.u.f);
        return 0;
    case JV_STR: {
        int64_t i;
        double f;
        if (parse_int(v, base, &i))
            *out = jv_int(i);
        else if (parse_float(v, &f) && !isnan(f) && !isinf(f))
            *out = jv_int((int64_t)f);
        else
            *out = def;
        return 0;
    }
    default:
        *out = def;
        return 0;
    }
}

static int f_float(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("float", "default");
    if (v.type == JV_UNDEF)
        return jr_undefined_error(r, v);
    jv def = (present & 1) ? a[0] : jv_float(0.0);
    double f;
    if (jv_is_num(v))
        *out = jv_float(jv_num(v));
    else if (v.type == JV_STR && parse_float(v, &f))
        *out = jv_float(f);
    else
        *out = def;
    return 0;
}

static int f_abs(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "abs", args))
        return -1;
    if (v.type == JV_UNDEF)
        return jr_undefined_error(r, v);
    if (v.type == JV_FLOAT)
        *out = jv_float(fabs(v.u.f));
    else if (v.type == JV_INT || v.type == JV_BOOL)
        *out = jv_int(v.u.i < 0 ? (int64_t)(0 - (uint64_t)v.u.i) : v.u.i);
    else
        return jr_fail(r, "TypeError: bad operand type for abs(): '%s'", jv_type_name(v));
    return 0;
}

static int f_round(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("round", "precision", "method");
    int64_t prec = (present & 1) && a[0].type == JV_INT ? a[0].u.i : 0;
    const char *method = "common";
    if (present & 2) {
        if (a[1].type == JV_STR && a[1].n == 4 && memcmp(a[1].u.s, "ceil", 4) == 0)
            method = "ceil";
        else if (a[1].type == JV_STR && a[1].n == 5 && memcmp(a[1].u.s, "floor", 5) == 0)
            method = "floor";
        else if (!(a[1].type == JV_STR && a[1].n == 6 && memcmp(a[1].u.s, "common", 6) == 0))
            return jr_fail(r, "FilterArgumentError: method must be common, ceil or floor");
    }
    if (!jv_is_num(v))
        return jr_fail(r, "TypeError: type %s doesn't define __round__ method", jv_type_name(v));
    if (method[0] == 'c' && method[1] == 'o' && v.type != JV_FLOAT) {
        *out = jv_int(v.u.i);
        return 0;
    }
    double x = jv_num(v), p10 = pow(10.0, (double)prec);
    if (method[0] == 'c' && method[1] == 'e') {
        *out = jv_float(ceil(x * p10) / p10);
    } else if (method[0] == 'f') {
        *out = jv_float(floor(x * p10) / p10);
    } else if (prec >= 0 && prec < 300 && isfinite(x)) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x); /* exact decimal, ties to even: Python's round */
        *out = jv_float(strtod(buf, NULL));
    } else {
        *out = jv_float(round(x * p10) / p10);
    }
    return 0;
}

static int f_indent(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("indent", "width", "first", "blank");
    jv ind = jv_str("    ", 4);
    if (present & 1) {
        if (a[0].type == JV_STR) {
            ind = a[0];
        } else if (a[0].type == JV_INT) {
            jv sp = jv_str(" ", 1);
            if (jr_binop(r, OP_MUL, sp, a[0], &ind))
                return -1;
        } else {
            return jr_fail(r, "TypeError: can't multiply sequence by non-int of type '%s'", jv_type_name(a[0]));
        }
    }
    bool first = (present & 2) && jv_truthy(a[1]);
    bool blank = (present & 4) && jv_truthy(a[2]);
    jv s, lines;
    if (v.type == JV_UNDEF)
        return jr_undefined_error(r, v);
    if (v.type != JV_STR) /* do_indent appends "\n" to its argument without str() */
        return jr_fail(r, "TypeError: unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(v));
    s = v;
    jv nl = jv_str("\n", 1);
    if (jr_binop(r, OP_ADD, s, nl, &s))
        return -1;
    static const jargs none = {0};
    if (rp_jinja_call_method(r, s, "splitlines", &none, &lines))
        return -1;
    rp_buf b = {0};
    int rc = 0;
    jv_list *l = lines.u.l;
    for (size_t i = 0; i < l->n && rc == 0; i++) {
        if (i)
            rc = rp_buf_putc(&b, '\n');
        bool pad = i == 0 ? first : (blank || l->items[i].n > 0);
        if (rc == 0 && pad)
            rc = rp_buf_append(&b, ind.u.s, ind.n);
        if (rc == 0)
            rc = rp_buf_append(&b, l->items[i].u.s, l->items[i].n);
    }
    if (rc == 0 && l->n == 0 && first)
        rc = rp_buf_append(&b, ind.u.s, ind.n);
    if (rc) {
        rp_buf_deinit(&b);
        return jr_nomem(r);
    }
    rc = jv_str_dup(r->a, b.data ? b.data : "", b.len, out);
    rp_buf_deinit(&b);
    return rc ? jr_nomem(r) : 0;
}

static int f_safe(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "safe", args))
        return -1;
    if (to_str(r, v, out))
        return -1;
    out->flags = JV_F_SAFE;
    return 0;
}

static int f_escape(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "escape", args))
        return -1;
    return rp_jinja_escape(r, v, out);
}

int rp_jinja_escape(jrender *r, jv v, jv *out)
{
    if (v.type == JV_STR && (v.flags & JV_F_SAFE)) {
        *out = v;
        return 0;
    }
    jv s;
    if (to_str(r, v, &s))
        return -1;
    rp_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < s.n && rc == 0; i++) {
        char c = s.u.s[i];
        rc = c == '&' ? rp_buf_puts(&b, "&amp;") : c == '<' ? rp_buf_puts(&b, "&lt;")
           : c == '>' ? rp_buf_puts(&b, "&gt;") : c == '"' ? rp_buf_puts(&b, "&#34;")
           : c == '\'' ? rp_buf_puts(&b, "&#39;") : rp_buf_putc(&b, c);
    }
    if (rc == 0)
        rc = jv_str_dup(r->a, b.data ? b.data : "", b.len, out);
    rp_buf_deinit(&b);
    if (rc)
        return jr_nomem(r);
    out->flags = JV_F_SAFE;
    return 0;
}

static int f_batch(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("batch", "linecount", "fill_with");
    if (a[0].type != JV_INT || a[0].u.i <= 0)
        return jr_fail(r, "ValueError: batch size must be a positive integer");
    if (lazy_fail(r, v, NULL, out))
        return 0;
    jv_list *l;
    if (list_of(r, v, &l) || new_list(r, 0, out))
        return -1;
    size_t n = (size_t)a[0].u.i;
    for (size_t i = 0; i < l->n; i += n) {
        jv chunk;
        if (n > l->n + 1000000)
            return jr_fail(r, "MemoryError: batch size too large");
        if (new_list(r, n, &chunk))
            return -1;
        for (size_t k = 0; k < n; k++) {
            if (i + k < l->n)
                chunk.u.l->items[chunk.u.l->n++] = l->items[i + k];
            else if ((present & 2) && a[1].type != JV_NONE)
                chunk.u.l->items[chunk.u.l->n++] = a[1];
        }
        if (jv_list_push(r->a, out->u.l, chunk))
            return jr_nomem(r);
    }
    out->flags = JV_F_GEN;
    return 0;
}

static int f_wordcount(jrender *r, jv v, const jargs *args, jv *out)
{
    if (no_args(r, "wordcount", args))
        return -1;
    jv s;
    if (to_str(r, v, &s))
        return -1;
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s.u.s + i, (utf8proc_ssize_t)(s.n - i), &c);
        if (k <= 0) {
            c = (unsigned char)s.u.s[i];
            k = 1;
        }
        i += (size_t)k;
        utf8proc_category_t cat = utf8proc_category(c);
        bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                 (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) ||
                 (cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME);
        if (w && !in_word)
            words++;
        in_word = w;
    }
    *out = jv_int(words);
    return 0;
}

static int f_center(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("center", "width");
    jv s;
    if (to_str(r, v, &s))
        return -1;
    jv pos[1] = {(present & 1) ? a[0] : jv_int(80)};
    jargs ca = {.pos = pos, .n_pos = 1};
    return rp_jinja_call_method(r, s, "center", &ca, out);
}

static int f_format(jrender *r, jv v, const jargs *args, jv *out)
{
    jv s;
    if (to_str(r, v, &s))
        return -1;
    if (args->n_kw) {
        jv d;
        if (jv_dict_new(r->a, args->n_kw, &d))
            return jr_nomem(r);
        for (size_t i = 0; i < args->n_kw; i++)
            if (jv_dict_set(r->a, d.u.d, jv_str(args->kw_names[i], strlen(args->kw_names[i])), args->kw[i]))
                return jr_nomem(r);
        return rp_jinja_str_percent(r, s, d, out);
    }
    jv t;
    if (new_list(r, args->n_pos, &t))
        return -1;
    jv_copy(t.u.l->items, args->pos, args->n_pos * sizeof(jv));
    t.u.l->n = args->n_pos;
    t.flags = JV_F_TUPLE;
    return rp_jinja_str_percent(r, s, t, out);
}

/* attr() looks up a Python attribute only: dict keys are not attributes. */
static int f_attr(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("attr", "name");
    if (a[0].type != JV_STR)
        return jr_fail(r, "TypeError: attribute name must be a string");
    bool unsafe;
    if (v.type == JV_DICT && !rp_jinja_has_method(v, a[0].u.s, a[0].n, &unsafe)) {
        *out = jr_missing_attr(r, v, a[0].u.s, a[0].n);
        return 0;
    }
    return jr_getattr(r, v, a[0].u.s, a[0].n, out);
}

static int f_truncate(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("truncate", "length", "killwords", "end", "leeway");
    if (v.type == JV_UNDEF) {
        *out = v;
        return 0;
    }
    int64_t length = (present & 1) && a[0].type == JV_INT ? a[0].u.i : 255;
    bool killwords = (present & 2) && jv_truthy(a[1]);
    jv end = (present & 4) ? a[2] : jv_str("...", 3);
    int64_t leeway = (present & 8) && a[3].type == JV_INT ? a[3].u.i : 5;
    if (v.type != JV_STR) { /* do_truncate takes len() of its argument, then slices it as a str */
        size_t n = v.type == JV_LIST && !(v.flags & JV_F_GEN) ? v.u.l->n : v.type == JV_DICT ? v.u.d->n : SIZE_MAX;
        if (n == SIZE_MAX)
            return jr_fail(r, "TypeError: object of type '%s' has no len()", jv_type_name(v));
        if ((int64_t)n <= length + leeway) {
            *out = v;
            return 0;
        }
        return jr_fail(r, "AttributeError: '%s' object has no attribute 'rsplit'", jv_type_name(v));
    }
    jv s = v;
    size_t nc = rp_jinja_utf8_len(s.u.s, s.n), ne = rp_jinja_utf8_len(end.u.s, end.n);
    if ((int64_t)nc <= length + leeway) {
        *out = s;
        return 0;
    }
    int64_t keep = length - (int64_t)ne;
    if (keep < 0)
        keep = 0;
    size_t cut = 0;
    for (int64_t k = 0; k < keep && cut < s.n; k++) {
        cut++;
        while (cut < s.n && ((unsigned char)s.u.s[cut] & 0xc0) == 0x80)
            cut++;
    }
    jv head = jv_str(s.u.s, cut);
    if (!killwords) {
        const char *sp = NULL;
        for (size_t i = cut; i-- > 0;)
            if (s.u.s[i] == ' ') {
                sp = s.u.s + i;
                break;
            }
        if (sp) /* rsplit(" ", 1)[0] */
            head = jv_str(s.u.s, (size_t)(sp - s.u.s));
    }
    return jr_binop(r, OP_ADD, head, end, out);
}

/* map / select / reject and their attr variants */

static int apply_test(jrender *r, jv item, jv test, const jargs *rest, bool *ok)
{
    if (test.type == JV_UNDEF) {
        *ok = jv_truthy(item);
        return 0;
    }
    if (test.type != JV_STR)
        return jr_fail(r, "TypeError: test name must be a string");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(test.n < 60 ? test.n : 60), test.u.s);
    bool found;
    if (rp_jinja_test(r, name, item, rest, ok, &found))
        return -1;
    if (!found)
        return jr_fail(r, "TemplateRuntimeError: No test named '%s'.", name);
    return 0;
}

static int select_common(jrender *r, jv v, const jargs *args, jv *out, bool attr, bool keep)
{
    jv_list *l;
    if (new_list(r, 0, out))
        return -1;
    out->flags = JV_F_GEN;
    if (!jv_truthy(v)) /* Jinja2: "if value:" before iterating */
        return 0;
    if (lazy_fail(r, v, NULL, out))
        return 0;
    if (list_of(r, v, &l))
        return -1;
    size_t skip = attr ? 2 : 1;
    jv attr_name = attr && args->n_pos > 0 ? args->pos[0] : jv_undef("");
    if (attr && args->n_pos == 0)
        return jr_fail(r, "FilterArgumentError: Missing parameter for attribute name");
    jv test = args->n_pos >= skip ? args->pos[skip - 1] : jv_undef("");
    jargs rest = {.pos = args->n_pos > skip ? args->pos + skip : NULL,
                  .n_pos = args->n_pos > skip ? args->n_pos - skip : 0,
                  .kw_names = args->kw_names, .kw = args->kw, .n_kw = args->n_kw};
    for (size_t i = 0; i < l->n; i++) {
        jv it = l->items[i], probe = it;
        if (attr && get_path(r, it, attr_name, &probe))
            return -1;
        bool ok;
        if (apply_test(r, probe, test, &rest, &ok))
            return -1;
        if (ok == keep && jv_list_push(r->a, out->u.l, it))
            return jr_nomem(r);
    }
    return 0;
}

static int f_select(jrender *r, jv v, const jargs *args, jv *out) { return select_common(r, v, args, out, false, true); }
static int f_reject(jrender *r, jv v, const jargs *args, jv *out) { return select_common(r, v, args, out, false, false); }
static int f_selectattr(jrender *r, jv v, const jargs *args, jv *out) { return select_common(r, v, args, out, true, true); }
static int f_rejectattr(jrender *r, jv v, const jargs *args, jv *out) { return select_common(r, v, args, out, true, false); }

static int f_map(jrender *r, jv v, const jargs *args, jv *out)
{
    jv_list *l;
    if (!jv_truthy(v)) { /* Jinja2: "if value:" before iterating */
        if (new_list(r, 0, out))
            return -1;
        out->flags = JV_F_GEN;
        return 0;
    }
    if (lazy_fail(r, v, NULL, out))
        return 0;
    if (list_of(r, v, &l) || new_list(r, l->n, out))
        return -1;
    out->flags = JV_F_GEN;
    jv attribute = jv_undef(""), def = jv_undef("");
    bool by_attr = false, has_def = false;
    for (size_t k = 0; k < args->n_kw; k++) {
        if (strcmp(args->kw_names[k], "attribute") == 0) {
            attribute = args->kw[k];
            by_attr = true;
        } else if (strcmp(args->kw_names[k], "default") == 0) {
            def = args->kw[k];
            has_def = true;
        }
    }
    if (by_attr) {
        for (size_t i = 0; i < l->n; i++) {
            jv it;
            if (get_path(r, l->items[i], attribute, &it))
                return -1;
            if (has_def && it.type == JV_UNDEF)
                it = def;
            out->u.l->items[out->u.l->n++] = it;
        }
        return 0;
    }
    if (args->n_pos == 0)
        return jr_fail(r, "FilterArgumentError: map requires a filter argument");
    if (args->pos[0].type != JV_STR)
        return jr_fail(r, "TypeError: filter name must be a string");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(args->pos[0].n < 60 ? args->pos[0].n : 60), args->pos[0].u.s);
    jargs rest = {.pos = args->pos + 1, .n_pos = args->n_pos - 1, .kw_names = args->kw_names,
                  .kw = args->kw, .n_kw = args->n_kw};
    for (size_t i = 0; i < l->n; i++) {
        bool found;
        jv it;
        if (rp_jinja_filter(r, name, l->items[i], &rest, &it, &found))
            return -1;
        if (!found)
            return jr_fail(r, "TemplateRuntimeError: No filter named '%s'.", name);
        out->u.l->items[out->u.l->n++] = it;
    }
    return 0;
}

static int f_groupby(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("groupby", "attribute", "default", "case_sensitive");
    jv_list *l;
    if (list_of(r, v, &l))
        return -1;
    bool cs = (present & 4) && jv_truthy(a[2]);
    kv *items = RP_ARENA_NEW(r->a, kv, l->n ? l->n : 1);
    if (!items)
        return jr_nomem(r);
    for (size_t i = 0; i < l->n; i++) {
        jv k;
        if (get_path(r, l->items[i], a[0], &k))
            return -1;
        if (k.type == JV_UNDEF && (present & 2))
            k = a[1];
        items[i].key = lower_key(r, k, cs);
        items[i].val = l->items[i];
    }
    if (sort_kv(r, items, l->n, false, false) || new_list(r, 0, out))
        return -1;
    for (size_t i = 0; i < l->n;) {
        size_t j = i;
        jv group, pair;
        if (new_list(r, 0, &group) || new_list(r, 2, &pair))
            return -1;
        while (j < l->n && jv_equal(items[j].key, items[i].key))
            if (jv_list_push(r->a, group.u.l, items[j++].val))
                return jr_nomem(r);
        jv key = items[i].key;
        if (!cs && get_path(r, items[i].val, a[0], &key)) /* the real key, not the lowered one */
            return -1;
        if (!cs && key.type == JV_UNDEF && (present & 2))
            key = a[1];
        pair.u.l->items[0] = key;
        pair.u.l->items[1] = group;
        pair.u.l->n = 2;
        pair.flags = JV_F_TUPLE | JV_F_GROUP;
        if (jv_list_push(r->a, out->u.l, pair))
            return jr_nomem(r);
        i = j;
    }
    return 0;
}

static int f_slice(jrender *r, jv v, const jargs *args, jv *out)
{
    BIND("slice", "slices", "fill_with");
    if (a[0].type != JV_INT || a[0].u.i <= 0)
        return jr_fail(r, "ValueError: slices must be a positive integer");
    if (lazy_fail(r, v, NULL, out))
        return 0;
    jv_list *l;
    if (list_of(r, v, &l) || new_list(r, 0, out))
        return -1;
    size_t slices = (size_t)a[0].u.i, length = l->n;
    if (slices > length + 1000000)
        return jr_fail(r, "MemoryError: too many slices");
    size_t per = length / slices, extra = length % slices, offset = 0;
    for (size_t k = 0; k < slices; k++) {
        size_t start = offset + k * per;
        if (k < extra)
            offset++;
        size_t end = offset + (k + 1) * per;
        jv part;
        if (new_list(r, 0, &part))
            return -1;
        for (size_t i = start; i < end && i < length; i++)
            if (jv_list_push(r->a, part.u.l, l->items[i]))
                return jr_nomem(r);
        if ((present & 2) && a[1].type != JV_NONE && k >= extra && jv_list_push(r->a, part.u.l, a[1]))
            return jr_nomem(r);
        if (jv_list_push(r->a, out->u.l, part))
            return jr_nomem(r);
    }
    out->flags = JV_F_GEN;
    return 0;
}

static int f_pprint(jrender *r, jv v, const jargs *args, jv *out)
{
    rp_buf b = {0};
    if (jv_write_repr(&b, v)) {
        rp_buf_deinit(&b);
        return jr_nomem(r);
    }
    int rc = jv_str_dup(r->a, b.data ? b.data : "", b.len, out);
    rp_buf_deinit(&b);
    return rc ? jr_nomem(r) : 0;
}

static const struct {
    const char *name;
    filter_fn fn;
} k_filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
    {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"pprint", f_pprint}, {"reject", f_reject}, {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe},
    {"select", f_select}, {"selectattr", f_selectattr}, {"slice", f_slice}, {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
    {"truncate", f_truncate}, {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

bool rp_jinja_has_filter(const char *name)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_filters); i++)
        if (strcmp(k_filters[i].name, name) == 0)
            return true;
    return false;
}

int rp_jinja_filter(jrender *r, const char *name, jv v, const jargs *args, jv *out, bool *found)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_filters); i++)
        if (strcmp(k_filters[i].name, name) == 0) {
            *found = true;
            if ((v.flags & JV_F_UNSAFE) && strcmp(name, "default") && strcmp(name, "d"))
                return jr_undefined_error(r, v);
            return k_filters[i].fn(r, v, args, out);
        }
    *found = false;
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------- */

static bool name_is(const char *name, const char *a, const char *b, const char *c)
{
    return strcmp(name, a) == 0 || (b && strcmp(name, b) == 0) || (c && strcmp(name, c) == 0);
}

static const char *const k_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even",
    "false", "filter", "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable",
    "le", "<=", "lower", "lt", "lessthan", "<", "mapping", "ne", "!=", "none", "number", "odd",
    "sameas", "sequence", "string", "test", "true", "undefined", "upper",
};

bool rp_jinja_has_test(const char *name)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_tests); i++)
        if (strcmp(k_tests[i], name) == 0)
            return true;
    return false;
}

static int need_arg(jrender *r, const char *name, const jargs *args, jv *arg)
{
    if (args->n_pos >= 1) {
        *arg = args->pos[0];
        return 0;
    }
    if (args->n_kw >= 1) {
        *arg = args->kw[0];
        return 0;
    }
    return jr_fail(r, "TypeError: test '%s' takes one argument", name);
}

/* str(value).isupper() / .islower(): at least one cased character, none of the other case. */
static int case_test(jrender *r, jv v, bool upper, bool *out)
{
    jv s, method;
    if (to_str(r, v, &s) || jr_getattr(r, s, upper ? "isupper" : "islower", 7, &method))
        return -1;
    static const jargs none = {0};
    jv res;
    if (jr_call(r, method, &none, &res))
        return -1;
    *out = jv_truthy(res);
    return 0;
}

/* The tests of jinja2/tests.py, one branch each (a flat dispatch over the test name). */
int rp_jinja_test(jrender *r, const char *name, jv v, const jargs *args, bool *out, bool *found)
{
    *found = true;
    jv arg;
    if (name_is(name, "defined", NULL, NULL)) {
        *out = v.type != JV_UNDEF;
    } else if (name_is(name, "undefined", NULL, NULL)) {
        *out = v.type == JV_UNDEF;
    } else if (name_is(name, "none", NULL, NULL)) {
        *out = v.type == JV_NONE;
    } else if (name_is(name, "boolean", NULL, NULL)) {
        *out = v.type == JV_BOOL;
    } else if (name_is(name, "true", NULL, NULL)) {
        *out = v.type == JV_BOOL && v.u.i;
    } else if (name_is(name, "false", NULL, NULL)) {
        *out = v.type == JV_BOOL && !v.u.i;
    } else if (name_is(name, "integer", NULL, NULL)) {
        *out = v.type == JV_INT;
    } else if (name_is(name, "float", NULL, NULL)) {
        *out = v.type == JV_FLOAT;
    } else if (name_is(name, "number", NULL, NULL)) {
        *out = jv_is_num(v);
    } else if (name_is(name, "string", NULL, NULL)) {
        *out = v.type == JV_STR;
    } else if (name_is(name, "mapping", NULL, NULL)) {
        *out = v.type == JV_DICT;
    } else if (name_is(name, "sequence", NULL, NULL)) {
        /* len() and __getitem__ exist: Undefined has both (its __getitem__ raises when called) */
        *out = v.type == JV_STR || (v.type == JV_LIST && !(v.flags & (JV_F_GEN | JV_F_VIEW))) ||
               v.type == JV_DICT || v.type == JV_UNDEF;
    } else if (name_is(name, "iterable", NULL, NULL)) {
        *out = v.type == JV_STR || v.type == JV_LIST || v.type == JV_DICT || v.type == JV_UNDEF;
    } else if (name_is(name, "callable", NULL, NULL)) {
        *out = v.type == JV_FUNC || v.type == JV_MACRO || v.type == JV_METHOD ||
               (v.type == JV_UNDEF && (v.flags & JV_F_UNSAFE));
    } else if (name_is(name, "escaped", NULL, NULL)) {
        *out = false;
    } else if (name_is(name, "odd", "even", NULL)) { /* value % 2 == 1 / == 0 */
        jv m;
        if (jr_binop(r, OP_MOD, v, jv_int(2), &m))
            return -1;
        *out = jv_equal(m, jv_int(name[0] == 'o' ? 1 : 0));
    } else if (name_is(name, "divisibleby", NULL, NULL)) {
        if (need_arg(r, name, args, &arg))
            return -1;
        jv m;
        if (jr_binop(r, OP_MOD, v, arg, &m))
            return -1;
        *out = jv_equal(m, jv_int(0));
    } else if (name_is(name, "eq", "equalto", "==")) {
        if (need_arg(r, name, args, &arg))
            return -1;
        *out = jv_equal(v, arg);
    } else if (name_is(name, "ne", "!=", NULL)) {
        if (need_arg(r, name, args, &arg))
            return -1;
        *out = !jv_equal(v, arg);
    } else if (name_is(name, "lt", "lessthan", "<") || name_is(name, "le", "<=", NULL) ||
               name_is(name, "gt", "greaterthan", ">") || name_is(name, "ge", ">=", NULL)) {
        if (need_arg(r, name, args, &arg))
            return -1;
        int op = name_is(name, "lt", "lessthan", "<") ? OP_LT : name_is(name, "le", "<=", NULL) ? OP_LE
               : name_is(name, "gt", "greaterthan", ">") ? OP_GT : OP_GE;
        return jr_compare(r, op, v, arg, out);
    } else if (name_is(name, "in", NULL, NULL)) {
        if (need_arg(r, name, args, &arg))
            return -1;
        return jr_compare(r, OP_IN, v, arg, out);
    } else if (name_is(name, "sameas", NULL, NULL)) {
        if (need_arg(r, name, args, &arg))
            return -1;
        *out = v.type == arg.type && (v.type == JV_NONE || v.type == JV_BOOL ? v.u.i == arg.u.i
                                      : v.type == JV_LIST || v.type == JV_DICT ? v.u.p == arg.u.p
                                      : jv_equal(v, arg));
    } else if (name_is(name, "lower", NULL, NULL)) {
        return case_test(r, v, false, out);
    } else if (name_is(name, "upper", NULL, NULL)) {
        return case_test(r, v, true, out);
    } else if (name_is(name, "filter", "test", NULL)) { /* value in environment.filters */
        if ((v.type == JV_LIST && !(v.flags & (JV_F_TUPLE | JV_F_GEN | JV_F_RANGE))) || v.type == JV_DICT)
            return jr_fail(r, "TypeError: unhashable type: '%s'", jv_type_name(v));
        char nm[64];
        snprintf(nm, sizeof nm, "%.*s", (int)(v.type == JV_STR ? (v.n < 60 ? v.n : 60) : 0), v.u.s);
        *out = v.type == JV_STR && (name[0] == 'f' ? rp_jinja_has_filter(nm) : rp_jinja_has_test(nm));
    } else {
        *found = false;
    }
    return 0;
}
