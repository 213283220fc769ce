/* cli/cmd_generate.c - `rapid generate`: ids in, generated ids out (a stable test interface).
 *
 * Goes through the engine exactly as the server does (rp_engine_generate), so the CLI and the
 * server share one generation path. Prints the ids comma-separated on one line.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_opts.h"
#include "engine/engine.h"

typedef struct gen_opts {
    const char *model, *ids, *max_tokens, *temperature, *top_k, *top_p, *min_p, *seed, *threads,
        *spec, *kv_dtype;
    int ref, ignore_eos;
} gen_opts;

static int parse_sampling(const gen_opts *o, rp_sampling *s, long *max_tokens, long *threads)
{
    rp_sampling_default(s);
    s->temperature = 0.0f; /* greedy unless asked */
    double d;
    long l;
    if (rp_args_int(o->max_tokens, max_tokens) || *max_tokens <= 0)
        return fprintf(stderr, "rapid generate: --max-tokens must be a positive number\n"), -1;
    if (o->temperature && (rp_args_float(o->temperature, &d) || d < 0))
        return fprintf(stderr, "rapid generate: bad --temperature\n"), -1;
    if (o->temperature)
        s->temperature = (float)d;
    if (o->top_p && (rp_args_float(o->top_p, &d) || d <= 0 || d > 1))
        return fprintf(stderr, "rapid generate: --top-p must be in (0, 1]\n"), -1;
    if (o->top_p)
        s->top_p = (float)d;
    if (o->min_p && (rp_args_float(o->min_p, &d) || d < 0 || d > 1))
        return fprintf(stderr, "rapid generate: --min-p must be in [0, 1]\n"), -1;
    if (o->min_p)
        s->min_p = (float)d;
    if (o->top_k && (rp_args_int(o->top_k, &l) || l < 0))
        return fprintf(stderr, "rapid generate: bad --top-k\n"), -1;
    if (o->top_k)
        s->top_k = (int)l;
    if (o->seed && rp_args_int(o->seed, &l))
        return fprintf(stderr, "rapid generate: bad --seed\n"), -1;
    if (o->seed) {
        s->seed = (uint64_t)l;
        s->has_seed = 1;
    }
    *threads = 0;
    if (o->threads && rp_args_int(o->threads, threads))
        return fprintf(stderr, "rapid generate: bad --threads\n"), -1;
    return 0;
}

int rp_cmd_generate(int argc, char **argv)
{
    gen_opts o = {0};
    rp_device_args dev = {0};
    rp_opt opts[] = {RP_MODEL_DEVICE_OPTS(dev),
                     {"model", &o.model, NULL},
                     {"ids", &o.ids, NULL},
                     {"max-tokens", &o.max_tokens, NULL},
                     {"temperature", &o.temperature, NULL},
                     {"top-k", &o.top_k, NULL},
                     {"top-p", &o.top_p, NULL},
                     {"min-p", &o.min_p, NULL},
                     {"seed", &o.seed, NULL},
                     {"threads", &o.threads, NULL},
                     {"speculative-tokens", &o.spec, NULL},
                     {"kv-cache-dtype", &o.kv_dtype, NULL},
                     {"ignore-eos", NULL, &o.ignore_eos},
                     {"ref-kernels", NULL, &o.ref}};
    if (rp_args_parse(argc, argv, opts, RP_ARRAY_LEN(opts), NULL, 0, NULL))
        return 2;
    if (!o.model || !o.ids || !o.max_tokens) {
        fprintf(stderr, "usage: rapid generate --model DIR --ids 1,2,3 --max-tokens N "
                        "[--device cuda|cpu] [--gpu-memory-fraction F] "
                        "[--speculative-tokens N] [--kv-cache-dtype T]\n");
        return 2;
    }
    rp_gen_request req = {0};
    long max_tokens, threads;
    rp_model_opts mo = {.ref_kernels = o.ref};
    if (parse_sampling(&o, &req.sampling, &max_tokens, &threads) ||
        rp_model_opts_device("generate", &dev, &mo))
        return 2;
    mo.n_threads = (int)threads;
    int *ids = NULL, n = 0;
    if (rp_args_parse_ids(o.ids, &ids, &n)) {
        fprintf(stderr, "rapid generate: --ids must be comma-separated token ids\n");
        return 2;
    }
    rp_err err = {0};
    rp_model *m = NULL;
    rp_engine *e = NULL;
    int32_t *out = NULL;
    int n_out = 0, status = 1;
    rp_engine_config ec = {.max_context = n + (int)max_tokens};
    long spec = 0;
    if (o.spec && (rp_args_int(o.spec, &spec) || spec < 0 || spec > RP_MAX_SPEC_TOKENS)) {
        fprintf(stderr, "rapid generate: --speculative-tokens must be in 0..%d\n",
                RP_MAX_SPEC_TOKENS);
        rp_free(ids);
        return 2;
    }
    ec.spec_tokens = (int)spec;
    if (o.kv_dtype && rp_kv_dtype_parse(o.kv_dtype, &ec.kv_dtype)) {
        fprintf(stderr, "rapid generate: --kv-cache-dtype must be f32, bf16, f16, int8 or int4 "
                        "(got '%s')\n", o.kv_dtype);
        rp_free(ids);
        return 2;
    }
    req.prompt = (const int32_t *)ids;
    req.n_prompt = n;
    req.max_tokens = (int)max_tokens;
    req.ignore_eos = o.ignore_eos;
    req.n_top_logprobs = -1;
    if (rp_model_load(o.model, &mo, &m, &err) || rp_engine_new(m, &ec, &e, &err) ||
        rp_engine_generate(e, &req, &out, &n_out, NULL, &err))
        goto done;
    for (int i = 0; i < n_out; i++)
        printf("%s%d", i ? "," : "", out[i]);
    printf("\n");
    status = 0;
done:
    if (status)
        fprintf(stderr, "rapid generate: %s\n", err.msg);
    rp_free(out);
    rp_engine_free(e);
    rp_model_free(m);
    rp_free(ids);
    return status;
}
