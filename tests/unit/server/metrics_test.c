/* Unit tests for src/api/metrics.c: histogram buckets, the registry's counters and live table,
 * /v1/status phases, and the Prometheus text it renders, which a checker written here
 * validates line by line against the text exposition format 0.0.4 grammar (HELP/TYPE
 * comments, metric and label names, label value escapes, sample values, family grouping,
 * histogram bucket order and totals). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/metrics.h"
#include "api/pipeline.h"
#include "base/alloc.h"
#include "base/buf.h"

/* ---- a checker for the text format ------------------------------------------------------ */

#define MAX_FAMILIES 128
#define MAX_SERIES 1024

typedef struct checker {
    char fam[MAX_FAMILIES][128]; /* families in order of appearance */
    char type[MAX_FAMILIES][16];
    int n_fam;
    int cur; /* family of the samples being read, -1: none */
    char series[MAX_SERIES][256];
    int n_series;
    /* the histogram being read */
    double last_le;
    double last_bucket;
    int saw_inf;
    double inf_count;
    char why[256];
} checker;

static int fail(checker *c, int line, const char *msg, const char *text)
{
    snprintf(c->why, sizeof c->why, "line %d: %s: %.120s", line, msg, text);
    return 0;
}

static int is_name_start(char ch, int colon)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
           (colon && ch == ':');
}

static int is_name_char(char ch, int colon)
{
    return is_name_start(ch, colon) || (ch >= '0' && ch <= '9');
}

/* Length of a metric (colon 1) or label (colon 0) name at s; 0 when none. */
static size_t name_len(const char *s, int colon)
{
    if (!is_name_start(*s, colon))
        return 0;
    size_t n = 1;
    while (is_name_char(s[n], colon))
        n++;
    return n;
}

/* A sample value as Go's ParseFloat reads it in the format: decimal, exponent, NaN, Inf. */
static int parse_value(const char *s, size_t n, double *out)
{
    char tmp[64];
    if (n == 0 || n >= sizeof tmp)
        return 0;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    if (!strcmp(tmp, "NaN")) {
        *out = NAN;
        return 1;
    }
    if (!strcmp(tmp, "+Inf") || !strcmp(tmp, "Inf")) {
        *out = INFINITY;
        return 1;
    }
    if (!strcmp(tmp, "-Inf")) {
        *out = -INFINITY;
        return 1;
    }
    size_t i = 0;
    if (tmp[i] == '+' || tmp[i] == '-')
        i++;
    size_t digits = 0;
    while (tmp[i] >= '0' && tmp[i] <= '9')
        i++, digits++;
    if (tmp[i] == '.') {
        i++;
        while (tmp[i] >= '0' && tmp[i] <= '9')
            i++, digits++;
    }
    if (!digits)
        return 0;
    if (tmp[i] == 'e' || tmp[i] == 'E') {
        i++;
        if (tmp[i] == '+' || tmp[i] == '-')
            i++;
        size_t ed = 0;
        while (tmp[i] >= '0' && tmp[i] <= '9')
            i++, ed++;
        if (!ed)
            return 0;
    }
    if (tmp[i])
        return 0;
    *out = strtod(tmp, NULL);
    return 1;
}

static int family_index(checker *c, const char *name, size_t n)
{
    for (int i = 0; i < c->n_fam; i++)
        if (strlen(c->fam[i]) == n && !strncmp(c->fam[i], name, n))
            return i;
    return -1;
}

static int new_family(checker *c, const char *name, size_t n)
{
    if (c->n_fam == MAX_FAMILIES || n >= sizeof c->fam[0])
        return -1;
    memcpy(c->fam[c->n_fam], name, n);
    c->fam[c->n_fam][n] = 0;
    c->type[c->n_fam][0] = 0;
    return c->n_fam++;
}

