/* engine/sampler.c - penalties, temperature, top-k/top-p/min-p, seeded draws. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"

typedef struct cand {
    float p; /* logit, then probability */
    int32_t id;
} cand;

struct rp_sampler {
    int vocab;
    rp_sampling prm;
    uint64_t rng[4];
    int32_t *count_gen;   /* generated occurrences per token */
    uint8_t *seen_any;    /* prompt or generated (repetition penalty) */
    cand *cands;
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
    s->cands = rp_alloc(sizeof(cand) * (size_t)vocab_size);
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

int rp_sampler_greedy(const rp_sampler *s)
{
    const rp_sampling *p = &s->prm;
    return p->temperature <= 0 && !(p->repetition_penalty > 0 && p->repetition_penalty != 1.0f) &&
           p->presence_penalty == 0 && p->frequency_penalty == 0;
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

static int cmp_desc(const void *a, const void *b)
{
    float x = ((const cand *)a)->p, y = ((const cand *)b)->p;
    if (x != y)
        return x < y ? 1 : -1;
    return ((const cand *)a)->id - ((const cand *)b)->id; /* stable order for ties */
}

static int32_t argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* log-softmax facts of the (penalised) logits: the max and log of the partition sum. */
static void logsumexp(const float *x, int n, float *mx, float *lse)
{
    float m = x[argmax(x, n)];
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

/* a before b in the candidates' order: higher p first, ties by the lower id (the order
 * cmp_desc sorts into) */
static inline int cand_before(const cand *a, const cand *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static inline void cand_swap(cand *a, cand *b)
{
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorders c[0, n) so that c[0, t) holds its t first candidates in cand_before's order, in
 * that order (the prefix a full sort would give), and the rest follow unordered: a
 * quickselect (Hoare partitions around a median of three, expected O(n)) and a sort of the
 * t. The bounds checks keep a NaN logit from running a scan off the array. */
static void sort_prefix(cand *c, int n, int t)
{
    int lo = 0, hi = n - 1;
    while (t < n && hi > lo) {
        int mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo]))
            cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi], &c[lo]))
            cand_swap(&c[hi], &c[lo]);
        if (cand_before(&c[hi], &c[mid]))
            cand_swap(&c[hi], &c[mid]);
        cand piv = c[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (i <= hi && cand_before(&c[i], &piv))
                i++;
            while (j >= lo && cand_before(&piv, &c[j]))
                j--;
            if (i <= j)
                cand_swap(&c[i++], &c[j--]);
        }
        if (t - 1 <= j)
            hi = j; /* the t-th candidate is left of the split */
        else if (t - 1 >= i)
            lo = i;
        else
            break; /* between them: only pivot-equal candidates, already in place */
    }
    qsort(c, (size_t)t, sizeof *c, cmp_desc);
}

static int32_t draw(rp_sampler *s, const float *logits)
{
    const rp_sampling *p = &s->prm;
    int n = s->vocab;
    cand *c = s->cands;
    float inv_t = 1.0f / p->temperature;
    for (int i = 0; i < n; i++) {
        c[i].p = logits[i] * inv_t;
        c[i].id = i;
    }
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    int nucleus = p->top_p > 0 && p->top_p < 1;
    int need_sort = k < n || nucleus;
    float mx = c[0].p;
    for (int i = 1; i < n; i++)
        mx = c[i].p > mx ? c[i].p : mx;
    double sum = 0.0;
    int m = k;
    if (k < n) { /* the k best, sorted; the mass is theirs */
        sort_prefix(c, n, k);
        for (int i = 0; i < k; i++) {
            c[i].p = expf(c[i].p - mx);
            sum += c[i].p;
        }
    } else if (nucleus) { /* the whole vocabulary's mass, its order left to the nucleus */
        for (int i = 0; i < n; i++)
            sum += expf(c[i].p - mx);
    } else { /* no order needed: the probabilities in place */
        for (int i = 0; i < n; i++) {
            c[i].p = expf(c[i].p - mx);
            sum += c[i].p;
        }
    }
    if (nucleus) { /* smallest sorted prefix whose mass reaches top_p */
        if (k < n) {
            double cum = 0.0;
            for (int i = 0; i < k; i++) {
                cum += c[i].p / sum;
                if (cum >= p->top_p) {
                    m = i + 1;
                    break;
                }
            }
        } else { /* sort a prefix of t, 8x longer until it holds the nucleus */
            for (int t = n < 256 ? n : 256;; t = t < n / 8 ? t * 8 : n) {
                sort_prefix(c, n, t);
                double cum = 0.0;
                int found = 0;
                m = t;
                for (int i = 0; i < t && !found; i++) {
                    cum += expf(c[i].p - mx) / sum;
                    if (cum >= p->top_p) {
                        m = i + 1;
                        found = 1;
                    }
                }
                if (found || t == n)
                    break;
            }
            for (int i = 0; i < m; i++)
                c[i].p = expf(c[i].p - mx);
        }
    }
    if (p->min_p > 0) { /* drop tokens below min_p x the best probability */
        float best = need_sort ? c[0].p : 0;
        if (!need_sort)
            for (int i = 0; i < m; i++)
                best = c[i].p > best ? c[i].p : best;
        int j = 0;
        for (int i = 0; i < m; i++)
            if (c[i].p >= p->min_p * best)
                c[j++] = c[i];
        m = j;
    }
    double total = 0.0;
    for (int i = 0; i < m; i++)
        total += c[i].p;
    double r = next_unit(s->rng) * total;
    for (int i = 0; i < m; i++) {
        r -= c[i].p;
        if (r < 0)
            return c[i].id;
    }
    return c[m - 1].id;
}

int32_t rp_sampler_sample(rp_sampler *s, float *logits, int n_top, float *logprob,
                          int32_t *top_ids, float *top_logprobs)
{
    apply_penalties(s, logits);
    int32_t tok = s->prm.temperature <= 0 ? argmax(logits, s->vocab) : draw(s, logits);
    if (n_top >= 0 && logprob)
        fill_logprobs(s, logits, tok, n_top, logprob, top_ids, top_logprobs);
    return tok;
}
