/* chat/jinja_lex.c - Jinja2 lexer (see jinja_lex.h for the whitespace rules it implements).
 *
 * Design notes:
 *  1. The source is first normalised (newlines, trailing newline) into an arena copy, so every
 *     later position test ("is this a line start?") looks at the same bytes Jinja2 looks at.
 *  2. Data mode finds the next "{{", "{%" or "{#"; the text before it is trimmed by the "-"
 *     or lstrip_blocks rule of that tag, exactly as Jinja2's tokeniter does it.
 *  3. Tag mode produces expression tokens until the matching end delimiter; "-" and "+" just
 *     before the delimiter are whitespace control, not operators.
 */
#include "chat/jinja_lex.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

typedef struct lexer {
    rp_arena *a;
    const char *s;
    size_t n, pos;
    int line;
    jtok *toks;
    size_t n_toks, cap;
    rp_err *err;
} lexer;

static int lex_fail(lexer *lx, const char *msg)
{
    rp_err_set(lx->err, RP_ERR_INVALID, "template syntax error, line %d: %s", lx->line, msg);
    return -1;
}

static int push(lexer *lx, jtok t)
{
    if (lx->n_toks == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtok *nt = RP_ARENA_NEW(lx->a, jtok, cap);
        if (!nt) {
            rp_err_set(lx->err, RP_ERR_NOMEM, "out of memory lexing the template");
            return -1;
        }
        if (lx->n_toks)
            memcpy(nt, lx->toks, lx->n_toks * sizeof(jtok));
        lx->toks = nt;
        lx->cap = cap;
    }
    lx->toks[lx->n_toks++] = t;
    return 0;
}

