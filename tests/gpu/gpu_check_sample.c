/* tests/gpu/gpu_check_sample.c - the draw on the GPU (rp_op_sample_rows, cuda_sample.cu)
 * against the host's (rp_sample_draw, backend/sample.c): the same token, bit for bit.
 *
 * Rows of logits of several shapes (a language model's head: a few likely tokens over a long
 * Gaussian tail; levels 0..6 with ties across every boundary; small flat values) and
 * vocabularies (128256, 4096, 1000, 7), each drawn under greedy, temperature alone, min-p,
 * top-k (1, 40, 1024, and 1025, which the GPU must leave to the caller), top-p, and their
 * mixes, with 16 rows of different u each. A row the GPU leaves to the caller (-1) passes only
 * where sample.h allows it: top_k above RP_SAMPLE_MAX_SORTED, or a nucleus alone longer than
 * it (checked on the host by the prefix mass). Also prints the GPU time of a 64-row draw at
 * 128256 against the host's per row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/sample.h"
#include "base/alloc.h"
#include "gpu_check.h"

static uint64_t s_rng = 0x243f6a8885a308d3ull;
static double urand(void)
{
    s_rng ^= s_rng << 13, s_rng ^= s_rng >> 7, s_rng ^= s_rng << 17;
    return (double)(s_rng >> 11) * 0x1.0p-53;
}

static void fill_row(float *l, int n, int shape, int r)
{
    for (int i = 0; i < n; i++) {
        if (shape == 0) { /* a head: Gaussian tail, a few peaks */
            double u1 = urand() + 1e-12, u2 = urand();
            l[i] = (float)(-6.0 + 3.0 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        } else if (shape == 1) { /* ties on 7 levels */
            l[i] = (float)((((unsigned)(i + 31 * r) * 2654435761u) >> 28) % 7);
        } else { /* small and flat */
            l[i] = (float)(0.1 * urand());
        }
    }
    if (shape == 0)
        for (int j = 0; j < 40 && j < n; j++)
            l[(j * 7919 + r * 131) % n] = 14.0f - 0.3f * (float)j;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_p_desc(const void *a, const void *b)
{
    float x = ((const rp_sample_cand *)a)->p, y = ((const rp_sample_cand *)b)->p;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* the host's prefix mass check for a nucleus alone: does the sorted prefix of
 * RP_SAMPLE_MAX_SORTED candidates reach top_p? (then the GPU must not defer) */
static int nucleus_fits(const float *l, int n, const rp_sample_row *p, rp_sample_cand *c)
{
    float inv_t = 1.0f / p->temperature, mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = l[i] * inv_t > mx ? l[i] * inv_t : mx;
    double sum = 0, cum = 0;
    for (int i = 0; i < n; i++) {
        sum += rp_sample_exp(l[i] * inv_t - mx);
        c[i].p = l[i] * inv_t, c[i].id = i;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_p_desc);
    int t = n < RP_SAMPLE_MAX_SORTED ? n : RP_SAMPLE_MAX_SORTED;
    for (int i = 0; i < t; i++) {
        cum += rp_sample_exp(c[i].p - mx) / sum;
        if (cum >= p->top_p * (1 - 1e-6)) /* a near miss may go either way */
            return 1;
    }
    return t == n;
}

void gpu_sample_checks(void)
{
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.3, &be, &err)) {
        gpu_check_report(0, "sample", err.msg, 0, 0);
        return;
    }
    static const int vocabs[] = {128256, 4096, 1000, 7};
    static const struct {
        const char *name;
        rp_sample_row p;
    } cases[] = {
        {"greedy", {.temperature = 0}},
        {"temp 0.8", {.temperature = 0.8f}},
        {"temp 1 min_p 0.05", {.temperature = 1.0f, .min_p = 0.05f}},
        {"top_k 1", {.temperature = 0.7f, .top_k = 1}},
        {"top_k 40", {.temperature = 0.9f, .top_k = 40}},
        {"top_k 1024", {.temperature = 1.0f, .top_k = 1024}},
        {"top_k 1025", {.temperature = 1.0f, .top_k = 1025}},
        {"top_p 0.9", {.temperature = 0.8f, .top_p = 0.9f}},
        {"top_p 0.5", {.temperature = 1.0f, .top_p = 0.5f}},
        {"top_k 50 top_p 0.9", {.temperature = 0.7f, .top_k = 50, .top_p = 0.9f}},
        {"top_p 0.8 min_p 0.1", {.temperature = 1.0f, .top_p = 0.8f, .min_p = 0.1f}},
        {"top_k 200 min_p 0.02", {.temperature = 1.2f, .top_k = 200, .min_p = 0.02f}},
    };
    enum { ROWS = 16 };
    int max_n = vocabs[0];
    float *l = rp_alloc(sizeof(float) * (size_t)ROWS * (size_t)max_n);
    rp_sample_cand *c = rp_alloc(sizeof(rp_sample_cand) * (size_t)max_n);
    float *ld = rp_backend_buf_alloc(be, sizeof(float) * (size_t)64 * (size_t)max_n, 0);
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++)
        for (int shape = 0; shape < 3; shape++) {
            int n = vocabs[vi];
            for (int r = 0; r < ROWS; r++)
                fill_row(l + (size_t)r * n, n, shape, r);
            rp_backend_from_host(be, ld, l, sizeof(float) * (size_t)ROWS * n);
            for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
                rp_sample_row p[ROWS];
                int32_t got[ROWS];
                for (int r = 0; r < ROWS; r++) {
                    p[r] = cases[ci].p;
                    p[r].u = urand();
                }
                int ran = rp_op_sample_rows(be, ld, ROWS, n, p, got);
                int bad = 0, deferred = 0;
                for (int r = 0; r < ROWS && ran; r++) {
                    const float *row = l + (size_t)r * n;
                    int32_t want = rp_sample_draw(row, n, &p[r], c);
                    if (got[r] == -1) {
                        int may = p[r].top_k > RP_SAMPLE_MAX_SORTED && p[r].top_k < n;
                        if (!may && p[r].top_k <= 0 && p[r].top_p > 0 && p[r].top_p < 1)
                            may = !nucleus_fits(row, n, &p[r], c);
                        deferred++;
                        bad += !may;
                    } else {
                        bad += got[r] != want;
                    }
                }
                char what[160];
                snprintf(what, sizeof what, "vocab %d shape %d %s: %d of %d rows differ, %d left to the host",
                         n, shape, cases[ci].name, bad, ROWS, deferred);
                gpu_check_report(ran && bad == 0, "sample", what, bad, 0);
            }
        }
    /* timing: 64 rows of a 128256 head, top_p 0.9 */
    {
        int n = vocabs[0];
        for (int r = 0; r < 64; r++)
            fill_row(l + (size_t)(r % ROWS) * n, n, 0, r);
        for (int r = 0; r < 64; r++)
            rp_backend_from_host(be, ld + (size_t)r * n, l + (size_t)(r % ROWS) * n,
                                 sizeof(float) * (size_t)n);
        rp_sample_row p[64];
        int32_t got[64];
        for (int r = 0; r < 64; r++)
            p[r] = (rp_sample_row){.temperature = 0.8f, .top_p = 0.9f, .u = urand()};
        rp_op_sample_rows(be, ld, 64, n, p, got);
        double t0 = now_s();
        for (int k = 0; k < 20; k++)
            rp_op_sample_rows(be, ld, 64, n, p, got);
        double gpu = (now_s() - t0) / 20;
        t0 = now_s();
        for (int r = 0; r < 8; r++)
            rp_sample_draw(l + (size_t)(r % ROWS) * n, n, &p[r], c);
        double host = (now_s() - t0) / 8;
        printf("info sample timing: 64 rows x %d, top_p 0.9: GPU %.3f ms a step (with the "
               "sync), host %.3f ms a row (%.1f ms for 64)\n",
               n, gpu * 1e3, host * 1e3, 64 * host * 1e3);
    }
    rp_backend_buf_free(be, ld);
    rp_free(l);
    rp_free(c);
    rp_backend_free(be);
}
