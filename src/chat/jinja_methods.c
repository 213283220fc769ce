/* chat/jinja_methods.c - the Python methods templates call on values: str (strip, split,
 * startswith, format, ...), dict (get, items, keys, values) and list (index, count), plus the
 * str % args operator. Mutating methods (list.append, dict.update, ...) are reported unsafe,
 * as Jinja2's ImmutableSandboxedEnvironment (the one transformers uses) reports them.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/jinja_eval.h"


static const char *const k_str_methods[] = {
    "capitalize", "center", "count", "endswith", "find", "format", "index", "isalnum", "isalpha",
    "isdigit", "islower", "isspace", "isupper", "istitle", "isnumeric", "isdecimal", "join",
    "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind",
    "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith",
    "strip", "swapcase", "title", "upper", "zfill", "format_map", "casefold", "expandtabs",
    "isidentifier", "isprintable", "isascii", "encode", "translate", "maketrans",
};
static const char *const k_dict_methods[] = {"get", "items", "keys", "values", "copy", "fromkeys"};
static const char *const k_dict_unsafe[] = {"pop", "popitem", "setdefault", "update", "clear"};
static const char *const k_list_methods[] = {"count", "index", "copy"};
static const char *const k_list_unsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse",
                                            "sort", "clear"};

static bool in_table(const char *const *t, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i]) == len && memcmp(t[i], name, len) == 0)
            return true;
    return false;
}

bool rp_jinja_has_method(jv self, const char *name, size_t len, bool *unsafe)
{
    *unsafe = false;
    switch (self.type) {
    case JV_STR:
        return in_table(k_str_methods, RP_ARRAY_LEN(k_str_methods), name, len);
    case JV_DICT:
        if (in_table(k_dict_unsafe, RP_ARRAY_LEN(k_dict_unsafe), name, len))
            return *unsafe = true;
        return in_table(k_dict_methods, RP_ARRAY_LEN(k_dict_methods), name, len);
    case JV_LIST:
        if (!(self.flags & JV_F_TUPLE) && in_table(k_list_unsafe, RP_ARRAY_LEN(k_list_unsafe), name, len))
            return *unsafe = true;
        return in_table(k_list_methods, RP_ARRAY_LEN(k_list_methods), name, len);
    default:
        return false;
    }
}

/* ---- UTF-8 and character classes --------------------------------------------------------- */

static size_t dec(const char *s, size_t n, size_t i, int32_t *cp)
{
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), cp);
    if (k <= 0) {
        *cp = (unsigned char)s[i];
        return 1;
    }
    return (size_t)k;
}

