/* tests/gpu/gpu_check_q4wg.c - rapid_gpu_check's checks and timings of the MLX 4-bit
 * batched-decode GEMM on Hopper's warpgroup MMA (cuda_wgmma_q4.cu, issue #12's 64-stream
 * target).
 *
 * Checks (`rapid_gpu_check q4wg`, also part of `kernels` and the full run): y = W x for
 * random MLX 4-bit weights on a backend with RAPID_CUDA_Q4WG=5 (the wgmma kernel from 5
 * tokens on sm_90 devices; elsewhere qmm2_kernel serves them and the same checks hold) at the
 * Llama-3-8B shapes (q/k/v stacked at 5/8/17/33/64 tokens, o, gate/up stacked, down with 14336
 * columns), a stack whose matrices end inside a 128-row block (1040 + 272 + 48), 1000 rows
 * (a partial last block), 384 columns (3 k steps), groups of 32 / 64 / 128, bf16 / f16 / f32
 * scales, a split cap (RAPID_CUDA_Q4WG_SPLIT=3), and RAPID_CUDA_Q4WG=0 (qmm2_kernel) as a
 * control. Each against a double-precision host reference on the weights dequantized as the
 * kernels round them (bf16 scales: q s + b rounded once to bf16, the bf16 fma; f16 / f32
 * scales: the f32 fma, then rounded to bf16) and x rounded to bf16: only the f32 summation
 * order differs (tolerance 2e-3 on outputs of order 1). Each runs twice and the two results
 * must be equal bit for bit (the split-k sum has a fixed order). A failure prints the first
 * element past the tolerance and the worst one.
 * The weight copies' L2 prefetch: the default (256 bytes), RAPID_CUDA_Q4WG_PF=1 (128) and =0.
 * Timing (`rapid_gpu_check q4wgtime`): RAPID_CUDA_Q4WG=5 (the default prefetch, then
 * RAPID_CUDA_Q4WG_PF=1 and =0) and =0 (qmm2_kernel), per shape and
 * token count (8, 16, 32, 64), the best of 3 passes of 30 back-to-back calls (host wall time,
 * one sync per pass; the x rounding kernel included), as microseconds per call.
 * Threading: single-threaded test program. Errors: a failed check is counted, never fatal.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/half.h"
#include "gpu_check.h"

static uint64_t g_qrng = 0x9e3779b97f4a7c15ull;
static uint32_t q_rnd32(void)
{
    g_qrng ^= g_qrng << 13, g_qrng ^= g_qrng >> 7, g_qrng ^= g_qrng << 17;
    return (uint32_t)(g_qrng >> 16);
}
static float q_frand(void) /* uniform in [-1, 1) */
{
    return (float)(q_rnd32() & 0xffffff) / (float)(1 << 23) - 1.0f;
}

/* A random MLX 4-bit weight on the host: packed words, scales and biases of type sd. */
typedef struct q4m {
    rp_tensor t;
    uint32_t *q;
    void *s, *b;
    long rows, cols;
    int gs;
    rp_dtype sd;
} q4m;

static float q4_sb(const q4m *h, const void *p, size_t i)
{
    if (h->sd == RP_DT_F32)
        return ((const float *)p)[i];
    uint16_t v = ((const uint16_t *)p)[i];
    return h->sd == RP_DT_BF16 ? rp_bf16_to_f32(v) : rp_f16_to_f32(v);
}

