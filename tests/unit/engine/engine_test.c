/* tests/unit/engine/engine_test.c - the engine thread: events, cancellation, limits, prefix
 * reuse. Uses the llama_gqa fixture (tests/golden/models). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "engine/engine.h"
#include "../model/fixture_util.h"

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