static bool py_space(int32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

static bool is_cased_upper(int32_t c) { return utf8proc_category(c) == UTF8PROC_CATEGORY_LU; }
static bool is_cased_lower(int32_t c) { return utf8proc_category(c) == UTF8PROC_CATEGORY_LL; }
static bool is_cased(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
static bool is_alpha(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
static bool is_digit(int32_t c) { return utf8proc_category(c) == UTF8PROC_CATEGORY_ND; }
static bool is_numeric(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

static int put_cp(rp_buf *b, int32_t cp)
{
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t n = utf8proc_encode_char(cp, u);
    return rp_buf_append(b, u, (size_t)n);
}

static int buf_to_str(jrender *r, rp_buf *b, jv *out)
{
    int rc = jv_str_dup(r->a, b->data ? b->data : "", b->len, out);
    rp_buf_deinit(b);
    return rc ? jr_nomem(r) : 0;
}

int rp_jinja_str_case(jrender *r, jv s, int mode, jv *out)
{
    rp_buf b = {0};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s.n;) {
        int32_t c;
        i += dec(s.u.s, s.n, i, &c);
        /* 'u' upper, 'l' lower, 'f' casefold, 's' swapcase, 't' title (str.title), 'c' capitalize */
        bool to_title = (mode == 't' && !prev_cased) || (mode == 'c' && first);
        bool to_upper = mode == 'u' || (mode == 's' && is_cased_lower(c));
        int32_t o;
        if (to_title)
            o = utf8proc_totitle(c);
        else if (to_upper)
            o = utf8proc_toupper(c);
        else if (mode == 'l' || mode == 'f' || mode == 'c' || mode == 't' || (mode == 's' && is_cased_upper(c)))
            o = utf8proc_tolower(c);
        else
            o = c;
        if (mode == 't')
            prev_cased = is_cased(c);
        first = false;
        int rc;
        if (c == 0xdf && (to_title || to_upper || mode == 'f')) /* full mappings: SS, Ss, casefold ss */
            rc = rp_buf_puts(&b, to_title ? "Ss" : mode == 'f' ? "ss" : "SS");
        else
            rc = put_cp(&b, o);
        if (rc) {
            rp_buf_deinit(&b);
            return jr_nomem(r);
        }
    }
    return buf_to_str(r, &b, out);
}

static bool in_chars(jv chars, int32_t c)
{
    for (size_t i = 0; i < chars.n;) {
        int32_t k;
        i += dec(chars.u.s, chars.n, i, &k);
        if (k == c)
            return true;
    }
    return false;
}

int rp_jinja_str_strip(jrender *r, jv s, jv chars, int which, jv *out)
{
    bool ws = chars.type == JV_NONE || chars.type == JV_UNDEF;
    if (!ws && chars.type != JV_STR)
        return jr_fail(r, "TypeError: strip arg must be None or str");
    size_t b = 0, e = s.n;
    if (which != 'r')
        while (b < e) {
            int32_t c;
            size_t k = dec(s.u.s, s.n, b, &c);
            if (ws ? !py_space(c) : !in_chars(chars, c))
                break;
            b += k;
        }
    if (which != 'l')
        while (e > b) {
            size_t st = e - 1;
            while (st > b && ((unsigned char)s.u.s[st] & 0xc0) == 0x80)
                st--;
            int32_t c;
            dec(s.u.s, s.n, st, &c);
            if (ws ? !py_space(c) : !in_chars(chars, c))
                break;
            e = st;
        }
    *out = jv_str(s.u.s + b, e - b);
    return 0;
}

int rp_jinja_str_replace(jrender *r, jv s, jv old, jv new_, int64_t count, jv *out)
{
    rp_buf b = {0};
    int64_t done = 0;
    size_t i = 0;
    int rc = 0;
    if (old.n == 0) { /* Python inserts new_ between every character (and at both ends) */
        while (rc == 0 && (count < 0 || done < count)) {
            if (b.len > r->out_limit) {
                rc = -2;
                break;
            }
            rc = rp_buf_append(&b, new_.u.s, new_.n);
            done++;
            if (i >= s.n)
                break;
            size_t k = 1;
            while (i + k < s.n && ((unsigned char)s.u.s[i + k] & 0xc0) == 0x80)
                k++;
            if (rc == 0)
                rc = rp_buf_append(&b, s.u.s + i, k);
            i += k;
        }
        if (rc == 0 && i < s.n)
            rc = rp_buf_append(&b, s.u.s + i, s.n - i);
    } else {
        while (rc == 0 && i <= s.n) {
            if (b.len > r->out_limit) {
                rc = -2;
                break;
            }
            const char *hit = (count < 0 || done < count) && s.n - i >= old.n
                                  ? memmem(s.u.s + i, s.n - i, old.u.s, old.n) : NULL;
            if (!hit) {
                rc = rp_buf_append(&b, s.u.s + i, s.n - i);
                break;
            }
            size_t at = (size_t)(hit - s.u.s);
            rc = rp_buf_append(&b, s.u.s + i, at - i);
            if (rc == 0)
                rc = rp_buf_append(&b, new_.u.s, new_.n);
            i = at + old.n;
            done++;
        }
    }
    if (rc == 0 && b.len > r->out_limit)
        rc = -2;
    if (rc) {
        rp_buf_deinit(&b);
        return rc == -2 ? jr_fail(r, "MemoryError: string too large") : jr_nomem(r);
    }
    return buf_to_str(r, &b, out);
}

/* ---- split ------------------------------------------------------------------------------- */

static int push_str(jrender *r, jv list, const char *s, size_t n)
{
    return jv_list_push(r->a, list.u.l, jv_str(s, n)) ? jr_nomem(r) : 0;
}

/* str.split / str.rsplit: whitespace mode (runs of Unicode whitespace, remainder kept as is
 * after maxsplit) and separator mode, left or right; the four cases share the result list. */
static int split(jrender *r, jv s, jv sep, int64_t maxsplit, bool right, jv *out)
{
    if (jv_list_new(r->a, 0, out))
        return jr_nomem(r);
    if (sep.type == JV_NONE || sep.type == JV_UNDEF) {
        /* whitespace split: runs of whitespace, no empty strings */
        jv words;
        if (jv_list_new(r->a, 0, &words))
            return jr_nomem(r);
        size_t i = 0;
        while (i < s.n) {
            int32_t c;
            size_t k = dec(s.u.s, s.n, i, &c);
            if (py_space(c)) {
                i += k;
                continue;
            }
            size_t st = i;
            while (i < s.n) {
                k = dec(s.u.s, s.n, i, &c);
                if (py_space(c))
                    break;
                i += k;
            }
            if (push_str(r, words, s.u.s + st, i - st))
                return -1;
        }
        size_t nw = words.u.l->n;
        if (maxsplit < 0 || (size_t)maxsplit + 1 >= nw) {
            *out = words;
            return 0;
        }
        /* with maxsplit the remainder keeps its inner whitespace */
        jv_list *w = words.u.l;
        if (!right) {
            for (int64_t k = 0; k < maxsplit; k++)
                if (push_str(r, *out, w->items[k].u.s, w->items[k].n))
                    return -1;
            const char *rest = w->items[maxsplit].u.s;
            return push_str(r, *out, rest, (size_t)(s.u.s + s.n - rest));
        }
        size_t first_kept = nw - (size_t)maxsplit;
        const char *end = w->items[first_kept - 1].u.s + w->items[first_kept - 1].n;
        if (push_str(r, *out, s.u.s, (size_t)(end - s.u.s)))
            return -1;
        for (size_t k = first_kept; k < nw; k++)
            if (push_str(r, *out, w->items[k].u.s, w->items[k].n))
                return -1;
        return 0;
    }
    if (sep.type != JV_STR)
        return jr_fail(r, "TypeError: must be str or None, not %s", jv_type_name(sep));
    if (sep.n == 0)
        return jr_fail(r, "ValueError: empty separator");
    if (!right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) && s.n - i >= sep.n
                                  ? memmem(s.u.s + i, s.n - i, sep.u.s, sep.n) : NULL;
            if (!hit)
                return push_str(r, *out, s.u.s + i, s.n - i);
            if (push_str(r, *out, s.u.s + i, (size_t)(hit - s.u.s) - i))
                return -1;
            i = (size_t)(hit - s.u.s) + sep.n;
            done++;
        }
    }
    /* rsplit: scan from the right, then reverse */
    jv parts;
    if (jv_list_new(r->a, 0, &parts))
        return jr_nomem(r);
    size_t e = s.n;
    int64_t done = 0;
    for (;;) {
        size_t found = SIZE_MAX;
        if ((maxsplit < 0 || done < maxsplit) && e >= sep.n)
            for (size_t k = e - sep.n + 1; k-- > 0;)
                if (memcmp(s.u.s + k, sep.u.s, sep.n) == 0) {
                    found = k;
                    break;
                }
        if (found == SIZE_MAX) {
            if (push_str(r, parts, s.u.s, e))
                return -1;
            break;
        }
        if (push_str(r, parts, s.u.s + found + sep.n, e - found - sep.n))
            return -1;
        e = found;
        done++;
    }
    for (size_t k = parts.u.l->n; k-- > 0;)
        if (jv_list_push(r->a, out->u.l, parts.u.l->items[k]))
            return jr_nomem(r);
    return 0;
}

static int splitlines(jrender *r, jv s, bool keepends, jv *out)
{
    if (jv_list_new(r->a, 0, out))
        return jr_nomem(r);
    size_t i = 0, st = 0;
    while (i < s.n) {
        int32_t c;
        size_t k = dec(s.u.s, s.n, i, &c);
        bool nl = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                  c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!nl) {
            i += k;
            continue;
        }
        size_t e = i;
        i += k;
        if (c == '\r' && i < s.n && s.u.s[i] == '\n')
            i++;
        if (push_str(r, *out, s.u.s + st, (keepends ? i : e) - st))
            return -1;
        st = i;
    }
    if (st < s.n)
        return push_str(r, *out, s.u.s + st, s.n - st);
    return 0;
}