static void q4_sb_set(rp_dtype sd, void *p, size_t i, float v)
{
    if (sd == RP_DT_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = sd == RP_DT_BF16 ? rp_f32_to_bf16(v) : rp_f32_to_f16(v);
}

static int q4m_make(q4m *h, int gs, rp_dtype sd, long rows, long cols)
{
    size_t nw = (size_t)rows * (size_t)cols / 8, ng = (size_t)rows * (size_t)(cols / gs);
    size_t es = sd == RP_DT_F32 ? 4 : 2;
    h->q = rp_alloc(4 * nw);
    h->s = rp_alloc(es * ng);
    h->b = rp_alloc(es * ng);
    h->rows = rows, h->cols = cols, h->gs = gs, h->sd = sd;
    if (!h->q || !h->s || !h->b)
        return -1;
    for (size_t i = 0; i < nw; i++)
        h->q[i] = q_rnd32();
    for (size_t g = 0; g < ng; g++) { /* weights of about +-0.03, as the 8B model's */
        float s = (0.04f + 0.02f * q_frand()) / 15.0f;
        q4_sb_set(sd, h->s, g, s);
        q4_sb_set(sd, h->b, g, -7.5f * s + 0.005f * q_frand());
    }
    h->t = (rp_tensor){.dtype = RP_DT_MLX4,
                       .n_dims = 2,
                       .shape = {rows, cols},
                       .data = h->q,
                       .n_bytes = 4 * nw,
                       .scales = h->s,
                       .biases = h->b,
                       .scale_dtype = sd,
                       .group_size = gs};
    return 0;
}

static void q4m_free(q4m *h)
{
    rp_free(h->q);
    rp_free(h->s);
    rp_free(h->b);
}

/* v rounded to bf16 (to nearest, ties to even) from double precision: one rounding */
static double bf16_of_d(double v)
{
    if (v == 0.0)
        return 0.0;
    int e;
    double m = frexp(v, &e); /* v = m 2^e, 0.5 <= |m| < 1: 8 significant bits kept */
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

/* element c of row r dequantized as the kernels round it */
static double q4_deq(const q4m *h, long r, long c)
{
    uint32_t w = h->q[(size_t)r * (size_t)(h->cols / 8) + (size_t)(c / 8)];
    unsigned q = (w >> (4 * (c % 8))) & 15u;
    size_t g = (size_t)r * (size_t)(h->cols / h->gs) + (size_t)(c / h->gs);
    float s = q4_sb(h, h->s, g), b = q4_sb(h, h->b, g);
    if (h->sd == RP_DT_BF16) /* the bf16 fma: q s + b exact, rounded once */
        return bf16_of_d((double)q * s + b);
    return rp_bf16_to_f32(rp_f32_to_bf16(fmaf((float)q, s, b)));
}

/* the rows the reference computes: both ends, every 61st, and the edges of every 64- and
 * 128-row block (the kernels' tiles) */
static int q4_row_sampled(long r, long rows)
{
    long m = r % 64;
    return r < 20 || r >= rows - 20 || r % 61 == 0 || m < 2 || m >= 62 || (m >= 14 && m < 18);
}

/* y = x W^T for n_mat stacked random MLX 4-bit matrices (group gs, scales sd) over n tokens,
 * run twice (bit-identical), against the double-precision reference (tolerance 2e-3). */
static void q4_check(rp_backend *be, const char *tag, int gs, rp_dtype sd, int n_mat,
                     const long *rows, long cols, int n)
{
    rp_err err = {0};
    q4m h[3];
    memset(h, 0, sizeof h);
    rp_tensor wd[3], xt, xd;
    float *x = rp_alloc(sizeof(float) * (size_t)n * cols), *y[3] = {0}, *y2[3] = {0};
    float *yd[3] = {0}, *yd2[3] = {0};
    double *wrow = rp_alloc(sizeof(double) * (size_t)cols);
    double *xr = rp_alloc(sizeof(double) * (size_t)n * cols);
    int ok = x && wrow && xr;
    for (long i = 0; ok && i < (long)n * cols; i++) {
        x[i] = q_frand();
        xr[i] = rp_bf16_to_f32(rp_f32_to_bf16(x[i])); /* x as the kernels round it */
    }
    xt = (rp_tensor){.dtype = RP_DT_F32,
                     .n_dims = 2,
                     .shape = {n, cols},
                     .data = x,
                     .n_bytes = sizeof(float) * (size_t)n * cols};
    ok = ok && rp_backend_weight(be, &xt, &xd, &err) == RP_OK;
    for (int m = 0; m < n_mat && ok; m++) {
        size_t yb = sizeof(float) * (size_t)n * rows[m];
        ok = q4m_make(&h[m], gs, sd, rows[m], cols) == 0 &&
             rp_backend_weight(be, &h[m].t, &wd[m], &err) == RP_OK;
        yd[m] = ok ? rp_backend_buf_alloc(be, yb, 0) : NULL;
        yd2[m] = ok ? rp_backend_buf_alloc(be, yb, 0) : NULL;
        y[m] = rp_alloc(yb);
        y2[m] = rp_alloc(yb);
        ok = ok && yd[m] && yd2[m] && y[m] && y2[m];
    }
    if (!ok)
        printf("      setup: %s\n", err.msg);
    double worst = INFINITY;
    long bad_m = -1, bad_r = 0, bad_t = 0, diff = 0;
    double bad_v = 0, bad_ref = 0;
    if (ok) {
        const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
        if (n_mat == 1) {
            rp_op_matmul(be, &wd[0], xd.data, n, yd[0]);
            rp_op_matmul(be, &wd[0], xd.data, n, yd2[0]);
        } else {
            rp_op_matmul_n(be, n_mat, wp, xd.data, n, yd);
            rp_op_matmul_n(be, n_mat, wp, xd.data, n, yd2);
        }
        worst = 0;
        for (int m = 0; m < n_mat; m++) {
            size_t yb = sizeof(float) * (size_t)n * rows[m];
            rp_backend_to_host(be, y[m], yd[m], yb);
            rp_backend_to_host(be, y2[m], yd2[m], yb);
            for (long i = 0; i < (long)n * rows[m]; i++)
                diff += memcmp(&y[m][i], &y2[m][i], sizeof(float)) != 0;
            for (long r = 0; r < rows[m]; r++) {
                if (!q4_row_sampled(r, rows[m]))
                    continue;
                for (long c = 0; c < cols; c++)
                    wrow[c] = q4_deq(&h[m], r, c);
                for (int t = 0; t < n; t++) {
                    if (n > 17 && !(t < 3 || t >= n - 3 || t == n / 2 || t % 8 == 7))
                        continue;
                    const double *xt_ = xr + (long)t * cols;
                    double ref = 0;
                    for (long c = 0; c < cols; c++)
                        ref += wrow[c] * xt_[c];
                    double got = y[m][(long)t * rows[m] + r], dd = fabs(ref - got);
                    if ((dd > 2e-3 || isnan(dd)) && bad_m < 0)
                        bad_m = m, bad_r = r, bad_t = t, bad_v = got, bad_ref = ref;
                    worst = dd > worst || isnan(dd) ? dd : worst;
                }
            }
        }
    }
    char what[112];
    snprintf(what, sizeof what, "%s g%d %s %d x %ldx%ld n=%d", tag, gs, rp_dtype_name(sd), n_mat,
             rows[0], cols, n);
    gpu_check_report(ok && worst <= 2e-3, "q4wg", what, worst, 2e-3);
    if (bad_m >= 0)
        printf("      first bad: matrix %ld row %ld token %ld: %.6g, reference %.6g\n", bad_m,
               bad_r, bad_t, bad_v, bad_ref);
    snprintf(what, sizeof what, "%s g%d %s %d x %ldx%ld n=%d twice", tag, gs, rp_dtype_name(sd),
             n_mat, rows[0], cols, n);
    gpu_check_report(ok && diff == 0, "q4wg", what, (double)diff, 0);
    for (int m = 0; m < n_mat; m++) {
        q4m_free(&h[m]);
        rp_free(y[m]);
        rp_free(y2[m]);
        if (yd[m])
            rp_backend_buf_free(be, yd[m]);
        if (yd2[m])
            rp_backend_buf_free(be, yd2[m]);
    }
    rp_free(x);
    rp_free(wrow);
    rp_free(xr);
}

/* A CUDA backend with var = val; the variable stays set until q4_done (the MLX kernels read
 * their knobs at their first call), then restored. */
static char g_keep[64];
static int g_had;
static rp_backend *q4_backend(const char *var, const char *val)
{
    const char *old = getenv(var);
    g_had = old != NULL;
    if (old)
        snprintf(g_keep, sizeof g_keep, "%s", old);
    setenv(var, val, 1);
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.5, &be, &err)) {
        gpu_check_report(0, "cuda backend", var, 0, 0);
        be = NULL;
    }
    return be;
}

