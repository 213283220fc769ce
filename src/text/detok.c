/* text/detok.c - decoding: the HF decoder chain over token strings, and the incremental
 * detokenizer for streaming (HF DecodeStream: decode a small window of ids and emit what
 * grew, holding back while the text ends in an incomplete UTF-8 sequence).
 */
#include <string.h>

#include "base/alloc.h"
#include "text/tok_impl.h"
#include "text/unicode.h"

typedef struct toks {
    rp_buf *v;
    int n, cap;
} toks;

static rp_status toks_push(toks *t, const char *s, size_t n)
{
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 16;
        rp_buf *v = rp_realloc(t->v, (size_t)cap * sizeof(rp_buf));
        if (!v)
            return RP_ERR_NOMEM;
        memset(v + t->cap, 0, (size_t)(cap - t->cap) * sizeof(rp_buf));
        t->v = v;
        t->cap = cap;
    }
    rp_buf *b = &t->v[t->n];
    rp_buf_reset(b);
    rp_status st = rp_buf_append(b, s, n);
    if (st)
        return st;
    t->n++;
    return RP_OK;
}

static void toks_free(toks *t)
{
    for (int i = 0; i < t->cap; i++)
        rp_buf_deinit(&t->v[i]);
    rp_free(t->v);
    memset(t, 0, sizeof(*t));
}

static const char *bdata(const rp_buf *b)
{
    return b->data ? b->data : "";
}

/* from_utf8_lossy: each maximal invalid subpart becomes U+FFFD. */
static rp_status append_lossy(rp_buf *out, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n) {
            if ((uint8_t)s[i] < 0x80) {
                i++;
                continue;
            }
            uint32_t cp;
            int l = rp_utf8_decode(s + i, n - i, &cp);
            if (!l)
                break;
            i += (size_t)l;
        }
        rp_status st = rp_buf_append(out, s + start, i - start);
        if (st)
            return st;
        if (i < n) {
            if ((st = rp_buf_append(out, "\xef\xbf\xbd", 3)))
                return st;
            i += (size_t)rp_utf8_invalid_len(s + i, n - i);
        }
    }
    return RP_OK;
}

static int byte_token(const char *s, size_t n, uint8_t *b)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return 0;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return 0;
        v = v * 16 + d;
    }
    *b = (uint8_t)v;
    return 1;
}

static rp_status replace_in(const tk_pattern *p, const char *content, size_t cl, rp_buf *b,
                            rp_buf *tmp)
{
    rp_buf_reset(tmp);
    if (p->re) {
        /* regex replace (rare in decoders): fall back to PCRE2 substitution */
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
        if (!md)
            return RP_ERR_NOMEM;
        size_t pos = 0;
        const char *s = bdata(b);
        rp_status st = RP_OK;
        while (!st && pos <= b->len) {
            int rc = pcre2_match(p->re, (PCRE2_SPTR)s, b->len, pos, 0, md, NULL);
            if (rc < 0)
                break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            st = rp_buf_append(tmp, s + pos, ov[0] - pos);
            if (!st)
                st = rp_buf_append(tmp, content, cl);
            pos = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
            if (ov[1] == ov[0] && ov[0] < b->len)
                st = st ? st : rp_buf_append(tmp, s + ov[0], 1);
        }
        if (!st && pos < b->len)
            st = rp_buf_append(tmp, s + pos, b->len - pos);
        pcre2_match_data_free(md);
        if (st)
            return st;
    } else {
        const char *s = bdata(b);
        size_t i = 0;
        while (i < b->len) {
            if (p->lit_len && i + p->lit_len <= b->len && memcmp(s + i, p->lit, p->lit_len) == 0) {
                if (rp_buf_append(tmp, content, cl))
                    return RP_ERR_NOMEM;
                i += p->lit_len;
            } else {
                if (rp_buf_putc(tmp, s[i]))
                    return RP_ERR_NOMEM;
                i++;
            }
        }
    }
    rp_buf t = *b;
    *b = *tmp;
    *tmp = t;
    return RP_OK;
}