/* ---- str.format and % -------------------------------------------------------------------- */

typedef struct fspec {
    char fill, align, sign, type, group; /* group: ',' or '_' thousands separator, or 0 */
    bool alt, zero, has_prec;
    int width, prec;
} fspec;

enum { MAX_FIELD = 1 << 20 }; /* widths and precisions beyond this fail (MemoryError) */

/* Accumulates a decimal digit, saturating above MAX_FIELD. */
static int digit_acc(int v, char d)
{
    return v > MAX_FIELD ? v : v * 10 + (d - '0');
}

static const char *parse_spec(const char *p, const char *e, fspec *f)
{
    *f = (fspec){.fill = ' '};
    if (e - p >= 2 && strchr("<>^=", p[1])) {
        f->fill = p[0];
        f->align = p[1];
        p += 2;
    } else if (p < e && strchr("<>^=", *p)) {
        f->align = *p++;
    }
    if (p < e && strchr("+- ", *p))
        f->sign = *p++;
    if (p < e && *p == '#')
        f->alt = true, p++;
    if (p < e && *p == '0') {
        f->zero = true;
        p++;
    }
    while (p < e && isdigit((unsigned char)*p))
        f->width = digit_acc(f->width, *p++);
    if (p < e && (*p == ',' || *p == '_'))
        f->group = *p++;
    if (p < e && *p == '.') {
        p++;
        f->has_prec = true;
        while (p < e && isdigit((unsigned char)*p))
            f->prec = digit_acc(f->prec, *p++);
    }
    if (p < e)
        f->type = *p++;
    return p;
}

/* Formats one value with a spec (the subset of format() and % that templates use): integer
 * (d x X o), float (f e g %), repr (r) and str (s) conversions, then fill/align/width padding. */
