/* tests/unit/engine/engine_test.c - the engine thread: events, cancellation, limits, prefix
 * reuse. Uses the llama_gqa fixture (tests/golden/models). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "engine/engine.h"
#include "model/kv_cache.h"
#include "../model/fixture_util.h"
#include "collector.h"

static rp_model *g_model;
static fixture g_fx;

static void setup(void)
{
    cr_assert_eq(fixture_load("llama_gqa", &g_fx), 0);
    rp_err err;
    cr_assert_eq(rp_model_load(g_fx.dir, NULL, &g_model, &err), RP_OK, "%s", err.msg);
}

static void teardown(void)
{
    rp_model_free(g_model);
    fixture_free(&g_fx);
}

static rp_gen_request greedy(int max_tokens)
{
    rp_gen_request r = {.prompt = g_fx.ids, .n_prompt = g_fx.n_ids, .max_tokens = max_tokens,
                        .ignore_eos = 1, .n_top_logprobs = -1};
    rp_sampling_default(&r.sampling);
    r.sampling.temperature = 0;
    return r;
}

typedef struct watcher {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_tokens, done;
    rp_finish finish;
    rp_engine *engine;
    uint64_t id;
    int cancel_after;
} watcher;

static void watch_cb(const rp_event *ev, void *user)
{
    watcher *w = user;
    pthread_mutex_lock(&w->mu);
    if (ev->kind == RP_EV_TOKEN) {
        w->n_tokens++;
        if (w->cancel_after && w->n_tokens == w->cancel_after)
            rp_engine_cancel(w->engine, ev->request_id);
    } else {
        w->done++;
        w->finish = ev->finish;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

static void wait_done(watcher *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

TestSuite(engine, .init = setup, .fini = teardown);

Test(engine, greedy_equals_transformers_and_repeat_uses_cache)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 64};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    for (int rep = 0; rep < 3; rep++) { /* 2nd and 3rd reuse the cached prompt */
        rp_gen_request r = greedy(g_fx.n_greedy);
        int32_t *out;
        int n;
        cr_assert_eq(rp_engine_generate(e, &r, &out, &n, NULL, &err), RP_OK, "%s", err.msg);
        cr_assert_eq(n, g_fx.n_greedy);
        for (int i = 0; i < n; i++)
            cr_assert_eq(out[i], g_fx.greedy[i], "rep %d token %d", rep, i);
        rp_free(out);
    }
    /* a prompt that diverges midway truncates the cache there */
    rp_gen_request r = greedy(4);
    int32_t other[16];
    memcpy(other, g_fx.ids, sizeof other);
    other[8] = 77;
    r.prompt = other;
    int32_t *a, *b;
    int na, nb;
    cr_assert_eq(rp_engine_generate(e, &r, &a, &na, NULL, &err), RP_OK);
    rp_engine_free(e);
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK); /* fresh cache */
    cr_assert_eq(rp_engine_generate(e, &r, &b, &nb, NULL, &err), RP_OK);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(a, b, sizeof(int32_t) * (size_t)na), 0);
    rp_free(a);
    rp_free(b);
    rp_engine_free(e);
}

Test(engine, cancel_stops_and_done_comes_once)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 200};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                 .engine = e, .cancel_after = 3};
    rp_gen_request r = greedy(150);
    cr_assert_eq(rp_engine_submit(e, &r, watch_cb, &w, &w.id, &err), RP_OK);
    wait_done(&w);
    cr_assert_eq(w.finish, RP_FINISH_CANCELLED);
    cr_assert_lt(w.n_tokens, 10);
    rp_engine_free(e);
    cr_assert_eq(w.done, 1);
}

Test(engine, limits_are_errors)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 32, .max_queue = 2};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    rp_gen_request r = greedy(100);
    cr_assert_eq(rp_engine_submit(e, &r, watch_cb, NULL, NULL, &err), RP_ERR_INVALID);
    cr_assert(strstr(err.msg, "32"), "%s", err.msg);
    r = greedy(8);
    int32_t bad = 9999;
    r.prompt = &bad;
    r.n_prompt = 1;
    cr_assert_eq(rp_engine_submit(e, &r, watch_cb, NULL, NULL, &err), RP_ERR_INVALID);
    /* fill the queue: one runs, two wait, the fourth is refused */
    watcher w[4];
    int accepted = 0, refused = 0;
    for (int i = 0; i < 4; i++) {
        w[i] = (watcher){.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
        rp_gen_request q = greedy(15);
        rp_status rc = rp_engine_submit(e, &q, watch_cb, &w[i], NULL, &err);
        if (rc == RP_OK)
            accepted++;
        else {
            cr_assert_eq(rc, RP_ERR_LIMIT);
            w[i].done = 1;
            refused++;
        }
    }
    cr_assert_geq(accepted, 2);
    rp_engine_free(e); /* cancels the rest; each gets its DONE */
    for (int i = 0; i < 4; i++)
        cr_assert_eq(w[i].done, 1);
    (void)refused;
}

