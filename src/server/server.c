/* server/server.c - libmicrohttpd glue: the daemon, request state, body limits, CORS, auth,
 * SSE streaming, request log lines, graceful shutdown. The handlers are in routes.c.
 *
 * Why thread-per-connection with a blocking content reader, not suspend/resume:
 *  - the engine serialises generation anyway, so one thread per connection (bounded by
 *    MHD_OPTION_CONNECTION_LIMIT) costs little at a local server's concurrency;
 *  - a blocked reader waits on the generation's own condition variable with a short timeout
 *    and, between waits, polls its socket for POLLRDHUP: a client that hangs up is noticed
 *    within ~100 ms even while its request is still queued and nothing is being written,
 *    which suspended connections (never polled) cannot do;
 *  - there is no resume-before-suspend race and no cross-thread MHD call at all: engine
 *    events go to a queue, the connection thread does every MHD call itself.
 *
 * Streaming: MHD_create_response_from_callback with unknown size (chunked on HTTP/1.1).
 * The reader hands out pending SSE bytes; when none are left it waits for the next delta,
 * writing ": keep-alive" comments every keepalive_ms while nothing comes.
 *
 * Shutdown: stopping is set, the listening socket is closed (quiesce), every request in
 * flight sees the flag within one wait and cancels its generation (streams end with an
 * error event, plain requests with 503), then the daemon stops and joins its threads.
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "server/server_impl.h"
#include "server/sse.h"

#define WAIT_MS 100

static route_id route_of(const char *url)
{
    static const struct {
        const char *path;
        route_id id;
    } table[] = {
        {"/", ROUTE_ROOT},
        {"/health", ROUTE_HEALTH},
        {"/v1/models", ROUTE_MODELS},
        {"/v1/chat/completions", ROUTE_CHAT},
        {"/v1/completions", ROUTE_COMPLETIONS},
        {"/v1/messages", ROUTE_MESSAGES},
        {"/v1/messages/count_tokens", ROUTE_COUNT_TOKENS},
        {"/metrics", ROUTE_METRICS},
        {"/v1/status", ROUTE_STATUS},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(table); i++)
        if (!strcmp(url, table[i].path))
            return table[i].id;
    if (!strncmp(url, "/v1/models/", 11) && url[11])
        return ROUTE_MODEL;
    return ROUTE_NONE;
}

/* The endpoint label of the request counters (static strings). */
static const char *route_name(route_id r)
{
    static const char *const names[] = {
        [ROUTE_NONE] = "other",
        [ROUTE_ROOT] = "/",
        [ROUTE_HEALTH] = "/health",
        [ROUTE_MODELS] = "/v1/models",
        [ROUTE_MODEL] = "/v1/models/{id}",
        [ROUTE_CHAT] = "/v1/chat/completions",
        [ROUTE_COMPLETIONS] = "/v1/completions",
        [ROUTE_MESSAGES] = "/v1/messages",
        [ROUTE_COUNT_TOKENS] = "/v1/messages/count_tokens",
        [ROUTE_METRICS] = "/metrics",
        [ROUTE_STATUS] = "/v1/status",
    };
    return (unsigned)r < RP_ARRAY_LEN(names) && names[r] ? names[r] : "other";
}

static const char *allowed_methods(route_id r)
{
    switch (r) {
    case ROUTE_METRICS:
    case ROUTE_STATUS: return "GET, OPTIONS";
    case ROUTE_ROOT:
    case ROUTE_HEALTH:
    case ROUTE_MODELS:
    case ROUTE_MODEL: return "GET, HEAD, OPTIONS";
    default: return "POST, OPTIONS";
    }
}

static int method_ok(route_id r, const char *m)
{
    if (r == ROUTE_METRICS || r == ROUTE_STATUS)
        return !strcmp(m, "GET");
    if (r == ROUTE_ROOT || r == ROUTE_HEALTH || r == ROUTE_MODELS || r == ROUTE_MODEL)
        return !strcmp(m, "GET") || !strcmp(m, "HEAD");
    return !strcmp(m, "POST");
}

static const char *header(http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static void add_cors(http_req *r, struct MHD_Response *resp)
{
    const char *allow = r->srv->cfg.cors_origins;
    const char *origin = header(r, "Origin");
    if (!allow || !*allow)
        return;
    if (!strcmp(allow, "*")) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        return;
    }
    if (!origin)
        return;
    size_t n = strlen(origin);
    for (const char *p = allow; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' ')) {
            p++;
            len--;
        }
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len == n && !strncmp(p, origin, n)) {
            MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
            MHD_add_response_header(resp, "Vary", "Origin");
            return;
        }
        if (!end)
            break;
        p = end + 1;
    }
}

