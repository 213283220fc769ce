/* server/server_impl.h - what server.c (libmicrohttpd glue) and routes.c (the handlers)
 * share: the server and per-request state, and the response helpers.
 *
 * Threading: an http_req belongs to its connection's thread. The server's pipeline pointer
 * and stopping flag are atomics read by every request thread.
 */
#ifndef RP_SERVER_SERVER_IMPL_H
#define RP_SERVER_SERVER_IMPL_H

#include <microhttpd.h>
#include <stdatomic.h>

#include "api/anthropic.h"
#include "api/metrics.h"
#include "api/openai.h"
#include "api/pipeline.h"
#include "base/buf.h"
#include "server/server.h"

struct rp_server {
    rp_server_config cfg;
    struct MHD_Daemon *daemon;
    int port;
    _Atomic(rp_pipeline *) pipeline;
    atomic_int stopping;
    rp_metrics *metrics; /* owned; the pipeline reports to it once set */
};

typedef enum route_id {
    ROUTE_NONE = 0,
    ROUTE_ROOT,
    ROUTE_HEALTH,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_MESSAGES,
    ROUTE_COUNT_TOKENS,
    ROUTE_METRICS,
    ROUTE_STATUS,
} route_id;

typedef struct http_req {
    rp_server *srv;
    struct MHD_Connection *conn;
    const char *method, *url; /* MHD's, valid for the request */
    route_id route;
    rp_api_kind api; /* error shape */
    double t_start;
    rp_buf body;
    size_t body_bytes;
    int too_large;
    int status; /* for the log line */
    int n_in, n_out;
    int disconnected;
    /* streaming */
    rp_chat_request creq;
    int has_creq;
    rp_gen *gen;
    rp_openai_stream oai;
    rp_anthropic_stream ant;
    rp_buf out;
    size_t out_pos;
    int stream_done;
    double last_write;
} http_req;

/* Queue a response; body is copied. content_type NULL: application/json. */
enum MHD_Result rp_http_respond(http_req *r, int status, const char *body, const char *content_type);
enum MHD_Result rp_http_error(http_req *r, const rp_api_error *e);
/* Starts an SSE response driven by r->gen (the request's stream state is set up). */
enum MHD_Result rp_http_respond_stream(http_req *r);
/* 1 when the client has gone (socket hung up), 0 otherwise. */
int rp_http_client_gone(http_req *r);
/* The handler of r->route, called once the body is complete (routes.c). */
enum MHD_Result rp_routes_dispatch(http_req *r);
/* Emit callback for the adapters: frames SSE into r->out. */
rp_status rp_http_emit(void *user, const char *event, const char *data, size_t len);

#endif