static int format_value(jrender *r, rp_buf *b, jv v, const fspec *f, bool percent)
{
    rp_buf tmp = {0};
    int rc = 0;
    char t = f->type;
    if (f->width > MAX_FIELD || f->prec > 1000)
        return jr_fail(r, "MemoryError: format width or precision too large");
    bool numeric = false;
    if (t == 'd' || t == 'i' || t == 'x' || t == 'X' || t == 'o' || t == 'b' || t == 'u') {
        if (!jv_is_num(v)) {
            rp_buf_deinit(&tmp);
            return jr_fail(r, "TypeError: %%%c format: a real number is required, not %s", t, jv_type_name(v));
        }
        if (v.type == JV_FLOAT && !percent) {
            rp_buf_deinit(&tmp);
            return jr_fail(r, "ValueError: Unknown format code '%c' for object of type 'float'", t);
        }
        int64_t x = v.type == JV_FLOAT ? (int64_t)v.u.f : v.u.i;
        numeric = true;
        if (t == 'x' || t == 'X' || t == 'o') {
            uint64_t ux = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
            rc = rp_buf_printf(&tmp, t == 'x' ? "%s%" PRIx64 : t == 'X' ? "%s%" PRIX64 : "%s%" PRIo64,
                               x < 0 ? "-" : (f->sign == '+' ? "+" : ""), ux);
        } else {
            rc = rp_buf_printf(&tmp, f->sign == '+' ? "%+" PRId64 : "%" PRId64, x);
        }
    } else if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G' || t == '%') {
        if (!jv_is_num(v)) {
            rp_buf_deinit(&tmp);
            return jr_fail(r, "TypeError: must be real number, not %s", jv_type_name(v));
        }
        numeric = true;
        double x = jv_num(v) * (t == '%' ? 100.0 : 1.0);
        int prec = f->has_prec ? f->prec : 6;
        char fmt[16];
        snprintf(fmt, sizeof fmt, "%%%s.%d%c", f->sign == '+' ? "+" : "", prec, t == '%' ? 'f' : t);
        rc = rp_buf_printf(&tmp, fmt, x);
        if (rc == 0 && t == '%')
            rc = rp_buf_putc(&tmp, '%');
    } else if (t == 'r' || t == 'a') {
        rc = jv_write_repr(&tmp, v);
    } else if (t == 's' || t == 0 || t == 'c') {
        if (t == 0 && v.type == JV_FLOAT && f->has_prec && !percent) {
            char fmt[16];
            snprintf(fmt, sizeof fmt, "%%.%dg", f->prec);
            rc = rp_buf_printf(&tmp, fmt, v.u.f);
            numeric = true;
        } else {
            numeric = t == 0 && jv_is_num(v) && v.type != JV_BOOL;
            rc = jv_write_str(&tmp, v);
            if (rc == 0 && f->has_prec && (t == 's' || !numeric)) {
                size_t cut = 0, k = 0;
                while (cut < tmp.len && k < (size_t)f->prec) {
                    cut++;
                    while (cut < tmp.len && ((unsigned char)tmp.data[cut] & 0xc0) == 0x80)
                        cut++;
                    k++;
                }
                tmp.len = cut;
            }
        }
    } else {
        rp_buf_deinit(&tmp);
        return jr_fail(r, "ValueError: unsupported format character '%c'", t);
    }
    if (rc == 0 && f->group && numeric && tmp.len) { /* 1234567 -> 1,234,567 */
        size_t st = (tmp.data[0] == '-' || tmp.data[0] == '+') ? 1 : 0, end = st;
        while (end < tmp.len && tmp.data[end] >= '0' && tmp.data[end] <= '9')
            end++;
        rp_buf g = {0};
        rc = rp_buf_append(&g, tmp.data, st);
        for (size_t i = st; i < end && rc == 0; i++) {
            rc = rp_buf_putc(&g, tmp.data[i]);
            size_t left = end - i - 1;
            if (rc == 0 && left > 0 && left % 3 == 0)
                rc = rp_buf_putc(&g, f->group);
        }
        if (rc == 0)
            rc = rp_buf_append(&g, tmp.data + end, tmp.len - end);
        rp_buf_deinit(&tmp);
        tmp = g;
    }
    if (rc) {
        rp_buf_deinit(&tmp);
        return jr_nomem(r);
    }
    size_t len = tmp.data ? rp_jinja_utf8_len(tmp.data, tmp.len) : 0;
    size_t pad = (size_t)f->width > len ? (size_t)f->width - len : 0;
    char align = f->align ? f->align : (numeric ? '>' : '<');
    char fill = f->fill;
    if (f->zero && !f->align) {
        fill = '0';
        align = numeric ? '=' : '<';
        if (percent && !numeric)
            fill = ' ', align = '>';
    }
    if (percent && !f->align)
        align = f->alt ? '<' : (f->zero && numeric ? '=' : '>');
    size_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    size_t right = align == '<' ? pad : align == '^' ? pad - pad / 2 : 0;
    size_t start = 0;
    if (align == '=') {
        if (tmp.len && (tmp.data[0] == '-' || tmp.data[0] == '+')) {
            rc |= rp_buf_putc(b, tmp.data[0]);
            start = 1;
        }
        left = pad;
    }
    for (size_t i = 0; i < left && rc == 0; i++)
        rc = rp_buf_putc(b, fill);
    if (rc == 0 && tmp.len)
        rc = rp_buf_append(b, tmp.data + start, tmp.len - start);
    for (size_t i = 0; i < right && rc == 0; i++)
        rc = rp_buf_putc(b, fill);
    rp_buf_deinit(&tmp);
    return rc ? jr_nomem(r) : 0;
}

/* str.format: scans the format string for {field[.attr][[key]][!conv][:spec]}, resolving
 * automatic, numbered and named fields; {{ and }} are literal braces. */
int rp_jinja_str_format(jrender *r, jv fmt, const jargs *args, jv *out)
{
    rp_buf b = {0};
    const char *s = fmt.u.s, *e = s + fmt.n;
    size_t auto_idx = 0;
    int rc = 0;
    while (s < e && rc == 0) {
        if (*s == '{' && s + 1 < e && s[1] == '{') {
            rc = rp_buf_putc(&b, '{') ? jr_nomem(r) : 0;
            s += 2;
            continue;
        }
        if (*s == '}' && s + 1 < e && s[1] == '}') {
            rc = rp_buf_putc(&b, '}') ? jr_nomem(r) : 0;
            s += 2;
            continue;
        }
        if (*s == '}') {
            rc = jr_fail(r, "ValueError: Single '}' encountered in format string");
            break;
        }
        if (*s != '{') {
            rc = rp_buf_putc(&b, *s++) ? jr_nomem(r) : 0;
            continue;
        }
        const char *f = ++s;
        int depth = 1;
        while (s < e && depth) {
            if (*s == '{')
                depth++;
            else if (*s == '}')
                depth--;
            if (depth)
                s++;
        }
        if (s >= e) {
            rc = jr_fail(r, "ValueError: Single '{' encountered in format string");
            break;
        }
        const char *fe = s++;
        const char *name_end = f;
        while (name_end < fe && *name_end != '!' && *name_end != ':' && *name_end != '.' && *name_end != '[')
            name_end++;
        jv v;
        if (name_end == f) {
            if (auto_idx >= args->n_pos) {
                rc = jr_fail(r, "IndexError: Replacement index %zu out of range for positional args tuple", auto_idx);
                break;
            }
            v = args->pos[auto_idx++];
        } else if (isdigit((unsigned char)*f)) {
            size_t idx = (size_t)strtoul(f, NULL, 10);
            if (idx >= args->n_pos) {
                rc = jr_fail(r, "IndexError: Replacement index %zu out of range for positional args tuple", idx);
                break;
            }
            v = args->pos[idx];
        } else {
            size_t k;
            for (k = 0; k < args->n_kw; k++)
                if (strlen(args->kw_names[k]) == (size_t)(name_end - f) &&
                    memcmp(args->kw_names[k], f, (size_t)(name_end - f)) == 0)
                    break;
            if (k == args->n_kw) {
                rc = jr_fail(r, "KeyError: '%.*s'", (int)(name_end - f), f);
                break;
            }
            v = args->kw[k];
        }
        const char *p = name_end;
        while (rc == 0 && p < fe && (*p == '.' || *p == '[')) {
            if (*p == '.') {
                const char *q = ++p;
                while (p < fe && *p != '.' && *p != '[' && *p != '!' && *p != ':')
                    p++;
                rc = jr_getattr(r, v, q, (size_t)(p - q), &v);
            } else {
                const char *q = ++p;
                while (p < fe && *p != ']')
                    p++;
                jv key = isdigit((unsigned char)*q) ? jv_int(strtoll(q, NULL, 10)) : jv_str(q, (size_t)(p - q));
                rc = jr_getitem(r, v, key, &v);
                if (p < fe)
                    p++;
            }
            if (rc == 0 && v.type == JV_UNDEF)
                rc = jr_undefined_error(r, v);
        }
        if (rc)
            break;
        char conv = 0;
        if (p < fe && *p == '!') {
            conv = p + 1 < fe ? p[1] : 0;
            p += 2;
        }
        fspec spec = {.fill = ' '};
        if (p < fe && *p == ':')
            parse_spec(p + 1, fe, &spec);
        if (conv == 'r' || conv == 'a') {
            rp_buf t = {0};
            if (jv_write_repr(&t, v)) {
                rp_buf_deinit(&t);
                rc = jr_nomem(r);
                break;
            }
            rc = jv_str_dup(r->a, t.data ? t.data : "", t.len, &v) ? jr_nomem(r) : 0;
            rp_buf_deinit(&t);
            if (rc)
                break;
        } else if (conv == 's') {
            rc = jr_str(r, v, &v);
        }
        if (rc == 0)
            rc = format_value(r, &b, v, &spec, false);
        if (rc == 0 && b.len > r->out_limit)
            rc = jr_fail(r, "MemoryError: formatted string too large");
    }
    if (rc) {
        rp_buf_deinit(&b);
        return -1;
    }
    return buf_to_str(r, &b, out);
}