static void q4_done(rp_backend *be, const char *var)
{
    if (be)
        rp_backend_free(be);
    if (g_had)
        setenv(var, g_keep, 1);
    else
        unsetenv(var);
}

void gpu_q4wg_checks(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               odd3[3] = {1040, 272, 48}, r1000[1] = {1000}, r272[1] = {272};
    rp_backend *be = q4_backend("RAPID_CUDA_Q4WG", "5");
    if (be) {
        const char *d = rp_backend_describe(be);
        printf("q4wg checks on %s: %s\n", d,
               strstr(d, "sm_90") ? "the wgmma kernel serves 5..64 tokens"
                                  : "not sm_90, so qmm2_kernel serves them (no wgmma code)");
        const int ns[] = {5, 8, 17, 33, 64};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            q4_check(be, "q4wg", 64, RP_DT_BF16, 3, qkv, 4096, ns[i]);
        q4_check(be, "q4wg", 64, RP_DT_BF16, 1, o, 4096, 16);
        q4_check(be, "q4wg", 64, RP_DT_BF16, 1, o, 4096, 64);
        q4_check(be, "q4wg", 64, RP_DT_BF16, 2, gu, 4096, 64);
        q4_check(be, "q4wg", 64, RP_DT_BF16, 2, gu, 4096, 9);
        q4_check(be, "q4wg", 64, RP_DT_BF16, 1, o, 14336, 17); /* down */
        q4_check(be, "q4wg", 64, RP_DT_BF16, 1, o, 14336, 64);
        const int n3[] = {5, 33, 64};
        for (size_t i = 0; i < sizeof n3 / sizeof *n3; i++)
            q4_check(be, "q4wg", 64, RP_DT_BF16, 3, odd3, 4096, n3[i]);
        q4_check(be, "q4wg", 64, RP_DT_BF16, 1, r1000, 4096, 33); /* partial last block */
        q4_check(be, "q4wg", 64, RP_DT_BF16, 1, r272, 384, 12);   /* 3 k steps */
        q4_check(be, "q4wg", 32, RP_DT_BF16, 1, o, 4096, 17);
        q4_check(be, "q4wg", 128, RP_DT_BF16, 1, o, 4096, 40);
        q4_check(be, "q4wg", 64, RP_DT_F16, 3, qkv, 4096, 48);
        q4_check(be, "q4wg", 128, RP_DT_F16, 1, o, 4096, 33);
        q4_check(be, "q4wg", 32, RP_DT_F16, 1, r1000, 4096, 24);
        q4_check(be, "q4wg", 32, RP_DT_F32, 1, r1000, 4096, 40);
        q4_check(be, "q4wg", 64, RP_DT_F32, 1, o, 4096, 64);
        q4_check(be, "q4wg", 128, RP_DT_F32, 3, odd3, 4096, 7);
    }
    q4_done(be, "RAPID_CUDA_Q4WG");
    be = q4_backend("RAPID_CUDA_Q4WG_SPLIT", "3"); /* the split capped at 3 */
    if (be) {
        q4_check(be, "q4wg split<=3", 64, RP_DT_BF16, 3, qkv, 4096, 64);
        q4_check(be, "q4wg split<=3", 64, RP_DT_BF16, 1, o, 14336, 17);
        q4_check(be, "q4wg split<=3", 64, RP_DT_BF16, 3, odd3, 4096, 40);
    }
    q4_done(be, "RAPID_CUDA_Q4WG_SPLIT");
    const char *pfs[2] = {"1", "0"}; /* the other L2 prefetch sizes (the same bytes arrive) */
    for (int k = 0; k < 2; k++) {
        char tag[32];
        snprintf(tag, sizeof tag, "q4wg pf=%s", pfs[k]);
        be = q4_backend("RAPID_CUDA_Q4WG_PF", pfs[k]);
        if (be) {
            q4_check(be, tag, 64, RP_DT_BF16, 3, qkv, 4096, 64);
            q4_check(be, tag, 64, RP_DT_BF16, 1, o, 14336, 17);
        }
        q4_done(be, "RAPID_CUDA_Q4WG_PF");
    }
    be = q4_backend("RAPID_CUDA_Q4WG", "0"); /* control: qmm2_kernel */
    if (be) {
        q4_check(be, "q4wg off (qmm2)", 64, RP_DT_BF16, 3, qkv, 4096, 64);
        q4_check(be, "q4wg off (qmm2)", 64, RP_DT_BF16, 3, odd3, 4096, 33);
        q4_check(be, "q4wg off (qmm2)", 32, RP_DT_F32, 1, r1000, 4096, 40);
    }
    q4_done(be, "RAPID_CUDA_Q4WG");
}

