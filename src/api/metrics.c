/* api/metrics.c - the metrics registry: counters, histograms, live generations, and their
 * Prometheus text and /v1/status JSON (see api/metrics.h).
 *
 * Design notes:
 *  1. A histogram keeps per-bucket (not cumulative) atomic counts; rendering accumulates
 *     them and takes _count as their total, so _count always equals the +Inf bucket even
 *     while observations race with a scrape. The sum is kept in integer nanoseconds so it
 *     can be an atomic add too.
 *  2. Engine-wide metrics are rows of g_engine_rows: a name, a type, a help text and one or
 *     two rp_engine_stats fields combined by an op (the value, a difference, a ratio). The
 *     fields are found by offsetof and their C type by _Generic, so a new stats field is
 *     one row, whatever integer or floating type it has.
 *  3. Live generations are a doubly linked list under the registry mutex, appended in
 *     submit order. The engine admits waiting requests first come, first served, so of the
 *     records without a first token the newest n_waiting are queued, the rest in prefill.
 */
#include "api/metrics.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "api/pipeline.h"
#include "base/alloc.h"
#include "base/clock.h"

/* Upper bounds in seconds. TTFT spans a cached short prompt to a long uncached one on the
 * CPU; inter-token latency one batched GPU step to a slow CPU step. */
static const double g_ttft_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                       0.25,  0.5,    0.75,  1,    2.5,   5,    7.5,   10,
                                       20,    40,     80,    160};
static const double g_itl_bounds[] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02,
                                      0.025, 0.05,   0.075, 0.1,    0.15, 0.2,   0.3,
                                      0.4,   0.5,    0.75,  1,      2.5,  5};
static const double g_duration_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                           5,    10,    15,   20,  30,   40,  50,  60,
                                           120,  240,   480,  960};

/* Generation endpoints (rp_req_type order) and finish labels (rp_gen_finish order). */
static const char *const g_gen_endpoints[] = {"/v1/chat/completions", "/v1/completions",
                                              "/v1/messages"};
#define N_GEN_ENDPOINTS 3
static const char *const g_finish_names[] = {
    [RP_GEN_FINISH_NONE] = "none",
    [RP_GEN_FINISH_STOP] = "stop",
    [RP_GEN_FINISH_LENGTH] = "length",
    [RP_GEN_FINISH_STOP_SEQUENCE] = "stop_sequence",
    [RP_GEN_FINISH_TOOL_CALLS] = "tool_calls",
    [RP_GEN_FINISH_CANCELLED] = "cancelled",
    [RP_GEN_FINISH_ERROR] = "error",
};
#define N_FINISH ((int)(sizeof g_finish_names / sizeof g_finish_names[0]))

#define MAX_HTTP_ROWS 256

typedef struct http_row {
    const char *endpoint; /* static */
    int status;
    uint64_t n;
} http_row;

struct rp_metrics_req {
    rp_metrics *m;
    rp_metrics_req *prev, *next; /* under m->mu */
    uint64_t id;
    int endpoint; /* index into g_gen_endpoints */
    int stream;
    int n_prompt;
    /* written by the owner thread under m->mu, read by the status renderer */
    int n_out;
    int has_first;
    double t_start, t_first, t_last;
};

struct rp_metrics {
    double t_created;
    pthread_mutex_t mu;
    http_row http[MAX_HTTP_ROWS]; /* under mu */
    int n_http;
    rp_metrics_req *head, *tail; /* live generations, under mu */
    int n_live;
    _Atomic uint64_t prompt_tokens, generation_tokens;
    _Atomic uint64_t generations[N_GEN_ENDPOINTS][N_FINISH];
    rp_hist ttft, itl, duration;
};

/* ---- histograms ----------------------------------------------------------------------- */

void rp_hist_init(rp_hist *h, const double *bounds, int n_bounds)
{
    h->bounds = bounds;
    h->n_bounds = n_bounds < RP_HIST_MAX_BOUNDS ? n_bounds : RP_HIST_MAX_BOUNDS;
    for (int i = 0; i <= RP_HIST_MAX_BOUNDS; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum_ns, 0);
}

void rp_hist_observe(rp_hist *h, double s)
{
    if (!(s > 0)) /* negative, zero or NaN */
        s = 0;
    int i = 0;
    while (i < h->n_bounds && s > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    double ns = s * 1e9;
    if (ns > 1e18)
        ns = 1e18;
    atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)(ns + 0.5), memory_order_relaxed);
}

