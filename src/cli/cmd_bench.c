/* cli/cmd_bench.c - `rapid bench`: speed of a running server over its OpenAI streaming API.
 * With --model naming a model directory (and no --url), it runs the in-process model
 * benchmark instead (cli/model_bench.h).
 *
 * Each run sends a synthetic prompt of about --prompt-tokens words and asks for --max-tokens
 * new tokens (temperature 0, ignore_eos so the length is fixed where the server supports
 * it). From the stream: TTFT (request to first token), prefill tok/s (prompt tokens / TTFT),
 * decode tok/s ((completion tokens - 1) / time from first to last token). Token counts come
 * from the usage chunk, else from the number of content deltas. --concurrency N then sends
 * N requests at once (one thread each) and reports the aggregate decode rate.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/hub.h"
#include "cli/model_bench.h"

typedef struct bench_cfg {
    char url[512];
    const char *model;
    long prompt_tokens, max_tokens;
    char *body; /* the request JSON (shared by every run) */
} bench_cfg;

typedef struct run_result {
    double t_start, t_first, t_last;
    long n_deltas;
    long prompt_tokens, completion_tokens;
    long http_code;
    rp_status status;
    char error[600];
} run_result;

static int on_event(const char *data, void *user)
{
    run_result *r = user;
    if (strcmp(data, "[DONE]") == 0)
        return 1;
    json_t *j = json_loads(data, 0, NULL);
    if (!j)
        return 0;
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        r->prompt_tokens = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
        r->completion_tokens = (long)json_integer_value(json_object_get(u, "completion_tokens"));
    }
    json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    const char *c = json_string_value(json_object_get(d, "content"));
    const char *rs = json_string_value(json_object_get(d, "reasoning_content"));
    if ((c && *c) || (rs && *rs)) {
        double now = rp_now_s();
        if (r->n_deltas == 0)
            r->t_first = now;
        r->t_last = now;
        r->n_deltas++;
    }
    json_decref(j);
    return 0;
}

static void run_once(const bench_cfg *cfg, run_result *r)
{
    memset(r, 0, sizeof *r);
    rp_buf url = {0};
    rp_buf_printf(&url, "%s/v1/chat/completions", cfg->url);
    rp_err err;
    char *err_body = NULL;
    r->t_start = rp_now_s();
    r->status = rp_http_sse(url.data, cfg->body, NULL, on_event, r, NULL, &r->http_code,
                            &err_body, &err);
    if (r->status != RP_OK)
        snprintf(r->error, sizeof r->error, "%s", err.msg);
    else if (r->http_code < 200 || r->http_code >= 300)
        snprintf(r->error, sizeof r->error, "HTTP %ld: %.200s", r->http_code,
                 err_body ? err_body : "");
    else if (r->n_deltas == 0)
        snprintf(r->error, sizeof r->error, "the stream had no tokens");
    if (!r->completion_tokens)
        r->completion_tokens = r->n_deltas;
    if (!r->prompt_tokens)
        r->prompt_tokens = cfg->prompt_tokens;
    rp_free(err_body);
    rp_buf_deinit(&url);
}

static double ttft(const run_result *r) { return r->t_first - r->t_start; }

static double decode_rate(const run_result *r)
{
    double dt = r->t_last - r->t_first;
    return dt > 0 && r->completion_tokens > 1 ? (double)(r->completion_tokens - 1) / dt : 0;
}

typedef struct worker {
    pthread_t th;
    const bench_cfg *cfg;
    run_result r;
} worker;

static void *worker_main(void *p)
{
    worker *w = p;
    run_once(w->cfg, &w->r);
    return NULL;
}

static char *make_body(const bench_cfg *cfg)
{
    static const char *words[] = {"the", "quick", "brown", "fox", "jumps", "over", "a",
                                  "lazy", "dog", "while", "rivers", "run", "to", "sea"};
    rp_buf p = {0};
    rp_buf_puts(&p, "Summarize:");
    for (long i = 0; i < cfg->prompt_tokens; i++)
        rp_buf_printf(&p, " %s", words[(size_t)i % RP_ARRAY_LEN(words)]);
    json_t *req = json_pack("{s:s, s:[{s:s, s:s}], s:b, s:i, s:f, s:b, s:{s:b}}", "model",
                            cfg->model, "messages", "role", "user", "content",
                            p.data ? p.data : "", "stream", 1, "max_tokens",
                            (json_int_t)cfg->max_tokens, "temperature", 0.0, "ignore_eos", 1,
                            "stream_options", "include_usage", 1);
    rp_buf_deinit(&p);
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    return s;
}

