/* server/config.c - flag, then environment, then default (the table is in config.h). */
#include "server/config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

static const char *pick(const char *flag, const char *env, const char *def)
{
    if (flag)
        return flag;
    const char *v = getenv(env);
    return v && *v ? v : def;
}

static rp_status number(const char *flag, const char *env, const char *def, long lo, long hi,
                        long *out, rp_err *err)
{
    const char *s = pick(flag, env, def);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return rp_err_set(err, RP_ERR_INVALID, "%s%s: '%s' is not a number in [%ld, %ld]",
                          flag ? "" : env, flag ? "invalid value" : "", s, lo, hi);
    *out = v;
    return RP_OK;
}

rp_status rp_server_config_resolve(const rp_server_flags *f, rp_server_config *c, rp_err *err)
{
    memset(c, 0, sizeof *c);
    long port, bytes, threads, queue, keepalive;
    rp_status st;
    if ((st = number(f->port, "RAPID_PORT", "8000", 0, 65535, &port, err)) ||
        (st = number(f->max_request_bytes, "RAPID_MAX_REQUEST_BYTES", "8388608", 1024,
                     1L << 34, &bytes, err)) ||
        (st = number(f->threads, "RAPID_THREADS", "0", 0, 1024, &threads, err)) ||
        (st = number(f->max_queue, "RAPID_MAX_QUEUE", "64", 1, 1 << 20, &queue, err)) ||
        (st = number(NULL, "RAPID_SSE_KEEPALIVE_MS", "5000", 10, 600000, &keepalive, err)))
        return rp_err_wrap(err, "serve");
    const char *level = pick(f->log_level, "RAPID_LOG_LEVEL", "info");
    c->log_level = rp_log_parse_level(level);
    if (c->log_level < 0)
        return rp_err_set(err, RP_ERR_INVALID,
                          "serve: log level '%s' is not one of debug, info, warn, error, off",
                          level);
    c->host = pick(f->host, "RAPID_HOST", "127.0.0.1");
    c->port = (int)port;
    c->api_key = pick(f->api_key, "RAPID_API_KEY", NULL);
    if (c->api_key && !*c->api_key)
        c->api_key = NULL;
    c->max_request_bytes = (size_t)bytes;
    c->cors_origins = pick(f->cors_origins, "RAPID_CORS_ORIGINS", "*");
    c->served_name = pick(f->served_model_name, "RAPID_SERVED_MODEL_NAME", NULL);
    c->n_threads = (int)threads;
    c->max_queue = (int)queue;
    c->keepalive_ms = (int)keepalive;
    c->max_connections = 512;
    c->tool_parser = pick(f->tool_call_parser, "RAPID_TOOL_CALL_PARSER", NULL);
    c->reasoning_parser = pick(f->reasoning_parser, "RAPID_REASONING_PARSER", NULL);
    return RP_OK;
}
