/* cli/cmd_template.c - `rapid template`: render a chat template against a JSON context.
 *
 *   rapid template --template FILE.jinja --context CTX.json
 *   rapid template --model DIR [--context CTX.json]
 *
 * The rendered text goes to stdout exactly (no newline added). With --model the template
 * comes from DIR/chat_template.jinja, else tokenizer_config.json's chat_template (a string,
 * or a list of {name, template}: "tool_use" when the context has tools, else "default", as
 * transformers picks), and bos_token/eos_token from tokenizer_config.json fill the context
 * where it has none. --now SECONDS fixes strftime_now's clock. --bench N renders N more times
 * and prints parse and render times on stderr (scripts/bench-template.sh). Template errors: the
 * message on stderr, exit status 1.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/file.h"
#include "base/status.h"
#include "chat/template.h"
#include "cli/args.h"
#include "cli/commands.h"

/* A special token in tokenizer_config.json: "text" or {"content": "text", ...}. */
static const char *token_text(const json_t *v)
{
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static char *pick_named(const json_t *list, const json_t *ctx, rp_err *err)
{
    const json_t *tools = ctx ? json_object_get(ctx, "tools") : NULL;
    bool want_tools = tools && !json_is_null(tools) && !(json_is_array(tools) && json_array_size(tools) == 0);
    const char *pick = NULL, *fallback = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *tpl = json_string_value(json_object_get(e, "template"));
        if (!name || !tpl)
            continue;
        if (want_tools && strcmp(name, "tool_use") == 0)
            pick = tpl;
        if (strcmp(name, "default") == 0)
            fallback = tpl;
    }
    if (!pick)
        pick = fallback;
    if (!pick) {
        rp_err_set(err, RP_ERR_INVALID, "the model's chat templates have no 'default' entry");
        return NULL;
    }
    char *s = rp_strdup(pick);
    if (!s)
        rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    return s;
}

