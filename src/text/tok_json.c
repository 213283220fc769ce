/* text/tok_json.c - a fast path for the two big members of tokenizer.json (model.vocab and
 * model.merges: hundreds of thousands of short strings). A general DOM parser spends most of
 * the load time allocating them; this scanner walks the text once, unescapes strings into
 * one reusable buffer and hands them to callbacks. The rest of the file (small) still goes
 * through jansson, with these two members blanked out in place.
 */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "text/tok_json.h"
#include "text/unicode.h"

/* Word-at-a-time helpers: tokenizer.json files are mostly indentation and short strings. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t load8(const char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* non-zero when some byte of w is zero */
static inline uint64_t has_zero(uint64_t w)
{
    return (w - ONES) & ~w & HIGHS;
}

static const char *ws(const char *p, const char *e)
{
    while (e - p >= 8 && load8(p) == 0x2020202020202020ULL) /* runs of indentation */
        p += 8;
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* p at '"': returns the position after the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *e)
{
    p++;
    while (p < e) {
        const char *q = memchr(p, '"', (size_t)(e - p));
        if (!q)
            return NULL;
        /* count the backslashes before the quote */
        const char *b = q;
        while (b > p && b[-1] == '\\')
            b--;
        if (((q - b) & 1) == 0)
            return q + 1;
        p = q + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *e)
{
    p = ws(p, e);
    if (p >= e)
        return NULL;
    if (*p == '"')
        return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        /* one byte loop, strings inline (the big members hold ~10^5 short strings: a call
         * per string costs more than the scan) */
        int depth = 0;
        while (p < e) {
            /* to the next quote or bracket, 8 bytes at a time ('[' | 0x20 is '{', ']' | 0x20
             * is '}', and no other byte maps to either) */
            while (e - p >= 8) {
                uint64_t w = load8(p), f = w | 0x2020202020202020ULL;
                if (has_zero(w ^ (ONES * '"')) | has_zero(f ^ (ONES * '{')) |
                    has_zero(f ^ (ONES * '}')))
                    break;
                p += 8;
            }
            char c = *p;
            if (c == '"') {
                for (p++; p < e && *p != '"'; p++)
                    if (*p == '\\' && ++p >= e)
                        return NULL;
                if (p >= e)
                    return NULL;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if ((c == '}' || c == ']') && --depth == 0) {
                return p + 1;
            }
            p++;
        }
        return NULL;
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' &&
           *p != '\r' && *p != '\t')
        p++;
    return p;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int hex4(const char *p, const char *e, uint32_t *v)
{
    if (e - p < 4)
        return -1;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexv(p[i]);
        if (h < 0)
            return -1;
        r = r * 16 + (uint32_t)h;
    }
    *v = r;
    return 0;
}

/* p at '"': the string's text in *sp, *sn: in place when it has no escapes, else unescaped
 * into out. Returns the position after the string or NULL. */
static const char *read_string_slow(const char *p, const char *e, rp_buf *out);

static inline const char *read_str(const char *p, const char *e, rp_buf *out, const char **sp,
                                   size_t *sn)
{
    const char *q = p + 1;
    while (q < e && *q != '"' && *q != '\\')
        q++;
    if (q < e && *q == '"') {
        *sp = p + 1;
        *sn = (size_t)(q - p - 1);
        return q + 1;
    }
    const char *r = read_string_slow(p, e, out);
    *sp = out->data ? out->data : "";
    *sn = out->len;
    return r;
}

static const char *read_string_slow(const char *p, const char *e, rp_buf *out)
{
    rp_buf_reset(out);
    p++;
    for (;;) {
        const char *q = p;
        while (q < e && *q != '"' && *q != '\\')
            q++;
        if (q >= e)
            return NULL;
        if (q > p && rp_buf_append(out, p, (size_t)(q - p)))
            return NULL;
        if (*q == '"')
            return q + 1;
        q++;
        if (q >= e)
            return NULL;
        char c = *q++, o;
        switch (c) {
        case '"': o = '"'; break;
        case '\\': o = '\\'; break;
        case '/': o = '/'; break;
        case 'b': o = '\b'; break;
        case 'f': o = '\f'; break;
        case 'n': o = '\n'; break;
        case 'r': o = '\r'; break;
        case 't': o = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (hex4(q, e, &cp))
                return NULL;
            q += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (e - q < 6 || q[0] != '\\' || q[1] != 'u' || hex4(q + 2, e, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return NULL;
                q += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return NULL;
            }
            char tmp[4];
            int l = rp_utf8_encode(cp, tmp);
            if (rp_buf_append(out, tmp, (size_t)l))
                return NULL;
            p = q;
            continue;
        }
        default:
            return NULL;
        }
        if (rp_buf_putc(out, o))
            return NULL;
        p = q;
    }
}

/* Finds member `key` (no escapes in it) of the object starting at p: its value starts at
 * *vs, and ends at or before *ve. */
static int find_member(const char *p, const char *e, const char *key, const char **vs,
                       const char **ve)
{
    size_t kl = strlen(key);
    p = ws(p, e);
    if (p >= e || *p != '{')
        return 0;
    p++;
    for (;;) {
        p = ws(p, e);
        if (p >= e || *p != '"')
            return 0;
        const char *ks = p + 1;
        const char *kend = skip_string(p, e);
        if (!kend)
            return 0;
        int match = (size_t)(kend - 1 - ks) == kl && memcmp(ks, key, kl) == 0;
        p = ws(kend, e);
        if (p >= e || *p != ':')
            return 0;
        p = ws(p + 1, e);
        if (match) { /* the value runs to *ve at most: its end is not looked for */
            *vs = p;
            *ve = e;
            return 1;
        }
        const char *v_end = skip_value(p, e);
        if (!v_end)
            return 0;
        p = ws(v_end, e);
        if (p < e && *p == ',') {
            p++;
            continue;
        }
        return 0;
    }
}

static rp_status scan_vocab(const char *p, const char *e, tk_vocab_cb cb, void *ud,
                            const char **end);
static rp_status scan_merges(const char *p, const char *e, tk_merge_cb cb, void *ud,
                             const char **end);

int tk_json_find_model_parts(const char *buf, size_t n, tk_span *vocab, tk_span *merges,
                             tk_json_parts_cbs *cbs)
{
    const char *e = buf + n, *ms, *me;
    memset(vocab, 0, sizeof(*vocab));
    memset(merges, 0, sizeof(*merges));
    if (!find_member(buf, e, "model", &ms, &me))
        return 0;
    /* one pass over model's members */
    const char *p = ws(ms, me);
    if (p >= me || *p != '{')
        return 0;
    p++;
    for (;;) {
        p = ws(p, me);
        if (p >= me || *p != '"')
            break;
        const char *ks = p + 1, *kend = skip_string(p, me);
        if (!kend)
            break;
        size_t kl = (size_t)(kend - 1 - ks);
        p = ws(kend, me);
        if (p >= me || *p != ':')
            break;
        p = ws(p + 1, me);
        int is_vocab = kl == 5 && !memcmp(ks, "vocab", 5) && p < me && *p == '{';
        int is_merges = kl == 6 && !memcmp(ks, "merges", 6) && p < me && *p == '[';
        const char *v_end = NULL;
        if (cbs && (is_vocab || is_merges)) { /* parsed as they are found: one pass */
            rp_status st = is_vocab ? scan_vocab(p, me, cbs->vocab, cbs->ud, &v_end)
                                    : scan_merges(p, me, cbs->merge, cbs->ud, &v_end);
            if (st) {
                cbs->st = st;
                return 0;
            }
        } else {
            v_end = skip_value(p, me);
        }
        if (!v_end)
            break;
        if (is_vocab)
            vocab->p = p, vocab->n = (size_t)(v_end - p);
        else if (is_merges)
            merges->p = p, merges->n = (size_t)(v_end - p);
        p = ws(v_end, me);
        if (p < me && *p == ',') {
            p++;
            continue;
        }
        break;
    }
    return vocab->p != NULL;
}

void tk_json_blank(char *buf, const tk_span *s)
{
    if (!s->p || s->n < 2)
        return;
    char *p = buf + (s->p - buf);
    char open = p[0];
    memset(p, ' ', s->n);
    p[0] = open;
    p[1] = open == '{' ? '}' : ']';
}

/* The vocab object at p (a '{') up to e: entries to cb; *end: the position after it. */
static rp_status scan_vocab(const char *p, const char *e, tk_vocab_cb cb, void *ud,
                            const char **end)
{
    p++;
    rp_buf key = {0};
    rp_status st = RP_OK;
    for (;;) {
        p = ws(p, e);
        if (p < e && *p == '}') {
            *end = p + 1;
            break;
        }
        const char *ks;
        size_t kn;
        if (p >= e || *p != '"' || !(p = read_str(p, e, &key, &ks, &kn))) {
            st = RP_ERR_INVALID;
            break;
        }
        p = ws(p, e);
        if (p >= e || *p != ':') {
            st = RP_ERR_INVALID;
            break;
        }
        p = ws(p + 1, e);
        long long v = 0;
        int digits = 0;
        while (p < e && *p >= '0' && *p <= '9' && digits < 12) {
            v = v * 10 + (*p++ - '0');
            digits++;
        }
        if (!digits) {
            st = RP_ERR_INVALID;
            break;
        }
        if ((st = cb(ud, ks, kn, v)))
            break;
        p = ws(p, e);
        if (p < e && *p == ',')
            p++;
        else if (p >= e || *p != '}') {
            st = RP_ERR_INVALID;
            break;
        }
    }
    rp_buf_deinit(&key);
    return st;
}

rp_status tk_json_vocab(const tk_span *s, tk_vocab_cb cb, void *ud)
{
    const char *end;
    return scan_vocab(s->p, s->p + s->n, cb, ud, &end);
}

static rp_status scan_merges(const char *p, const char *e, tk_merge_cb cb, void *ud,
                             const char **end)
{
    p++;
    rp_buf a = {0}, b = {0};
    rp_status st = RP_OK;
    for (;;) {
        p = ws(p, e);
        if (p < e && *p == ']') {
            *end = p + 1;
            break;
        }
        if (p < e && *p == '"') {
            const char *as;
            size_t an;
            if (!(p = read_str(p, e, &a, &as, &an))) {
                st = RP_ERR_INVALID;
                break;
            }
            const char *sp = memchr(as, ' ', an);
            if (!sp) {
                st = RP_ERR_INVALID;
                break;
            }
            size_t al = (size_t)(sp - as);
            st = cb(ud, as, al, sp + 1, an - al - 1);
        } else if (p < e && *p == '[') {
            p = ws(p + 1, e);
            const char *as, *bs;
            size_t an, bn;
            if (p >= e || *p != '"' || !(p = read_str(p, e, &a, &as, &an))) {
                st = RP_ERR_INVALID;
                break;
            }
            p = ws(p, e);
            if (p >= e || *p != ',') {
                st = RP_ERR_INVALID;
                break;
            }
            p = ws(p + 1, e);
            if (p >= e || *p != '"' || !(p = read_str(p, e, &b, &bs, &bn))) {
                st = RP_ERR_INVALID;
                break;
            }
            p = ws(p, e);
            if (p >= e || *p != ']') {
                st = RP_ERR_INVALID;
                break;
            }
            p++;
            st = cb(ud, as, an, bs, bn);
        } else {
            st = RP_ERR_INVALID;
        }
        if (st)
            break;
        p = ws(p, e);
        if (p < e && *p == ',')
            p++;
        else if (p >= e || *p != ']') {
            st = RP_ERR_INVALID;
            break;
        }
    }
    rp_buf_deinit(&a);
    rp_buf_deinit(&b);
    return st;
}

rp_status tk_json_merges(const tk_span *s, tk_merge_cb cb, void *ud)
{
    const char *end;
    return scan_merges(s->p, s->p + s->n, cb, ud, &end);
}
