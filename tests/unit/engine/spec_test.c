/* tests/unit/engine/spec_test.c - speculative decoding by prompt lookup (engine.c, note 7):
 * the tokens are greedy decoding's exactly, drafts are really made and accepted, stops and
 * limits land where they do without drafts, the prefix cache stays right after rejected
 * drafts, and sequences that may not draft (sampled, hybrid) do not.
 *
 * The fixtures' random weights soon repeat themselves, which is what prompt lookup feeds on;
 * their weights are f32, whose kernels are batch-invariant, so exact equality is the bound.
 * Their output is mostly one token over and over, so drafts are seldom wrong there; the
 * embedded default model (trained, varied text; reference kernels, batch-invariant too) is
 * where rejections are checked. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "engine/engine.h"
#include "../model/fixture_util.h"
#include "collector.h"

typedef struct job {
    int32_t prompt[48];
    int n_prompt, max_tokens;
    float temperature;
    int32_t stop_id; /* -1: none */
    collector c;
} job;

/* Prompt i over the fixture's ids: a pattern repeated so that lookup finds matches at once,
 * with a tail that varies by i. */
static void make_job(const fixture *fx, int i, job *j)
{
    memset(j, 0, sizeof *j);
    int period = 3 + i % 4, n = 12 + (i * 7) % 20;
    for (int k = 0; k < n; k++)
        j->prompt[k] = fx->ids[(k % period + i) % fx->n_ids];
    j->prompt[n] = fx->ids[(i * 5 + 1) % fx->n_ids];
    j->n_prompt = n + 1;
    j->max_tokens = 20 + (i * 11) % 60;
    j->stop_id = -1;
}

/* Runs jobs[0..n) concurrently on a fresh engine; returns its stats. */
static rp_engine_stats run(rp_model *m, job *jobs, int n, int spec, int max_num_seqs)
{
    rp_err err;
    rp_engine *e;
    rp_engine_config cfg = {
        .max_context = 160, .max_num_seqs = max_num_seqs, .spec_tokens = spec, .prefill_chunk = 16};
    cr_assert_eq(rp_engine_new(m, &cfg, &e, &err), RP_OK, "%s", err.msg);
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        j->c = collector_new();
        rp_gen_request r = {.prompt = j->prompt,
                            .n_prompt = j->n_prompt,
                            .max_tokens = j->max_tokens,
                            .ignore_eos = 1,
                            .n_top_logprobs = -1};
        rp_sampling_default(&r.sampling);
        r.sampling.temperature = j->temperature;
        r.sampling.seed = 7 + (uint64_t)i;
        r.sampling.has_seed = 1;
        if (j->stop_id >= 0) {
            r.stop_ids = &j->stop_id;
            r.n_stop_ids = 1;
        }
        cr_assert_eq(rp_engine_submit(e, &r, collect_cb, &j->c, NULL, &err), RP_OK, "%s", err.msg);
    }
    for (int i = 0; i < n; i++)
        collector_wait(&jobs[i].c);
    rp_engine_stats st;
    rp_engine_get_stats(e, &st);
    rp_engine_free(e);
    return st;
}

static void same_tokens(const job *a, const job *b, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        cr_assert_eq(a[i].c.finish, b[i].c.finish, "%s: job %d finish %d vs %d", what, i,
                     a[i].c.finish, b[i].c.finish);
        cr_assert_eq(a[i].c.n, b[i].c.n, "%s: job %d: %d tokens vs %d", what, i, a[i].c.n,
                     b[i].c.n);
        for (int k = 0; k < a[i].c.n; k++)
            cr_assert_eq(a[i].c.toks[k], b[i].c.toks[k], "%s: job %d token %d: %d vs %d", what, i,
                         k, a[i].c.toks[k], b[i].c.toks[k]);
    }
}

static rp_model *load_dir(const char *dir, int ref_kernels)
{
    rp_err err;
    rp_model *m;
    rp_model_opts mo = {.ref_kernels = ref_kernels};
    cr_assert_eq(rp_model_load(dir, &mo, &m, &err), RP_OK, "%s", err.msg);
    return m;
}

static rp_model *load(const char *name, fixture *fx)
{
    cr_assert_eq(fixture_load(name, fx), 0, "fixture %s", name);
    rp_err err;
    rp_model *m;
    cr_assert_eq(rp_model_load(fx->dir, NULL, &m, &err), RP_OK, "%s", err.msg);
    return m;
}