/* str % args (printf-style): %[(key)][flags][width][.prec]type over a tuple, one value or a
 * mapping; too few or too many arguments fail as in Python. */
int rp_jinja_str_percent(jrender *r, jv fmt, jv argv, jv *out)
{
    rp_buf b = {0};
    const jv *items = &argv;
    size_t n_items = 1, next = 0;
    if (argv.type == JV_LIST && (argv.flags & JV_F_TUPLE)) {
        items = argv.u.l->items;
        n_items = argv.u.l->n;
    }
    const char *s = fmt.u.s, *e = s + fmt.n;
    int rc = 0;
    while (s < e && rc == 0) {
        if (*s != '%') {
            rc = rp_buf_putc(&b, *s++) ? jr_nomem(r) : 0;
            continue;
        }
        s++;
        if (s < e && *s == '%') {
            rc = rp_buf_putc(&b, '%') ? jr_nomem(r) : 0;
            s++;
            continue;
        }
        jv v;
        if (s < e && *s == '(') {
            const char *k = ++s;
            while (s < e && *s != ')')
                s++;
            if (argv.type == JV_UNDEF) {
                rc = jr_undefined_error(r, argv);
                break;
            }
            if (argv.type != JV_DICT) {
                rc = jr_fail(r, "TypeError: format requires a mapping");
                break;
            }
            jv *hit = jv_dict_get_str(argv.u.d, k, (size_t)(s - k));
            if (!hit) {
                rc = jr_fail(r, "KeyError: '%.*s'", (int)(s - k), k);
                break;
            }
            v = *hit;
            s++;
        } else {
            if (next >= n_items) {
                rc = jr_fail(r, "TypeError: not enough arguments for format string");
                break;
            }
            v = items[next++];
        }
        fspec f = {.fill = ' '};
        while (s < e && strchr("-+ #0", *s)) {
            if (*s == '-')
                f.alt = true; /* left align (reuses alt) */
            else if (*s == '0')
                f.zero = true;
            else if (*s == '+')
                f.sign = '+';
            s++;
        }
        while (s < e && isdigit((unsigned char)*s))
            f.width = digit_acc(f.width, *s++);
        if (s < e && *s == '.') {
            s++;
            f.has_prec = true;
            while (s < e && isdigit((unsigned char)*s))
                f.prec = digit_acc(f.prec, *s++);
        }
        if (s >= e) {
            rc = jr_fail(r, "ValueError: incomplete format");
            break;
        }
        f.type = *s++;
        if (f.type == 'i' || f.type == 'u')
            f.type = 'd';
        if (f.alt)
            f.zero = false;
        rc = format_value(r, &b, v, &f, true);
        if (rc == 0 && b.len > r->out_limit)
            rc = jr_fail(r, "MemoryError: formatted string too large");
    }
    /* a single non-tuple argument with __getitem__ (list, dict) counts as a mapping: unused is fine */
    bool mapping_like = argv.type == JV_DICT || argv.type == JV_UNDEF ||
                        (argv.type == JV_LIST && !(argv.flags & JV_F_TUPLE));
    if (rc == 0 && !mapping_like && next < n_items)
        rc = jr_fail(r, "TypeError: not all arguments converted during string formatting");
    if (rc) {
        rp_buf_deinit(&b);
        return -1;
    }
    return buf_to_str(r, &b, out);
}

/* ---- method dispatch --------------------------------------------------------------------- */

static int find(jrender *r, jv s, jv sub, bool rev, int64_t *out)
{
    if (sub.type != JV_STR)
        return jr_fail(r, "TypeError: must be str, not %s", jv_type_name(sub));
    *out = -1;
    if (sub.n > s.n)
        return 0;
    size_t at = SIZE_MAX;
    if (!rev) {
        const char *h = sub.n ? memmem(s.u.s, s.n, sub.u.s, sub.n) : s.u.s;
        if (h)
            at = (size_t)(h - s.u.s);
    } else {
        for (size_t k = s.n - sub.n + 1; k-- > 0;)
            if (memcmp(s.u.s + k, sub.u.s, sub.n) == 0) {
                at = k;
                break;
            }
    }
    if (at != SIZE_MAX)
        *out = (int64_t)rp_jinja_utf8_len(s.u.s, at);
    return 0;
}