static void count_lines(lexer *lx, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (lx->s[i] == '\n')
            lx->line++;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Skips whitespace after a "-" end tag; returns the new position. */
static size_t skip_ws(const lexer *lx, size_t p)
{
    while (p < lx->n && is_space(lx->s[p]))
        p++;
    return p;
}

/* After an end delimiter at p (just past it): applies "-" (strip all) or trim_blocks. */
static size_t after_end(const lexer *lx, size_t p, char ctl, bool trim)
{
    if (ctl == '-')
        return skip_ws(lx, p);
    if (ctl != '+' && trim && p < lx->n && lx->s[p] == '\n')
        return p + 1;
    return p;
}

/* Emits the text [start, end) before a tag, trimmed for the tag's whitespace control. */
static int emit_text(lexer *lx, size_t start, size_t end, char ctl, bool lstrip)
{
    if (ctl == '-') {
        while (end > start && is_space(lx->s[end - 1]))
            end--;
    } else if (ctl != '+' && lstrip) {
        size_t l = end;
        while (l > start && lx->s[l - 1] != '\n')
            l--;
        bool line_start = l > start || start == 0 || lx->s[start - 1] == '\n';
        if (line_start) {
            bool ws = true;
            for (size_t i = l; i < end; i++)
                if (!is_space(lx->s[i]))
                    ws = false;
            if (ws)
                end = l;
        }
    }
    if (end > start)
        return push(lx, (jtok){.kind = JT_TEXT, .line = lx->line, .text = lx->s + start, .len = end - start});
    return 0;
}

/* Finds "{% endraw %}" (with optional -/+ controls) from p; sets body end, tag end, controls. */
static bool find_endraw(const lexer *lx, size_t p, size_t *body_end, size_t *tag_end, char *ctl_open,
                        char *ctl_close)
{
    for (size_t i = p; i + 1 < lx->n; i++) {
        if (lx->s[i] != '{' || lx->s[i + 1] != '%')
            continue;
        size_t j = i + 2;
        char co = 0;
        if (j < lx->n && (lx->s[j] == '-' || lx->s[j] == '+'))
            co = lx->s[j++];
        while (j < lx->n && is_space(lx->s[j]))
            j++;
        if (j + 6 > lx->n || memcmp(lx->s + j, "endraw", 6) != 0)
            continue;
        j += 6;
        while (j < lx->n && is_space(lx->s[j]))
            j++;
        char cc = 0;
        if (j < lx->n && (lx->s[j] == '-' || lx->s[j] == '+'))
            cc = lx->s[j++];
        if (j + 1 < lx->n && lx->s[j] == '%' && lx->s[j + 1] == '}') {
            *body_end = i;
            *tag_end = j + 2;
            *ctl_open = co;
            *ctl_close = cc;
            return true;
        }
    }
    return false;
}

/* At p (just past "{%" and its control char): is this "raw %}"? Sets the position after it. */
static bool is_raw_open(const lexer *lx, size_t p, size_t *after, char *ctl)
{
    while (p < lx->n && is_space(lx->s[p]))
        p++;
    if (p + 3 > lx->n || memcmp(lx->s + p, "raw", 3) != 0)
        return false;
    p += 3;
    while (p < lx->n && is_space(lx->s[p]))
        p++;
    char c = 0;
    if (p < lx->n && (lx->s[p] == '-' || lx->s[p] == '+'))
        c = lx->s[p++];
    if (p + 1 < lx->n && lx->s[p] == '%' && lx->s[p + 1] == '}') {
        *after = p + 2;
        *ctl = c;
        return true;
    }
    return false;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int put_utf8(rp_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return rp_buf_append(b, u, n);
}

/* Decodes a string literal body with Python's unicode-escape rules: one switch over the
 * escape letter (\n \t \xHH \uHHHH \UHHHHHHHH octal, unknown escapes kept verbatim). */
static int lex_string(lexer *lx, char q)
{
    size_t p = lx->pos + 1;
    rp_buf b = {0};
    int line0 = lx->line;
    int rc = 0;
    while (p < lx->n && lx->s[p] != q && rc == 0) {
        char c = lx->s[p];
        if (c == '\n')
            lx->line++;
        if (c != '\\') {
            rc = rp_buf_putc(&b, c);
            p++;
            continue;
        }
        if (p + 1 >= lx->n)
            break;
        char e = lx->s[p + 1];
        p += 2;
        switch (e) {
        case '\n': lx->line++; break;
        case '\\': rc = rp_buf_putc(&b, '\\'); break;
        case '\'': rc = rp_buf_putc(&b, '\''); break;
        case '"': rc = rp_buf_putc(&b, '"'); break;
        case 'a': rc = rp_buf_putc(&b, '\a'); break;
        case 'b': rc = rp_buf_putc(&b, '\b'); break;
        case 'f': rc = rp_buf_putc(&b, '\f'); break;
        case 'n': rc = rp_buf_putc(&b, '\n'); break;
        case 'r': rc = rp_buf_putc(&b, '\r'); break;
        case 't': rc = rp_buf_putc(&b, '\t'); break;
        case 'v': rc = rp_buf_putc(&b, '\v'); break;
        case 'x':
        case 'u':
        case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int i = 0; i < nd; i++) {
                int h = p < lx->n ? hexval(lx->s[p]) : -1;
                if (h < 0) {
                    rp_buf_deinit(&b);
                    return lex_fail(lx, "truncated \\x/\\u escape in a string");
                }
                cp = cp * 16 + (uint32_t)h;
                p++;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) {
                rp_buf_deinit(&b);
                return lex_fail(lx, "invalid code point escape in a string");
            }
            rc = put_utf8(&b, cp);
            break;
        }
        case 'N':
            rp_buf_deinit(&b);
            return lex_fail(lx, "\\N{name} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int i = 0; i < 2 && p < lx->n && lx->s[p] >= '0' && lx->s[p] <= '7'; i++)
                    cp = cp * 8 + (uint32_t)(lx->s[p++] - '0');
                rc = put_utf8(&b, cp);
            } else {
                char two[2] = {'\\', e};
                rc = rp_buf_append(&b, two, 2);
                if (e == '\n')
                    lx->line++;
            }
        }
    }
    if (rc) {
        rp_buf_deinit(&b);
        rp_err_set(lx->err, RP_ERR_NOMEM, "out of memory lexing the template");
        return -1;
    }
    if (p >= lx->n) {
        rp_buf_deinit(&b);
        lx->line = line0;
        return lex_fail(lx, "unterminated string");
    }
    char *text = rp_arena_strndup(lx->a, b.data ? b.data : "", b.len);
    size_t len = b.len;
    rp_buf_deinit(&b);
    if (!text) {
        rp_err_set(lx->err, RP_ERR_NOMEM, "out of memory lexing the template");
        return -1;
    }
    lx->pos = p + 1;
    return push(lx, (jtok){.kind = JT_STRING, .line = line0, .text = text, .len = len});
}