/* The family a sample name belongs to (histogram _bucket/_sum/_count go to their base). */
static int sample_family(checker *c, const char *name, size_t n, const char **suffix)
{
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    *suffix = "";
    for (size_t k = 0; k < 3; k++) {
        size_t sl = strlen(sfx[k]);
        if (n > sl && !strncmp(name + n - sl, sfx[k], sl)) {
            int f = family_index(c, name, n - sl);
            if (f >= 0 && (!strcmp(c->type[f], "histogram") || !strcmp(c->type[f], "summary"))) {
                *suffix = sfx[k];
                return f;
            }
        }
    }
    return family_index(c, name, n);
}

static int check_comment(checker *c, int ln, const char *s)
{
    int help = !strncmp(s, "# HELP ", 7), type = !strncmp(s, "# TYPE ", 7);
    if (!help && !type)
        return 1; /* any other comment */
    const char *p = s + 7;
    size_t n = name_len(p, 1);
    if (!n)
        return fail(c, ln, "bad metric name", s);
    int f = family_index(c, p, n);
    if (f >= 0 && f != c->cur)
        return fail(c, ln, "family seen before (not contiguous)", s);
    if (f < 0 && (f = new_family(c, p, n)) < 0)
        return fail(c, ln, "too many families", s);
    if (f != c->cur) {
        c->cur = f;
        c->saw_inf = 0;
        c->last_le = -INFINITY;
        c->last_bucket = 0;
    }
    p += n;
    if (help) {
        if (*p != ' ')
            return fail(c, ln, "HELP without text", s);
        for (p++; *p; p++)
            if (*p == '\\' && p[1] != '\\' && p[1] != 'n')
                return fail(c, ln, "bad escape in HELP", s);
            else if (*p == '\\')
                p++;
        return 1;
    }
    if (c->type[f][0])
        return fail(c, ln, "second TYPE", s);
    if (c->n_series > 0) { /* TYPE must come before the family's samples */
        for (int i = 0; i < c->n_series; i++) {
            const char *sfx;
            if (sample_family(c, c->series[i], name_len(c->series[i], 1), &sfx) == f)
                return fail(c, ln, "TYPE after samples", s);
        }
    }
    if (*p != ' ')
        return fail(c, ln, "TYPE without a type", s);
    p++;
    static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    for (size_t i = 0; i < 5; i++)
        if (!strcmp(p, types[i])) {
            strcpy(c->type[f], types[i]);
            return 1;
        }
    return fail(c, ln, "unknown type", s);
}

