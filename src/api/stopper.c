/* api/stopper.c - the stop-string matcher (contract and invariant in api/stopper.h). */
#include "api/stopper.h"

#include <string.h>

void rp_stopper_init(rp_stopper *s, char *const *stops, int n_stops)
{
    memset(s, 0, sizeof *s);
    s->stops = stops;
    s->n_stops = n_stops;
    s->matched = -1;
}

void rp_stopper_deinit(rp_stopper *s) { rp_buf_deinit(&s->held); }

/* Length of the longest suffix of h[0..n) that is a proper prefix of some stop string. */
static size_t held_prefix(const rp_stopper *s, const char *h, size_t n)
{
    size_t best = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t ls = strlen(s->stops[i]);
        size_t k = ls - 1 < n ? ls - 1 : n;
        for (; k > best; k--)
            if (memcmp(h + n - k, s->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

rp_status rp_stopper_feed(rp_stopper *s, const char *text, size_t len, rp_buf *out)
{
    if (s->matched >= 0)
        return RP_OK;
    if (s->n_stops == 0)
        return rp_buf_append(out, text, len);
    if (rp_buf_append(&s->held, text, len) != RP_OK)
        return RP_ERR_NOMEM;
    const char *h = s->held.data ? s->held.data : "";
    size_t n = s->held.len, first = n;
    for (int i = 0; i < s->n_stops; i++) {
        const char *m = memmem(h, n, s->stops[i], strlen(s->stops[i]));
        if (m && (size_t)(m - h) < first) {
            first = (size_t)(m - h);
            s->matched = i;
        }
    }
    if (s->matched >= 0) {
        rp_status st = rp_buf_append(out, h, first);
        rp_buf_reset(&s->held);
        return st;
    }
    size_t keep = held_prefix(s, h, n);
    if (rp_buf_append(out, h, n - keep) != RP_OK)
        return RP_ERR_NOMEM;
    memmove(s->held.data, h + n - keep, keep);
    s->held.len = keep;
    s->held.data[keep] = '\0';
    return RP_OK;
}

rp_status rp_stopper_flush(rp_stopper *s, rp_buf *out)
{
    if (s->matched >= 0 || s->held.len == 0)
        return RP_OK;
    rp_status st = rp_buf_append(out, s->held.data, s->held.len);
    rp_buf_reset(&s->held);
    return st;
}
