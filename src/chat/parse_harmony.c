/* chat/parse_harmony.c - the Harmony state machine (see parse_harmony.h for the diagram).
 *
 * Input accumulates in `in`; text that is decided (content, reasoning) is handed to the sink
 * as soon as no marker can start in it; headers and call bodies stay in `in` until their end
 * marker so that a body that fails to parse can be kept whole as content.
 */
#include "chat/parse_harmony.h"

#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "chat/parse_impl.h"

#define H_START "<|start|>"
#define H_CHANNEL "<|channel|>"
#define H_MESSAGE "<|message|>"
#define H_END "<|end|>"
#define H_CALL "<|call|>"
#define H_RETURN "<|return|>"
#define MAX_HEADER 1024

typedef enum hstate { H_BEGIN, H_TEXT, H_HEADER, H_BODY, H_CALL_BODY } hstate;

struct rp_harmony {
    bool parse_calls;
    hstate st;
    rp_buf in;        /* pending input */
    size_t pos;       /* next byte of `in` to examine */
    size_t msg_start; /* HEADER/CALL_BODY: where the message's markup began */
    size_t body_start;
    bool reasoning; /* BODY: analysis channel */
    char name[256]; /* CALL_BODY: function name */
};

rp_status rp_harmony_new(bool parse_calls, rp_harmony **out)
{
    rp_harmony *h = rp_calloc(1, sizeof *h);
    if (!h) return RP_ERR_NOMEM;
    h->parse_calls = parse_calls;
    *out = h;
    return RP_OK;
}

void rp_harmony_free(rp_harmony *h)
{
    if (!h) return;
    rp_buf_deinit(&h->in);
    rp_free(h);
}

/* Index of the first marker of list in [from, n) into *at (*which); returns RP_MARK_FULL,
 * RP_MARK_PARTIAL (a marker may start at *at: wait) or RP_MARK_NONE. */
static int find_marker(const char *s, size_t from, size_t n, const char *const *list, size_t n_list,
                       size_t *at, size_t *which)
{
    for (size_t i = from; i < n; i++) {
        if (s[i] != '<') continue;
        for (size_t k = 0; k < n_list; k++) {
            int m = rp_marker_match(s + i, n - i, list[k]);
            if (m != RP_MARK_NONE) {
                *at = i;
                *which = k;
                return m;
            }
        }
    }
    return RP_MARK_NONE;
}

/* Parses the header [s, e): channel and recipient. */
static void parse_header(rp_harmony *h, const char *s, const char *e)
{
    const char *ch = rp_find(s, e, H_CHANNEL), *cs = "", *ce = cs;
    if (ch) {
        cs = ch + strlen(H_CHANNEL);
        ce = cs;
        while (ce < e && *ce != ' ' && *ce != '<' && *ce != '\n')
            ce++;
    }
    h->reasoning = (size_t)(ce - cs) == 8 && memcmp(cs, "analysis", 8) == 0;
    h->name[0] = '\0';
    const char *to = rp_find(s, e, "to=");
    if (!to) return;
    const char *rs = to + 3, *re = rs;
    while (re < e && *re != ' ' && *re != '<' && *re != '\n')
        re++;
    if (rp_has_prefix(rs, re, "functions.") && re - rs > 10 &&
        (size_t)(re - rs - 10) < sizeof h->name) {
        memcpy(h->name, rs + 10, (size_t)(re - rs - 10));
        h->name[re - rs - 10] = '\0';
    }
}