static int check_sample(checker *c, int ln, const char *s)
{
    size_t n = name_len(s, 1);
    if (!n)
        return fail(c, ln, "bad metric name", s);
    const char *sfx;
    int f = sample_family(c, s, n, &sfx);
    if (f < 0) { /* untyped, no comments: a family of its own */
        if ((f = new_family(c, s, n)) < 0)
            return fail(c, ln, "too many families", s);
        c->cur = f;
    }
    if (f != c->cur)
        return fail(c, ln, "sample outside its family's group", s);
    const char *p = s + n;
    double le = NAN;
    int has_le = 0;
    if (*p == '{') {
        p++;
        char seen[16][64];
        int n_seen = 0;
        while (*p != '}') {
            size_t ln2 = name_len(p, 0);
            if (!ln2 || ln2 >= 64)
                return fail(c, ln, "bad label name", s);
            for (int i = 0; i < n_seen; i++)
                if (strlen(seen[i]) == ln2 && !strncmp(seen[i], p, ln2))
                    return fail(c, ln, "duplicate label", s);
            if (n_seen < 16) {
                memcpy(seen[n_seen], p, ln2);
                seen[n_seen++][ln2] = 0;
            }
            int is_le = ln2 == 2 && !strncmp(p, "le", 2);
            p += ln2;
            if (p[0] != '=' || p[1] != '"')
                return fail(c, ln, "label without =\"", s);
            p += 2;
            const char *v = p;
            for (; *p && *p != '"'; p++) {
                if (*p == '\\') {
                    if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                        return fail(c, ln, "bad escape in label value", s);
                    p++;
                }
            }
            if (*p != '"')
                return fail(c, ln, "unterminated label value", s);
            if (is_le) {
                has_le = 1;
                if (!parse_value(v, (size_t)(p - v), &le))
                    return fail(c, ln, "le is not a number", s);
            }
            p++;
            if (*p == ',')
                p++;
            else if (*p != '}')
                return fail(c, ln, "expected , or }", s);
        }
        p++;
    }
    if (*p != ' ')
        return fail(c, ln, "no space before the value", s);
    size_t series_len = (size_t)(p - s);
    p++;
    const char *v = p;
    while (*p && *p != ' ')
        p++;
    double value;
    if (!parse_value(v, (size_t)(p - v), &value))
        return fail(c, ln, "bad value", s);
    if (*p == ' ') { /* optional timestamp: an integer of milliseconds */
        p++;
        if (*p == '-')
            p++;
        if (!*p)
            return fail(c, ln, "empty timestamp", s);
        for (; *p; p++)
            if (*p < '0' || *p > '9')
                return fail(c, ln, "bad timestamp", s);
    }
    for (int i = 0; i < c->n_series; i++)
        if (strlen(c->series[i]) == series_len && !strncmp(c->series[i], s, series_len))
            return fail(c, ln, "duplicate series", s);
    if (c->n_series == MAX_SERIES || series_len >= sizeof c->series[0])
        return fail(c, ln, "too many series", s);
    memcpy(c->series[c->n_series], s, series_len);
    c->series[c->n_series++][series_len] = 0;
    const char *type = c->type[f];
    if (!strcmp(type, "counter") && (value < 0 || isnan(value)))
        return fail(c, ln, "negative counter", s);
    if (!strcmp(type, "histogram")) {
        if (!strcmp(sfx, "_bucket")) {
            if (!has_le)
                return fail(c, ln, "bucket without le", s);
            if (c->saw_inf || !(le > c->last_le))
                return fail(c, ln, "le not increasing", s);
            if (value < c->last_bucket)
                return fail(c, ln, "buckets not cumulative", s);
            c->last_le = le;
            c->last_bucket = value;
            if (isinf(le)) {
                c->saw_inf = 1;
                c->inf_count = value;
            }
        } else if (!strcmp(sfx, "_count")) {
            if (!c->saw_inf)
                return fail(c, ln, "histogram without a +Inf bucket", s);
            if (value != c->inf_count)
                return fail(c, ln, "_count differs from the +Inf bucket", s);
        } else if (!*sfx) {
            return fail(c, ln, "histogram sample without _bucket/_sum/_count", s);
        }
    }
    return 1;
}

/* 1 when text is valid exposition text; else 0 with c->why. */
static int check_exposition(checker *c, const char *text)
{
    memset(c, 0, sizeof *c);
    c->cur = -1;
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n')
        return fail(c, 0, "text does not end with a newline", "");
    int ln = 0;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        char line[1024];
        size_t n = (size_t)(end - p);
        ln++;
        if (n >= sizeof line)
            return fail(c, ln, "line too long", "");
        memcpy(line, p, n);
        line[n] = 0;
        p = end + 1;
        if (strchr(line, '\r'))
            return fail(c, ln, "carriage return", line);
        if (!n)
            continue;
        if (line[0] == '#' ? !check_comment(c, ln, line) : !check_sample(c, ln, line))
            return 0;
    }
    return 1;
}

/* The value of one series ("name" or "name{labels}" exactly as rendered); NAN when absent. */
static double value_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

/* ---- the checker itself -------------------------------------------------------------------- */