static char *served_model(const char *url)
{
    rp_buf u = {0};
    rp_buf_printf(&u, "%s/v1/models", url);
    char *body = NULL;
    long code = 0;
    int ok = rp_http_request(u.data, NULL, NULL, 5, &body, &code, NULL) == RP_OK && code == 200;
    rp_buf_deinit(&u);
    json_t *j = ok ? json_loads(body, 0, NULL) : NULL;
    const char *id = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    char *out = id ? rp_strdup(id) : ok ? rp_strdup("default") : NULL;
    json_decref(j);
    rp_free(body);
    return out;
}

static int parse_pos(const char *s, long *out, long dflt, const char *name)
{
    *out = dflt;
    if (s && (rp_args_int(s, out) != 0 || *out <= 0)) {
        fprintf(stderr, "rapid bench: --%s takes a positive number\n", name);
        return -1;
    }
    return 0;
}

static int run_bench(bench_cfg *cfg, long n_runs, long conc, int as_json)
{
    run_result *runs = rp_calloc((size_t)n_runs, sizeof *runs);
    worker *ws = rp_calloc((size_t)conc, sizeof *ws);
    if (!runs || !ws) {
        rp_free(runs);
        rp_free(ws);
        return 1;
    }
    int status = 0;
    double s_ttft = 0, s_prefill = 0, s_decode = 0;
    if (!as_json)
        printf("rapid bench: %s, model %s, prompt ~%ld tokens, %ld new tokens\n\n%-5s %8s %14s "
               "%13s %7s\n",
               cfg->url, cfg->model, cfg->prompt_tokens, cfg->max_tokens, "run", "ttft_s",
               "prefill_tok/s", "decode_tok/s", "tokens");
    for (long i = 0; i < n_runs && !status; i++) {
        run_result *r = &runs[i];
        run_once(cfg, r);
        if (r->error[0]) {
            fprintf(stderr, "rapid bench: run %ld failed: %s\n", i + 1, r->error);
            status = 1;
            break;
        }
        s_ttft += ttft(r);
        s_prefill += ttft(r) > 0 ? (double)r->prompt_tokens / ttft(r) : 0;
        s_decode += decode_rate(r);
        if (!as_json)
            printf("%-5ld %8.3f %14.1f %13.1f %7ld\n", i + 1, ttft(r),
                   ttft(r) > 0 ? (double)r->prompt_tokens / ttft(r) : 0, decode_rate(r),
                   r->completion_tokens);
    }
    double wall = 0, agg = 0, c_ttft = 0;
    long c_tokens = 0;
    if (!status && conc > 1) {
        double t0 = rp_now_s();
        for (long i = 0; i < conc; i++) {
            ws[i].cfg = cfg;
            pthread_create(&ws[i].th, NULL, worker_main, &ws[i]);
        }
        for (long i = 0; i < conc; i++)
            pthread_join(ws[i].th, NULL);
        wall = rp_now_s() - t0;
        for (long i = 0; i < conc; i++) {
            if (ws[i].r.error[0]) {
                fprintf(stderr, "rapid bench: stream %ld failed: %s\n", i + 1, ws[i].r.error);
                status = 1;
            }
            c_tokens += ws[i].r.completion_tokens;
            c_ttft += ttft(&ws[i].r) / (double)conc;
        }
        agg = wall > 0 ? (double)c_tokens / wall : 0;
    }
    double n = (double)n_runs;
    if (!status && as_json) {
        json_t *arr = json_array();
        for (long i = 0; i < n_runs; i++)
            json_array_append_new(arr, json_pack("{s:f, s:f, s:f, s:i, s:i}", "ttft_s",
                                                 ttft(&runs[i]), "prefill_tok_s",
                                                 (double)runs[i].prompt_tokens / ttft(&runs[i]),
                                                 "decode_tok_s", decode_rate(&runs[i]),
                                                 "prompt_tokens", (json_int_t)runs[i].prompt_tokens,
                                                 "completion_tokens",
                                                 (json_int_t)runs[i].completion_tokens));
        json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:o, s:{s:f, s:f, s:f}}", "url", cfg->url,
                              "model", cfg->model, "prompt_tokens", (json_int_t)cfg->prompt_tokens,
                              "max_tokens", (json_int_t)cfg->max_tokens, "runs", arr, "mean",
                              "ttft_s", s_ttft / n, "prefill_tok_s", s_prefill / n,
                              "decode_tok_s", s_decode / n);
        if (conc > 1)
            json_object_set_new(o, "concurrent",
                                json_pack("{s:i, s:f, s:f, s:f, s:i}", "streams", (json_int_t)conc,
                                          "aggregate_decode_tok_s", agg, "mean_ttft_s", c_ttft,
                                          "wall_s", wall, "completion_tokens",
                                          (json_int_t)c_tokens));
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else if (!status) {
        printf("%-5s %8.3f %14.1f %13.1f\n", "mean", s_ttft / n, s_prefill / n, s_decode / n);
        if (conc > 1)
            printf("\n%ld concurrent streams: %.1f tok/s aggregate (%ld tokens in %.2f s), mean "
                   "TTFT %.3f s\n",
                   conc, agg, c_tokens, wall, c_ttft);
    }
    rp_free(runs);
    rp_free(ws);
    return status;
}