/* s[start:end] by code points with Python's index clamping (start/end may be None or absent).
 * *cp_off is the window's start in code points; false when start lies beyond the string. */
static bool str_window(jv s, jv start, jv end, jv *win, int64_t *cp_off)
{
    int64_t nc = (int64_t)rp_jinja_utf8_len(s.u.s, s.n);
    int64_t b = (start.type == JV_INT || start.type == JV_BOOL) ? start.u.i : 0;
    int64_t e = (end.type == JV_INT || end.type == JV_BOOL) ? end.u.i : nc;
    if (b < 0)
        b = b + nc < 0 ? 0 : b + nc;
    if (e < 0)
        e = e + nc < 0 ? 0 : e + nc;
    if (b > nc)
        return false;
    if (e > nc)
        e = nc;
    if (e < b)
        e = b;
    size_t ob = 0, oe = 0, k = 0;
    for (size_t i = 0; i <= s.n; i++) {
        if (i == s.n || ((unsigned char)s.u.s[i] & 0xc0) != 0x80) {
            if ((int64_t)k == b)
                ob = i;
            if ((int64_t)k == e)
                oe = i;
            k++;
        }
    }
    *win = jv_str(s.u.s + ob, oe - ob);
    *cp_off = b;
    return true;
}

static int affix(jrender *r, jv s, jv arg, bool end, bool *out)
{
    *out = false;
    if (arg.type == JV_LIST && (arg.flags & JV_F_TUPLE)) {
        for (size_t i = 0; i < arg.u.l->n && !*out; i++)
            if (affix(r, s, arg.u.l->items[i], end, out))
                return -1;
        return 0;
    }
    if (arg.type != JV_STR)
        return jr_fail(r, "TypeError: %s first arg must be str or a tuple of str, not %s",
                       end ? "endswith" : "startswith", jv_type_name(arg));
    if (arg.n <= s.n)
        *out = memcmp(end ? s.u.s + s.n - arg.n : s.u.s, arg.u.s, arg.n) == 0;
    return 0;
}

static bool all_chars(jv s, bool (*pred)(int32_t))
{
    if (s.n == 0)
        return false;
    for (size_t i = 0; i < s.n;) {
        int32_t c;
        i += dec(s.u.s, s.n, i, &c);
        if (!pred(c))
            return false;
    }
    return true;
}

static bool is_alnum(int32_t c) { return is_alpha(c) || is_numeric(c); }

static int case_test(jv s, bool upper)
{
    bool any = false;
    for (size_t i = 0; i < s.n;) {
        int32_t c;
        i += dec(s.u.s, s.n, i, &c);
        if (upper ? is_cased_lower(c) : is_cased_upper(c))
            return 0;
        if (is_cased(c))
            any = true;
    }
    return any;
}

static int justify(jrender *r, jv s, jv width, jv fill, char align, jv *out)
{
    if (width.type != JV_INT && width.type != JV_BOOL)
        return jr_fail(r, "TypeError: integer argument expected");
    if (align == '^') { /* str.center: the odd pad goes left when the width is odd (CPython's pad()) */
        int64_t w = width.u.i > 100000 ? 100000 : width.u.i;
        int64_t len = (int64_t)rp_jinja_utf8_len(s.u.s, s.n), marg = w - len;
        if (marg <= 0) {
            *out = s;
            return 0;
        }
        int64_t left = marg / 2 + (marg & w & 1);
        char fc = fill.type == JV_STR && fill.n == 1 ? fill.u.s[0] : ' ';
        rp_buf b = {0};
        int rc = 0;
        for (int64_t i = 0; i < left && rc == 0; i++)
            rc = rp_buf_putc(&b, fc);
        if (rc == 0)
            rc = rp_buf_append(&b, s.u.s, s.n);
        for (int64_t i = left; i < marg && rc == 0; i++)
            rc = rp_buf_putc(&b, fc);
        if (rc) {
            rp_buf_deinit(&b);
            return jr_nomem(r);
        }
        return buf_to_str(r, &b, out);
    }
    fspec f = {.fill = ' ', .align = align, .width = (int)(width.u.i > 100000 ? 100000 : width.u.i)};
    if (fill.type == JV_STR && fill.n == 1)
        f.fill = fill.u.s[0];
    rp_buf b = {0};
    if (format_value(r, &b, s, &f, false)) {
        rp_buf_deinit(&b);
        return -1;
    }
    return buf_to_str(r, &b, out);
}

/* Python str methods, one branch per method name (a flat dispatch; each branch binds its
 * arguments by Python's parameter names and follows the CPython behaviour). */
