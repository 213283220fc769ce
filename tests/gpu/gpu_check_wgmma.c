/* tests/gpu/gpu_check_wgmma.c - rapid_gpu_check's checks and timings of the batched-decode
 * skinny GEMM on Hopper's warpgroup MMA (cuda_wgmma.cu, issue #12's 64-stream target).
 *
 * Checks (`rapid_gpu_check wg`, also part of `kernels` and the full run): y = W x for 16-bit
 * weights on a backend with the default knobs (RAPID_CUDA_WG on from 5 tokens on sm_90
 * devices) at the Llama-3-8B shapes (q/k/v stacked, o, gate/up stacked, down with 14336
 * columns, the 128256-row head) at 5/8/9/16/17/33/63/64 tokens, stacks whose matrices end
 * inside a 128-row block (1040 + 272 + 48), rows that leave a partial last block (4112, 1040:
 * 16 rows of the last 64-row half), a single 16-row block, 320 columns (5 k steps), f16
 * weights, and with RAPID_CUDA_WG=0 (tc2_kernel) as a control. Each against a double-precision
 * host reference on x rounded to the weight's type as the kernel does (only the f32
 * summation order differs: tolerance 2e-3 on outputs of order 1, as gpu_check_gemm.c); each
 * runs twice and the two results must be equal bit for bit (the split-k sum has a fixed
 * order). A failure prints its first element past the tolerance (matrix, row, token, value,
 * reference) and the worst one.
 * Other split counts: RAPID_CUDA_WG_SPLIT=3 and =7 (tc2's split rule capped there); blocks
 * of 256 rows (RAPID_CUDA_WG_BM=256) at the 8B shapes and the odd ones.
 * Timing (`rapid_gpu_check wgtime`): per setting (the default; RAPID_CUDA_WG_SPLIT=8, i.e.
 * tc2's split rule; =4; RAPID_CUDA_WG_BM=256; RAPID_CUDA_WG=0, tc2_kernel), shape and token count
 * (8, 16, 32, 64), the best of 3 passes of 30 back-to-back calls (host wall time, one sync
 * per pass; the x rounding kernel included), as GB/s of weights read.
 * Threading: single-threaded test program. Errors: a failed check is counted, never fatal.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "gpu_check.h"

static uint64_t g_wrng = 0x3c6ef372fe94f82bull;
static float wrand(void) /* uniform in [-1, 1) */
{
    g_wrng ^= g_wrng << 13, g_wrng ^= g_wrng >> 7, g_wrng ^= g_wrng << 17;
    return (float)((g_wrng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

void gpu_wg_checks(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               down[1] = {4096}, head[1] = {128256}, odd3[3] = {1040, 272, 48},
               odd1[1] = {1040}, r16[1] = {16}, r4112[1] = {4112};
    rp_backend *be = gpu_backend_with("RAPID_CUDA_WG", NULL);
    if (be) {
        const char *d = rp_backend_describe(be);
        printf("wgmma checks on %s: %s\n", d,
               strstr(d, "sm_90") ? "the wgmma kernel serves 5..64 tokens"
                                  : "not sm_90, so tc2_kernel serves them (no wgmma code)");
        const int ns[] = {5, 8, 9, 16, 17, 33, 63, 64};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            gpu_gemm16_check(be, "wg", RP_DT_BF16, 3, qkv, 4096, ns[i]); /* split over 5 */
        const int n3[] = {5, 17, 64};
        for (size_t i = 0; i < sizeof n3 / sizeof *n3; i++)
            gpu_gemm16_check(be, "wg", RP_DT_BF16, 3, odd3, 4096, n3[i]); /* 11 row blocks, 8 splits */
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, o, 4096, 16);
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, o, 4096, 64);
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 2, gu, 4096, 16); /* 224 blocks: no split */
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 2, gu, 4096, 64);
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, down, 14336, 17);
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, down, 14336, 64);
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, head, 4096, 33);
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, r4112, 4096, 64); /* last block: 16 rows */
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, odd1, 4096, 9);
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, r16, 256, 33); /* one block, one split */
        gpu_gemm16_check(be, "wg", RP_DT_BF16, 1, odd1, 320, 12); /* 5 k steps */
        gpu_gemm16_check(be, "wg", RP_DT_F16, 1, odd1, 4096, 33);
        gpu_gemm16_check(be, "wg", RP_DT_F16, 1, o, 4096, 8);
        gpu_gemm16_check(be, "wg", RP_DT_F16, 3, qkv, 4096, 64);
        rp_backend_free(be);
    }
    /* other split counts (the default picks them by the GPU's cluster occupancy): tc2's
     * rule with at most 3 (q/k/v, o, down: 3 splits, the last one shorter) and 7 */
    be = gpu_backend_with("RAPID_CUDA_WG_SPLIT", "3");
    if (be) {
        gpu_gemm16_check(be, "wg split<=3", RP_DT_BF16, 3, qkv, 4096, 64);
        gpu_gemm16_check(be, "wg split<=3", RP_DT_BF16, 1, down, 14336, 17);
        gpu_gemm16_check(be, "wg split<=3", RP_DT_BF16, 3, odd3, 4096, 40);
        rp_backend_free(be);
    }
    be = gpu_backend_with("RAPID_CUDA_WG_SPLIT", "7");
    if (be) {
        gpu_gemm16_check(be, "wg split<=7", RP_DT_BF16, 1, o, 4096, 64);
        gpu_gemm16_check(be, "wg split<=7", RP_DT_BF16, 1, down, 14336, 9);
        rp_backend_free(be);
    }
    /* blocks of 256 rows (two warpgroups sharing each x tile) */
    be = gpu_backend_with("RAPID_CUDA_WG_BM", "256");
    if (be) {
        const int n2[] = {5, 17, 64};
        for (size_t i = 0; i < sizeof n2 / sizeof *n2; i++)
            gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 3, qkv, 4096, n2[i]);
        gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 3, odd3, 4096, 33);
        gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 1, o, 4096, 64);
        gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 2, gu, 4096, 64);
        gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 1, down, 14336, 64);
        gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 1, r4112, 4096, 64); /* last block: 16 rows */
        gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 1, odd1, 4096, 9);
        gpu_gemm16_check(be, "wg bm256", RP_DT_BF16, 1, r16, 256, 33);
        gpu_gemm16_check(be, "wg bm256", RP_DT_F16, 3, qkv, 4096, 40);
        rp_backend_free(be);
    }
    be = gpu_backend_with("RAPID_CUDA_WG", "0"); /* control: tc2_kernel */
    if (be) {
        gpu_gemm16_check(be, "wg off (tc2)", RP_DT_BF16, 3, qkv, 4096, 64);
        gpu_gemm16_check(be, "wg off (tc2)", RP_DT_BF16, 3, odd3, 4096, 33);
        rp_backend_free(be);
    }
}