static double q4_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { QT_SHAPES = 4, QT_NS = 4 };

/* microseconds per n-token GEMM over n_mat stacked MLX 4-bit matrices (g64, bf16 scales),
 * for each n of ns */
static void q4_times(rp_backend *be, int n_mat, const long *rows, long cols, const int *ns,
                     double *us)
{
    rp_err err = {0};
    q4m h[3];
    memset(h, 0, sizeof h);
    rp_tensor wd[3];
    float *yd[3] = {0}, *xd = rp_backend_buf_alloc(be, sizeof(float) * 64 * (size_t)cols, 0);
    float *x = rp_alloc(sizeof(float) * 64 * (size_t)cols);
    int ok = xd && x;
    for (long i = 0; ok && i < 64 * cols; i++)
        x[i] = q_frand();
    for (int m = 0; m < n_mat && ok; m++) {
        ok = q4m_make(&h[m], 64, RP_DT_BF16, rows[m], cols) == 0 &&
             rp_backend_weight(be, &h[m].t, &wd[m], &err) == RP_OK;
        q4m_free(&h[m]);
        yd[m] = ok ? rp_backend_buf_alloc(be, sizeof(float) * 64 * (size_t)rows[m], 0) : NULL;
        ok = ok && yd[m];
    }
    if (ok)
        rp_backend_from_host(be, xd, x, sizeof(float) * 64 * (size_t)cols);
    const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
    for (int j = 0; j < QT_NS; j++) {
        double best = INFINITY;
        for (int rep = 0; ok && rep < 4; rep++) { /* pass 0 warms up (first-use set-ups) */
            float sink;
            double t0 = q4_now();
            for (int i = 0; i < 30; i++) {
                if (n_mat == 1)
                    rp_op_matmul(be, &wd[0], xd, ns[j], yd[0]);
                else
                    rp_op_matmul_n(be, n_mat, wp, xd, ns[j], yd);
            }
            rp_backend_to_host(be, &sink, yd[0], sizeof sink);
            double t = (q4_now() - t0) / 30.0 * 1e6;
            best = rep && t < best ? t : best;
        }
        us[j] = ok ? best : NAN;
    }
    for (int m = 0; m < n_mat; m++)
        if (yd[m])
            rp_backend_buf_free(be, yd[m]);
    if (xd)
        rp_backend_buf_free(be, xd);
    rp_free(x);
}

