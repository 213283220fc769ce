/* tests/gpu/gpu_check_mv1.c - the one-token 16-bit matvec with x in shared memory and its
 * fusions (mv1_kernel in cuda_kernels.cu), part of rapid_gpu_check.
 *
 * Checks, against double-precision host references on the same bf16 weights: a one-token
 * rmsnorm (with and without its weight, with gemma's 1 + w) followed by a matvec of its
 * output and a residual add of the matvec's result (the norm taken into the matvec's x, the
 * add into its epilogue), at the 8B shapes (q/k/v stacked, o, gate/up, the head) and odd
 * ones; silu_mul followed by the down projection and its residual add; the norm's output,
 * the matvec's output and the added residual are all compared (tolerance MV1_TOL = 1e-4 on
 * y and the residual, 1e-5 on the normalised x: f32 sums of up to 14336 products).
 * `rapid_gpu_check mvtime` times the one-token matvecs at the 8B shapes (50 calls each,
 * wall time over the queued calls) with the default kernel (U by shape), RAPID_CUDA_MV1=4,
 * =8, the old matvec_kernel (RAPID_CUDA_MV1=0) and the full grid (RAPID_CUDA_MV1_GRID=0),
 * and prints the read rate of each.
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

#define MV1_TOL 1e-4
#define MV1_XTOL 1e-5

static uint64_t m_rng = 0x243f6a8885a308d3ull;
static float mrand(void) /* uniform in [-1, 1) */
{
    m_rng ^= m_rng << 13;
    m_rng ^= m_rng >> 7;
    m_rng ^= m_rng << 17;
    return (float)((double)(m_rng >> 11) / 4503599627370496.0 - 1.0);
}

static double worse(double w, double d) { return d != d ? INFINITY : d > w ? d : w; }

/* mode 0: rmsnorm(h) (weight: 0 none, 1 w, 2 1 + w) -> matvec over n_mat stacked matrices
 * -> (n_mat == 1) res += y; mode 1: silu(g) * u -> matvec -> res += y. */
