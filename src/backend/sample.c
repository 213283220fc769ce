/* backend/sample.c - rp_sample_draw, the host side of the draw sample.h specifies (the CUDA
 * backend's kernel is cuda_sample.cu). */
#include "backend/sample.h"

#include <stdlib.h>

/* a before b: higher p first, ties by the lower id (+0 == -0 as floats compare) */
static inline int cand_before(const rp_sample_cand *a, const rp_sample_cand *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int cmp_desc(const void *a, const void *b)
{
    const rp_sample_cand *x = a, *y = b;
    return cand_before(x, y) ? -1 : cand_before(y, x) ? 1 : 0;
}

static inline void cand_swap(rp_sample_cand *a, rp_sample_cand *b)
{
    rp_sample_cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorders c[0, n) so that c[0, t) holds its t first candidates in cand_before's order, in
 * that order (the prefix a full sort gives), the rest after them unordered: a quickselect
 * (Hoare partitions around a median of three, expected O(n)), then a sort of the t. The
 * bounds checks keep a NaN from running a scan off the array. */
static void sort_prefix(rp_sample_cand *c, int n, int t)
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
        rp_sample_cand piv = c[mid];
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
            break; /* between them: pivot-equal candidates, already in place */
    }
    qsort(c, (size_t)t, sizeof *c, cmp_desc);
}

/* The weights' sum over the whole vocabulary in sample.h's chunks (c in index order, p the
 * scaled logits); weights below keep_min count as 0; each chunk's sum into chunk_sums when
 * given. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("fma", "default")))
#endif
static double vocab_sum(const rp_sample_cand *c, int n, float mx, float keep_min,
                        double *chunk_sums)
{
    int ch = rp_sample_chunk(n);
    double total = 0.0;
    for (int j = 0; j * ch < n; j++) {
        double cs = 0.0;
        int end = (j + 1) * ch < n ? (j + 1) * ch : n;
        for (int i = j * ch; i < end; i++) {
            float e = rp_sample_exp(c[i].p - mx);
            cs += e >= keep_min ? e : 0.0f;
        }
        if (chunk_sums)
            chunk_sums[j] = cs;
        total += cs;
    }
    return total;
}

int32_t rp_sample_argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Step 3: every token in index order (c in index order, p the scaled logits). */
static int32_t draw_unsorted(const rp_sample_cand *c, int n, float mx, const rp_sample_row *p)
{
    double cs[RP_SAMPLE_CHUNKS];
    float keep_min = p->min_p > 0 ? p->min_p : 0.0f;
    double r = p->u * vocab_sum(c, n, mx, keep_min, cs);
    int ch = rp_sample_chunk(n);
    for (int j = 0; j * ch < n; j++) {
        if (r >= cs[j]) {
            r -= cs[j];
            continue;
        }
        int end = (j + 1) * ch < n ? (j + 1) * ch : n;
        for (int i = j * ch; i < end; i++) {
            float e = rp_sample_exp(c[i].p - mx);
            if (e >= keep_min) {
                r -= e;
                if (r < 0)
                    return i;
            }
        }
    }
    for (int i = n - 1; i > 0; i--) /* rounding ran past the end: the last kept token */
        if (rp_sample_exp(c[i].p - mx) >= keep_min)
            return i;
    return 0;
}

int32_t rp_sample_draw(const float *logits, int n, const rp_sample_row *p, rp_sample_cand *c)
{
    if (p->temperature <= 0)
        return rp_sample_argmax(logits, n);
    float inv_t = 1.0f / p->temperature;
    float mx = logits[0] * inv_t;
    for (int i = 0; i < n; i++) {
        c[i].p = logits[i] * inv_t;
        c[i].id = i;
        mx = c[i].p > mx ? c[i].p : mx;
    }
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    int nucleus = p->top_p > 0 && p->top_p < 1;
    if (k == n && !nucleus)
        return draw_unsorted(c, n, mx, p);
    double sum = 0.0;
    int m = k;
    if (k < n) { /* the k best, sorted; the mass is theirs */
        sort_prefix(c, n, k);
        for (int i = 0; i < k; i++) {
            c[i].p = rp_sample_exp(c[i].p - mx);
            sum += c[i].p;
        }
        if (nucleus) {
            double cum = 0.0;
            for (int i = 0; i < k; i++) {
                cum += c[i].p / sum;
                if (cum >= p->top_p) {
                    m = i + 1;
                    break;
                }
            }
        }
    } else { /* nucleus alone: sort a prefix, 8x longer until it holds the nucleus */
        sum = vocab_sum(c, n, mx, 0.0f, NULL);
        for (int t = n < 256 ? n : 256;; t = t < n / 8 ? t * 8 : n) {
            sort_prefix(c, n, t);
            double cum = 0.0;
            int found = 0;
            m = t;
            for (int i = 0; i < t && !found; i++) {
                cum += rp_sample_exp(c[i].p - mx) / sum;
                if (cum >= p->top_p) {
                    m = i + 1;
                    found = 1;
                }
            }
            if (found || t == n)
                break;
        }
        for (int i = 0; i < m; i++)
            c[i].p = rp_sample_exp(c[i].p - mx);
    }
    if (p->min_p > 0) { /* drop tokens below min_p x the best weight */
        float best = c[0].p;
        int j = 0;
        for (int i = 0; i < m; i++)
            if (c[i].p >= p->min_p * best)
                c[j++] = c[i];
        m = j > 0 ? j : 1; /* min_p > 1 keeps nothing: the best one */
    }
    double total = 0.0;
    for (int i = 0; i < m; i++)
        total += c[i].p;
    double r = p->u * total;
    for (int i = 0; i < m; i++) {
        r -= c[i].p;
        if (r < 0)
            return c[i].id;
    }
    return c[m - 1].id;
}
