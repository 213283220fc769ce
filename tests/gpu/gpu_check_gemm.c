/* tests/gpu/gpu_check_gemm.c - rapid_gpu_check's checks of the batched-decode / prefill GEMM
 * paths added for issue #12's 64-stream and 4-bit prefill targets (cuda_kernels.cu's staged
 * skinny GEMM tc2_kernel, cuda_quant.cu's dequantize-then-bf16-GEMM path).
 *
 * Staged GEMM: y = W x for 16-bit weights (bf16 and f16) at the 8B shapes and awkward ones
 * (rows not a multiple of the 128-row block, 1 and 3 stacked matrices, 5..64 tokens, split
 * and unsplit grids) against a double-precision host reference on x rounded to the weight's
 * type as the kernel does (then only the f32 summation order differs: tolerance 2e-3 on
 * outputs of order 1, as the old kernel's check). Run on a backend made with
 * RAPID_CUDA_TC2=5 (every 5..64-token GEMM through the staged kernel); a few shapes also
 * with RAPID_CUDA_TC2=0 (the old kernel) as a control; both with RAPID_CUDA_WG=0 (else the
 * wgmma kernel, checked in gpu_check_wgmma.c, would serve them on sm_90).
 * Staged 4-bit kernel (qmm2_kernel): a backend with RAPID_CUDA_QMM2=5, 5..64 tokens, the 8B
 * shapes, rows not a multiple of 16 or of its 256-row block, group sizes 32/64/128,
 * bf16/f16/f32 scales (gpu_qmm_check, tolerance 2e-3); RAPID_CUDA_QMM2=0 as a control.
 * Dequantize path: MLX 4/8-bit weights at >= RAPID_CUDA_QDQ tokens (default 128; a backend
 * with RAPID_CUDA_QDQ=5 for 17 / 64 tokens), through gpu_qmm_check (gpu_check_quant.c:
 * reference on bf16-dequantized weights and bf16 x, tolerance 2e-3), incl. a 65536-row head
 * (two 256 MB chunks of rows), rows not a multiple of 16, group sizes 32/64/128 and
 * bf16/f16/f32 scales.
 * Threading: single-threaded test program. Errors: a failed check is counted, never fatal.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/half.h"
#include "gpu_check.h"

static uint64_t g_rng = 0x6a09e667f3bcc909ull;
static float grand(void) /* uniform in [-1, 1) */
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static uint16_t to16(rp_dtype dt, float v)
{
    return dt == RP_DT_BF16 ? rp_f32_to_bf16(v) : rp_f32_to_f16(v);
}

static float from16(rp_dtype dt, uint16_t h)
{
    return dt == RP_DT_BF16 ? rp_bf16_to_f32(h) : rp_f16_to_f32(h);
}

static int sampled(long r, long rows)
{
    return r < 40 || r >= rows - 40 || r % 61 == 0 || (r % 128 >= 120);
}