/* Greedy with drafts == greedy without, alone and 6 at a time, for two draft lengths; the
 * drafts are accepted often enough to save steps. */
static void equals_plain(const char *name)
{
    fixture fx;
    rp_model *m = load(name, &fx);
    enum { N = 6 };
    job plain[N], spec[N];
    for (int i = 0; i < N; i++)
        make_job(&fx, i, &plain[i]);
    rp_engine_stats p1 = run(m, plain, N, 0, 1);
    cr_assert_eq(p1.spec_draft_tokens, 0);
    int drafts[] = {3, 8};
    for (size_t d = 0; d < 2; d++)
        for (int seqs = 1; seqs <= N; seqs += N - 1) {
            memcpy(spec, plain, sizeof spec);
            rp_engine_stats s = run(m, spec, N, drafts[d], seqs);
            same_tokens(plain, spec, N, name);
            cr_assert_gt(s.spec_accepted_tokens, 0, "%s: %lld drafts, none accepted", name,
                         (long long)s.spec_draft_tokens);
            cr_assert_leq(s.spec_accepted_tokens, s.spec_draft_tokens);
            if (seqs == 1)
                cr_assert_lt(s.n_steps, p1.n_steps, "%s: %lld steps with drafts, %lld without",
                             name, (long long)s.n_steps, (long long)p1.n_steps);
        }
    rp_model_free(m);
    fixture_free(&fx);
}

Test(spec, llama_equals_plain_greedy)
{
    equals_plain("llama_gqa");
}

/* gemma3 has no batched forward: the engine's fallback runs each sequence with logits for
 * the last rows of its run. */
Test(spec, gemma3_equals_plain_greedy)
{
    equals_plain("gemma3");
}

/* The default model writes varied text: drafts get rejected as well as accepted, and the
 * tokens are still greedy decoding's. The prompts are ids of its tokenizer ("The function
 * returns the value of x. The function returns the value of", and variants). */
Test(spec, default_model_rejects_and_accepts)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/models/default", getenv("RP_SOURCE_DIR"));
    rp_model *m = load_dir(dir, 1);
    static const int32_t text[] = {505, 5179, 7811, 262,  2185, 272,  223, 90,
                                   16,  389,  5179, 7811, 262,  2185, 272};
    enum { N = 3 };
    job plain[N], spec[N];
    for (int i = 0; i < N; i++) {
        memset(&plain[i], 0, sizeof plain[i]);
        int n = (int)RP_ARRAY_LEN(text) - i * 2;
        memcpy(plain[i].prompt, text + i, sizeof(int32_t) * (size_t)(n - i));
        plain[i].n_prompt = n - i;
        plain[i].max_tokens = 32;
        plain[i].stop_id = -1;
    }
    memcpy(spec, plain, sizeof spec);
    run(m, plain, N, 0, 2);
    rp_engine_stats s = run(m, spec, N, 5, 2);
    same_tokens(plain, spec, N, "default model");
    cr_assert_gt(s.spec_accepted_tokens, 0);
    cr_assert_gt(s.spec_draft_tokens, s.spec_accepted_tokens, "no draft was ever rejected");
    rp_model_free(m);
}

/* A stop id and every max_tokens land where they do without drafts, even inside a run of
 * accepted drafts. */
Test(spec, stops_and_limits_land_in_place)
{
    fixture fx;
    rp_model *m = load("llama_gqa", &fx);
    job base;
    make_job(&fx, 2, &base);
    base.max_tokens = 60;
    job ref[1] = {base};
    run(m, ref, 1, 0, 1);
    cr_assert_geq(ref[0].c.n, 20);
    enum { N = 12 };
    job plain[N], spec[N];
    for (int i = 0; i < N; i++) {
        plain[i] = base;
        plain[i].max_tokens = 1 + i * 3; /* 1, 4, ..., 34 */
        if (i % 3 == 2)                  /* a token the output holds further on */
            plain[i].stop_id = ref[0].c.toks[5 + i];
    }
    memcpy(spec, plain, sizeof spec);
    run(m, plain, N, 0, 4);
    rp_engine_stats s = run(m, spec, N, 6, 4);
    same_tokens(plain, spec, N, "stops and limits");
    cr_assert_gt(s.spec_accepted_tokens, 0);
    int stopped = 0;
    for (int i = 0; i < N; i++)
        stopped += spec[i].c.finish == RP_FINISH_STOP;
    cr_assert_gt(stopped, 0, "no job ended on its stop id");
    rp_model_free(m);
    fixture_free(&fx);
}