static rp_status dec_apply(const tk_dec *d, toks *t, toks *spare)
{
    rp_status st = RP_OK;
    rp_buf tmp = {0};
    switch (d->kind) {
    case TK_DEC_SEQ:
        for (int i = 0; !st && i < d->n_sub; i++)
            st = dec_apply(&d->sub[i], t, spare);
        break;
    case TK_DEC_BYTELEVEL: {
        rp_buf bytes = {0};
        for (int i = 0; !st && i < t->n; i++) {
            const char *s = bdata(&t->v[i]);
            size_t n = t->v[i].len, mark = bytes.len, k = 0;
            int ok = 1;
            while (k < n && !st) {
                uint32_t cp;
                int l = rp_utf8_decode(s + k, n - k, &cp);
                int b = l ? rp_bytelevel_byte(cp) : -1;
                if (b < 0) {
                    ok = 0;
                    break;
                }
                st = rp_buf_putc(&bytes, (char)b);
                k += (size_t)l;
            }
            if (!ok && !st) {
                bytes.len = mark;
                st = rp_buf_append(&bytes, s, n);
            }
        }
        if (!st) {
            rp_buf_reset(&tmp);
            st = append_lossy(&tmp, bdata(&bytes), bytes.len);
        }
        if (!st) {
            t->n = 0;
            st = toks_push(t, bdata(&tmp), tmp.len);
        }
        rp_buf_deinit(&bytes);
        break;
    }
    case TK_DEC_BYTEFALLBACK: {
        spare->n = 0;
        rp_buf pend = {0};
        for (int i = 0; !st && i <= t->n; i++) {
            uint8_t b;
            if (i < t->n && byte_token(bdata(&t->v[i]), t->v[i].len, &b)) {
                st = rp_buf_putc(&pend, (char)b);
                continue;
            }
            if (pend.len) {
                if (rp_utf8_valid(pend.data, pend.len)) {
                    st = toks_push(spare, pend.data, pend.len);
                } else {
                    for (size_t k = 0; !st && k < pend.len; k++)
                        st = toks_push(spare, "\xef\xbf\xbd", 3);
                }
                rp_buf_reset(&pend);
            }
            if (!st && i < t->n)
                st = toks_push(spare, bdata(&t->v[i]), t->v[i].len);
        }
        rp_buf_deinit(&pend);
        toks x = *t;
        *t = *spare;
        *spare = x;
        break;
    }
    case TK_DEC_FUSE: {
        rp_buf_reset(&tmp);
        for (int i = 0; !st && i < t->n; i++)
            st = rp_buf_append(&tmp, bdata(&t->v[i]), t->v[i].len);
        if (!st) {
            t->n = 0;
            st = toks_push(t, bdata(&tmp), tmp.len);
        }
        break;
    }
    case TK_DEC_STRIP:
        for (int i = 0; !st && i < t->n; i++) {
            rp_buf *b = &t->v[i];
            size_t cl = d->content_len, a = 0, e = b->len;
            for (int k = 0; k < d->start && cl && a + cl <= e &&
                            memcmp(b->data + a, d->content, cl) == 0;
                 k++)
                a += cl;
            for (int k = 0; k < d->stop && cl && e >= a + cl &&
                            memcmp(b->data + e - cl, d->content, cl) == 0;
                 k++)
                e -= cl;
            if (a || e != b->len) {
                memmove(b->data, b->data + a, e - a);
                b->len = e - a;
                b->data[b->len] = 0;
            }
        }
        break;
    case TK_DEC_REPLACE:
        for (int i = 0; !st && i < t->n; i++)
            st = replace_in(&d->pat, d->content, d->content_len, &t->v[i], &tmp);
        break;
    case TK_DEC_METASPACE:
        for (int i = 0; !st && i < t->n; i++) {
            rp_buf *b = &t->v[i];
            rp_buf_reset(&tmp);
            size_t k = 0, rl = (size_t)d->repl_len;
            while (k < b->len && !st) {
                if (k + rl <= b->len && memcmp(b->data + k, d->repl, rl) == 0) {
                    if (!(i == 0 && d->prepend != TK_PREPEND_NEVER))
                        st = rp_buf_putc(&tmp, ' ');
                    k += rl;
                } else {
                    st = rp_buf_putc(&tmp, b->data[k]);
                    k++;
                }
            }
            rp_buf x = *b;
            *b = tmp;
            tmp = x;
        }
        break;
    case TK_DEC_WORDPIECE: {
        size_t pl = strlen(d->prefix);
        for (int i = 0; !st && i < t->n; i++) {
            rp_buf *b = &t->v[i];
            rp_buf_reset(&tmp);
            if (b->len >= pl && memcmp(bdata(b), d->prefix, pl) == 0)
                st = rp_buf_append(&tmp, bdata(b) + pl, b->len - pl);
            else {
                if (i != 0)
                    st = rp_buf_putc(&tmp, ' ');
                if (!st)
                    st = rp_buf_append(&tmp, bdata(b), b->len);
            }
            rp_buf x = *b;
            *b = tmp;
            tmp = x;
        }
        if (!st && d->cleanup) {
            static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm",
                                               " 's", " 've", " 're"};
            static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m",
                                             "'s", "'ve", "'re"};
            for (int i = 0; !st && i < t->n; i++)
                for (size_t r = 0; !st && r < RP_ARRAY_LEN(from); r++) {
                    tk_pattern p = {.lit = (char *)from[r], .lit_len = strlen(from[r])};
                    st = replace_in(&p, to[r], strlen(to[r]), &t->v[i], &tmp);
                }
        }
        break;
    }
    }
    rp_buf_deinit(&tmp);
    return st;
}

