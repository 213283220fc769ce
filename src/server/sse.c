/* server/sse.c - SSE framing (format in sse.h). */
#include "server/sse.h"

#include <string.h>

rp_status rp_sse_event(rp_buf *out, const char *event, const char *data, size_t len)
{
    rp_status st = RP_OK;
    if (event)
        st = rp_buf_printf(out, "event: %s\n", event);
    for (size_t i = 0; st == RP_OK;) {
        const char *nl = memchr(data + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - data) : len;
        if ((st = rp_buf_puts(out, "data: ")) == RP_OK &&
            (st = rp_buf_append(out, data + i, end - i)) == RP_OK)
            st = rp_buf_putc(out, '\n');
        if (!nl)
            break;
        i = end + 1;
    }
    return st == RP_OK ? rp_buf_putc(out, '\n') : st;
}

rp_status rp_sse_comment(rp_buf *out, const char *text) { return rp_buf_printf(out, ": %s\n\n", text); }