void gpu_q4wg_timing(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096};
    const int ns[QT_NS] = {8, 16, 32, 64};
    const char *names[QT_SHAPES] = {"qkv", "o", "gate/up", "down"};
    /* the default (256-byte L2 prefetch of the weights), 128 bytes, none, and qmm2_kernel */
    const char *var[4] = {"RAPID_CUDA_Q4WG", "RAPID_CUDA_Q4WG_PF", "RAPID_CUDA_Q4WG_PF",
                          "RAPID_CUDA_Q4WG"},
               *val[4] = {"5", "1", "0", "0"},
               *label[4] = {"Q4WG=5", "PF=1", "PF=0", "Q4WG=0 (qmm2)"};
    for (int k = 0; k < 4; k++) {
        rp_backend *be = q4_backend(var[k], val[k]);
        if (!be) {
            q4_done(be, var[k]);
            return;
        }
        double u[QT_SHAPES][QT_NS];
        q4_times(be, 3, qkv, 4096, ns, u[0]);
        q4_times(be, 1, o, 4096, ns, u[1]);
        q4_times(be, 2, gu, 4096, ns, u[2]);
        q4_times(be, 1, o, 14336, ns, u[3]);
        for (int j = 0; j < QT_NS; j++) {
            printf("q4wgtime %-14s n=%2d us/call:", label[k], ns[j]);
            for (int s = 0; s < QT_SHAPES; s++)
                printf("  %s %.1f", names[s], u[s][j]);
            printf("\n");
        }
        fflush(stdout);
        q4_done(be, var[k]);
    }
}
