/* server/server.h - the HTTP server: libmicrohttpd, routes, auth, CORS, limits, streaming.
 *
 * Routes:   GET|HEAD /                      liveness text
 *           GET /health                     503 {"status":"loading"} until a pipeline is set,
 *                                           then 200 {"status":"ok","model":...}
 *           GET /v1/models, /v1/models/{id} (Anthropic shape when anthropic-version is sent)
 *           POST /v1/chat/completions, /v1/completions          OpenAI
 *           POST /v1/messages, /v1/messages/count_tokens        Anthropic
 *           GET /metrics                    Prometheus text (api/metrics.h; while loading:
 *                                           server metrics only, rapid_model_loaded 0)
 *           GET /v1/status                  JSON: live generations, phase, speed, queue
 *                                           (503 while loading)
 *           OPTIONS *                       CORS preflight (no auth)
 *           Every route but /, /health and OPTIONS needs the API key when one is set;
 *           /metrics and /v1/status answer GET only (HEAD too is 405).
 *
 * Lifecycle: rp_server_start (listening; API routes answer 503 while loading)
 *            -> rp_server_set_pipeline (ready) -> rp_server_stop (stops accepting, cancels
 *            every generation in flight, closes connections, joins their threads, frees).
 *
 * Ownership: the config's strings and the pipeline are borrowed until rp_server_stop
 *            returns (free the pipeline after it).
 * Threading: start/set/stop from one thread (main). Requests run on one thread per
 *            connection.
 * Errors:    rp_server_start: RP_ERR_IO (cannot bind, with the address), RP_ERR_INVALID
 *            (bad host), RP_ERR_NOMEM.
 */
#ifndef RP_SERVER_SERVER_H
#define RP_SERVER_SERVER_H

#include "api/pipeline.h"
#include "base/status.h"
#include "server/config.h"

typedef struct rp_server rp_server;

rp_status rp_server_start(const rp_server_config *cfg, rp_server **out, rp_err *err);
/* The port actually bound (useful with port 0). */
int rp_server_port(const rp_server *s);
void rp_server_set_pipeline(rp_server *s, rp_pipeline *p);
void rp_server_stop(rp_server *s); /* NULL ok */

#endif