/* Loads the model's template into *src and adds its special tokens to ctx. */
static rp_status load_model(const char *dir, json_t *ctx, char **src, rp_err *err)
{
    char *jinja_path = rp_path_join(dir, "chat_template.jinja");
    char *cfg_path = rp_path_join(dir, "tokenizer_config.json");
    rp_status st = RP_OK;
    json_t *cfg = NULL;
    if (!jinja_path || !cfg_path) {
        st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (rp_path_exists(cfg_path)) {
        json_error_t je;
        cfg = json_load_file(cfg_path, 0, &je);
        if (!cfg) {
            st = rp_err_set(err, RP_ERR_INVALID, "%s: line %d: %s", cfg_path, je.line, je.text);
            goto out;
        }
        static const char *const toks[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
        for (size_t i = 0; i < RP_ARRAY_LEN(toks); i++) {
            const char *t = token_text(json_object_get(cfg, toks[i]));
            if (t && !json_object_get(ctx, toks[i]))
                json_object_set_new(ctx, toks[i], json_string(t));
        }
    }
    if (rp_path_exists(jinja_path)) {
        size_t n;
        st = rp_file_read(jinja_path, src, &n, err);
        goto out;
    }
    const json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (json_is_string(ct)) {
        *src = rp_strdup(json_string_value(ct));
        if (!*src)
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    } else if (json_is_array(ct)) {
        *src = pick_named(ct, ctx, err);
        if (!*src)
            st = err ? err->code : RP_ERR_INVALID;
    } else {
        st = rp_err_set(err, RP_ERR_NOT_FOUND,
                        "%s has no chat template (no chat_template.jinja, no chat_template in "
                        "tokenizer_config.json)", dir);
    }
out:
    json_decref(cfg);
    rp_free(jinja_path);
    rp_free(cfg_path);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Renders n more times; prints parse time and render time statistics on stderr. */
static int bench(const rp_template *t, const json_t *ctx, long n, double t_parse, size_t n_out)
{
    double *times = rp_alloc((size_t)n * sizeof(double)), total = 0;
    if (!times) {
        fprintf(stderr, "rapid template: out of memory\n");
        return -1;
    }
    for (long i = 0; i < n; i++) {
        char *o = NULL;
        rp_err err;
        double t0 = rp_now_s();
        rp_status st = rp_template_render(t, ctx, &o, NULL, &err);
        times[i] = rp_now_s() - t0;
        rp_free(o);
        if (st) {
            fprintf(stderr, "rapid template: %s\n", err.msg);
            rp_free(times);
            return -1;
        }
        total += times[i];
    }
    qsort(times, (size_t)n, sizeof(double), cmp_double);
    fprintf(stderr, "template bench: parse %.1f us; render of %zu bytes over %ld runs: median %.1f us, "
                    "mean %.1f us, best %.1f us, p99 %.1f us\n",
            t_parse * 1e6, n_out, n, times[n / 2] * 1e6, total / (double)n * 1e6, times[0] * 1e6,
            times[(size_t)((double)n * 0.99)] * 1e6);
    rp_free(times);
    return 0;
}

int rp_cmd_template(int argc, char **argv)
{
    const char *tpl_path = NULL, *ctx_path = NULL, *model_dir = NULL, *now_s = NULL, *bench_s = NULL;
    const rp_opt opts[] = {
        {"template", &tpl_path, NULL},
        {"context", &ctx_path, NULL},
        {"model", &model_dir, NULL},
        {"now", &now_s, NULL},
        {"bench", &bench_s, NULL},
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = rp_args_parse(argc, argv, opts, RP_ARRAY_LEN(opts), pos, 0, &n_pos);
    if (rc)
        return rc;
    if (!tpl_path == !model_dir) {
        fprintf(stderr, "rapid template: give exactly one of --template FILE or --model DIR\n");
        return 2;
    }
    long now = 0, n_bench = 0;
    if (bench_s && (rp_args_int(bench_s, &n_bench) || n_bench < 1)) {
        fprintf(stderr, "rapid template: --bench wants a positive count\n");
        return 2;
    }
    if (now_s && rp_args_int(now_s, &now)) {
        fprintf(stderr, "rapid template: --now wants whole seconds since the epoch\n");
        return 2;
    }
    rp_err err = {0};
    json_t *ctx = NULL;
    char *src = NULL, *out = NULL;
    rp_template *t = NULL;
    int status = 1;
    if (ctx_path) {
        json_error_t je;
        ctx = strcmp(ctx_path, "-") == 0 ? json_loadf(stdin, 0, &je) : json_load_file(ctx_path, 0, &je);
        if (!ctx) {
            fprintf(stderr, "rapid template: %s: line %d: %s\n", ctx_path, je.line, je.text);
            goto out;
        }
        if (!json_is_object(ctx)) {
            fprintf(stderr, "rapid template: %s: the context must be a JSON object\n", ctx_path);
            goto out;
        }
    } else {
        ctx = json_object();
    }
    size_t n_src = 0;
    rp_status st = model_dir ? load_model(model_dir, ctx, &src, &err) : rp_file_read(tpl_path, &src, &n_src, &err);
    if (st) {
        fprintf(stderr, "rapid template: %s\n", err.msg);
        goto out;
    }
    if (model_dir)
        n_src = strlen(src);
    double t0 = rp_now_s();
    if (rp_template_new(src, n_src, &t, &err)) {
        fprintf(stderr, "rapid template: %s\n", err.msg);
        goto out;
    }
    double t_parse = rp_now_s() - t0;
    size_t n_out = 0;
    st = now_s ? rp_template_render_at(t, ctx, now, &out, &n_out, &err)
               : rp_template_render(t, ctx, &out, &n_out, &err);
    if (st) {
        fprintf(stderr, "rapid template: %s\n", err.msg);
        goto out;
    }
    if (n_bench && bench(t, ctx, n_bench, t_parse, n_out))
        goto out;
    if (fwrite(out, 1, n_out, stdout) != n_out || fflush(stdout)) {
        fprintf(stderr, "rapid template: cannot write the output\n");
        goto out;
    }
    status = 0;
out:
    rp_free(out);
    rp_template_free(t);
    rp_free(src);
    json_decref(ctx);
    return status;
}