/* Rejected drafts leave full blocks in the prefix index; a conversation resent with the
 * answer appended (so it runs over those blocks) still continues exactly as without drafts. */
Test(spec, prefix_cache_after_rejected_drafts)
{
    fixture fx;
    rp_model *m = load("llama_gqa", &fx);
    rp_err err;
    rp_engine_config cfg = {.max_context = 160, .max_num_seqs = 2, .spec_tokens = 8};
    rp_engine_config plain_cfg = {.max_context = 160, .max_num_seqs = 2, .no_prefix_cache = 1};
    int32_t outs[2][COLLECTOR_MAX + 48];
    int lens[2];
    for (int pass = 0; pass < 2; pass++) {
        rp_engine *e;
        cr_assert_eq(rp_engine_new(m, pass ? &plain_cfg : &cfg, &e, &err), RP_OK);
        job j;
        make_job(&fx, 3, &j);
        rp_gen_request r = {.prompt = j.prompt,
                            .n_prompt = j.n_prompt,
                            .max_tokens = 40,
                            .ignore_eos = 1,
                            .n_top_logprobs = -1};
        rp_sampling_default(&r.sampling);
        r.sampling.temperature = 0;
        int32_t *out;
        int n;
        cr_assert_eq(rp_engine_generate(e, &r, &out, &n, NULL, &err), RP_OK, "%s", err.msg);
        int32_t conv[48 + 40 + 2];
        memcpy(conv, j.prompt, sizeof(int32_t) * (size_t)j.n_prompt);
        memcpy(conv + j.n_prompt, out, sizeof(int32_t) * (size_t)n);
        conv[j.n_prompt + n] = fx.ids[1];
        rp_free(out);
        r.prompt = conv;
        r.n_prompt = j.n_prompt + n + 1;
        cr_assert_eq(rp_engine_generate(e, &r, &out, &n, NULL, &err), RP_OK, "%s", err.msg);
        memcpy(outs[pass], out, sizeof(int32_t) * (size_t)n);
        lens[pass] = n;
        rp_free(out);
        rp_engine_stats st;
        rp_engine_get_stats(e, &st);
        if (!pass)
            cr_assert_gt(st.n_cached_tokens, 16, "cached %lld", (long long)st.n_cached_tokens);
        rp_engine_free(e);
    }
    cr_assert_eq(lens[0], lens[1]);
    for (int k = 0; k < lens[0]; k++)
        cr_assert_eq(outs[0][k], outs[1][k], "token %d", k);
    rp_model_free(m);
    fixture_free(&fx);
}

/* Sampled sequences never draft (their tokens are the seed's, with or without the option),
 * and a greedy one batched beside them still drafts and still matches. */
Test(spec, sampled_do_not_draft_greedy_beside_them_does)
{
    fixture fx;
    rp_model *m = load("llama_gqa", &fx);
    enum { N = 4 };
    job plain[N], spec[N];
    for (int i = 0; i < N; i++) {
        make_job(&fx, i, &plain[i]);
        plain[i].temperature = i == 0 ? 0.0f : 0.8f;
    }
    memcpy(spec, plain, sizeof spec);
    run(m, plain, N, 0, N);
    rp_engine_stats s = run(m, spec, N, 6, N);
    same_tokens(plain, spec, N, "mixed");
    cr_assert_gt(s.spec_draft_tokens, 0);
    for (int i = 1; i < N; i++) { /* alone, a sampled job drafts nothing */
        job one[1] = {spec[i]};
        rp_engine_stats s1 = run(m, one, 1, 6, 1);
        cr_assert_eq(s1.spec_draft_tokens, 0, "sampled job %d drafted", i);
    }
    rp_model_free(m);
    fixture_free(&fx);
}

/* A hybrid cannot rewind its recurrent state: it never drafts, and its tokens are unchanged. */
Test(spec, hybrid_never_drafts)
{
    fixture fx;
    rp_model *m = load("qwen3_5", &fx);
    job plain[2], spec[2];
    for (int i = 0; i < 2; i++)
        make_job(&fx, i, &plain[i]);
    memcpy(spec, plain, sizeof spec);
    run(m, plain, 2, 0, 2);
    rp_engine_stats s = run(m, spec, 2, 6, 2);
    same_tokens(plain, spec, 2, "qwen3_5");
    cr_assert_eq(s.spec_draft_tokens, 0);
    rp_model_free(m);
    fixture_free(&fx);
}