static int str_method(jrender *r, jv s, const char *m, const jargs *args, jv *out)
{
    jv a[3];
    unsigned present = 0;
#define M(name) (strcmp(m, name) == 0)
#define BIND(...)                                                                              \
    do {                                                                                       \
        static const char *const names_[] = {__VA_ARGS__};                                     \
        if (jr_bind(r, m, args, names_, RP_ARRAY_LEN(names_), a, &present))                    \
            return -1;                                                                         \
    } while (0)
    if (M("format"))
        return rp_jinja_str_format(r, s, args, out);
    if (M("upper") || M("lower") || M("title") || M("capitalize") || M("swapcase") || M("casefold")) {
        if (args->n_pos || args->n_kw)
            return jr_fail(r, "TypeError: str.%s() takes no arguments", m);
        int mode = M("upper") ? 'u' : M("lower") ? 'l' : M("casefold") ? 'f' : M("title") ? 't' : M("swapcase") ? 's' : 'c';
        return rp_jinja_str_case(r, s, mode, out);
    }
    if (M("strip") || M("lstrip") || M("rstrip")) {
        BIND("chars");
        return rp_jinja_str_strip(r, s, a[0], m[0] == 's' ? 'b' : m[0], out);
    }
    if (M("split") || M("rsplit")) {
        BIND("sep", "maxsplit");
        int64_t maxsplit = -1;
        if (present & 2) {
            if (a[1].type != JV_INT)
                return jr_fail(r, "TypeError: maxsplit must be an integer");
            maxsplit = a[1].u.i;
        }
        return split(r, s, a[0], maxsplit, m[0] == 'r', out);
    }
    if (M("splitlines")) {
        BIND("keepends");
        return splitlines(r, s, jv_truthy(a[0]), out);
    }
    if (M("startswith") || M("endswith")) {
        BIND("prefix", "start", "end");
        if (!(present & 1))
            return jr_fail(r, "TypeError: %s() takes at least 1 argument (0 given)", m);
        jv sub = s;
        int64_t off;
        if ((present & 6) && !str_window(s, (present & 2) ? a[1] : jv_none(), (present & 4) ? a[2] : jv_none(),
                                         &sub, &off)) {
            *out = jv_bool(false);
            return 0;
        }
        bool res;
        if (affix(r, sub, a[0], m[0] == 'e', &res))
            return -1;
        *out = jv_bool(res);
        return 0;
    }
    if (M("replace")) {
        BIND("old", "new", "count");
        if (a[0].type != JV_STR || a[1].type != JV_STR)
            return jr_fail(r, "TypeError: replace() arguments must be str");
        int64_t count = (present & 4) && a[2].type == JV_INT ? a[2].u.i : -1;
        return rp_jinja_str_replace(r, s, a[0], a[1], count, out);
    }
    if (M("find") || M("rfind") || M("index") || M("rindex") || M("count")) {
        BIND("sub", "start", "end");
        if (!(present & 1))
            return jr_fail(r, "TypeError: %s() takes at least 1 argument (0 given)", m);
        if (a[0].type != JV_STR)
            return jr_fail(r, "TypeError: must be str, not %s", jv_type_name(a[0]));
        int64_t off = 0;
        if ((present & 6) && !str_window(s, (present & 2) ? a[1] : jv_none(), (present & 4) ? a[2] : jv_none(),
                                         &s, &off)) {
            if (M("index") || M("rindex"))
                return jr_fail(r, "ValueError: substring not found");
            *out = jv_int(M("count") ? 0 : -1);
            return 0;
        }
        if (M("count")) {
            int64_t c = 0;
            if (a[0].n == 0) {
                c = (int64_t)rp_jinja_utf8_len(s.u.s, s.n) + 1;
            } else {
                for (size_t i = 0; i + a[0].n <= s.n;) {
                    const char *h = memmem(s.u.s + i, s.n - i, a[0].u.s, a[0].n);
                    if (!h)
                        break;
                    c++;
                    i = (size_t)(h - s.u.s) + a[0].n;
                }
            }
            *out = jv_int(c);
            return 0;
        }
        int64_t pos;
        if (find(r, s, a[0], m[0] == 'r', &pos))
            return -1;
        if (pos < 0 && (M("index") || M("rindex")))
            return jr_fail(r, "ValueError: substring not found");
        *out = jv_int(pos < 0 ? pos : pos + off);
        return 0;
    }
    if (M("join")) {
        BIND("iterable");
        jv_list *items;
        if (jr_iter_list(r, a[0], &items))
            return -1;
        rp_buf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (items->items[i].type != JV_STR) {
                rp_buf_deinit(&b);
                return jr_fail(r, "TypeError: sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(items->items[i]));
            }
            if ((i && rp_buf_append(&b, s.u.s, s.n)) ||
                rp_buf_append(&b, items->items[i].u.s, items->items[i].n)) {
                rp_buf_deinit(&b);
                return jr_nomem(r);
            }
            if (b.len > r->out_limit) {
                rp_buf_deinit(&b);
                return jr_fail(r, "MemoryError: joined string too large");
            }
        }
        return buf_to_str(r, &b, out);
    }
    if (M("isdigit") || M("isdecimal")) {
        *out = jv_bool(all_chars(s, is_digit));
        return 0;
    }
    if (M("isnumeric")) {
        *out = jv_bool(all_chars(s, is_numeric));
        return 0;
    }
    if (M("isalpha")) {
        *out = jv_bool(all_chars(s, is_alpha));
        return 0;
    }
    if (M("isalnum")) {
        *out = jv_bool(all_chars(s, is_alnum));
        return 0;
    }
    if (M("isspace")) {
        *out = jv_bool(all_chars(s, py_space));
        return 0;
    }
    if (M("isupper") || M("islower")) {
        *out = jv_bool(case_test(s, m[2] == 'u'));
        return 0;
    }
    if (M("isascii")) {
        *out = jv_bool(rp_jinja_utf8_len(s.u.s, s.n) == s.n && memchr(s.u.s, 0x80, 0) == NULL);
        for (size_t i = 0; i < s.n; i++)
            if ((unsigned char)s.u.s[i] >= 0x80)
                *out = jv_bool(false);
        return 0;
    }
    if (M("removeprefix") || M("removesuffix")) {
        BIND("affix");
        if (a[0].type != JV_STR)
            return jr_fail(r, "TypeError: %s() argument must be str", m);
        bool hit;
        bool suffix = M("removesuffix");
        if (affix(r, s, a[0], suffix, &hit))
            return -1;
        *out = !hit ? s : suffix ? jv_str(s.u.s, s.n - a[0].n) : jv_str(s.u.s + a[0].n, s.n - a[0].n);
        return 0;
    }
    if (M("partition") || M("rpartition")) {
        BIND("sep");
        int64_t pos;
        if (a[0].type != JV_STR || a[0].n == 0)
            return jr_fail(r, "ValueError: empty separator");
        if (find(r, s, a[0], m[0] == 'r', &pos))
            return -1;
        if (jv_list_new(r->a, 3, out))
            return jr_nomem(r);
        out->flags = JV_F_TUPLE;
        jv_list *l = out->u.l;
        l->n = 3;
        if (pos < 0) {
            bool right = m[0] == 'r';
            l->items[0] = right ? jv_str("", 0) : s;
            l->items[1] = jv_str("", 0);
            l->items[2] = right ? s : jv_str("", 0);
            return 0;
        }
        size_t at = 0;
        for (int64_t k = 0; k < pos; k++) {
            at++;
            while (at < s.n && ((unsigned char)s.u.s[at] & 0xc0) == 0x80)
                at++;
        }
        l->items[0] = jv_str(s.u.s, at);
        l->items[1] = a[0];
        l->items[2] = jv_str(s.u.s + at + a[0].n, s.n - at - a[0].n);
        return 0;
    }
    if (M("center") || M("ljust") || M("rjust")) {
        BIND("width", "fillchar");
        return justify(r, s, a[0], a[1], M("center") ? '^' : M("ljust") ? '<' : '>', out);
    }
    if (M("zfill")) {
        BIND("width");
        fspec f = {.fill = '0', .align = '=', .width = a[0].type == JV_INT ? (int)(a[0].u.i > 100000 ? 100000 : a[0].u.i) : 0};
        rp_buf b = {0};
        if (format_value(r, &b, s, &f, false)) {
            rp_buf_deinit(&b);
            return -1;
        }
        return buf_to_str(r, &b, out);
    }
#undef BIND
#undef M
    return jr_fail(r, "TypeError: str.%s() is not supported by rapid's template engine", m);
}

