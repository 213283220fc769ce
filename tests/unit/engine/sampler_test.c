/* tests/unit/engine/sampler_test.c - sampling rules and reproducibility. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* A large vocabulary whose logits fall on a few levels, so ties cross every top-k / nucleus
 * boundary: the candidates kept must be the prefix a full sort by (logit desc, id asc) gives
 * (the sampler selects that prefix without sorting the rest), and every one of them must be
 * drawn. */
#define BIG 5000

static int cmp_ref(const void *a, const void *b)
{
    const int *x = a, *y = b;
    float lx = (float)(x[1]), ly = (float)(y[1]);
    if (lx != ly)
        return lx < ly ? 1 : -1;
    return x[0] - y[0];
}

Test(sampler, large_vocab_with_ties_keeps_the_sorted_prefix)
{
    static float l[BIG], base[BIG];
    static int ref[BIG][2]; /* id, level */
    for (int i = 0; i < BIG; i++) {
        int level = (int)((i * 2654435761u) >> 28) % 7; /* 0..6, scattered */
        base[i] = (float)level;
        ref[i][0] = i;
        ref[i][1] = level;
    }
    qsort(ref, BIG, sizeof ref[0], cmp_ref);
    static const int ks[] = {1, 37, 300, 1999};
    for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
        int k = ks[q];
        rp_sampling p;
        rp_sampling_default(&p);
        p.temperature = 1000.0f; /* near uniform over the kept ones */
        p.top_k = k;
        p.top_p = 1;
        p.has_seed = 1;
        p.seed = 11 + q;
        rp_sampler *s = rp_sampler_new(BIG, &p);
        static char allowed[BIG], seen[BIG];
        memset(allowed, 0, sizeof allowed);
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < k; i++)
            allowed[ref[i][0]] = 1;
        int n_seen = 0;
        for (int d = 0; d < 40 * k + 200; d++) {
            memcpy(l, base, sizeof l);
            int32_t t = rp_sampler_sample(s, l, -1, NULL, NULL, NULL);
            cr_assert(t >= 0 && t < BIG && allowed[t], "top_k %d drew %d (level %g)", k, t,
                      base[t]);
            n_seen += !seen[t];
            seen[t] = 1;
        }
        cr_assert_eq(n_seen, k, "top_k %d: %d of the kept tokens were drawn", k, n_seen);
        rp_sampler_free(s);
    }
    /* nucleus alone: with logits on levels 0..6 and temperature 1, the prefix whose mass
     * reaches 0.5 (in the full sort's order) is all that may be drawn */
    double mx = 6, sum = 0, cum = 0;
    for (int i = 0; i < BIG; i++)
        sum += exp(base[i] - mx);
    int m = 0;
    while (m < BIG && cum < 0.5)
        cum += exp(ref[m++][1] - mx) / sum;
    rp_sampling p;
    rp_sampling_default(&p);
    p.temperature = 1.0f;
    p.top_p = 0.5f;
    p.has_seed = 1;
    p.seed = 5;
    rp_sampler *s = rp_sampler_new(BIG, &p);
    static char allowed[BIG];
    memset(allowed, 0, sizeof allowed);
    for (int i = 0; i < m; i++)
        allowed[ref[i][0]] = 1;
    for (int d = 0; d < 3000; d++) {
        memcpy(l, base, sizeof l);
        int32_t t = rp_sampler_sample(s, l, -1, NULL, NULL, NULL);
        cr_assert(t >= 0 && t < BIG && allowed[t], "top_p 0.5 drew %d outside the %d kept", t, m);
    }
    rp_sampler_free(s);
}