/* n_mat 16-bit matrices stacked over n tokens, against the double-precision reference. */
static void tc2_check(rp_backend *be, const char *tag, rp_dtype dt, int n_mat, const long *rows,
                      long cols, int n)
{
    rp_err err = {0};
    rp_tensor w[3], wd[3], xt, xd;
    uint16_t *wh[3] = {0};
    float *x = rp_alloc(sizeof(float) * (size_t)n * cols), *y[3] = {0}, *yd[3] = {0};
    for (long i = 0; i < (long)n * cols; i++)
        x[i] = grand();
    xt = (rp_tensor){.dtype = RP_DT_F32, .n_dims = 2, .shape = {n, cols}, .data = x,
                     .n_bytes = sizeof(float) * (size_t)n * cols};
    int ok = rp_backend_weight(be, &xt, &xd, &err) == RP_OK;
    for (int m = 0; m < n_mat && ok; m++) {
        wh[m] = rp_alloc(sizeof(uint16_t) * (size_t)rows[m] * cols);
        for (long i = 0; i < rows[m] * cols; i++)
            wh[m][i] = to16(dt, grand() * 0.05f);
        w[m] = (rp_tensor){.dtype = dt, .n_dims = 2, .shape = {rows[m], cols}, .data = wh[m],
                           .n_bytes = sizeof(uint16_t) * (size_t)rows[m] * cols};
        ok = rp_backend_weight(be, &w[m], &wd[m], &err) == RP_OK;
        yd[m] = rp_backend_buf_alloc(be, sizeof(float) * (size_t)n * rows[m], 0);
        y[m] = rp_alloc(sizeof(float) * (size_t)n * rows[m]);
        ok = ok && yd[m] && y[m];
    }
    double worst = INFINITY;
    if (ok) {
        const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
        for (int rep = 0; rep < 2; rep++) {
            if (n_mat == 1)
                rp_op_matmul(be, &wd[0], xd.data, n, yd[0]);
            else
                rp_op_matmul_n(be, n_mat, wp, xd.data, n, yd);
        }
        float *xr = rp_alloc(sizeof(float) * (size_t)cols);
        worst = 0;
        for (int m = 0; m < n_mat; m++) {
            rp_backend_to_host(be, y[m], yd[m], sizeof(float) * (size_t)n * rows[m]);
            for (int t = 0; t < n; t++) {
                for (long k = 0; k < cols; k++) /* the kernel rounds x to the weight's type */
                    xr[k] = from16(dt, to16(dt, x[(long)t * cols + k]));
                for (long r = 0; r < rows[m]; r++) {
                    if (!sampled(r, rows[m]))
                        continue;
                    double ref = 0;
                    for (long k = 0; k < cols; k++)
                        ref += (double)from16(dt, wh[m][r * cols + k]) * xr[k];
                    double d = fabs(ref - y[m][(long)t * rows[m] + r]);
                    worst = d > worst || isnan(d) ? d : worst;
                }
            }
        }
        rp_free(xr);
    } else {
        printf("      setup: %s\n", err.msg);
    }
    char what[96];
    snprintf(what, sizeof what, "%s %s %d x %ldx%ld n=%d", tag, rp_dtype_name(dt), n_mat,
             rows[0], cols, n);
    gpu_check_report(worst <= 2e-3, "gemm", what, worst, 2e-3);
    for (int m = 0; m < n_mat; m++) {
        rp_free(wh[m]);
        rp_free(y[m]);
        rp_backend_buf_free(be, yd[m]);
    }
    rp_free(x);
}

/* A CUDA backend made with env var `var` set to `val` (the knobs are read at creation). */
static rp_backend *backend_with(const char *var, const char *val)
{
    const char *old = getenv(var);
    char keep[64] = "";
    if (old)
        snprintf(keep, sizeof keep, "%s", old);
    setenv(var, val, 1);
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.5, &be, &err)) {
        gpu_check_report(0, "cuda backend", var, 0, 0);
        be = NULL;
    }
    if (old)
        setenv(var, keep, 1);
    else
        unsetenv(var);
    return be;
}

