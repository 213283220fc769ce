/* base/status.c - status strings and the rp_err helpers. */
#include "base/status.h"

#include <stdarg.h>
#include <string.h>

const char *rp_status_str(rp_status s)
{
    switch (s) {
    case RP_OK: return "ok";
    case RP_AGAIN: return "again";
    case RP_ERR_NOMEM: return "out of memory";
    case RP_ERR_INVALID: return "invalid input";
    case RP_ERR_NOT_FOUND: return "not found";
    case RP_ERR_LIMIT: return "limit exceeded";
    case RP_ERR_IO: return "i/o error";
    case RP_ERR_UNSUPPORTED: return "unsupported";
    case RP_ERR_BACKEND: return "backend failure";
    case RP_ERR_CANCELLED: return "cancelled";
    case RP_ERR_AUTH: return "unauthorized";
    }
    return "unknown status";
}

rp_status rp_err_set(rp_err *err, rp_status code, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

rp_status rp_err_wrap(rp_err *err, const char *fmt, ...)
{
    if (!err)
        return RP_ERR_INVALID;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3)
        n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3, lo = strlen(old);
    if (lo > room)
        lo = room;
    memcpy(err->msg + n + 2, old, lo);
    err->msg[n + 2 + lo] = '\0';
    return err->code;
}

void rp_err_clear(rp_err *err)
{
    if (err) {
        err->code = RP_OK;
        err->msg[0] = '\0';
    }
}
