/* api/metrics.h - the metrics registry behind GET /metrics and GET /v1/status.
 *
 * One registry per server. It holds:
 *   - HTTP request counters by endpoint and status (the server counts every request once,
 *     when it completes);
 *   - generation measurements taken in the pipeline from the engine's event arrival times:
 *     time to first token, inter-token latency, request duration (fixed-bucket histograms),
 *     prompt and generated token counters, finished generations by endpoint and finish;
 *   - a table of live generations (id, endpoint, tokens so far, first/last token times) that
 *     /v1/status lists with their phase and speed.
 * Engine-wide numbers (running/waiting sequences, prefix cache, KV blocks) are not stored
 * here: rp_metrics_render reads them from an rp_engine_stats snapshot through one table of
 * rows in metrics.c (g_engine_rows), so each new rp_engine_stats field is one more row.
 *
 * Metric names (Prometheus text format 0.0.4, all prefixed rapid_):
 *   rapid_http_requests_total{endpoint,status}        counter
 *   rapid_generations_total{endpoint,finish}          counter
 *   rapid_prompt_tokens_total                         counter
 *   rapid_generation_tokens_total                     counter
 *   rapid_time_to_first_token_seconds                 histogram
 *   rapid_inter_token_latency_seconds                 histogram
 *   rapid_request_duration_seconds                    histogram
 *   rapid_requests_in_flight                          gauge (live generations)
 *   rapid_model_loaded, rapid_uptime_seconds          gauges
 *   engine rows: rapid_num_requests_running, rapid_num_requests_waiting,
 *   rapid_prefix_cache_hit_tokens_total, rapid_prefix_cache_miss_tokens_total,
 *   rapid_prefix_cache_hit_rate, rapid_engine_* (see g_engine_rows in metrics.c).
 *
 * Ownership: rp_metrics_new / rp_metrics_free (every live record must have ended first).
 *            A record from rp_metrics_req_begin belongs to its caller until
 *            rp_metrics_req_end, which frees it. Strings passed in are copied or must be
 *            static (endpoint names). Rendered text / JSON is the caller's (rp_free).
 * Threading: everything is safe from any thread. Counters and histogram buckets are
 *            atomics; the HTTP counter table and the live table take a mutex briefly. A
 *            record's token/end calls come from the one thread that owns the generation.
 *            A snapshot may mix values from either side of a concurrent update (a
 *            histogram's _count is the sum of its buckets, so those always agree).
 * Errors:    rp_metrics_new: RP_ERR_NOMEM. rp_metrics_req_begin returns NULL when m is NULL
 *            or out of memory; every record call accepts NULL and does nothing, so a
 *            pipeline without a registry (the CLI) pays nothing. Render/JSON: RP_ERR_NOMEM.
 */
#ifndef RP_API_METRICS_H
#define RP_API_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "api/request.h"
#include "base/buf.h"
#include "base/status.h"
#include "engine/engine.h"

typedef struct rp_metrics rp_metrics;
typedef struct rp_metrics_req rp_metrics_req;

/* ---- fixed-bucket histograms (exposed for the tests) ---------------------------------- */

#define RP_HIST_MAX_BOUNDS 24

typedef struct rp_hist {
    const double *bounds; /* ascending upper bounds (static), n_bounds of them */
    int n_bounds;
    _Atomic uint64_t counts[RP_HIST_MAX_BOUNDS + 1]; /* per bucket, not cumulative; last: +Inf */
    _Atomic uint64_t sum_ns;                          /* sum of observations, nanoseconds */
} rp_hist;

/* n_bounds <= RP_HIST_MAX_BOUNDS (more are ignored). */
void rp_hist_init(rp_hist *h, const double *bounds, int n_bounds);
/* Seconds; negative values count as 0. A value equal to a bound falls in that bucket (le). */
void rp_hist_observe(rp_hist *h, double seconds);
uint64_t rp_hist_count(const rp_hist *h);
/* Appends # HELP, # TYPE, the cumulative _bucket lines, _sum and _count. */
rp_status rp_hist_write(const rp_hist *h, const char *name, const char *help, rp_buf *out);

/* ---- the registry ------------------------------------------------------------------- */

rp_status rp_metrics_new(rp_metrics **out, rp_err *err);
void rp_metrics_free(rp_metrics *m); /* NULL ok */

/* One HTTP request finished. endpoint: a static string (the route); status 0 is counted as
 * 499 (the client left before a response was queued). */
void rp_metrics_http(rp_metrics *m, const char *endpoint, int status);

/* A generation was submitted to the engine: engine id, its prompt token count, t_start (a
 * rp_now_s() time when the request entered the pipeline; TTFT and duration start there). */
rp_metrics_req *rp_metrics_req_begin(rp_metrics *m, const rp_chat_request *req, uint64_t id,
                                     int n_prompt, double t_start);
/* A token arrived at time t; n_completion is the request's counted tokens after it (a token
 * the pipeline ignored, after a stop string matched, leaves it unchanged: not counted). */
void rp_metrics_req_token(rp_metrics_req *r, double t, int n_completion);
/* The generation ended at time t; finish is an rp_gen_finish (api/pipeline.h), the label
 * "stop", "length", "stop_sequence", "tool_calls", "cancelled" or "error". Counts its tokens
 * and duration, unlinks and frees r. */
void rp_metrics_req_end(rp_metrics_req *r, int finish, int n_completion, double t);

/* Prometheus text. es: an engine snapshot, NULL while the model loads (engine rows left out,
 * rapid_model_loaded 0). */
rp_status rp_metrics_render(rp_metrics *m, const rp_engine_stats *es, rp_buf *out);

/* /v1/status JSON: {"model","uptime_s","queue_depth","running","requests":[{"id",
 * "endpoint","stream","phase","prompt_tokens","completion_tokens","tokens_per_second",
 * "ttft_s","age_s"}]}. Phase: "decode" after the first token; before it the newest
 * es->n_waiting of the waiting-for-first-token requests are "queued" (the engine admits in
 * FIFO order), the others "prefill". NULL on out of memory; rp_free the result. */
char *rp_metrics_status_json(rp_metrics *m, const char *model, const rp_engine_stats *es);

#endif
