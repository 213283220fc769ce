/* base/buf.c - growable byte buffer. */
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

rp_status rp_buf_reserve(rp_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return RP_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2)
            return RP_ERR_NOMEM;
        cap *= 2;
    }
    char *d = rp_realloc(b->data, cap);
    if (!d)
        return RP_ERR_NOMEM;
    b->data = d;
    b->cap = cap;
    return RP_OK;
}

rp_status rp_buf_append(rp_buf *b, const void *p, size_t n)
{
    if (rp_buf_reserve(b, n) != RP_OK)
        return RP_ERR_NOMEM;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return RP_OK;
}

rp_status rp_buf_puts(rp_buf *b, const char *s) { return rp_buf_append(b, s, strlen(s)); }
rp_status rp_buf_putc(rp_buf *b, char c) { return rp_buf_append(b, &c, 1); }

rp_status rp_buf_printf(rp_buf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    rp_status st = RP_ERR_INVALID;
    if (n >= 0 && (st = rp_buf_reserve(b, (size_t)n)) == RP_OK) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    return st;
}

void rp_buf_reset(rp_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

char *rp_buf_take(rp_buf *b)
{
    char *d = b->data;
    if (!d)
        d = rp_strdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return d;
}

void rp_buf_deinit(rp_buf *b)
{
    rp_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
