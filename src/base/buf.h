/* base/buf.h - a growable byte buffer (always NUL-terminated) for building strings.
 *
 * Ownership: the buffer owns .data; rp_buf_deinit frees it; rp_buf_take hands it to the caller
 *            (free with rp_free). A zero-initialised rp_buf is valid and empty.
 * Threading: one owner at a time.
 * Errors:    append functions return RP_ERR_NOMEM; after a failure the buffer keeps its old
 *            contents and stays usable.
 */
#ifndef RP_BASE_BUF_H
#define RP_BASE_BUF_H

#include <stddef.h>

#include "base/status.h"

typedef struct rp_buf {
    char *data; /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
} rp_buf;

rp_status rp_buf_reserve(rp_buf *b, size_t extra);
rp_status rp_buf_append(rp_buf *b, const void *p, size_t n);
rp_status rp_buf_puts(rp_buf *b, const char *s);
rp_status rp_buf_putc(rp_buf *b, char c);
rp_status rp_buf_printf(rp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rp_buf_reset(rp_buf *b);
char *rp_buf_take(rp_buf *b);
void rp_buf_deinit(rp_buf *b);

#endif
