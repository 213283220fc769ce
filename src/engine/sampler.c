/* engine/sampler.c - penalties, temperature, top-k/top-p/min-p, seeded draws. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/sample.h"
#include "base/alloc.h"

struct rp_sampler {
    int vocab;
    rp_sampling prm;
    uint64_t rng[4];
    int32_t *count_gen;   /* generated occurrences per token */
    uint8_t *seen_any;    /* prompt or generated (repetition penalty) */
    rp_sample_cand *cands; /* rp_sample_draw's scratch */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 bits. */
static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

rp_sampler *rp_sampler_new(int vocab_size, const rp_sampling *params)
{
    rp_sampler *s = rp_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->vocab = vocab_size;
    s->prm = *params;
    uint64_t seed = params->has_seed ? params->seed
                                     : (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)s << 17);
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&seed);
    s->count_gen = rp_calloc((size_t)vocab_size, sizeof(int32_t));
    s->seen_any = rp_calloc((size_t)vocab_size, 1);
    s->cands = rp_alloc(sizeof(rp_sample_cand) * (size_t)vocab_size);
    if (!s->count_gen || !s->seen_any || !s->cands) {
        rp_sampler_free(s);
        return NULL;
    }
    return s;
}

void rp_sampler_free(rp_sampler *s)
{
    if (!s)
        return;
    rp_free(s->count_gen);
    rp_free(s->seen_any);
    rp_free(s->cands);
    rp_free(s);
}

void rp_sampler_accept(rp_sampler *s, int32_t token, int generated)
{
    if (token < 0 || token >= s->vocab)
        return;
    s->seen_any[token] = 1;
    if (generated)
        s->count_gen[token]++;
}

int rp_sampler_plain(const rp_sampler *s)
{
    const rp_sampling *p = &s->prm;
    return !(p->repetition_penalty > 0 && p->repetition_penalty != 1.0f) &&
           p->presence_penalty == 0 && p->frequency_penalty == 0;
}

int rp_sampler_greedy(const rp_sampler *s)
{
    return s->prm.temperature <= 0 && rp_sampler_plain(s);
}

static void apply_penalties(rp_sampler *s, float *logits)
{
    const rp_sampling *p = &s->prm;
    int rep = p->repetition_penalty > 0 && p->repetition_penalty != 1.0f;
    int pf = p->presence_penalty != 0 || p->frequency_penalty != 0;
    if (!rep && !pf)
        return;
    for (int i = 0; i < s->vocab; i++) {
        if (rep && s->seen_any[i])
            logits[i] = logits[i] > 0 ? logits[i] / p->repetition_penalty
                                      : logits[i] * p->repetition_penalty;
        if (pf && s->count_gen[i])
            logits[i] -= p->frequency_penalty * (float)s->count_gen[i] + p->presence_penalty;
    }
}

/* log-softmax facts of the (penalised) logits: the max and log of the partition sum. */
static void logsumexp(const float *x, int n, float *mx, float *lse)
{
    float m = x[rp_sample_argmax(x, n)];
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(x[i] - m));
    *mx = m;
    *lse = (float)log(sum);
}

static void fill_logprobs(rp_sampler *s, const float *logits, int32_t chosen, int n_top,
                          float *logprob, int32_t *top_ids, float *top_lp)
{
    float mx, lse;
    logsumexp(logits, s->vocab, &mx, &lse);
    *logprob = logits[chosen] - mx - lse;
    for (int k = 0; k < n_top; k++) { /* n_top <= 20: repeated selection is cheapest */
        int32_t best = -1;
        for (int i = 0; i < s->vocab; i++) {
            int taken = 0;
            for (int j = 0; j < k && !taken; j++)
                taken = top_ids[j] == i;
            if (!taken && (best < 0 || logits[i] > logits[best]))
                best = i;
        }
        top_ids[k] = best;
        top_lp[k] = logits[best] - mx - lse;
    }
}

rp_sample_row rp_sampler_row(const rp_sampler *s, double u)
{
    const rp_sampling *p = &s->prm;
    return (rp_sample_row){.temperature = p->temperature, .top_p = p->top_p, .min_p = p->min_p,
                           .top_k = p->top_k, .u = u};
}

double rp_sampler_next_u(rp_sampler *s)
{
    return s->prm.temperature > 0 ? next_unit(s->rng) : 0.0;
}

int32_t rp_sampler_sample_u(rp_sampler *s, const float *logits, double u)
{
    rp_sample_row row = rp_sampler_row(s, u);
    return rp_sample_draw(logits, s->vocab, &row, s->cands);
}

int32_t rp_sampler_sample(rp_sampler *s, float *logits, int n_top, float *logprob,
                          int32_t *top_ids, float *top_logprobs)
{
    apply_penalties(s, logits);
    int32_t tok = s->prm.temperature <= 0 ? rp_sample_argmax(logits, s->vocab)
                                          : rp_sampler_sample_u(s, logits, next_unit(s->rng));
    if (n_top >= 0 && logprob)
        fill_logprobs(s, logits, tok, n_top, logprob, top_ids, top_logprobs);
    return tok;
}