static void fused_check(rp_backend *be, int mode, int wmode, int n_mat, const long *rows,
                        long cols)
{
    rp_err err = {0};
    long tot = 0;
    for (int m = 0; m < n_mat; m++)
        tot += rows[m];
    float *h = rp_alloc(sizeof(float) * (size_t)cols), *h2 = rp_alloc(sizeof(float) * (size_t)cols);
    float *nw = rp_alloc(sizeof(float) * (size_t)cols), *xr = rp_alloc(sizeof(float) * (size_t)cols);
    double *xd = rp_alloc(sizeof(double) * (size_t)cols);
    float *res = rp_alloc(sizeof(float) * (size_t)rows[0]), *resg = rp_alloc(sizeof(float) * (size_t)rows[0]);
    float *yh = rp_alloc(sizeof(float) * (size_t)tot);
    uint16_t *wh = rp_alloc(sizeof(uint16_t) * (size_t)tot * cols);
    int ok = h && h2 && nw && xr && xd && res && resg && yh && wh;
    rp_tensor w[3], wd[3], nwt, nwd;
    float *hd = NULL, *h2d = NULL, *xo = NULL, *resd = NULL, *yd[3] = {0};
    for (long i = 0; ok && i < cols; i++) {
        h[i] = mode == 0 ? mrand() * 2.0f : mrand() * 4.0f;
        h2[i] = mrand() * 2.0f;
        nw[i] = 1.0f + 0.5f * mrand();
    }
    for (long i = 0; ok && i < rows[0]; i++)
        res[i] = mrand();
    for (long i = 0; ok && i < tot * cols; i++)
        wh[i] = rp_f32_to_bf16(mrand() * 0.05f);
    long off = 0;
    for (int m = 0; m < n_mat && ok; m++) {
        w[m] = (rp_tensor){.dtype = RP_DT_BF16, .n_dims = 2, .shape = {rows[m], cols},
                           .data = wh + off * cols,
                           .n_bytes = sizeof(uint16_t) * (size_t)rows[m] * cols};
        ok = rp_backend_weight(be, &w[m], &wd[m], &err) == RP_OK;
        yd[m] = rp_backend_buf_alloc(be, sizeof(float) * (size_t)rows[m], 0);
        ok = ok && yd[m];
        off += rows[m];
    }
    nwt = (rp_tensor){.dtype = RP_DT_F32, .n_dims = 1, .shape = {cols}, .data = nw,
                      .n_bytes = sizeof(float) * (size_t)cols};
    ok = ok && rp_backend_weight(be, &nwt, &nwd, &err) == RP_OK;
    if (ok) {
        hd = rp_backend_buf_alloc(be, sizeof(float) * (size_t)cols, 0);
        h2d = rp_backend_buf_alloc(be, sizeof(float) * (size_t)cols, 0);
        xo = rp_backend_buf_alloc(be, sizeof(float) * (size_t)cols, 0);
        resd = rp_backend_buf_alloc(be, sizeof(float) * (size_t)rows[0], 0);
        ok = hd && h2d && xo && resd;
    }
    double wy = INFINITY, wx = INFINITY, wr = INFINITY;
    if (ok) {
        rp_backend_from_host(be, hd, h, sizeof(float) * (size_t)cols);
        rp_backend_from_host(be, h2d, h2, sizeof(float) * (size_t)cols);
        rp_backend_from_host(be, resd, res, sizeof(float) * (size_t)rows[0]);
        if (mode == 0)
            rp_op_rmsnorm(be, xo, hd, wmode ? &nwd : NULL, 1, (int)cols, 1e-5f, wmode == 2);
        else
            rp_op_silu_mul(be, xo, hd, h2d, cols);
        const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
        if (n_mat == 1)
            rp_op_matmul(be, &wd[0], xo, 1, yd[0]);
        else
            rp_op_matmul_n(be, n_mat, wp, xo, 1, yd);
        if (n_mat == 1)
            rp_op_add(be, resd, yd[0], rows[0]);
        rp_backend_to_host(be, xr, xo, sizeof(float) * (size_t)cols);
        rp_backend_to_host(be, resg, resd, sizeof(float) * (size_t)rows[0]);
        off = 0;
        for (int m = 0; m < n_mat; m++) {
            rp_backend_to_host(be, yh + off, yd[m], sizeof(float) * (size_t)rows[m]);
            off += rows[m];
        }
        double ss = 0;
        for (long i = 0; i < cols; i++)
            ss += (double)h[i] * h[i];
        double inv = 1.0 / sqrt(ss / (double)cols + 1e-5);
        wx = 0;
        for (long i = 0; i < cols; i++) {
            double v;
            if (mode == 0)
                v = h[i] * inv * (wmode == 0 ? 1.0 : wmode == 1 ? nw[i] : 1.0 + nw[i]);
            else
                v = h[i] / (1.0 + exp(-(double)h[i])) * h2[i];
            xd[i] = v;
            wx = worse(wx, fabs(v - xr[i]));
        }
        wy = wr = 0;
        for (long r = 0; r < tot; r += tot <= 16384 || r % 997 < 5 ? 1 : 61) {
            double ref = 0;
            for (long k = 0; k < cols; k++)
                ref += (double)rp_bf16_to_f32(wh[r * cols + k]) * xd[k];
            wy = worse(wy, fabs(ref - yh[r]));
            if (n_mat == 1)
                wr = worse(wr, fabs(res[r] + ref - resg[r]));
        }
    }
    char what[128];
    int n = snprintf(what, sizeof what, "%s%s %ld", mode == 0 ? "rmsnorm" : "silu_mul",
                     mode == 0 ? (wmode == 0 ? " (no w)" : wmode == 1 ? "" : " (1+w)") : "",
                     rows[0]);
    for (int m = 1; m < n_mat; m++)
        n += snprintf(what + n, sizeof what - (size_t)n, "+%ld", rows[m]);
    n += snprintf(what + n, sizeof what - (size_t)n, " x %ld", cols);
    char w2[160];
    snprintf(w2, sizeof w2, "%s: x", what);
    gpu_check_report(wx <= MV1_XTOL, "mv1 fused", w2, wx, MV1_XTOL);
    snprintf(w2, sizeof w2, "%s: y", what);
    gpu_check_report(wy <= MV1_TOL, "mv1 fused", w2, wy, MV1_TOL);
    if (n_mat == 1) {
        snprintf(w2, sizeof w2, "%s: residual", what);
        gpu_check_report(wr <= MV1_TOL, "mv1 fused", w2, wr, MV1_TOL);
    }
    for (int m = 0; m < n_mat; m++)
        rp_backend_buf_free(be, yd[m]);
    rp_backend_buf_free(be, hd);
    rp_backend_buf_free(be, h2d);
    rp_backend_buf_free(be, xo);
    rp_backend_buf_free(be, resd);
    rp_free(h), rp_free(h2), rp_free(nw), rp_free(xr), rp_free(xd), rp_free(res), rp_free(resg);
    rp_free(yh), rp_free(wh);
}

