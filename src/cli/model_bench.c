/* cli/model_bench.c - prefill/decode timing and the bandwidth-normalised decode figure. */
#include "cli/model_bench.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "cli/args.h"
#include "cli/model_opts.h"
#include "engine/engine.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/model_impl.h"

/* Bytes a decode step reads: every weight except the embedding table (one row of it is
 * read; its MLX scales/biases likewise), plus the lm_head when it is the tied embedding. Of
 * a mixture of experts only the active ones are read: expert tensors (mlp.experts.*,
 * mlp.switch_mlp.*) count num_experts_per_tok / num_experts of their bytes. */
static int is_embedding(const char *name)
{
    return strcmp(name, "model.embed_tokens.weight") == 0 ||
           strcmp(name, "model.embed_tokens.scales") == 0 ||
           strcmp(name, "model.embed_tokens.biases") == 0;
}

static int is_expert(const char *name)
{
    return strstr(name, ".mlp.experts.") != NULL || strstr(name, ".mlp.switch_mlp.") != NULL;
}

static double decode_bytes(rp_model *m)
{
    const rp_model_config *c = &m->cfg;
    int n_exp = rp_config_int(c, "num_experts", rp_config_int(c, "num_local_experts", 0));
    int top_k = rp_config_int(c, "num_experts_per_tok", rp_config_int(c, "experts_per_token", 0));
    double active = n_exp > 0 && top_k > 0 && top_k <= n_exp ? (double)top_k / n_exp : 1.0;
    double total = 0.0, emb = 0.0;
    for (int i = 0; i < rp_st_count(m->st); i++) {
        const rp_st_tensor *t = rp_st_at(m->st, i);
        if (is_embedding(t->name))
            emb += (double)t->t.n_bytes;
        else if (is_expert(t->name))
            total += (double)t->t.n_bytes * active;
        else
            total += (double)t->t.n_bytes;
    }
    if (!rp_st_find(m->st, "lm_head.weight"))
        total += emb;
    return total;
}

typedef struct stream_counter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_streams, n_done, n_started; /* streams finished / with their first token */
    int64_t n_tokens, n_at_all;       /* tokens so far / when the last stream started */
    int64_t t_all;                    /* when the last stream got its first token */
} stream_counter;

typedef struct stream_one {
    stream_counter *c;
    int started;
} stream_one;

/* Counts tokens; wakes the waiting thread only when a stream ends (a wake per token would
 * cost the engine thread a futex call per row, a visible share of a 64-row step). */