Test(engine, seeded_sampling_is_reproducible)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 64};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    int32_t *out[2];
    int n[2];
    for (int i = 0; i < 2; i++) {
        rp_gen_request r = greedy(20);
        r.sampling.temperature = 1.0f;
        r.sampling.seed = 1234;
        r.sampling.has_seed = 1;
        cr_assert_eq(rp_engine_generate(e, &r, &out[i], &n[i], NULL, &err), RP_OK);
    }
    cr_assert_eq(n[0], n[1]);
    cr_assert_eq(memcmp(out[0], out[1], sizeof(int32_t) * (size_t)n[0]), 0);
    rp_free(out[0]);
    rp_free(out[1]);
    rp_engine_free(e);
}

/* ---- continuous batching ---------------------------------------------------------------- */

/* Prompt i: the fixture ids rotated by i, truncated to a length that varies with i. */
static int make_prompt(int i, int32_t *out)
{
    int n = 3 + (i * 5) % 14;
    for (int k = 0; k < n; k++)
        out[k] = g_fx.ids[(k + i) % g_fx.n_ids];
    return n;
}

static void run_concurrent(int n_req, int max_num_seqs)
{
    rp_err err;
    rp_engine *alone, *batched; /* one model, used by one engine at a time (see below) */
    rp_engine_config c1 = {.max_context = 64, .max_num_seqs = 1};
    rp_engine_config cn = {.max_context = 64, .max_num_seqs = max_num_seqs, .prefill_chunk = 5};
    cr_assert_eq(rp_engine_new(g_model, &c1, &alone, &err), RP_OK);
    cr_assert_eq(rp_engine_new(g_model, &cn, &batched, &err), RP_OK);
    collector *c = rp_calloc((size_t)n_req, sizeof *c);
    int32_t prompts[64][16];
    int lens[64];
    for (int i = 0; i < n_req; i++) {
        c[i] = collector_new();
        lens[i] = make_prompt(i, prompts[i]);
        rp_gen_request r = greedy(4 + i % 9);
        r.prompt = prompts[i];
        r.n_prompt = lens[i];
        cr_assert_eq(rp_engine_submit(batched, &r, collect_cb, &c[i], NULL, &err), RP_OK,
                     "%s", err.msg);
    }
    for (int i = 0; i < n_req; i++) { /* all done first: two engines must not share the model */
        collector_wait(&c[i]);
    }
    for (int i = 0; i < n_req; i++) {
        cr_assert_eq(c[i].finish, RP_FINISH_LENGTH);
        rp_gen_request r = greedy(4 + i % 9);
        r.prompt = prompts[i];
        r.n_prompt = lens[i];
        int32_t *ref;
        int n;
        cr_assert_eq(rp_engine_generate(alone, &r, &ref, &n, NULL, &err), RP_OK);
        cr_assert_eq(c[i].n, n, "request %d: %d tokens batched, %d alone", i, c[i].n, n);
        for (int k = 0; k < n; k++)
            cr_assert_eq(c[i].toks[k], ref[k], "request %d token %d differs batched", i, k);
        rp_free(ref);
    }
    rp_engine_stats st;
    rp_engine_get_stats(batched, &st);
    cr_assert_eq(st.n_requests, n_req);
    cr_assert_lt(st.n_steps, st.n_generated, "batching: %lld steps for %lld tokens",
                 (long long)st.n_steps, (long long)st.n_generated);
    rp_free(c);
    rp_engine_free(alone);
    rp_engine_free(batched);
}

Test(engine, batched_tokens_equal_alone_16)
{
    run_concurrent(16, 16);
}

Test(engine, thirty_two_mixed_requests_complete)
{
    run_concurrent(32, 8);
}