Test(exposition_checker, accepts_valid_text)
{
    checker c;
    const char *ok =
        "# HELP a_total A counter with \\\\ and \\n escapes.\n"
        "# TYPE a_total counter\n"
        "a_total{x=\"1\",y=\"q\\\"uote\\\\\\n\"} 3\n"
        "a_total{x=\"2\",} 4 1700000000000\n"
        "\n"
        "# a plain comment\n"
        "b:gauge -1.5e-3\n"
        "# TYPE h histogram\n"
        "h_bucket{le=\"0.1\"} 1\n"
        "h_bucket{le=\"1\"} 1\n"
        "h_bucket{le=\"+Inf\"} 2\n"
        "h_sum 5.25\n"
        "h_count 2\n"
        "c NaN\n"
        "d +Inf\n";
    cr_assert(check_exposition(&c, ok), "%s", c.why);
}

Test(exposition_checker, rejects_invalid_text)
{
    const char *bad[] = {
        "a 1",                                          /* no final newline */
        "1a 1\n",                                       /* name starts with a digit */
        "a{1x=\"v\"} 1\n",                              /* label name */
        "a{x=v} 1\n",                                   /* unquoted value */
        "a{x=\"\\t\"} 1\n",                             /* bad escape */
        "a{x=\"v\",x=\"w\"} 1\n",                       /* duplicate label */
        "a 1,5\n",                                      /* value */
        "a 1 12x\n",                                    /* timestamp */
        "a 1\na 2\n",                                   /* duplicate series */
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",        /* second TYPE */
        "# TYPE a blob\na 1\n",                         /* unknown type */
        "a 1\n# TYPE a gauge\n",                        /* TYPE after samples */
        "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"1\"} 2\n", /* not contiguous */
        "# TYPE a counter\na -1\n",                     /* negative counter */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"0.5\"} 2\n", /* le order */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n", /* cumulative */
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",            /* count */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_count 2\n",               /* no +Inf */
        "# TYPE h histogram\nh_bucket{x=\"1\"} 2\n",                           /* no le */
        "# HELP a bad \\q escape\n",                    /* HELP escape */
        "a\r 1\n",                                      /* CR */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        checker c;
        cr_assert_not(check_exposition(&c, bad[i]), "accepted bad text %zu: %s", i, bad[i]);
    }
}

/* ---- histograms ---------------------------------------------------------------------------- */

Test(metrics_hist, buckets_are_le_and_cumulative)
{
    static const double bounds[] = {0.1, 0.5, 1};
    rp_hist h;
    rp_hist_init(&h, bounds, 3);
    const double obs[] = {0.05, 0.1, 0.3, 0.5, 1.0, 2.0, -1.0, NAN, 1e9};
    for (size_t i = 0; i < sizeof obs / sizeof obs[0]; i++)
        rp_hist_observe(&h, obs[i]);
    /* le 0.1: 0.05, 0.1, -1 (as 0), NaN (as 0); le 0.5: 0.3, 0.5; le 1: 1.0; +Inf: 2, 1e9 */
    cr_assert_eq(atomic_load(&h.counts[0]), 4);
    cr_assert_eq(atomic_load(&h.counts[1]), 2);
    cr_assert_eq(atomic_load(&h.counts[2]), 1);
    cr_assert_eq(atomic_load(&h.counts[3]), 2);
    cr_assert_eq(rp_hist_count(&h), 9);
    rp_buf b = {0};
    cr_assert_eq(rp_hist_write(&h, "x_seconds", "X.", &b), RP_OK);
    const char *want_head = "# HELP x_seconds X.\n# TYPE x_seconds histogram\n"
                            "x_seconds_bucket{le=\"0.1\"} 4\n"
                            "x_seconds_bucket{le=\"0.5\"} 6\n"
                            "x_seconds_bucket{le=\"1\"} 7\n"
                            "x_seconds_bucket{le=\"+Inf\"} 9\n";
    cr_assert(!strncmp(b.data, want_head, strlen(want_head)), "%s", b.data);
    cr_assert_float_eq(value_of(b.data, "x_seconds_sum"), 0.05 + 0.1 + 0.3 + 0.5 + 1 + 2 + 1e9,
                       1e-3);
    cr_assert_eq(value_of(b.data, "x_seconds_count"), 9);
    checker c;
    cr_assert(check_exposition(&c, b.data), "%s\n%s", c.why, b.data);
    rp_buf_deinit(&b);
}