static int lex_number(lexer *lx)
{
    size_t p = lx->pos;
    const char *s = lx->s;
    char buf[128];
    size_t nb = 0;
    bool is_float = false;
    if (s[p] == '0' && p + 1 < lx->n && strchr("xXoObB", s[p + 1])) {
        int base = (s[p + 1] == 'x' || s[p + 1] == 'X') ? 16 : (s[p + 1] == 'o' || s[p + 1] == 'O') ? 8 : 2;
        p += 2;
        long long v = 0;
        size_t st = p;
        while (p < lx->n && (hexval(s[p]) >= 0 || s[p] == '_')) {
            if (s[p] != '_') {
                int h = hexval(s[p]);
                if (h >= base)
                    break;
                v = v * base + h;
            }
            p++;
        }
        if (p == st)
            return lex_fail(lx, "malformed number");
        lx->pos = p;
        return push(lx, (jtok){.kind = JT_INT, .line = lx->line, .text = s + st, .len = p - st, .ival = v});
    }
    size_t st = p;
    while (p < lx->n && (isdigit((unsigned char)s[p]) || s[p] == '_'))
        p++;
    if (p + 1 < lx->n && s[p] == '.' && isdigit((unsigned char)s[p + 1])) {
        is_float = true;
        p++;
        while (p < lx->n && (isdigit((unsigned char)s[p]) || s[p] == '_'))
            p++;
    }
    if (p < lx->n && (s[p] == 'e' || s[p] == 'E')) {
        size_t q = p + 1;
        if (q < lx->n && (s[q] == '+' || s[q] == '-'))
            q++;
        if (q < lx->n && isdigit((unsigned char)s[q])) {
            is_float = true;
            p = q;
            while (p < lx->n && (isdigit((unsigned char)s[p]) || s[p] == '_'))
                p++;
        }
    }
    for (size_t i = st; i < p && nb < sizeof buf - 1; i++)
        if (s[i] != '_')
            buf[nb++] = s[i];
    buf[nb] = 0;
    lx->pos = p;
    jtok t = {.kind = is_float ? JT_FLOAT : JT_INT, .line = lx->line, .text = s + st, .len = p - st};
    if (is_float)
        t.fval = strtod(buf, NULL);
    else
        t.ival = strtoll(buf, NULL, 10);
    return push(lx, t);
}

static const char *const k_ops2[] = {"**", "//", "==", "!=", "<=", ">="};

/* Lexes inside {{ }} or {% %} until the end delimiter; end is "}}" or "%}". */
static int lex_tag(lexer *lx, const char *end, jtok_kind end_kind, bool trim)
{
    int depth = 0; /* brackets: a "}}" inside a dict literal does not end the tag */
    for (;;) {
        while (lx->pos < lx->n && is_space(lx->s[lx->pos])) {
            if (lx->s[lx->pos] == '\n')
                lx->line++;
            lx->pos++;
        }
        if (lx->pos >= lx->n)
            return lex_fail(lx, end_kind == JT_VAR_END ? "unexpected end of template, expected '}}'"
                                                       : "unexpected end of template, expected '%}'");
        const char *s = lx->s + lx->pos;
        size_t left = lx->n - lx->pos;
        char ctl = 0;
        size_t skip = 0;
        if (depth > 0) {
            /* Jinja2 does not end a tag inside open brackets */
        } else if ((s[0] == '-' || s[0] == '+') && left >= 3 && s[1] == end[0] && s[2] == end[1]) {
            ctl = s[0];
            skip = 3;
        } else if (left >= 2 && s[0] == end[0] && s[1] == end[1]) {
            skip = 2;
        }
        if (skip && !(ctl == '+' && end_kind == JT_VAR_END)) {
            if (push(lx, (jtok){.kind = end_kind, .line = lx->line}))
                return -1;
            size_t p = lx->pos + skip;
            size_t np = after_end(lx, p, ctl, trim);
            count_lines(lx, p, np);
            lx->pos = np;
            return 0;
        }
        char c = s[0];
        if (c == '\'' || c == '"') {
            if (lex_string(lx, c))
                return -1;
            continue;
        }
        if (isdigit((unsigned char)c)) {
            if (lex_number(lx))
                return -1;
            continue;
        }
        if (isalpha((unsigned char)c) || c == '_' || (unsigned char)c >= 0x80) {
            size_t p = lx->pos;
            while (p < lx->n && (isalnum((unsigned char)lx->s[p]) || lx->s[p] == '_' ||
                                 (unsigned char)lx->s[p] >= 0x80))
                p++;
            if (push(lx, (jtok){.kind = JT_NAME, .line = lx->line, .text = s, .len = p - lx->pos}))
                return -1;
            lx->pos = p;
            continue;
        }
        size_t oplen = 0;
        for (size_t i = 0; i < RP_ARRAY_LEN(k_ops2); i++)
            if (left >= 2 && s[0] == k_ops2[i][0] && s[1] == k_ops2[i][1])
                oplen = 2;
        if (!oplen && strchr("+-*/%~<>=()[]{},.:|", c))
            oplen = 1;
        if (!oplen)
            return lex_fail(lx, "unexpected character in a tag");
        if (c == '(' || c == '[' || c == '{')
            depth++;
        else if ((c == ')' || c == ']' || c == '}') && depth > 0)
            depth--;
        if (push(lx, (jtok){.kind = JT_OP, .line = lx->line, .text = s, .len = oplen}))
            return -1;
        lx->pos += oplen;
    }
}