void gpu_mv1_checks(void)
{
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.3, &be, &err)) {
        gpu_check_report(0, "mv1 fused", err.msg, 1, 0);
        return;
    }
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               head[1] = {32000}, odd3[3] = {5, 3, 7}, one[1] = {1}, r3[1] = {3};
    fused_check(be, 0, 1, 3, qkv, 4096);
    fused_check(be, 0, 1, 1, o, 4096);
    fused_check(be, 0, 2, 1, o, 4096);
    fused_check(be, 0, 0, 1, o, 4096);
    fused_check(be, 0, 1, 2, gu, 4096);
    fused_check(be, 0, 1, 1, head, 4096);
    fused_check(be, 1, 0, 1, o, 14336);
    fused_check(be, 0, 1, 3, odd3, 64);
    fused_check(be, 0, 1, 1, one, 1032);
    fused_check(be, 1, 0, 1, r3, 2056);
    fused_check(be, 0, 2, 1, r3, 24);
    rp_backend_free(be);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 50 one-token matvecs over n_mat stacked matrices: GB/s read. */
static double mv_rate(rp_backend *be, int n_mat, const long *rows, long cols)
{
    rp_err err = {0};
    rp_tensor w[3], wd[3];
    float *yd[3] = {0}, *xd = rp_backend_buf_alloc(be, sizeof(float) * (size_t)cols, 0);
    float *x = rp_alloc(sizeof(float) * (size_t)cols);
    int ok = xd && x;
    size_t bytes = 0;
    for (long i = 0; ok && i < cols; i++)
        x[i] = mrand();
    for (int m = 0; m < n_mat && ok; m++) {
        size_t n = (size_t)rows[m] * cols;
        uint16_t *wh = rp_alloc(sizeof(uint16_t) * n);
        ok = wh != NULL;
        for (size_t i = 0; ok && i < n; i++)
            wh[i] = (uint16_t)(0x3c00u + ((i * 2654435761u) >> 24));
        w[m] = (rp_tensor){.dtype = RP_DT_BF16, .n_dims = 2, .shape = {rows[m], cols},
                           .data = wh, .n_bytes = sizeof(uint16_t) * n};
        ok = ok && rp_backend_weight(be, &w[m], &wd[m], &err) == RP_OK;
        rp_free(wh);
        yd[m] = rp_backend_buf_alloc(be, sizeof(float) * (size_t)rows[m], 0);
        ok = ok && yd[m];
        bytes += sizeof(uint16_t) * n;
    }
    double best = 0;
    if (ok) {
        rp_backend_from_host(be, xd, x, sizeof(float) * (size_t)cols);
        const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
        float sink;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            for (int i = 0; i < 50; i++) {
                if (n_mat == 1)
                    rp_op_matmul(be, &wd[0], xd, 1, yd[0]);
                else
                    rp_op_matmul_n(be, n_mat, wp, xd, 1, yd);
            }
            rp_backend_to_host(be, &sink, yd[0], sizeof sink);
            double r = 50.0 * (double)bytes / (now() - t0) / 1e9;
            best = r > best ? r : best;
        }
    }
    for (int m = 0; m < n_mat; m++)
        rp_backend_buf_free(be, yd[m]);
    rp_backend_buf_free(be, xd);
    rp_free(x);
    return best;
}

void gpu_mv1_timing(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               head[1] = {128256};
    const char *knobs[] = {NULL, "4", "8", "0", "grid"};
    for (int k = 0; k < 5; k++) {
        if (knobs[k] && k < 4)
            setenv("RAPID_CUDA_MV1", knobs[k], 1);
        if (k == 4)
            setenv("RAPID_CUDA_MV1_GRID", "0", 1);
        rp_backend *be = NULL;
        rp_err err = {0};
        rp_status rc = rp_backend_new_cuda(0, 0.5, &be, &err);
        unsetenv("RAPID_CUDA_MV1");
        unsetenv("RAPID_CUDA_MV1_GRID");
        if (rc) {
            printf("mvtime: %s\n", err.msg);
            return;
        }
        double a = mv_rate(be, 3, qkv, 4096), b = mv_rate(be, 1, o, 4096),
               c = mv_rate(be, 2, gu, 4096), d = mv_rate(be, 1, o, 14336),
               e = mv_rate(be, 1, head, 4096);
        printf("mvtime %s GB/s: qkv %.0f  o %.0f  gate/up %.0f  down %.0f  head %.0f\n",
               k == 0 ? "default" : k == 1 ? "RAPID_CUDA_MV1=4" : k == 2 ? "RAPID_CUDA_MV1=8"
               : k == 3 ? "RAPID_CUDA_MV1=0" : "RAPID_CUDA_MV1_GRID=0", a, b, c, d, e);
        fflush(stdout);
        rp_backend_free(be);
    }
}