Test(metrics_hist, empty_histogram_is_valid)
{
    static const double bounds[] = {1};
    rp_hist h;
    rp_hist_init(&h, bounds, 1);
    rp_buf b = {0};
    cr_assert_eq(rp_hist_write(&h, "e", "Empty.", &b), RP_OK);
    checker c;
    cr_assert(check_exposition(&c, b.data), "%s\n%s", c.why, b.data);
    cr_assert_eq(value_of(b.data, "e_count"), 0);
    cr_assert_eq(value_of(b.data, "e_sum"), 0);
    rp_buf_deinit(&b);
}

/* ---- the registry ------------------------------------------------------------------------ */

static rp_metrics *new_metrics(void)
{
    rp_metrics *m;
    rp_err err;
    cr_assert_eq(rp_metrics_new(&m, &err), RP_OK);
    return m;
}

static char *render(rp_metrics *m, const rp_engine_stats *es)
{
    rp_buf b = {0};
    cr_assert_eq(rp_metrics_render(m, es, &b), RP_OK);
    checker c;
    cr_assert(check_exposition(&c, b.data), "%s\n%s", c.why, b.data);
    return rp_buf_take(&b);
}

static rp_chat_request req_of(rp_req_type type, int stream)
{
    rp_chat_request r;
    memset(&r, 0, sizeof r);
    r.type = type;
    r.stream = stream;
    return r;
}