/* Copies src with \r\n and \r turned into \n and one trailing newline dropped. */
static char *normalise(rp_arena *a, const char *src, size_t len, size_t *out_len)
{
    char *d = rp_arena_alloc(a, len + 1);
    if (!d)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            d[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            d[o++] = src[i];
        }
    }
    if (o > 0 && d[o - 1] == '\n')
        o--;
    d[o] = 0;
    *out_len = o;
    return d;
}

static int lex_data(lexer *lx)
{
    while (lx->pos < lx->n) {
        size_t start = lx->pos, p = start;
        const char *tag = NULL;
        while (p + 1 < lx->n) {
            if (lx->s[p] == '{' && (lx->s[p + 1] == '{' || lx->s[p + 1] == '%' || lx->s[p + 1] == '#')) {
                tag = lx->s + p;
                break;
            }
            p++;
        }
        if (!tag) {
            if (emit_text(lx, start, lx->n, 0, false))
                return -1;
            count_lines(lx, start, lx->n);
            lx->pos = lx->n;
            return 0;
        }
        char kind = tag[1];
        char ctl = 0;
        size_t q = p + 2;
        if (q < lx->n && (lx->s[q] == '-' || lx->s[q] == '+'))
            ctl = lx->s[q++];
        bool lstrip = kind != '{';
        if (emit_text(lx, start, p, ctl, lstrip))
            return -1;
        count_lines(lx, start, p);
        if (kind == '#') {
            size_t e = q;
            while (e + 1 < lx->n && !(lx->s[e] == '#' && lx->s[e + 1] == '}'))
                e++;
            if (e + 1 >= lx->n)
                return lex_fail(lx, "missing end of comment tag");
            char cc = (e > q && (lx->s[e - 1] == '-' || lx->s[e - 1] == '+')) ? lx->s[e - 1] : 0;
            count_lines(lx, p, e + 2);
            size_t np = after_end(lx, e + 2, cc, true);
            count_lines(lx, e + 2, np);
            lx->pos = np;
            continue;
        }
        size_t after;
        char rctl;
        if (kind == '%' && is_raw_open(lx, q, &after, &rctl)) {
            size_t body_end, tag_end;
            char co, cc;
            if (!find_endraw(lx, after, &body_end, &tag_end, &co, &cc))
                return lex_fail(lx, "missing {% endraw %}");
            size_t bstart = after_end(lx, after, rctl, false); /* no trim_blocks after raw */
            count_lines(lx, p, bstart);
            lx->pos = bstart;
            if (emit_text(lx, bstart, body_end, co, true))
                return -1;
            count_lines(lx, bstart, tag_end);
            size_t np = after_end(lx, tag_end, cc, true);
            count_lines(lx, tag_end, np);
            lx->pos = np;
            continue;
        }
        if (push(lx, (jtok){.kind = kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, .line = lx->line}))
            return -1;
        lx->pos = q;
        if (kind == '{') {
            if (lex_tag(lx, "}}", JT_VAR_END, false))
                return -1;
        } else if (lex_tag(lx, "%}", JT_BLOCK_END, true)) {
            return -1;
        }
    }
    return 0;
}

int rp_jinja_lex(rp_arena *a, const char *src, size_t len, jinja_lexed *out, rp_err *err)
{
    lexer lx = {.a = a, .line = 1, .err = err};
    lx.s = normalise(a, src, len, &lx.n);
    if (!lx.s) {
        rp_err_set(err, RP_ERR_NOMEM, "out of memory lexing the template");
        return -1;
    }
    if (lex_data(&lx) || push(&lx, (jtok){.kind = JT_EOF, .line = lx.line}))
        return -1;
    out->toks = lx.toks;
    out->n = lx.n_toks;
    return 0;
}