uint64_t rp_hist_count(const rp_hist *h)
{
    uint64_t n = 0;
    for (int i = 0; i <= h->n_bounds; i++)
        n += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    return n;
}

/* HELP text escapes only backslash and newline (text format 0.0.4). */
static rp_status put_escaped(rp_buf *out, const char *s, int quote)
{
    rp_status st = RP_OK;
    for (; *s && st == RP_OK; s++) {
        if (*s == '\\')
            st = rp_buf_puts(out, "\\\\");
        else if (*s == '\n')
            st = rp_buf_puts(out, "\\n");
        else if (quote && *s == '"')
            st = rp_buf_puts(out, "\\\"");
        else
            st = rp_buf_putc(out, *s);
    }
    return st;
}

static rp_status family(rp_buf *out, const char *name, const char *type, const char *help)
{
    rp_status st = rp_buf_printf(out, "# HELP %s ", name);
    if (st == RP_OK)
        st = put_escaped(out, help, 0);
    if (st == RP_OK)
        st = rp_buf_printf(out, "\n# TYPE %s %s\n", name, type);
    return st;
}

rp_status rp_hist_write(const rp_hist *h, const char *name, const char *help, rp_buf *out)
{
    rp_status st = family(out, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n_bounds && st == RP_OK; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < h->n_bounds)
            st = rp_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
                               (unsigned long long)cum);
        else
            st = rp_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                               (unsigned long long)cum);
    }
    uint64_t ns = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
    if (st == RP_OK) /* exact: whole seconds, then nine digits of nanoseconds */
        st = rp_buf_printf(out, "%s_sum %llu.%09llu\n%s_count %llu\n", name,
                           (unsigned long long)(ns / 1000000000u),
                           (unsigned long long)(ns % 1000000000u), name, (unsigned long long)cum);
    return st;
}

/* ---- the registry ----------------------------------------------------------------------- */

rp_status rp_metrics_new(rp_metrics **out, rp_err *err)
{
    rp_metrics *m = rp_calloc(1, sizeof *m);
    *out = NULL;
    if (!m)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory (metrics)");
    m->t_created = rp_now_s();
    pthread_mutex_init(&m->mu, NULL);
    atomic_init(&m->prompt_tokens, 0);
    atomic_init(&m->generation_tokens, 0);
    for (int e = 0; e < N_GEN_ENDPOINTS; e++)
        for (int f = 0; f < N_FINISH; f++)
            atomic_init(&m->generations[e][f], 0);
    rp_hist_init(&m->ttft, g_ttft_bounds, (int)RP_ARRAY_LEN(g_ttft_bounds));
    rp_hist_init(&m->itl, g_itl_bounds, (int)RP_ARRAY_LEN(g_itl_bounds));
    rp_hist_init(&m->duration, g_duration_bounds, (int)RP_ARRAY_LEN(g_duration_bounds));
    *out = m;
    return RP_OK;
}

void rp_metrics_free(rp_metrics *m)
{
    if (!m)
        return;
    /* records still live belong to generations that were never freed: free them too */
    for (rp_metrics_req *r = m->head; r;) {
        rp_metrics_req *next = r->next;
        rp_free(r);
        r = next;
    }
    pthread_mutex_destroy(&m->mu);
    rp_free(m);
}

void rp_metrics_http(rp_metrics *m, const char *endpoint, int status)
{
    if (!m)
        return;
    if (status <= 0)
        status = 499;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_http &&
           !(m->http[i].status == status && !strcmp(m->http[i].endpoint, endpoint)))
        i++;
    if (i == m->n_http && m->n_http < MAX_HTTP_ROWS)
        m->http[m->n_http++] = (http_row){.endpoint = endpoint, .status = status};
    if (i < m->n_http)
        m->http[i].n++;
    pthread_mutex_unlock(&m->mu);
}

rp_metrics_req *rp_metrics_req_begin(rp_metrics *m, const rp_chat_request *req, uint64_t id,
                                     int n_prompt, double t_start)
{
    if (!m)
        return NULL;
    rp_metrics_req *r = rp_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->m = m;
    r->id = id;
    r->endpoint = req->type == RP_REQ_COMPLETION ? 1 : req->type == RP_REQ_CHAT ? 0 : 2;
    r->stream = req->stream;
    r->n_prompt = n_prompt;
    r->t_start = t_start;
    atomic_fetch_add_explicit(&m->prompt_tokens, (uint64_t)(n_prompt > 0 ? n_prompt : 0),
                              memory_order_relaxed);
    pthread_mutex_lock(&m->mu);
    r->prev = m->tail;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->n_live++;
    pthread_mutex_unlock(&m->mu);
    return r;
}