rp_status tk_decode_tokens(const rp_tokenizer *tok, const int32_t *ids, int n, int skip_special,
                           rp_buf *out)
{
    toks t = {0}, spare = {0};
    rp_status st = RP_OK;
    for (int i = 0; !st && i < n; i++) {
        int32_t id = ids[i];
        size_t l;
        const char *s = tk_strtab_get(&tok->strs, id, &l);
        if (!s)
            continue;
        if (skip_special && tok->is_special_tab[id])
            continue;
        st = toks_push(&t, s, l);
    }
    if (!st && tok->dec)
        st = dec_apply(tok->dec, &t, &spare);
    for (int i = 0; !st && i < t.n; i++) {
        if (!tok->dec && i > 0)
            st = rp_buf_putc(out, ' ');
        if (!st)
            st = rp_buf_append(out, bdata(&t.v[i]), t.v[i].len);
    }
    toks_free(&t);
    toks_free(&spare);
    return st;
}

rp_status rp_tokenizer_decode(const rp_tokenizer *tok, const int32_t *ids, int n,
                              int skip_special, char **out_text, size_t *out_len, rp_err *err)
{
    *out_text = NULL;
    if (out_len)
        *out_len = 0;
    rp_buf b = {0};
    rp_status st = tk_decode_tokens(tok, ids, n, skip_special, &b);
    if (!st && !b.data)
        st = rp_buf_reserve(&b, 1);
    if (st) {
        rp_buf_deinit(&b);
        return rp_err_set(err, st, "decode: out of memory");
    }
    if (out_len)
        *out_len = b.len;
    *out_text = rp_buf_take(&b);
    return RP_OK;
}

/* ---- incremental ----------------------------------------------------------------------- */

struct rp_detok {
    const rp_tokenizer *tok;
    int skip_special;
    int32_t *ids; /* the window */
    int n, cap;
    int prefix_index;
    rp_buf prefix; /* decode(window[0..n before the last step]) */
    rp_buf cur;
};

rp_detok *rp_detok_new(const rp_tokenizer *tok, int skip_special)
{
    rp_detok *d = rp_calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->tok = tok;
    d->skip_special = skip_special;
    return d;
}

static int ends_with_fffd(const rp_buf *b)
{
    return b->len >= 3 && memcmp(b->data + b->len - 3, "\xef\xbf\xbd", 3) == 0;
}

rp_status rp_detok_feed(rp_detok *d, int32_t id, rp_buf *out)
{
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 16;
        int32_t *v = rp_realloc(d->ids, (size_t)cap * sizeof(int32_t));
        if (!v)
            return RP_ERR_NOMEM;
        d->ids = v;
        d->cap = cap;
    }
    d->ids[d->n++] = id;
    rp_buf_reset(&d->cur);
    rp_status st = tk_decode_tokens(d->tok, d->ids, d->n, d->skip_special, &d->cur);
    if (st)
        return st;
    if (d->cur.len <= d->prefix.len || ends_with_fffd(&d->cur))
        return RP_OK;
    /* common prefix (normally all of prefix) */
    size_t k = 0;
    while (k < d->prefix.len && d->cur.data[k] == d->prefix.data[k])
        k++;
    if (k < d->prefix.len)
        k = d->prefix.len; /* decoder rewrote earlier text: never retract, emit the tail */
    if ((st = rp_buf_append(out, d->cur.data + k, d->cur.len - k)))
        return st;
    int new_prefix_index = d->n - d->prefix_index;
    memmove(d->ids, d->ids + d->prefix_index, (size_t)new_prefix_index * sizeof(int32_t));
    d->n = new_prefix_index;
    rp_buf_reset(&d->prefix);
    st = tk_decode_tokens(d->tok, d->ids, d->n, d->skip_special, &d->prefix);
    d->prefix_index = new_prefix_index;
    return st;
}

rp_status rp_detok_flush(rp_detok *d, rp_buf *out)
{
    rp_status st = RP_OK;
    if (d->n) {
        rp_buf_reset(&d->cur);
        st = tk_decode_tokens(d->tok, d->ids, d->n, d->skip_special, &d->cur);
        if (!st && d->cur.len > d->prefix.len)
            st = rp_buf_append(out, d->cur.data + d->prefix.len, d->cur.len - d->prefix.len);
    }
    d->n = 0;
    d->prefix_index = 0;
    rp_buf_reset(&d->prefix);
    return st;
}

void rp_detok_free(rp_detok *d)
{
    if (!d)
        return;
    rp_free(d->ids);
    rp_buf_deinit(&d->prefix);
    rp_buf_deinit(&d->cur);
    rp_free(d);
}