Test(metrics, counters_and_histograms_move_by_the_right_amounts)
{
    rp_metrics *m = new_metrics();
    rp_metrics_http(m, "/v1/chat/completions", 200);
    rp_metrics_http(m, "/v1/chat/completions", 200);
    rp_metrics_http(m, "/v1/chat/completions", 400);
    rp_metrics_http(m, "/health", 0); /* client left: 499 */
    rp_metrics_http(m, "q\"uote\\d", 404);

    rp_chat_request chat = req_of(RP_REQ_CHAT, 1), comp = req_of(RP_REQ_COMPLETION, 0);
    rp_metrics_req *a = rp_metrics_req_begin(m, &chat, 1, 10, 100.0);
    rp_metrics_req *b = rp_metrics_req_begin(m, &comp, 2, 7, 100.0);
    rp_metrics_req_token(a, 100.25, 1); /* TTFT 0.25 */
    rp_metrics_req_token(a, 100.30, 2); /* ITL 0.05 */
    rp_metrics_req_token(a, 100.30, 2); /* not counted (after a stop string): ignored */
    rp_metrics_req_token(a, 100.40, 3); /* ITL 0.1 */
    rp_metrics_req_token(b, 102.0, 1);  /* TTFT 2 */

    char *t = render(m, NULL);
    cr_assert_eq(value_of(t, "rapid_model_loaded"), 0);
    cr_assert_eq(value_of(t, "rapid_requests_in_flight"), 2);
    cr_assert_eq(value_of(t, "rapid_prompt_tokens_total"), 17);
    cr_assert_eq(value_of(t, "rapid_generation_tokens_total"), 0);
    cr_assert_eq(value_of(t, "rapid_time_to_first_token_seconds_count"), 2);
    cr_assert_eq(value_of(t, "rapid_inter_token_latency_seconds_count"), 2);
    cr_assert_eq(value_of(t, "rapid_request_duration_seconds_count"), 0);
    cr_assert(isnan(value_of(t, "rapid_num_requests_running")), "no engine rows while loading");
    rp_free(t);

    rp_metrics_req_end(a, RP_GEN_FINISH_STOP, 3, 101.0);
    rp_metrics_req_end(b, RP_GEN_FINISH_LENGTH, 1, 102.5);
    rp_metrics_req_end(NULL, RP_GEN_FINISH_STOP, 5, 1.0); /* no-ops on NULL */
    rp_metrics_req_token(NULL, 1.0, 1);

    rp_engine_stats es = {.n_running = 3, .n_waiting = 2, .n_requests = 9,
                          .n_prompt_tokens = 400, .n_cached_tokens = 300, .n_generated = 50,
                          .n_steps = 70, .prefix_hit_tokens = 300, .prefix_miss_tokens = 100,
                          .kv_blocks_total = 64, .kv_blocks_used = 10, .kv_blocks_cached = 20,
                          .kv_evicted_blocks = 7, .kv_bytes_per_token = 17408.0};
    t = render(m, &es);
    cr_assert_eq(value_of(t, "rapid_model_loaded"), 1);
    cr_assert_eq(value_of(t, "rapid_http_requests_total{endpoint=\"/v1/chat/completions\","
                             "status=\"200\"}"), 2);
    cr_assert_eq(value_of(t, "rapid_http_requests_total{endpoint=\"/v1/chat/completions\","
                             "status=\"400\"}"), 1);
    cr_assert_eq(value_of(t, "rapid_http_requests_total{endpoint=\"/health\",status=\"499\"}"), 1);
    cr_assert_eq(value_of(t, "rapid_http_requests_total{endpoint=\"q\\\"uote\\\\d\","
                             "status=\"404\"}"), 1);
    cr_assert_eq(value_of(t, "rapid_generations_total{endpoint=\"/v1/chat/completions\","
                             "finish=\"stop\"}"), 1);
    cr_assert_eq(value_of(t, "rapid_generations_total{endpoint=\"/v1/completions\","
                             "finish=\"length\"}"), 1);
    cr_assert_eq(value_of(t, "rapid_generations_total{endpoint=\"/v1/messages\","
                             "finish=\"stop\"}"), 0);
    cr_assert_eq(value_of(t, "rapid_requests_in_flight"), 0);
    cr_assert_eq(value_of(t, "rapid_generation_tokens_total"), 4);
    cr_assert_eq(value_of(t, "rapid_time_to_first_token_seconds_count"), 2);
    cr_assert_float_eq(value_of(t, "rapid_time_to_first_token_seconds_sum"), 2.25, 1e-6);
    cr_assert_eq(value_of(t, "rapid_time_to_first_token_seconds_bucket{le=\"0.25\"}"), 1);
    cr_assert_eq(value_of(t, "rapid_time_to_first_token_seconds_bucket{le=\"1\"}"), 1);
    cr_assert_eq(value_of(t, "rapid_time_to_first_token_seconds_bucket{le=\"2.5\"}"), 2);
    cr_assert_float_eq(value_of(t, "rapid_inter_token_latency_seconds_sum"), 0.15, 1e-6);
    cr_assert_eq(value_of(t, "rapid_request_duration_seconds_count"), 2);
    cr_assert_float_eq(value_of(t, "rapid_request_duration_seconds_sum"), 3.5, 1e-6);
    cr_assert_eq(value_of(t, "rapid_num_requests_running"), 3);
    cr_assert_eq(value_of(t, "rapid_num_requests_waiting"), 2);
    cr_assert_eq(value_of(t, "rapid_engine_steps_total"), 70);
    cr_assert_eq(value_of(t, "rapid_prefix_cache_hit_tokens_total"), 300);
    cr_assert_eq(value_of(t, "rapid_prefix_cache_miss_tokens_total"), 100);
    cr_assert_float_eq(value_of(t, "rapid_prefix_cache_hit_rate"), 0.75, 1e-12);
    cr_assert_eq(value_of(t, "rapid_kv_blocks_total"), 64);
    cr_assert_eq(value_of(t, "rapid_kv_blocks_used"), 10);
    cr_assert_eq(value_of(t, "rapid_kv_blocks_free"), 54);
    cr_assert_eq(value_of(t, "rapid_kv_blocks_cached"), 20);
    cr_assert_eq(value_of(t, "rapid_kv_evicted_blocks_total"), 7);
    cr_assert_eq(value_of(t, "rapid_kv_bytes_per_token"), 17408);
    rp_free(t);

    es = (rp_engine_stats){0}; /* no prompt yet: the hit rate is 0, not NaN */
    t = render(m, &es);
    cr_assert_eq(value_of(t, "rapid_prefix_cache_hit_rate"), 0);
    rp_free(t);
    rp_metrics_free(m);
}