void rp_metrics_req_token(rp_metrics_req *r, double t, int n_completion)
{
    if (!r || n_completion <= r->n_out)
        return;
    rp_metrics *m = r->m;
    if (!r->has_first)
        rp_hist_observe(&m->ttft, t - r->t_start);
    else
        rp_hist_observe(&m->itl, t - r->t_last);
    pthread_mutex_lock(&m->mu);
    if (!r->has_first) {
        r->has_first = 1;
        r->t_first = t;
    }
    r->t_last = t;
    r->n_out = n_completion;
    pthread_mutex_unlock(&m->mu);
}

void rp_metrics_req_end(rp_metrics_req *r, int finish, int n_completion, double t)
{
    if (!r)
        return;
    rp_metrics *m = r->m;
    pthread_mutex_lock(&m->mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        m->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        m->tail = r->prev;
    m->n_live--;
    pthread_mutex_unlock(&m->mu);
    if (finish < 0 || finish >= N_FINISH)
        finish = RP_GEN_FINISH_ERROR;
    atomic_fetch_add_explicit(&m->generations[r->endpoint][finish], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->generation_tokens,
                              (uint64_t)(n_completion > 0 ? n_completion : 0),
                              memory_order_relaxed);
    rp_hist_observe(&m->duration, t - r->t_start);
    rp_free(r);
}

/* ---- engine rows (design note 2) --------------------------------------------------------- */

typedef enum field_kind {
    F_NONE = 0,
    F_INT,
    F_LONG,
    F_LLONG,
    F_UINT,
    F_ULONG,
    F_ULLONG,
    F_FLOAT,
    F_DOUBLE
} field_kind;

#define FIELD_KIND(x)                                                                          \
    _Generic((x), int: F_INT, long: F_LONG, long long: F_LLONG, unsigned: F_UINT,             \
             unsigned long: F_ULONG, unsigned long long: F_ULLONG, float: F_FLOAT,            \
             double: F_DOUBLE)
/* One rp_engine_stats field: its offset and its type. */
#define STAT(f) {offsetof(rp_engine_stats, f), FIELD_KIND(((rp_engine_stats *)0)->f)}
#define NO_STAT {0, F_NONE}

typedef enum row_op {
    OP_VALUE, /* a */
    OP_DIFF,  /* a - b */
    OP_RATIO, /* a / b (0 when b is 0) */
    OP_SHARE, /* a / (a + b) (0 when both are 0) */
} row_op;

typedef struct stat_ref {
    size_t off;
    field_kind kind;
} stat_ref;

typedef struct engine_row {
    const char *name, *type, *help;
    row_op op;
    stat_ref a, b;
} engine_row;

/* Engine-wide metrics. Wiring a new rp_engine_stats field is one row here. */
static const engine_row g_engine_rows[] = {
    {"rapid_num_requests_running", "gauge",
     "Sequences in the engine's running batch (prefill or decode).", OP_VALUE,
     STAT(n_running), NO_STAT},
    {"rapid_num_requests_waiting", "gauge",
     "Requests waiting in the engine's queue for a sequence slot.", OP_VALUE,
     STAT(n_waiting), NO_STAT},
    {"rapid_engine_requests_total", "counter", "Requests the engine finished.", OP_VALUE,
     STAT(n_requests), NO_STAT},
    {"rapid_engine_prompt_tokens_total", "counter", "Prompt tokens admitted into the engine.",
     OP_VALUE, STAT(n_prompt_tokens), NO_STAT},
    {"rapid_engine_generation_tokens_total", "counter", "Tokens the engine generated.",
     OP_VALUE, STAT(n_generated), NO_STAT},
    {"rapid_engine_steps_total", "counter", "Batched forward steps of the engine.", OP_VALUE,
     STAT(n_steps), NO_STAT},
    {"rapid_prefix_cache_hit_tokens_total", "counter",
     "Prompt tokens served from the prefix cache instead of being recomputed.", OP_VALUE,
     STAT(n_cached_tokens), NO_STAT},
    {"rapid_prefix_cache_miss_tokens_total", "counter",
     "Prompt tokens computed because the prefix cache did not hold them.", OP_VALUE,
     STAT(prefix_miss_tokens), NO_STAT},
    {"rapid_prefix_cache_hit_rate", "gauge",
     "Share of admitted prompt tokens served from the prefix cache since start.", OP_RATIO,
     STAT(n_cached_tokens), STAT(n_prompt_tokens)},
    {"rapid_spec_draft_tokens_total", "counter",
     "Draft tokens evaluated by speculative decoding (prompt lookup).", OP_VALUE,
     STAT(spec_draft_tokens), NO_STAT},
    {"rapid_spec_accepted_tokens_total", "counter",
     "Draft tokens accepted: emitted without a forward step of their own.", OP_VALUE,
     STAT(spec_accepted_tokens), NO_STAT},
    /* the paged KV pool */
    {"rapid_kv_blocks_total", "gauge", "KV cache blocks in the pool.", OP_VALUE,
     STAT(kv_blocks_total), NO_STAT},
    {"rapid_kv_blocks_used", "gauge", "KV cache blocks held by running sequences.", OP_VALUE,
     STAT(kv_blocks_used), NO_STAT},
    {"rapid_kv_blocks_free", "gauge", "KV cache blocks not held by a running sequence.",
     OP_DIFF, STAT(kv_blocks_total), STAT(kv_blocks_used)},
    {"rapid_kv_blocks_cached", "gauge",
     "KV cache blocks indexed in the prefix cache (in use or evictable).", OP_VALUE,
     STAT(kv_blocks_cached), NO_STAT},
    {"rapid_kv_evicted_blocks_total", "counter",
     "Cached KV blocks evicted to make room (LRU).", OP_VALUE, STAT(kv_evicted_blocks),
     NO_STAT},
    {"rapid_kv_bytes_per_token", "gauge", "Bytes of KV cache one cached token takes.", OP_VALUE,
     STAT(kv_bytes_per_token), NO_STAT},
};

static double stat_value(const rp_engine_stats *es, stat_ref ref)
{
    const unsigned char *p = (const unsigned char *)es + ref.off;
    switch (ref.kind) {
    case F_INT: { int v; memcpy(&v, p, sizeof v); return (double)v; }
    case F_LONG: { long v; memcpy(&v, p, sizeof v); return (double)v; }
    case F_LLONG: { long long v; memcpy(&v, p, sizeof v); return (double)v; }
    case F_UINT: { unsigned v; memcpy(&v, p, sizeof v); return (double)v; }
    case F_ULONG: { unsigned long v; memcpy(&v, p, sizeof v); return (double)v; }
    case F_ULLONG: { unsigned long long v; memcpy(&v, p, sizeof v); return (double)v; }
    case F_FLOAT: { float v; memcpy(&v, p, sizeof v); return (double)v; }
    case F_DOUBLE: { double v; memcpy(&v, p, sizeof v); return v; }
    default: return 0;
    }
}

static double row_value(const engine_row *row, const rp_engine_stats *es)
{
    double a = stat_value(es, row->a), b = stat_value(es, row->b);
    switch (row->op) {
    case OP_DIFF: return a - b;
    case OP_RATIO: return b != 0 ? a / b : 0;
    case OP_SHARE: return a + b != 0 ? a / (a + b) : 0;
    default: return a;
    }
}

/* ---- rendering ---------------------------------------------------------------------------- */

static rp_status single(rp_buf *out, const char *name, const char *type, const char *help,
                       double v)
{
    rp_status st = family(out, name, type, help);
    return st != RP_OK ? st : rp_buf_printf(out, "%s %.17g\n", name, v);
}

rp_status rp_metrics_render(rp_metrics *m, const rp_engine_stats *es, rp_buf *out)
{
    rp_status st = single(out, "rapid_model_loaded", "gauge",
                         "1 once the model is loaded and requests are served.", es ? 1 : 0);
    if (st == RP_OK)
        st = single(out, "rapid_uptime_seconds", "gauge", "Seconds since the server started.",
                   rp_now_s() - m->t_created);

    if (st == RP_OK)
        st = family(out, "rapid_http_requests_total", "counter",
                    "HTTP requests by endpoint and status (499: the client left first).");
    pthread_mutex_lock(&m->mu);
    int n_live = m->n_live;
    for (int i = 0; i < m->n_http && st == RP_OK; i++) {
        st = rp_buf_puts(out, "rapid_http_requests_total{endpoint=\"");
        if (st == RP_OK)
            st = put_escaped(out, m->http[i].endpoint, 1);
        if (st == RP_OK)
            st = rp_buf_printf(out, "\",status=\"%d\"} %llu\n", m->http[i].status,
                               (unsigned long long)m->http[i].n);
    }
    pthread_mutex_unlock(&m->mu);

    if (st == RP_OK)
        st = family(out, "rapid_generations_total", "counter",
                    "Finished generations by endpoint and finish reason.");
    for (int e = 0; e < N_GEN_ENDPOINTS && st == RP_OK; e++)
        for (int f = RP_GEN_FINISH_STOP; f < N_FINISH && st == RP_OK; f++)
            st = rp_buf_printf(
                out, "rapid_generations_total{endpoint=\"%s\",finish=\"%s\"} %llu\n",
                g_gen_endpoints[e], g_finish_names[f],
                (unsigned long long)atomic_load_explicit(&m->generations[e][f],
                                                         memory_order_relaxed));
    if (st == RP_OK)
        st = single(out, "rapid_requests_in_flight", "gauge",
                   "Generations submitted and not finished (see GET /v1/status).", n_live);
    if (st == RP_OK)
        st = single(out, "rapid_prompt_tokens_total", "counter",
                   "Prompt tokens of the generations submitted.",
                   (double)atomic_load_explicit(&m->prompt_tokens, memory_order_relaxed));
    if (st == RP_OK)
        st = single(out, "rapid_generation_tokens_total", "counter",
                   "Tokens generated by finished generations (their usage counts).",
                   (double)atomic_load_explicit(&m->generation_tokens, memory_order_relaxed));
    if (st == RP_OK)
        st = rp_hist_write(&m->ttft, "rapid_time_to_first_token_seconds",
                           "Seconds from a request entering the pipeline to its first token.",
                           out);
    if (st == RP_OK)
        st = rp_hist_write(&m->itl, "rapid_inter_token_latency_seconds",
                           "Seconds between consecutive tokens of one generation.", out);
    if (st == RP_OK)
        st = rp_hist_write(&m->duration, "rapid_request_duration_seconds",
                           "Seconds from a generation entering the pipeline to its end.", out);
    for (size_t i = 0; es && i < RP_ARRAY_LEN(g_engine_rows) && st == RP_OK; i++)
        st = single(out, g_engine_rows[i].name, g_engine_rows[i].type, g_engine_rows[i].help,
                   row_value(&g_engine_rows[i], es));
    return st;
}

static int dump_cb(const char *buf, size_t size, void *data)
{
    return rp_buf_append(data, buf, size) == RP_OK ? 0 : -1;
}

char *rp_metrics_status_json(rp_metrics *m, const char *model, const rp_engine_stats *es)
{
    double now = rp_now_s();
    int n_waiting = es ? es->n_waiting : 0;
    json_t *reqs = json_array();
    json_t *root = json_pack("{s:s?, s:f, s:i, s:i, s:o}", "model", model, "uptime_s",
                             now - m->t_created, "queue_depth", n_waiting, "running",
                             es ? es->n_running : 0, "requests", reqs);
    if (!root)
        return NULL;
    pthread_mutex_lock(&m->mu);
    for (const rp_metrics_req *r = m->head; r; r = r->next) {
        const char *phase = "decode";
        if (!r->has_first) { /* design note 3 */
            int newer = 0;
            for (const rp_metrics_req *q = m->head; q; q = q->next)
                newer += !q->has_first && q->id > r->id;
            phase = newer < n_waiting ? "queued" : "prefill";
        }
        double tps = r->n_out >= 2 && r->t_last > r->t_first
                         ? (r->n_out - 1) / (r->t_last - r->t_first)
                         : 0;
        json_t *o = json_pack("{s:I, s:s, s:b, s:s, s:i, s:i, s:f, s:o, s:f}", "id",
                              (json_int_t)r->id, "endpoint", g_gen_endpoints[r->endpoint],
                              "stream", r->stream, "phase", phase, "prompt_tokens", r->n_prompt,
                              "completion_tokens", r->n_out, "tokens_per_second", tps, "ttft_s",
                              r->has_first ? json_real(r->t_first - r->t_start) : json_null(),
                              "age_s", now - r->t_start);
        if (!o || json_array_append_new(reqs, o)) {
            pthread_mutex_unlock(&m->mu);
            json_decref(root);
            return NULL;
        }
    }
    pthread_mutex_unlock(&m->mu);
    rp_buf b = {0}; /* six significant digits: times and speeds, not 17-digit noise */
    int bad = json_dump_callback(root, dump_cb, &b, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(root);
    if (bad || !b.data) {
        rp_buf_deinit(&b);
        return NULL;
    }
    return rp_buf_take(&b);
}