/* In-process when --model names a directory or a .gguf file and no --url is given. */
static int wants_model_bench(int argc, char **argv)
{
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--url", 5) == 0)
            return 0;
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[i + 1];
        else if (strncmp(argv[i], "--model=", 8) == 0)
            model = argv[i] + 8;
    }
    size_t n = model ? strlen(model) : 0;
    return model && (rp_path_is_dir(model) || (n > 5 && strcmp(model + n - 5, ".gguf") == 0));
}

int rp_cmd_bench(int argc, char **argv)
{
    if (wants_model_bench(argc, argv))
        return rp_model_bench_main(argc, argv);
    const char *url = NULL, *model = NULL, *pt = NULL, *mt = NULL, *cc = NULL, *rn = NULL;
    int as_json = 0;
    rp_opt opts[] = {{"url", &url, NULL},          {"model", &model, NULL},
                     {"prompt-tokens", &pt, NULL}, {"max-tokens", &mt, NULL},
                     {"concurrency", &cc, NULL},   {"runs", &rn, NULL},
                     {"json", NULL, &as_json}};
    if (rp_args_parse(argc, argv, opts, 7, NULL, 0, NULL) != 0)
        return 2;
    bench_cfg cfg = {0};
    long conc, n_runs;
    if (parse_pos(pt, &cfg.prompt_tokens, 512, "prompt-tokens") ||
        parse_pos(mt, &cfg.max_tokens, 128, "max-tokens") ||
        parse_pos(cc, &conc, 1, "concurrency") || parse_pos(rn, &n_runs, 3, "runs"))
        return 2;
    if (!url)
        url = getenv("RAPID_URL") && *getenv("RAPID_URL") ? getenv("RAPID_URL")
                                                          : "http://127.0.0.1:8000";
    snprintf(cfg.url, sizeof cfg.url, "%s", url);
    size_t n = strlen(cfg.url);
    while (n && cfg.url[n - 1] == '/')
        cfg.url[--n] = '\0';
    if (n > 3 && strcmp(cfg.url + n - 3, "/v1") == 0)
        cfg.url[n - 3] = '\0';
    curl_global_init(CURL_GLOBAL_DEFAULT); /* before the worker threads */
    char *served = served_model(cfg.url);
    if (!served) {
        fprintf(stderr, "rapid bench: no server answers at %s; start one with 'rapid serve "
                        "MODEL' (or pass --url)\n", cfg.url);
        curl_global_cleanup();
        return 1;
    }
    cfg.model = model ? model : served;
    cfg.body = make_body(&cfg);
    int status = cfg.body ? run_bench(&cfg, n_runs, conc, as_json) : 1;
    free(cfg.body);
    rp_free(served);
    curl_global_cleanup();
    return status;
}
