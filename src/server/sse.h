/* server/sse.h - Server-Sent Events framing (text/event-stream).
 *
 * An event is optional "event: NAME\n", then one "data: LINE\n" per line of the payload,
 * then a blank line. A line starting with ':' is a comment: the keep-alive while a request
 * waits for its first token ("": keep-alive\n\n").
 *
 * Threading: any. Errors: RP_ERR_NOMEM.
 */
#ifndef RP_SERVER_SSE_H
#define RP_SERVER_SSE_H

#include <stddef.h>

#include "base/buf.h"
#include "base/status.h"

rp_status rp_sse_event(rp_buf *out, const char *event, const char *data, size_t len);
rp_status rp_sse_comment(rp_buf *out, const char *text);

#endif