static enum MHD_Result queue(http_req *r, int status, struct MHD_Response *resp)
{
    if (!resp)
        return MHD_NO;
    add_cors(r, resp);
    r->status = status;
    /* counted before the response leaves, so a client reading /metrics next sees it */
    rp_metrics_http(r->srv->metrics, route_name(r->route), status);
    enum MHD_Result res = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return res;
}

enum MHD_Result rp_http_respond(http_req *r, int status, const char *body, const char *ctype)
{
    size_t len = body ? strlen(body) : 0;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype ? ctype : "application/json");
    return queue(r, status, resp);
}

static enum MHD_Result error_with(http_req *r, const rp_api_error *e, const char *hname,
                                  const char *hvalue)
{
    char *body = rp_api_error_json(r->api, e);
    int status = rp_api_error_http_status(e->kind);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        body ? strlen(body) : 0, body ? body : (void *)"", MHD_RESPMEM_MUST_COPY);
    rp_free(body);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (hname)
        MHD_add_response_header(resp, hname, hvalue);
    if (e->kind == RP_APIERR_OVERLOADED || e->kind == RP_APIERR_LOADING)
        MHD_add_response_header(resp, "Retry-After", "1");
    if (e->kind == RP_APIERR_AUTH && r->api == RP_API_OPENAI)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    return queue(r, status, resp);
}

enum MHD_Result rp_http_error(http_req *r, const rp_api_error *e)
{
    return error_with(r, e, NULL, NULL);
}

rp_status rp_http_emit(void *user, const char *event, const char *data, size_t len)
{
    http_req *r = user;
    return rp_sse_event(&r->out, event, data, len);
}

int rp_http_client_gone(http_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* One step of a stream: forward a delta or the end through the adapter (routes.c). */
void rp_routes_stream_step(http_req *r, rp_gen_step step, rp_gen_output *o);

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    http_req *r = cls;
    for (;;) {
        if (r->out_pos < r->out.len) {
            size_t n = r->out.len - r->out_pos < max ? r->out.len - r->out_pos : max;
            memcpy(buf, r->out.data + r->out_pos, n);
            r->out_pos += n;
            if (r->out_pos == r->out.len) {
                rp_buf_reset(&r->out);
                r->out_pos = 0;
            }
            r->last_write = rp_now_s();
            return (ssize_t)n;
        }
        if (r->stream_done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (rp_http_client_gone(r)) {
            r->disconnected = 1;
            rp_gen_cancel(r->gen); /* at once; rp_gen_free waits for the DONE later */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (atomic_load(&r->srv->stopping))
            rp_gen_cancel(r->gen);
        rp_gen_output o;
        rp_gen_step step = rp_gen_next(r->gen, WAIT_MS, &o);
        if (step != RP_GEN_TIMEOUT)
            rp_routes_stream_step(r, step, &o);
        else if ((rp_now_s() - r->last_write) * 1000 >= r->srv->cfg.keepalive_ms)
            rp_sse_comment(&r->out, "keep-alive");
    }
}

enum MHD_Result rp_http_respond_stream(http_req *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, NULL);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    r->last_write = rp_now_s();
    return queue(r, 200, resp);
}

/* Constant-time comparison: time depends only on the length of the presented key. */
static int key_equal(const char *given, const char *want)
{
    size_t ng = strlen(given), nw = strlen(want);
    unsigned diff = (unsigned)(ng ^ nw);
    for (size_t i = 0; i < ng; i++)
        diff |= (unsigned char)given[i] ^ (unsigned char)want[nw ? i % nw : 0];
    return diff == 0 && nw > 0;
}

static int authorized(http_req *r)
{
    const char *key = r->srv->cfg.api_key;
    if (!key)
        return 1;
    const char *auth = header(r, "Authorization");
    const char *x = header(r, "x-api-key");
    int ok = 0;
    if (auth && !strncasecmp(auth, "Bearer ", 7))
        ok |= key_equal(auth + 7, key);
    if (x)
        ok |= key_equal(x, key);
    return ok;
}

static enum MHD_Result preflight(http_req *r)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"",
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    const char *req_headers = header(r, "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, HEAD, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            req_headers ? req_headers
                                        : "Authorization, Content-Type, x-api-key, "
                                          "anthropic-version, anthropic-beta");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    return queue(r, 204, resp);
}

