/* backend/sample.h - the draw of one token from a row of logits (temperature, top-k, top-p,
 * min-p) with a given uniform number: the arithmetic the engine's sampler runs on the host and
 * the CUDA backend runs where the logits are (rp_op_sample_rows), so that both give the same
 * token bit for bit.
 *
 * The draw, for logits l[0, n) and a row's parameters p (u in [0, 1) from the caller's RNG):
 *  1. temperature <= 0: the argmax (the lowest index among equal maxima).
 *  2. s_i = l_i * (1 / temperature) (f32); mx = max s_i; weights e_i = rp_sample_exp(s_i - mx).
 *  3. Neither top-k (0 < top_k < n) nor top-p (0 < top_p < 1): every token in index order,
 *     those with e_i < min_p dropped (e of the best is exactly 1). total = the sum of the kept
 *     e_i in RP_SAMPLE_CHUNKS contiguous chunks of ceil(n / RP_SAMPLE_CHUNKS) tokens (each
 *     chunk summed in order in double, then the chunk sums in order); r = u * total; walking
 *     the chunks in order, r -= a chunk's sum while r >= it, then r -= e_i through the chunk
 *     that holds it until r < 0 (on into later chunks if rounding leaves r >= 0): that token;
 *     none: the last kept one.
 *  4. Otherwise the candidates in order of s descending, ties by the lower id (+0 and -0 are
 *     equal). With top-k, the first k; their e_i summed in that order (sum). Without it, sum
 *     is the whole vocabulary's sum of e_i in the chunks of 3. With top-p, the shortest prefix
 *     whose cum += e_i / sum (double) reaches top_p. With min_p, those of that prefix with
 *     e_i >= min_p * e_0 (order kept; none: e_0's). total = their sum in order; r = u * total; r -= e_i
 *     in order until r < 0: that token; none: the last one.
 *
 * Ownership: rp_sample_draw uses the caller's scratch (n candidates). Threading: pure
 * functions. Errors: none (n >= 1; NaN logits give an unspecified token, never a fault).
 */
#ifndef RP_BACKEND_SAMPLE_H
#define RP_BACKEND_SAMPLE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define RP_SAMPLE_HD __host__ __device__
#else
#define RP_SAMPLE_HD
#endif

#define RP_SAMPLE_CHUNKS 1024
/* The longest sorted prefix the CUDA op builds; a row that needs more (top_k above it, or a
 * nucleus longer than it) is left to the caller. */
#define RP_SAMPLE_MAX_SORTED 1024

typedef struct rp_sample_row {
    float temperature; /* <= 0: greedy */
    float top_p;       /* (0, 1): nucleus; else off */
    float min_p;       /* > 0: drop tokens below min_p x the best one's probability */
    int32_t top_k;     /* (0, n): the k best only; else off */
    double u;          /* the draw, uniform in [0, 1) */
} rp_sample_row;

typedef struct rp_sample_cand {
    float p; /* scaled logit, then weight */
    int32_t id;
} rp_sample_cand;

/* 2^k as a float, for -126 <= k <= 127. */
static inline RP_SAMPLE_HD float rp_sample_pow2(int k)
{
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)(k + 127) << 23};
    return v.f;
}

/* e^x for x <= 0 from IEEE operations only (a multiply, rint, two fmas for the reduction by
 * ln 2, a degree-7 Horner polynomial in fmas, a multiply by a power of two that stays in the
 * normal range, so exact), so the host and the GPU compute the same float; relative error
 * about 2^-23; 0 below -86 (where e^x nears the subnormals). */
static inline RP_SAMPLE_HD float rp_sample_exp(float x)
{
    if (!(x >= -86.0f))
        return 0.0f;
    float k = rintf(x * 1.44269504f);
    float r = fmaf(k, -0.693145751953125f, x); /* ln 2 in two parts: hi has 16 bits */
    r = fmaf(k, -1.428606765330187e-06f, r);
    float q = 1.98412698e-4f; /* 1/7! .. 1/0! */
    q = fmaf(q, r, 1.38888889e-3f);
    q = fmaf(q, r, 8.33333333e-3f);
    q = fmaf(q, r, 4.16666667e-2f);
    q = fmaf(q, r, 1.66666667e-1f);
    q = fmaf(q, r, 0.5f);
    q = fmaf(q, r, 1.0f);
    q = fmaf(q, r, 1.0f);
    return q * rp_sample_pow2((int)k);
}

/* Tokens per chunk of the vocabulary sums (step 3). */
static inline RP_SAMPLE_HD int rp_sample_chunk(int n)
{
    return (n + RP_SAMPLE_CHUNKS - 1) / RP_SAMPLE_CHUNKS;
}

/* The greedy pick: the lowest index among equal maxima of x[0, n). */
int32_t rp_sample_argmax(const float *x, int n);

/* The draw above; scratch: n candidates. */
int32_t rp_sample_draw(const float *logits, int n, const rp_sample_row *p,
                       rp_sample_cand *scratch);

#endif