/* One step of the machine; returns RP_AGAIN when it needs more input. */
static rp_status step(rp_harmony *h, bool final, const rp_harmony_sink *sink)
{
    static const char *const text_marks[] = {H_START, H_CHANNEL, H_END, H_CALL, H_RETURN};
    static const char *const body_marks[] = {H_END, H_CALL, H_RETURN, H_START, H_CHANNEL};
    const char *s = h->in.data;
    size_t n = h->in.len, at = 0, which = 0;
    rp_status st = RP_OK;
    switch (h->st) {
    case H_BEGIN: {
        /* the prompt ends "<|start|>assistant": the output may go on with that header's
         * recipient (" to=functions.f<|channel|>...") before any marker */
        static const char *const opens[] = {" to=", "to="};
        h->st = H_TEXT;
        for (size_t k = 0; k < 2; k++) {
            int m = rp_marker_match(s + h->pos, n - h->pos, opens[k]);
            if (m == RP_MARK_PARTIAL && !final) {
                h->st = H_BEGIN;
                return RP_AGAIN;
            }
            if (m == RP_MARK_FULL) {
                h->st = H_HEADER;
                h->msg_start = h->pos;
                break;
            }
        }
        return RP_OK;
    }
    case H_TEXT:
    case H_BODY: {
        const char *const *marks = h->st == H_TEXT ? text_marks : body_marks;
        int m = find_marker(s, h->pos, n, marks, 5, &at, &which);
        size_t upto = m == RP_MARK_NONE || (m == RP_MARK_PARTIAL && final) ? n : at;
        if (upto > h->pos)
            st = sink->text(sink->user, h->st == H_BODY && h->reasoning, s + h->pos, upto - h->pos);
        h->pos = upto;
        if (st != RP_OK) return st;
        if (m != RP_MARK_FULL) return m == RP_MARK_PARTIAL && !final ? RP_AGAIN : RP_OK;
        const char *mk = marks[which];
        bool opens = h->st == H_TEXT ? which <= 1 : which >= 3;
        if (opens) {
            h->st = H_HEADER;
            h->msg_start = at;
            h->pos = strcmp(mk, H_START) == 0 ? at + strlen(H_START) : at;
        } else {
            h->st = H_TEXT; /* <|end|>, <|call|>, <|return|>: the message is over */
            h->pos = at + strlen(mk);
        }
        return RP_OK;
    }
    case H_HEADER: {
        static const char *const msg[] = {H_MESSAGE};
        int m = find_marker(s, h->pos, n, msg, 1, &at, &which);
        if (m != RP_MARK_FULL) {
            if (final) { /* an unfinished header carries routing only: nothing to keep */
                h->pos = n;
                h->st = H_TEXT;
                return RP_OK;
            }
            if (n - h->msg_start > MAX_HEADER) { /* not a header after all: keep it as text */
                st = sink->text(sink->user, false, s + h->msg_start, n - h->msg_start);
                h->pos = n;
                h->st = H_TEXT;
                return st;
            }
            h->pos = m == RP_MARK_PARTIAL ? at : n;
            return RP_AGAIN;
        }
        parse_header(h, s + h->msg_start, s + at);
        h->body_start = h->pos = at + strlen(H_MESSAGE);
        h->st = h->name[0] && h->parse_calls ? H_CALL_BODY : H_BODY;
        return RP_OK;
    }
    case H_CALL_BODY: {
        int m = find_marker(s, h->pos, n, body_marks, 5, &at, &which);
        if (m != RP_MARK_FULL && !final) {
            h->pos = m == RP_MARK_PARTIAL ? at : n;
            return RP_AGAIN;
        }
        size_t body_end = m == RP_MARK_FULL ? at : n, raw_end = body_end;
        if (m == RP_MARK_FULL && which <= 2) /* <|end|>, <|call|>, <|return|> belong to it */
            raw_end += strlen(body_marks[which]);
        st = sink->call(sink->user, h->name, s + h->body_start, body_end - h->body_start,
                        s + h->msg_start, raw_end - h->msg_start);
        h->pos = raw_end;
        h->st = H_TEXT;
        return st;
    }
    }
    return RP_OK;
}

rp_status rp_harmony_feed(rp_harmony *h, const char *s, size_t n, bool final,
                          const rp_harmony_sink *sink)
{
    if (n && rp_buf_append(&h->in, s, n) != RP_OK) return RP_ERR_NOMEM;
    if (!h->in.data) return RP_OK; /* nothing was fed yet */
    rp_status st;
    for (;;) {
        size_t before_pos = h->pos;
        hstate before_st = h->st;
        st = step(h, final, sink);
        if (st != RP_OK) break;
        if (h->pos >= h->in.len && h->st == before_st && h->pos == before_pos) break;
        if (h->pos >= h->in.len && (h->st == H_TEXT || h->st == H_BODY)) break;
    }
    if (st == RP_AGAIN) st = RP_OK;
    if (final && st == RP_OK && (h->st == H_HEADER || h->st == H_CALL_BODY))
        st = step(h, true, sink); /* flush an open header or call */
    /* drop what is consumed: keep an open header/call from its first byte */
    size_t keep = (h->st == H_HEADER || h->st == H_CALL_BODY) ? h->msg_start : h->pos;
    if (keep > 0 && keep <= h->in.len) {
        memmove(h->in.data, h->in.data + keep, h->in.len - keep);
        h->in.len -= keep;
        h->in.data[h->in.len] = '\0';
        h->pos -= keep;
        if (h->st == H_HEADER || h->st == H_CALL_BODY) {
            h->msg_start -= keep;
            h->body_start = h->body_start >= keep ? h->body_start - keep : 0;
        }
    }
    return st;
}
