/* tests/unit/engine/sampler_test.c - sampling rules and reproducibility. */
#include <criterion/criterion.h>
#include <math.h>

#include "engine/sampler.h"

#define V 8

static void fill(float *l)
{
    float v[V] = {1.0f, 3.0f, 2.0f, 0.5f, -1.0f, 2.9f, 0.0f, 1.5f};
    for (int i = 0; i < V; i++)
        l[i] = v[i];
}

static rp_sampler *make(float temp, int top_k, float top_p, float min_p, uint64_t seed)
{
    rp_sampling p;
    rp_sampling_default(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    p.has_seed = 1;
    return rp_sampler_new(V, &p);
}

Test(sampler, greedy_is_argmax)
{
    rp_sampler *s = make(0, 0, 1, 0, 1);
    float l[V];
    fill(l);
    cr_assert_eq(rp_sampler_sample(s, l, -1, NULL, NULL, NULL), 1);
    rp_sampler_free(s);
}

Test(sampler, top_k_limits_choices)
{
    rp_sampler *s = make(5.0f, 2, 1, 0, 7);
    for (int i = 0; i < 500; i++) {
        float l[V];
        fill(l);
        int32_t t = rp_sampler_sample(s, l, -1, NULL, NULL, NULL);
        cr_assert(t == 1 || t == 5, "top-2 gave %d", t);
    }
    rp_sampler_free(s);
}

Test(sampler, top_p_and_min_p_limit_choices)
{
    /* p(1) ~ 0.36, p(5) ~ 0.33, p(2) ~ 0.13: top_p 0.6 keeps {1, 5} */
    rp_sampler *s = make(1.0f, 0, 0.6f, 0, 3);
    for (int i = 0; i < 500; i++) {
        float l[V];
        fill(l);
        int32_t t = rp_sampler_sample(s, l, -1, NULL, NULL, NULL);
        cr_assert(t == 1 || t == 5, "top_p gave %d", t);
    }
    rp_sampler_free(s);
    s = make(1.0f, 0, 1, 0.5f, 3); /* keeps p >= 0.5 p_max: tokens 1, 5 */
    for (int i = 0; i < 500; i++) {
        float l[V];
        fill(l);
        int32_t t = rp_sampler_sample(s, l, -1, NULL, NULL, NULL);
        cr_assert(t == 1 || t == 5, "min_p gave %d", t);
    }
    rp_sampler_free(s);
}

Test(sampler, seed_reproduces_and_distribution_is_right)
{
    int32_t a[200], b[200];
    int counts[V] = {0};
    for (int run = 0; run < 2; run++) {
        rp_sampler *s = make(1.0f, 0, 1, 0, 42);
        for (int i = 0; i < 200; i++) {
            float l[V];
            fill(l);
            (run ? b : a)[i] = rp_sampler_sample(s, l, -1, NULL, NULL, NULL);
        }
        rp_sampler_free(s);
    }
    for (int i = 0; i < 200; i++)
        cr_assert_eq(a[i], b[i]);
    rp_sampler *s = make(1.0f, 0, 1, 0, 9);
    for (int i = 0; i < 20000; i++) {
        float l[V];
        fill(l);
        counts[rp_sampler_sample(s, l, -1, NULL, NULL, NULL)]++;
    }
    rp_sampler_free(s);
    float l[V], z = 0;
    fill(l);
    for (int i = 0; i < V; i++)
        z += expf(l[i]);
    for (int i = 0; i < V; i++) {
        float want = expf(l[i]) / z, got = counts[i] / 20000.0f;
        cr_expect(fabsf(want - got) < 0.015f, "token %d: %f vs %f", i, got, want);
    }
}

Test(sampler, penalties_and_logprobs)
{
    rp_sampling p;
    rp_sampling_default(&p);
    p.temperature = 0;
    p.presence_penalty = 2.0f;
    rp_sampler *s = rp_sampler_new(V, &p);
    rp_sampler_accept(s, 1, 1); /* token 1 generated once: 3.0 - 2.0 = 1.0 */
    float l[V], lp, top_lp[3];
    int32_t top[3];
    fill(l);
    cr_assert_eq(rp_sampler_sample(s, l, 3, &lp, top, top_lp), 5);
    cr_assert_eq(top[0], 5);
    cr_assert_eq(top[1], 2);
    cr_assert(lp < 0 && fabsf(lp - top_lp[0]) < 1e-6f);
    rp_sampler_free(s);
    rp_sampling_default(&p);
    p.temperature = 0;
    p.repetition_penalty = 10.0f;
    s = rp_sampler_new(V, &p);
    rp_sampler_accept(s, 1, 0);
    rp_sampler_accept(s, 5, 0); /* prompt tokens count for repetition */
    fill(l);
    cr_assert_eq(rp_sampler_sample(s, l, -1, NULL, NULL, NULL), 2);
    rp_sampler_free(s);
}