static void stream_cb(const rp_event *ev, void *user)
{
    stream_one *o = user;
    stream_counter *c = o->c;
    pthread_mutex_lock(&c->mu);
    if (ev->kind == RP_EV_TOKEN) {
        c->n_tokens++;
        if (!o->started) {
            o->started = 1;
            if (++c->n_started == c->n_streams) {
                c->t_all = rp_now_ns();
                c->n_at_all = c->n_tokens;
            }
        }
    } else {
        c->n_done++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Aggregate decode: n_streams requests of a 16-token prompt and n_gen tokens each, submitted
 * together, sampled as smp says (seeded per stream). Returns tokens / wall time (the short
 * prefills included); *decode_only gets the tokens after every stream has its first one over
 * the time from then to the end (all streams decoding together: what llama-batched-bench
 * calls S_TG), or 0 when that phase is too short to time. */
static double bench_streams(rp_model *m, int n_streams, int n_gen, rp_kv_dtype kvt,
                            const rp_sampling *smp, double *decode_only, rp_err *err)
{
    rp_engine_config ec = {.max_context = 16 + n_gen + 8, .max_num_seqs = n_streams,
                           .kv_dtype = kvt};
    rp_engine *e;
    *decode_only = 0.0;
    stream_one *one = rp_calloc((size_t)n_streams, sizeof *one);
    if (!one) {
        rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (rp_engine_new(m, &ec, &e, err)) {
        rp_free(one);
        return -1;
    }
    stream_counter c = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                        .n_streams = n_streams};
    int32_t prompt[16];
    int vocab = rp_model_get_info(m)->vocab_size;
    int64_t t0 = rp_now_ns();
    int n_sub = 0;
    for (int s = 0; s < n_streams; s++) {
        for (int i = 0; i < 16; i++)
            prompt[i] = (int32_t)((s * 131 + i * 7919 + 13) % vocab);
        rp_gen_request r = {.prompt = prompt, .n_prompt = 16, .max_tokens = n_gen,
                            .ignore_eos = 1, .n_top_logprobs = -1};
        r.sampling = *smp;
        r.sampling.seed = (uint64_t)s + 1;
        r.sampling.has_seed = 1;
        one[s].c = &c;
        if (rp_engine_submit(e, &r, stream_cb, &one[s], NULL, err))
            break;
        n_sub++;
    }
    pthread_mutex_lock(&c.mu);
    while (c.n_done < n_sub)
        pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    int64_t t1 = rp_now_ns();
    double secs = (double)(t1 - t0) * 1e-9;
    rp_engine_free(e);
    rp_free(one);
    if (n_sub < n_streams)
        return -1;
    double dsecs = c.t_all ? (double)(t1 - c.t_all) * 1e-9 : 0.0;
    if (dsecs > 0 && c.n_tokens - c.n_at_all >= n_streams)
        *decode_only = (double)(c.n_tokens - c.n_at_all) / dsecs;
    return (double)c.n_tokens / secs;
}

/* TTFT of an n-token prompt, then of the same prompt with a new last turn of 50 tokens (the
 * prefix comes from the cache). */
static int bench_prefix(rp_model *m, int n, rp_kv_dtype kvt, double *t_cold, double *t_warm,
                        rp_err *err)
{
    rp_engine_config ec = {.max_context = n + 64, .max_num_seqs = 1, .kv_dtype = kvt};
    rp_engine *e;
    if (rp_engine_new(m, &ec, &e, err))
        return -1;
    int32_t *p = rp_alloc(sizeof(int32_t) * (size_t)(n + 50));
    int vocab = rp_model_get_info(m)->vocab_size;
    for (int i = 0; i < n + 50; i++)
        p[i] = (int32_t)((i * 7919 + 13) % vocab);
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        rp_gen_request r = {.prompt = p, .n_prompt = k ? n + 50 : n, .max_tokens = 1,
                            .ignore_eos = 1, .n_top_logprobs = -1};
        rp_sampling_default(&r.sampling);
        r.sampling.temperature = 0;
        int32_t *out;
        int n_out;
        int64_t t0 = rp_now_ns();
        rc = rp_engine_generate(e, &r, &out, &n_out, NULL, err) ? -1 : 0;
        *(k ? t_warm : t_cold) = (double)(rp_now_ns() - t0) * 1e-9;
        if (!rc)
            rp_free(out);
    }
    rp_free(p);
    rp_engine_free(e);
    return rc;
}

/* Memory per cached token for every KV storage type: from the block layout, and measured as
 * the KV allocation of a 64-block pool (CPU: the allocator's RP_TAG_KV counter). */
static void print_kv_memory(rp_model *m)
{
    const rp_model_info *in = rp_model_get_info(m);
    printf("kv memory per token (%d cache layers x K,V x %d heads x row):\n", m->n_kv_layers,
           in->n_kv_heads);
    for (int dt = 0; dt < RP_KV_DTYPE_COUNT; dt++) {
        size_t row = rp_kv_row_bytes((rp_kv_dtype)dt, in->head_dim);
        double layout = 2.0 * m->n_kv_layers * in->n_kv_heads * (double)row;
        rp_kv_pool_opts o = {.dtype = (rp_kv_dtype)dt, .n_blocks = 64};
        rp_kv_pool *p = NULL;
        rp_err e;
        int64_t before = rp_alloc_live_bytes(RP_TAG_KV);
        if (!row || rp_kv_pool_new(m, &o, &p, &e)) {
            printf("  %-5s (not available here)\n", rp_kv_dtype_name((rp_kv_dtype)dt));
            continue;
        }
        double measured = (double)(rp_alloc_live_bytes(RP_TAG_KV) - before) / (64.0 * RP_KV_BLOCK_TOKENS);
        rp_kv_pool_free(p);
        if (rp_backend_host_buffers(m->be))
            printf("  %-5s %8.0f bytes (layout), %8.0f bytes (pool allocation), %.3fx f32\n",
                   rp_kv_dtype_name((rp_kv_dtype)dt), layout, measured,
                   layout / (2.0 * m->n_kv_layers * in->n_kv_heads * 4.0 * in->head_dim));
        else
            printf("  %-5s %8.0f bytes (layout)\n", rp_kv_dtype_name((rp_kv_dtype)dt), layout);
    }
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int rp_model_bench_main(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt_s = "128", *gen_s = "32", *threads_s = NULL;
    const char *streams_s = NULL, *prefix_s = NULL, *kvt_s = NULL, *temp_s = NULL, *top_p_s = NULL;
    int json = 0;
    rp_device_args dev = {0};
    rp_opt opts[] = {RP_MODEL_DEVICE_OPTS(dev),
                     {"model", &model_dir, NULL},     {"prompt", &prompt_s, NULL},
                     {"gen", &gen_s, NULL},           {"threads", &threads_s, NULL},
                     {"streams", &streams_s, NULL},   {"prefix-cache", &prefix_s, NULL},
                     {"kv-cache-dtype", &kvt_s, NULL}, {"temperature", &temp_s, NULL},
                     {"top-p", &top_p_s, NULL},       {"json", NULL, &json}};
    if (rp_args_parse(argc, argv, opts, RP_ARRAY_LEN(opts), NULL, 0, NULL))
        return 2;
    long n_prompt, n_gen, threads = 0;
    rp_kv_dtype kvt = RP_KV_F32;
    if (kvt_s && rp_kv_dtype_parse(kvt_s, &kvt)) {
        fprintf(stderr, "rapid bench: --kv-cache-dtype must be f32, bf16, f16, int8 or int4\n");
        return 2;
    }
    /* the streams' sampling: greedy unless --temperature (and --top-p) are given */
    rp_sampling smp;
    rp_sampling_default(&smp);
    double temp = 0, top_p = 1;
    int bad_smp = (temp_s && (rp_args_float(temp_s, &temp) || temp < 0)) ||
                  (top_p_s && (rp_args_float(top_p_s, &top_p) || top_p <= 0 || top_p > 1));
    smp.temperature = (float)temp;
    smp.top_p = (float)top_p;
    if (bad_smp || !model_dir || rp_args_int(prompt_s, &n_prompt) || rp_args_int(gen_s, &n_gen) ||
        n_prompt < 1 || n_gen < 1 || (threads_s && rp_args_int(threads_s, &threads))) {
        fprintf(stderr, "usage: rapid bench --model DIR [--prompt N] [--gen N] [--threads N] "
                        "[--streams 1,4,16] [--temperature T] [--top-p P] [--prefix-cache N] "
                        "[--kv-cache-dtype T] [--json] "
                        "[--device cuda|cpu] "
                        "[--gpu-memory-fraction F]\n");
        return 2;
    }
    rp_err err = {0};
    rp_model *m = NULL;
    rp_kv *kv = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    int status = 1;
    rp_model_opts mo = {.n_threads = (int)threads};
    if (rp_model_opts_device("bench", &dev, &mo))
        return 2;
    if (rp_model_load(model_dir, &mo, &m, &err) ||
        rp_kv_new(m, (int)(n_prompt + n_gen + 8), &kv, &err))
        goto out;
    const rp_model_info *in = rp_model_get_info(m);
    ids = rp_alloc(sizeof(int32_t) * (size_t)n_prompt);
    logits = rp_alloc(sizeof(float) * (size_t)in->vocab_size);
    if (!ids || !logits) {
        rp_err_set(&err, RP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (long i = 0; i < n_prompt; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % in->vocab_size);
    /* warm the page cache and the kernels with one short pass, then start clean (on CUDA a
     * whole prompt: cuBLASLt picks and loads its kernels per shape on first use) */
    int n_warm = rp_backend_is_cuda(m->be) ? (int)n_prompt : (n_prompt < 4 ? (int)n_prompt : 4);
    if (rp_model_eval(m, kv, ids, n_warm, logits, 0, &err))
        goto out;
    /* prefill: the median of 3 passes over the prompt (1 past 512 tokens), as llama-bench
     * repeats its runs; the decode goes on from the last pass's cache */
    int p_reps = n_prompt <= 512 ? 3 : 1;
    double t_pf[3], share_pf[3];
    int64_t t0 = 0;
    for (int r = 0; r < p_reps; r++) {
        rp_kv_truncate(kv, 0);
        t0 = rp_now_ns();
        double pcpu0 = cpu_seconds();
        if (rp_model_eval(m, kv, ids, (int)n_prompt, logits, 0, &err))
            goto out;
        t_pf[r] = (double)(rp_now_ns() - t0) * 1e-9;
        share_pf[r] = (cpu_seconds() - pcpu0) / t_pf[r] / rp_backend_n_threads(m->be);
    }
    int mid = 0;
    if (p_reps == 3) /* the index of the median time */
        mid = (t_pf[0] <= t_pf[1]) == (t_pf[1] <= t_pf[2]) ? 1
              : (t_pf[1] <= t_pf[0]) == (t_pf[0] <= t_pf[2]) ? 0 : 2;
    double t_prefill = t_pf[mid], prefill_share = share_pf[mid];
    /* Decode in up to RP_BENCH_WINDOWS windows, each followed by the bandwidth probe: on a
     * shared host the bandwidth other tenants leave moves within seconds, so each window's
     * tok/s is set against a probe taken right after it and the figure is the median of those
     * ratios. The whole run's tok/s against the best probe is printed beside it. */
    enum { RP_BENCH_WINDOWS = 4 };
    int n_win = n_gen < RP_BENCH_WINDOWS ? (int)n_gen : RP_BENCH_WINDOWS;
    double bytes = decode_bytes(m), win_ratio[RP_BENCH_WINDOWS], bw = 0.0, t_decode = 0.0;
    double cpu_dec = 0.0;
    int32_t tok = 1;
    for (int w = 0; w < n_win; w++) {
        long w_tok = n_gen * (w + 1) / n_win - n_gen * w / n_win;
        t0 = rp_now_ns();
        double cpu0 = cpu_seconds();
        for (long i = 0; i < w_tok; i++)
            if (rp_model_eval(m, kv, &tok, 1, logits, 0, &err))
                goto out;
        double t_w = (double)(rp_now_ns() - t0) * 1e-9;
        cpu_dec += cpu_seconds() - cpu0;
        t_decode += t_w;
        double bw_w = rp_backend_read_bandwidth(m->be, (size_t)1 << 30, 3);
        bw = bw_w > bw ? bw_w : bw;
        win_ratio[w] = bw_w > 0 ? (double)w_tok / t_w * bytes / (bw_w * 1e9) : 0.0;
    }
    /* how much of its threads the decode got: on a loaded machine tok/s and the bandwidth
     * probe (short bursts, best of 3) see different shares of the CPU */
    double cpu_share = cpu_dec / t_decode / rp_backend_n_threads(m->be);
    for (int i = 1; i < n_win; i++) /* insertion sort for the median */
        for (int j = i; j > 0 && win_ratio[j] < win_ratio[j - 1]; j--) {
            double t = win_ratio[j];
            win_ratio[j] = win_ratio[j - 1];
            win_ratio[j - 1] = t;
        }
    double ratio = n_win % 2 ? win_ratio[n_win / 2]
                             : 0.5 * (win_ratio[n_win / 2 - 1] + win_ratio[n_win / 2]);
    double tg = (double)n_gen / t_decode, pp = (double)n_prompt / t_prefill;
    double ratio_whole = bw > 0 ? tg * bytes / (bw * 1e9) : 0.0;
    if (json)
        printf("{\"model\":\"%s\",\"dtype\":\"%s\",\"threads\":%d,\"prompt\":%ld,\"gen\":%ld,"
               "\"prefill_tok_s\":%.2f,\"ttft_s\":%.4f,\"decode_tok_s\":%.2f,"
               "\"bytes_per_token\":%.0f,\"read_bw_gb_s\":%.2f,\"bw_ratio\":%.3f,"
               "\"bw_ratio_whole\":%.3f,\"windows\":%d,"
               "\"prefill_cpu_share\":%.2f,\"decode_cpu_share\":%.2f}\n",
               model_dir, in->dtype, rp_backend_n_threads(m->be), n_prompt, n_gen, pp, t_prefill,
               tg, bytes, bw, ratio, ratio_whole, n_win, prefill_share, cpu_share);
    else
        printf("model        %s (%s, %lld params, %s)\n"
               "backend      %s\n"
               "prefill      %ld tokens: %.2f tok/s (TTFT %.3f s, median of %d, CPU share %.0f%%)\n"
               "decode       %ld tokens: %.2f tok/s (CPU share %.0f%% of the threads)\n"
               "bytes/token  %.3f GB\n"
               "read bw      %.2f GB/s (best probe, same run)\n"
               "decode / bandwidth bound: %.3f (median of %d windows, each against the probe "
               "after it; the whole run against the best probe: %.3f)\n",
               model_dir, in->arch, (long long)in->n_params, in->dtype, rp_backend_describe(m->be),
               n_prompt, pp, t_prefill, p_reps, 100.0 * prefill_share, n_gen, tg, 100.0 * cpu_share,
               bytes / 1e9, bw, ratio, n_win, ratio_whole);
    rp_kv_free(kv);
    kv = NULL;
    if (!json)
        print_kv_memory(m);
    if (streams_s) {
        int *ns = NULL, n_ns = 0;
        if (rp_args_parse_ids(streams_s, &ns, &n_ns)) {
            rp_err_set(&err, RP_ERR_INVALID, "--streams wants a list like 1,4,16");
            goto out;
        }
        double base = 0;
        for (int i = 0; i < n_ns; i++) {
            /* CUDA: an untimed short run first, so cuBLASLt's per-shape tuning for this
             * batch size is not in the figure */
            double dec = 0.0;
            if (rp_backend_is_cuda(m->be) &&
                bench_streams(m, ns[i], 4, kvt, &smp, &dec, &err) < 0) {
                rp_free(ns);
                goto out;
            }
            double agg = bench_streams(m, ns[i], (int)n_gen, kvt, &smp, &dec, &err);
            if (agg < 0) {
                rp_free(ns);
                goto out;
            }
            if (i == 0)
                base = agg;
            printf("streams %-4d aggregate decode %.2f tok/s (%.2fx the first)%s; all %d "
                   "decoding: %.2f tok/s\n",
                   ns[i], agg, base > 0 ? agg / base : 0.0,
                   smp.temperature > 0 ? " (sampled)" : "", ns[i], dec);
        }
        rp_free(ns);
    }
    if (prefix_s) {
        long n_pre;
        double cold, warm;
        if (rp_args_int(prefix_s, &n_pre) || n_pre < 1 ||
            bench_prefix(m, (int)n_pre, kvt, &cold, &warm, &err)) {
            if (!err.msg[0])
                rp_err_set(&err, RP_ERR_INVALID, "--prefix-cache wants a token count");
            goto out;
        }
        printf("prefix cache %ld-token prompt (kv %s): TTFT %.3f s uncached, %.3f s resent with "
               "50 new tokens (%.1f%%)\n",
               n_pre, rp_kv_dtype_name(kvt), cold, warm, 100.0 * warm / cold);
    }
    status = 0;
out:
    if (status)
        fprintf(stderr, "rapid bench: %s\n", err.msg);
    rp_free(ids);
    rp_free(logits);
    rp_kv_free(kv);
    rp_model_free(m);
    return status;
}