Test(metrics, null_registry_is_a_no_op)
{
    rp_chat_request chat = req_of(RP_REQ_CHAT, 0);
    cr_assert_null(rp_metrics_req_begin(NULL, &chat, 1, 3, 0));
    rp_metrics_http(NULL, "/", 200);
    rp_metrics_free(NULL);
}

Test(metrics, free_with_live_records)
{
    rp_metrics *m = new_metrics();
    rp_chat_request chat = req_of(RP_REQ_CHAT, 0);
    rp_metrics_req_begin(m, &chat, 1, 3, 0);
    rp_metrics_free(m); /* ASan: nothing leaks */
}

static json_t *status_of(rp_metrics *m, const rp_engine_stats *es)
{
    char *s = rp_metrics_status_json(m, "tiny", es);
    cr_assert_not_null(s);
    json_error_t jerr;
    json_t *j = json_loads(s, 0, &jerr);
    cr_assert_not_null(j, "%s: %s", jerr.text, s);
    rp_free(s);
    return j;
}

static const char *phase_of(json_t *st, json_int_t id)
{
    json_t *reqs = json_object_get(st, "requests");
    for (size_t i = 0; i < json_array_size(reqs); i++) {
        json_t *r = json_array_get(reqs, i);
        if (json_integer_value(json_object_get(r, "id")) == id)
            return json_string_value(json_object_get(r, "phase"));
    }
    return NULL;
}

Test(metrics, status_lists_live_requests_with_phase_and_speed)
{
    rp_metrics *m = new_metrics();
    rp_chat_request chat = req_of(RP_REQ_CHAT, 1), msg = req_of(RP_REQ_MESSAGES, 0);
    rp_metrics_req *a = rp_metrics_req_begin(m, &chat, 5, 12, 10.0);
    rp_metrics_req *b = rp_metrics_req_begin(m, &msg, 6, 4, 10.0);
    rp_metrics_req *c = rp_metrics_req_begin(m, &msg, 7, 4, 10.0);
    rp_metrics_req_token(a, 10.5, 1);
    rp_metrics_req_token(a, 10.6, 2);
    rp_metrics_req_token(a, 11.5, 11); /* 10 tokens in one second after the first */

    rp_engine_stats es = {.n_running = 2, .n_waiting = 1};
    json_t *st = status_of(m, &es);
    cr_assert_str_eq(json_string_value(json_object_get(st, "model")), "tiny");
    cr_assert_eq(json_integer_value(json_object_get(st, "queue_depth")), 1);
    cr_assert_eq(json_integer_value(json_object_get(st, "running")), 2);
    cr_assert(json_real_value(json_object_get(st, "uptime_s")) >= 0);
    cr_assert_eq(json_array_size(json_object_get(st, "requests")), 3);
    cr_assert_str_eq(phase_of(st, 5), "decode");
    cr_assert_str_eq(phase_of(st, 6), "prefill"); /* admitted first (FIFO) */
    cr_assert_str_eq(phase_of(st, 7), "queued");  /* the newest waiting one */
    json_t *ra = json_array_get(json_object_get(st, "requests"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(ra, "endpoint")), "/v1/chat/completions");
    cr_assert(json_is_true(json_object_get(ra, "stream")));
    cr_assert_eq(json_integer_value(json_object_get(ra, "prompt_tokens")), 12);
    cr_assert_eq(json_integer_value(json_object_get(ra, "completion_tokens")), 11);
    cr_assert_float_eq(json_real_value(json_object_get(ra, "tokens_per_second")), 10, 1e-9);
    cr_assert_float_eq(json_real_value(json_object_get(ra, "ttft_s")), 0.5, 1e-9);
    json_t *rb = json_array_get(json_object_get(st, "requests"), 1);
    cr_assert_str_eq(json_string_value(json_object_get(rb, "endpoint")), "/v1/messages");
    cr_assert(json_is_null(json_object_get(rb, "ttft_s")));
    json_decref(st);

    es.n_waiting = 0; /* both admitted: prefill */
    st = status_of(m, &es);
    cr_assert_str_eq(phase_of(st, 7), "prefill");
    json_decref(st);

    rp_metrics_req_end(b, RP_GEN_FINISH_STOP, 0, 12.0); /* from the middle of the list */
    rp_metrics_req_end(a, RP_GEN_FINISH_STOP, 11, 12.0);
    st = status_of(m, NULL);
    cr_assert_eq(json_array_size(json_object_get(st, "requests")), 1);
    cr_assert_str_eq(phase_of(st, 7), "prefill");
    json_decref(st);
    rp_metrics_req_end(c, RP_GEN_FINISH_CANCELLED, 0, 12.0);
    st = status_of(m, NULL);
    cr_assert_eq(json_array_size(json_object_get(st, "requests")), 0);
    json_decref(st);
    rp_metrics_free(m);
}