static int dict_method(jrender *r, jv d, const char *m, const jargs *args, jv *out)
{
    if (strcmp(m, "get") == 0) {
        jv a[2];
        unsigned present;
        static const char *const names[] = {"key", "default"};
        if (jr_bind(r, "get", args, names, 2, a, &present))
            return -1;
        if (!(present & 1))
            return jr_fail(r, "TypeError: get expected at least 1 argument, got 0");
        jv *v = jv_dict_get(d.u.d, a[0]);
        *out = v ? *v : (present & 2) ? a[1] : jv_none();
        return 0;
    }
    if (args->n_pos || args->n_kw)
        return jr_fail(r, "TypeError: dict.%s() takes no arguments", m);
    jv_dict *dd = d.u.d;
    if (strcmp(m, "copy") == 0) {
        if (jv_dict_new(r->a, dd->n, out))
            return jr_nomem(r);
        jv_copy(out->u.d->keys, dd->keys, dd->n * sizeof(jv));
        jv_copy(out->u.d->vals, dd->vals, dd->n * sizeof(jv));
        out->u.d->n = dd->n;
        return 0;
    }
    if (jv_list_new(r->a, dd->n, out))
        return jr_nomem(r);
    out->flags = m[0] == 'k' ? JV_F_KEYS : m[0] == 'v' ? JV_F_VALUES : JV_F_VIEW;
    for (size_t i = 0; i < dd->n; i++) {
        if (m[0] == 'k') {
            out->u.l->items[i] = dd->keys[i];
        } else if (m[0] == 'v') {
            out->u.l->items[i] = dd->vals[i];
        } else {
            jv pair;
            if (jv_list_new(r->a, 2, &pair))
                return jr_nomem(r);
            pair.flags = JV_F_TUPLE;
            pair.u.l->items[0] = dd->keys[i];
            pair.u.l->items[1] = dd->vals[i];
            pair.u.l->n = 2;
            out->u.l->items[i] = pair;
        }
    }
    out->u.l->n = dd->n;
    return 0;
}

static int list_method(jrender *r, jv l, const char *m, const jargs *args, jv *out)
{
    if (strcmp(m, "copy") == 0) {
        if (jv_list_new(r->a, l.u.l->n, out))
            return jr_nomem(r);
        jv_copy(out->u.l->items, l.u.l->items, l.u.l->n * sizeof(jv));
        out->u.l->n = l.u.l->n;
        return 0;
    }
    if (args->n_pos < 1)
        return jr_fail(r, "TypeError: %s expected 1 argument", m);
    int64_t c = 0;
    for (size_t i = 0; i < l.u.l->n; i++)
        if (jv_equal(l.u.l->items[i], args->pos[0])) {
            if (m[0] == 'i') {
                *out = jv_int((int64_t)i);
                return 0;
            }
            c++;
        }
    if (m[0] == 'i')
        return jr_fail(r, "ValueError: value is not in list");
    *out = jv_int(c);
    return 0;
}

int rp_jinja_call_method(jrender *r, jv self, const char *name, const jargs *args, jv *out)
{
    switch (self.type) {
    case JV_STR:
        return str_method(r, self, name, args, out);
    case JV_DICT:
        return dict_method(r, self, name, args, out);
    case JV_LIST:
        return list_method(r, self, name, args, out);
    case JV_LOOP:
        return jr_loop_method(r, self, name, args, out);
    case JV_NS:
        if (strcmp(name, "joiner") == 0)
            return jr_joiner_call(r, self, out);
        return jr_fail(r, "TypeError: 'Namespace' object has no method '%s'", name);
    default:
        return jr_fail(r, "TypeError: '%s' object has no method '%s'", jv_type_name(self), name);
    }
}