void gpu_gemm_kernel_checks(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               down[1] = {4096}, head[1] = {65536}, odd3[3] = {1040, 272, 48}, odd1[1] = {1040},
               r16[1] = {16}, r4112[1] = {4112};
    /* tc2_kernel itself: the wgmma kernel (sm_90; gpu_check_wgmma.c) would take these */
    const char *wg = getenv("RAPID_CUDA_WG");
    char wg_keep[64] = "";
    if (wg)
        snprintf(wg_keep, sizeof wg_keep, "%s", wg);
    setenv("RAPID_CUDA_WG", "0", 1);
    rp_backend *be = backend_with("RAPID_CUDA_TC2", "5");
    if (be) {
        const int ns[] = {5, 9, 17, 33, 64};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            tc2_check(be, "tc2", RP_DT_BF16, 3, qkv, 4096, ns[i]); /* split over 5 */
            tc2_check(be, "tc2", RP_DT_BF16, 3, odd3, 4096, ns[i]); /* 11 row blocks, 8 splits */
        }
        tc2_check(be, "tc2", RP_DT_BF16, 1, o, 4096, 40);
        tc2_check(be, "tc2", RP_DT_BF16, 1, o, 4096, 64);
        tc2_check(be, "tc2", RP_DT_BF16, 2, gu, 4096, 64); /* 224 blocks: no split */
        tc2_check(be, "tc2", RP_DT_BF16, 2, gu, 4096, 23);
        tc2_check(be, "tc2", RP_DT_BF16, 1, down, 14336, 64);
        tc2_check(be, "tc2", RP_DT_BF16, 1, down, 14336, 17);
        tc2_check(be, "tc2", RP_DT_BF16, 1, head, 4096, 64);
        tc2_check(be, "tc2", RP_DT_BF16, 1, r4112, 4096, 64); /* last block: 16 rows */
        tc2_check(be, "tc2", RP_DT_BF16, 1, r16, 256, 33);    /* one block, one step */
        tc2_check(be, "tc2", RP_DT_BF16, 1, odd1, 320, 12);
        tc2_check(be, "tc2", RP_DT_F16, 1, odd1, 4096, 33);
        tc2_check(be, "tc2", RP_DT_F16, 3, qkv, 4096, 64);
        rp_backend_free(be);
    }
    be = backend_with("RAPID_CUDA_TC2", "0");
    if (be) {
        tc2_check(be, "tc (old)", RP_DT_BF16, 3, qkv, 4096, 64);
        tc2_check(be, "tc (old)", RP_DT_BF16, 3, odd3, 4096, 33);
        rp_backend_free(be);
    }
    if (wg)
        setenv("RAPID_CUDA_WG", wg_keep, 1);
    else
        unsetenv("RAPID_CUDA_WG");
    be = backend_with("RAPID_CUDA_QMM2", "5"); /* the staged 4-bit kernel from 5 tokens */
    if (be) {
        const long odd[1] = {1000};
        const int ns[] = {5, 12, 17, 33, 64};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, ns[i]);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, o, 4096, 64);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 2, gu, 4096, 64);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, down, 14336, 64);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, down, 14336, 20);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, head, 4096, 64);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, odd, 4096, 33);
        gpu_qmm_check(be, 4, 32, RP_DT_BF16, 1, o, 4096, 17);
        gpu_qmm_check(be, 4, 128, RP_DT_BF16, 1, o, 4096, 17);
        gpu_qmm_check(be, 4, 32, RP_DT_F32, 1, odd, 4096, 40);
        gpu_qmm_check(be, 4, 64, RP_DT_F32, 1, o, 4096, 64);
        gpu_qmm_check(be, 4, 128, RP_DT_F16, 1, o, 4096, 33);
        gpu_qmm_check(be, 4, 64, RP_DT_F16, 3, qkv, 4096, 48);
        rp_backend_free(be);
    }
    be = backend_with("RAPID_CUDA_QMM2", "0"); /* control: the register-fed kernel */
    if (be) {
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 64);
        rp_backend_free(be);
    }
    be = backend_with("RAPID_CUDA_QDQ", "5");
    if (be) {
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 17);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 64);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, down, 14336, 64);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 2, gu, 4096, 33);
        rp_backend_free(be);
    }
    be = backend_with("RAPID_CUDA_QDQ", "128"); /* the default, stated */
    if (be) {
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 512);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 2, gu, 4096, 128);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, down, 14336, 130);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, head, 4096, 128); /* two chunks of rows */
        const long odd[1] = {1000};
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, odd, 4096, 129);
        gpu_qmm_check(be, 4, 32, RP_DT_BF16, 1, o, 4096, 200);
        gpu_qmm_check(be, 4, 128, RP_DT_BF16, 1, o, 4096, 200);
        gpu_qmm_check(be, 4, 64, RP_DT_F32, 1, o, 4096, 256);
        gpu_qmm_check(be, 4, 64, RP_DT_F16, 1, o, 4096, 256);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 3, qkv, 4096, 256);
        gpu_qmm_check(be, 8, 128, RP_DT_F16, 1, odd, 4096, 128);
        rp_backend_free(be);
    }
}