Test(engine, resent_conversation_reuses_prefix)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 64, .max_num_seqs = 2};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    rp_gen_request r = greedy(4);
    int32_t *out;
    int n;
    cr_assert_eq(rp_engine_generate(e, &r, &out, &n, NULL, &err), RP_OK);
    rp_free(out);
    int32_t longer[20];
    memcpy(longer, g_fx.ids, sizeof(int32_t) * 16);
    longer[16] = 5, longer[17] = 6, longer[18] = 7, longer[19] = 8;
    r.prompt = longer;
    r.n_prompt = 20;
    cr_assert_eq(rp_engine_generate(e, &r, &out, &n, NULL, &err), RP_OK);
    rp_free(out);
    rp_engine_stats st;
    rp_engine_get_stats(e, &st);
    cr_assert_geq(st.n_cached_tokens, 16, "cached %lld", (long long)st.n_cached_tokens);
    rp_engine_free(e);
}

/* ---- paged KV: prefix hits, pressure, limits -------------------------------------------- */

/* n tokens of "conversation" g: equal for equal g (shared prefixes), valid ids. */
static void conv_tokens(int32_t *out, int n, int g, int from)
{
    for (int k = from; k < from + n; k++)
        out[k - from] = (int32_t)((k * 37 + g * 101 + 11) % g_fx.vocab);
}

typedef struct job {
    int32_t prompt[96];
    int n_prompt, max_tokens;
    collector c;
} job;

static void submit_jobs(rp_engine *e, job *jobs, int n)
{
    rp_err err;
    for (int i = 0; i < n; i++) {
        jobs[i].c = collector_new();
        rp_gen_request r = greedy(jobs[i].max_tokens);
        r.prompt = jobs[i].prompt;
        r.n_prompt = jobs[i].n_prompt;
        cr_assert_eq(rp_engine_submit(e, &r, collect_cb, &jobs[i].c, NULL, &err), RP_OK, "%s",
                     err.msg);
    }
    for (int i = 0; i < n; i++)
        collector_wait(&jobs[i].c);
}

/* Each job's tokens against the same request alone on an engine without a prefix cache. */
static void check_against_alone(job *jobs, int n)
{
    rp_err err;
    rp_engine *alone;
    rp_engine_config c1 = {.max_context = 128, .max_num_seqs = 1, .no_prefix_cache = 1};
    cr_assert_eq(rp_engine_new(g_model, &c1, &alone, &err), RP_OK);
    for (int i = 0; i < n; i++) {
        rp_gen_request r = greedy(jobs[i].max_tokens);
        r.prompt = jobs[i].prompt;
        r.n_prompt = jobs[i].n_prompt;
        int32_t *ref;
        int nr;
        cr_assert_eq(rp_engine_generate(alone, &r, &ref, &nr, NULL, &err), RP_OK);
        cr_assert_eq(jobs[i].c.finish, RP_FINISH_LENGTH);
        cr_assert_eq(jobs[i].c.n, nr, "job %d: %d tokens, %d alone", i, jobs[i].c.n, nr);
        for (int k = 0; k < nr; k++)
            cr_assert_eq(jobs[i].c.toks[k], ref[k], "job %d token %d differs from alone", i, k);
        rp_free(ref);
    }
    rp_engine_free(alone);
}

Test(engine, prefix_hits_batched_equal_alone)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 128, .max_num_seqs = 16, .prefill_chunk = 7};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    int64_t kv_bytes = rp_alloc_live_bytes(RP_TAG_KV); /* the pool: allocated once */
    job *jobs = rp_calloc(17, sizeof *jobs);
    jobs[0].n_prompt = 40; /* the shared prefix alone first: its blocks get cached */
    conv_tokens(jobs[0].prompt, 40, 1, 0);
    jobs[0].max_tokens = 3;
    submit_jobs(e, jobs, 1);
    for (int i = 1; i < 17; i++) { /* then 16 at once, each the prefix and its own tail */
        conv_tokens(jobs[i].prompt, 40, 1, 0);
        int tail = 1 + i % 6;
        conv_tokens(jobs[i].prompt + 40, tail, 100 + i, 40);
        jobs[i].n_prompt = 40 + tail;
        jobs[i].max_tokens = 4 + i % 5;
    }
    submit_jobs(e, jobs + 1, 16);
    rp_engine_stats st;
    rp_engine_get_stats(e, &st);
    cr_assert_geq(st.prefix_hit_tokens, 16 * 32, "hit %lld tokens", (long long)st.prefix_hit_tokens);
    cr_assert_eq(st.prefix_hit_tokens + st.prefix_miss_tokens, st.n_prompt_tokens);
    cr_assert_eq(st.kv_blocks_used, 0, "every block returned");
    cr_assert_geq(st.kv_blocks_cached, 2);
    cr_assert_eq(st.kv_block_tokens, RP_KV_BLOCK_TOKENS);
    cr_assert_eq(rp_alloc_live_bytes(RP_TAG_KV), kv_bytes, "KV memory changed per request");
    cr_assert_eq(st.kv_bytes, kv_bytes);
    rp_engine_free(e);
    check_against_alone(jobs, 17);
    rp_free(jobs);
}