static enum MHD_Result handle(http_req *r)
{
    rp_api_error e = {0};
    if (!strcmp(r->method, "OPTIONS"))
        return preflight(r);
    if (r->route == ROUTE_NONE) {
        rp_api_error_set(&e, RP_APIERR_NOT_FOUND, NULL, "no route for %s %s (see GET /v1/models)",
                         r->method, r->url);
        return rp_http_error(r, &e);
    }
    if (!method_ok(r->route, r->method)) {
        rp_api_error_set(&e, RP_APIERR_METHOD, NULL, "%s is not allowed on %s (allowed: %s)",
                         r->method, r->url, allowed_methods(r->route));
        return error_with(r, &e, "Allow", allowed_methods(r->route));
    }
    if (r->too_large) {
        rp_api_error_set(&e, RP_APIERR_TOO_LARGE, NULL,
                         "the request body is %zu bytes, over the limit of %zu bytes "
                         "(--max-request-bytes)",
                         r->body_bytes, r->srv->cfg.max_request_bytes);
        return rp_http_error(r, &e);
    }
    if (r->route != ROUTE_ROOT && r->route != ROUTE_HEALTH && !authorized(r)) {
        rp_api_error_set(&e, RP_APIERR_AUTH, NULL,
                         "invalid or missing API key: send 'Authorization: Bearer KEY' or "
                         "'x-api-key: KEY'");
        return rp_http_error(r, &e);
    }
    return rp_routes_dispatch(r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    rp_server *s = cls;
    http_req *r = *con_cls;
    if (!r) {
        r = rp_calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->srv = s;
        r->conn = conn;
        r->method = method;
        r->url = url;
        r->t_start = rp_now_s();
        r->route = route_of(url);
        r->api = (r->route == ROUTE_MESSAGES || r->route == ROUTE_COUNT_TOKENS ||
                  !strncmp(url, "/v1/messages", 12))
                     ? RP_API_ANTHROPIC
                     : RP_API_OPENAI;
        if (r->route == ROUTE_NONE && header(r, "anthropic-version"))
            r->api = RP_API_ANTHROPIC;
        const char *cl = header(r, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_request_bytes)
            r->too_large = 1;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size) {
        r->body_bytes += *upload_size;
        if (r->body_bytes > s->cfg.max_request_bytes)
            r->too_large = 1;
        if (!r->too_large && rp_buf_append(&r->body, upload, *upload_size) != RP_OK)
            return MHD_NO;
        if (r->too_large && r->body_bytes > 4 * s->cfg.max_request_bytes + (1u << 20))
            return MHD_NO; /* not worth reading to the end */
        *upload_size = 0;
        return MHD_YES;
    }
    return handle(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_req *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        r->disconnected = 1;
    if (r->gen && !r->n_out)
        r->n_out = rp_gen_n_completion(r->gen);
    rp_gen_free(r->gen);
    if (!r->status) /* no response was queued: the client left first (counted as 499) */
        rp_metrics_http(r->srv->metrics, route_name(r->route), 0);
    rp_log(r->status >= 500 ? RP_LOG_WARN : RP_LOG_INFO, "%s %s %d in=%d out=%d %.3fs%s",
           r->method, r->url, r->status, r->n_in, r->n_out, rp_now_s() - r->t_start,
           r->disconnected ? " (client gone)" : "");
    if (r->has_creq)
        rp_chat_request_deinit(&r->creq);
    rp_buf_deinit(&r->body);
    rp_buf_deinit(&r->out);
    rp_free(r);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    RP_DEBUG("http: %s", line);
}

static rp_status resolve(const char *host, int port, struct sockaddr_storage *ss, int *v6,
                         rp_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return rp_err_set(err, RP_ERR_INVALID, "cannot resolve host '%s': %s", host,
                          gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    if (*v6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return RP_OK;
}

rp_status rp_server_start(const rp_server_config *cfg, rp_server **out, rp_err *err)
{
    *out = NULL;
    rp_server *s = rp_calloc(1, sizeof *s);
    if (!s)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    struct sockaddr_storage ss;
    int v6 = 0;
    rp_status st = resolve(cfg->host, cfg->port, &ss, &v6, err);
    if (st == RP_OK)
        st = rp_metrics_new(&s->metrics, err);
    if (st != RP_OK) {
        rp_free(s);
        return st;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_END);
    if (!s->daemon) {
        rp_metrics_free(s->metrics);
        rp_free(s);
        return rp_err_set(err, RP_ERR_IO,
                          "cannot listen on %s:%d (in use, or not an address of this machine); "
                          "pick another with --host/--port",
                          cfg->host, cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return RP_OK;
}

int rp_server_port(const rp_server *s) { return s->port; }

void rp_server_set_pipeline(rp_server *s, rp_pipeline *p)
{
    if (p)
        rp_pipeline_set_metrics(p, s->metrics); /* published by the store below */
    atomic_store(&s->pipeline, p);
}

void rp_server_stop(rp_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1);
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon); /* no new connections */
    MHD_stop_daemon(s->daemon); /* in-flight requests cancel (they watch stopping); joins */
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd); /* quiesce hands the listening socket to us */
    rp_pipeline *p = atomic_load(&s->pipeline);
    if (p)
        rp_pipeline_set_metrics(p, NULL); /* every request thread has been joined */
    rp_metrics_free(s->metrics);
    rp_free(s);
}