/* ---- concurrency: exact totals while scrapes run --------------------------------------------- */

#define N_THREADS 4
#define N_PER_THREAD 300

static void *worker(void *arg)
{
    rp_metrics *m = arg;
    rp_chat_request chat = req_of(RP_REQ_CHAT, 1);
    for (int i = 0; i < N_PER_THREAD; i++) {
        rp_metrics_req *r = rp_metrics_req_begin(m, &chat, (uint64_t)i, 2, 0.0);
        rp_metrics_req_token(r, 0.01, 1);
        rp_metrics_req_token(r, 0.02, 2);
        rp_metrics_req_end(r, RP_GEN_FINISH_STOP, 2, 0.03);
        rp_metrics_http(m, "/v1/chat/completions", 200);
    }
    return NULL;
}

Test(metrics, concurrent_updates_add_up)
{
    rp_metrics *m = new_metrics();
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        pthread_create(&th[i], NULL, worker, m);
    rp_engine_stats es = {0};
    for (int i = 0; i < 20; i++) { /* scrapes racing the workers stay valid */
        char *t = render(m, &es);
        rp_free(t);
        char *s = rp_metrics_status_json(m, "x", &es);
        cr_assert_not_null(s);
        rp_free(s);
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    char *t = render(m, &es);
    const double n = N_THREADS * N_PER_THREAD;
    cr_assert_eq(value_of(t, "rapid_http_requests_total{endpoint=\"/v1/chat/completions\","
                             "status=\"200\"}"), n);
    cr_assert_eq(value_of(t, "rapid_time_to_first_token_seconds_count"), n);
    cr_assert_eq(value_of(t, "rapid_inter_token_latency_seconds_count"), n);
    cr_assert_eq(value_of(t, "rapid_request_duration_seconds_count"), n);
    cr_assert_eq(value_of(t, "rapid_prompt_tokens_total"), 2 * n);
    cr_assert_eq(value_of(t, "rapid_generation_tokens_total"), 2 * n);
    cr_assert_eq(value_of(t, "rapid_generations_total{endpoint=\"/v1/chat/completions\","
                             "finish=\"stop\"}"), n);
    cr_assert_eq(value_of(t, "rapid_requests_in_flight"), 0);
    rp_free(t);
    rp_metrics_free(m);
}