Test(engine, fully_cached_prompt_copies_the_last_block)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 128, .max_num_seqs = 2};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    job jobs[3] = {0};
    for (int i = 0; i < 3; i++) { /* 32 tokens = 2 whole blocks, sent three times */
        conv_tokens(jobs[i].prompt, 32, 2, 0);
        jobs[i].n_prompt = 32;
        jobs[i].max_tokens = 8;
    }
    submit_jobs(e, jobs, 1);
    submit_jobs(e, jobs + 1, 2); /* both share the cached blocks, each copies block 1 */
    rp_engine_stats st;
    rp_engine_get_stats(e, &st);
    cr_assert_geq(st.prefix_hit_tokens, 2 * 31);
    rp_engine_free(e);
    check_against_alone(jobs, 3);
}

Test(engine, eviction_under_pressure_keeps_tokens)
{
    rp_err err;
    rp_engine *e;
    /* 8 blocks of 16; each request is 16 shared tokens (a system prompt), 18 of one of six
     * conversations and a short tail: 3 blocks with its generated tokens, 2 once the shared
     * block is a hit. Running sequences hold most of the pool, so the conversations' cached
     * blocks keep being evicted while requests wait their turn. */
    rp_engine_config cfg = {.max_context = 64, .max_num_seqs = 4, .kv_blocks = 8,
                            .prefill_chunk = 5};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    enum { N = 32 };
    job *jobs = rp_calloc(N, sizeof *jobs);
    for (int i = 0; i < N; i++) {
        conv_tokens(jobs[i].prompt, 16, 7, 0);
        conv_tokens(jobs[i].prompt + 16, 18, i % 6, 16);
        int tail = 1 + i % 3;
        conv_tokens(jobs[i].prompt + 34, tail, 200 + i, 34);
        jobs[i].n_prompt = 34 + tail;
        jobs[i].max_tokens = 4 + i % 5;
    }
    submit_jobs(e, jobs, N);
    rp_engine_stats st;
    rp_engine_get_stats(e, &st);
    cr_assert_eq(st.n_requests, N);
    cr_assert_gt(st.kv_evicted_blocks, 0, "the pool was never short");
    cr_assert_geq(st.prefix_hit_tokens, 16 * (N / 2), "hit %lld", (long long)st.prefix_hit_tokens);
    cr_assert_eq(st.kv_blocks_total, 8);
    cr_assert_eq(st.kv_blocks_used, 0);
    rp_engine_free(e);
    check_against_alone(jobs, N);
    rp_free(jobs);
}

Test(engine, request_that_can_never_fit_is_refused)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {.max_context = 64, .kv_blocks = 2};
    cr_assert_eq(rp_engine_new(g_model, &cfg, &e, &err), RP_OK);
    int32_t p[40];
    conv_tokens(p, 40, 3, 0);
    rp_gen_request r = greedy(8);
    r.prompt = p;
    r.n_prompt = 40;
    cr_assert_eq(rp_engine_submit(e, &r, watch_cb, NULL, NULL, &err), RP_ERR_INVALID);
    cr_assert(strstr(err.msg, "kv-cache-mb"), "%s", err.msg);
    r.n_prompt = 20; /* 28 positions, 2 blocks: fits */
    int32_t *out;
    int n;
    cr_assert_eq(rp_engine_generate(e, &r, &out, &n, NULL, &err), RP_OK, "%s", err.msg);
    cr_assert_eq(n, 8);
    rp_free(out);
    rp_engine_free(e);
}
