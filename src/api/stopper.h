/* api/stopper.h - stop strings over streamed text, never leaking any part of one.
 *
 * Text goes in as it is detokenized. Everything that can no longer be the start of a stop
 * string comes out at once; a tail that is a prefix of some stop string is held back until
 * the next text decides it. When a stop string completes, the text before it comes out and
 * the rest (the stop string and anything after it) is dropped.
 *
 * Invariant: the held tail is always shorter than the longest stop string, and no stop
 * string can start inside text already released (it would have been held).
 *
 * Ownership: the stop strings are borrowed for the stopper's life; deinit frees the tail.
 * Threading: one thread. Errors: RP_ERR_NOMEM from feed/flush.
 */
#ifndef RP_API_STOPPER_H
#define RP_API_STOPPER_H

#include <stddef.h>

#include "base/buf.h"
#include "base/status.h"

typedef struct rp_stopper {
    char *const *stops;
    int n_stops;
    rp_buf held;
    int matched; /* index of the stop string that matched, -1 while none */
} rp_stopper;

void rp_stopper_init(rp_stopper *s, char *const *stops, int n_stops);
void rp_stopper_deinit(rp_stopper *s);
/* Appends text and moves what may be shown to out. After a match, feed ignores its input. */
rp_status rp_stopper_feed(rp_stopper *s, const char *text, size_t len, rp_buf *out);
/* The generation ended: the held tail is shown (it can no longer become a stop string). */
rp_status rp_stopper_flush(rp_stopper *s, rp_buf *out);

#endif