static double now_w(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { WT_SHAPES = 5, WT_NS = 4 };

/* GB/s of the n-token GEMM over n_mat stacked bf16 matrices, for each n of ns */
static void wt_rates(rp_backend *be, int n_mat, const long *rows, long cols, const int *ns,
                     double *gbs)
{
    rp_err err = {0};
    rp_tensor w[3], wd[3];
    float *yd[3] = {0}, *xd = rp_backend_buf_alloc(be, sizeof(float) * 64 * (size_t)cols, 0);
    float *x = rp_alloc(sizeof(float) * 64 * (size_t)cols);
    int ok = xd && x;
    size_t bytes = 0;
    for (long i = 0; ok && i < 64 * cols; i++)
        x[i] = wrand();
    for (int m = 0; m < n_mat && ok; m++) {
        size_t ne = (size_t)rows[m] * cols, blk = 1 << 20;
        uint16_t *wh = rp_alloc(sizeof(uint16_t) * ne);
        ok = wh != NULL;
        for (size_t i = 0; ok && i < ne && i < blk; i++) /* a 1M-element pattern, repeated */
            wh[i] = (uint16_t)(0x3c00u + ((i * 2654435761u) >> 24));
        for (size_t i = blk; ok && i < ne; i += blk)
            memcpy(wh + i, wh, sizeof(uint16_t) * (ne - i < blk ? ne - i : blk));
        w[m] = (rp_tensor){.dtype = RP_DT_BF16, .n_dims = 2, .shape = {rows[m], cols},
                           .data = wh, .n_bytes = sizeof(uint16_t) * ne};
        ok = ok && rp_backend_weight(be, &w[m], &wd[m], &err) == RP_OK;
        rp_free(wh);
        yd[m] = rp_backend_buf_alloc(be, sizeof(float) * 64 * (size_t)rows[m], 0);
        ok = ok && yd[m];
        bytes += sizeof(uint16_t) * ne;
    }
    if (ok)
        rp_backend_from_host(be, xd, x, sizeof(float) * 64 * (size_t)cols);
    const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
    for (int j = 0; j < WT_NS; j++) {
        double best = 0;
        for (int rep = 0; ok && rep < 4; rep++) { /* pass 0 warms up (first-use set-ups) */
            float sink;
            double t0 = now_w();
            for (int i = 0; i < 30; i++) {
                if (n_mat == 1)
                    rp_op_matmul(be, &wd[0], xd, ns[j], yd[0]);
                else
                    rp_op_matmul_n(be, n_mat, wp, xd, ns[j], yd);
            }
            rp_backend_to_host(be, &sink, yd[0], sizeof sink);
            double r = 30.0 * (double)bytes / (now_w() - t0) / 1e9;
            best = rep && r > best ? r : best;
        }
        gbs[j] = best;
    }
    for (int m = 0; m < n_mat; m++)
        rp_backend_buf_free(be, yd[m]);
    rp_backend_buf_free(be, xd);
    rp_free(x);
}

void gpu_wg_timing(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               head[1] = {128256};
    const int ns[WT_NS] = {8, 16, 32, 64};
    const char *names[WT_SHAPES] = {"qkv", "o", "gate/up", "down", "head"};
    /* the default (split by cluster occupancy), tc2's split rule with at most 8 / 4 splits,
     * tc2_kernel */
    const char *var[5] = {"RAPID_CUDA_WG", "RAPID_CUDA_WG_SPLIT", "RAPID_CUDA_WG_SPLIT",
                          "RAPID_CUDA_WG_BM", "RAPID_CUDA_WG"},
               *val[5] = {NULL, "8", "4", "256", "0"},
               *label[5] = {"WG on   ", "SPLIT=8 ", "SPLIT=4 ", "BM=256  ", "WG=0    "};
    for (int k = 0; k < 5; k++) {
        rp_backend *be = gpu_backend_with(var[k], val[k]);
        if (!be)
            return;
        double g[WT_SHAPES][WT_NS];
        wt_rates(be, 3, qkv, 4096, ns, g[0]);
        wt_rates(be, 1, o, 4096, ns, g[1]);
        wt_rates(be, 2, gu, 4096, ns, g[2]);
        wt_rates(be, 1, o, 14336, ns, g[3]);
        wt_rates(be, 1, head, 4096, ns, g[4]);
        for (int j = 0; j < WT_NS; j++) {
            printf("wgtime %s n=%d GB/s:", label[k], ns[j]);
            for (int s = 0; s < WT_SHAPES; s++)
                printf("  %s %.0f", names[s], g[s][j]);
            printf("\n");
        }
        fflush(stdout);
        rp_backend_free(be);
    }
}
