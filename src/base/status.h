/* base/status.h - status codes and the error value every fallible function fills.
 *
 * Errors are values: a function returns RP_OK (0) or a negative rp_status, and writes a
 * human-readable message (what was wrong, what to do) into an rp_err the caller provides.
 * Only src/api/ maps statuses to HTTP codes.
 *
 * Ownership: rp_err is a plain value; callers own it (usually on the stack).
 * Threading: any thread.
 */
#ifndef RP_BASE_STATUS_H
#define RP_BASE_STATUS_H

#include <stdio.h>
#include <stdlib.h>

typedef enum rp_status {
    RP_OK = 0,
    RP_AGAIN = 1,          /* incomplete input or would block: call again */
    RP_ERR_NOMEM = -1,
    RP_ERR_INVALID = -2,   /* bad client or model input -> HTTP 400 */
    RP_ERR_NOT_FOUND = -3, /* -> 404 */
    RP_ERR_LIMIT = -4,     /* context length, queue full, body size -> 400/413/503 */
    RP_ERR_IO = -5,
    RP_ERR_UNSUPPORTED = -6,
    RP_ERR_BACKEND = -7,
    RP_ERR_CANCELLED = -8,
    RP_ERR_AUTH = -9,      /* -> 401 */
} rp_status;

typedef struct rp_err {
    rp_status code;
    char msg[512];
} rp_err;

/* "ok", "out of memory", ... (static string). */
const char *rp_status_str(rp_status s);

/* Stores code and a printf-style message in err (which may be NULL); returns code, so
 * callers write: return rp_err_set(err, RP_ERR_INVALID, "bad role '%s'", role); */
rp_status rp_err_set(rp_err *err, rp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in err with "prefix: " (keeps the code); returns the code. */
rp_status rp_err_wrap(rp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void rp_err_clear(rp_err *err);

/* Tier 1: a bug. Aborts with file and line in every build type. */
#define RP_ASSERT(x)                                                                           \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #x);          \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define RP_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
