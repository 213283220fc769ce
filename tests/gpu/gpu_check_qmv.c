/* tests/gpu/gpu_check_qmv.c - the one-token MLX matvec of cuda_quant.cu (qmv2_kernel, the x
 * split folded in, a persistent grid) in each RAPID_CUDA_QMV2 setting, and its timing.
 *
 * Checks (gpu_qmm_check, gpu_check_quant.c: a double-precision host reference on the same
 * two-part int8 x as the kernel, tolerance 1e-3): on a backend per setting (the knob is read
 * once per context), the 8B shapes and the edges of the kernel's tiling: stacks whose rows
 * straddle two-row tiles (odd row counts, R = 2 forced by RAPID_CUDA_QMV2=5), fewer runs than
 * lanes (96 and 256 columns), 14336 columns (a partial last item), every scale type and group
 * size, 8-bit weights; RAPID_CUDA_QMV2=0 (the old two-kernel path) as a control.
 * Session 6: the fusions of the deferred-op machinery (gpu_qfused_check): a one-token
 * rmsnorm or silu_mul into the matvec of its output, the residual add of its output into its
 * epilogue, at the 8B layer's shapes in 4 and 8 bits and at odd ones, on the default; the
 * opt-in kernels with them: split k for rows of more than 8192 elements (RAPID_CUDA_QMV2=6,
 * qmv2k_kernel) at odd shapes (the last warp's slice short, rows not a multiple of the row
 * group, 64 rows a block, 4 runs a lane) and two items in flight (=7); then the 8B layer's
 * fused checks with RAPID_CUDA_QMV2=5 (session 5's kernel, no fusions) and
 * RAPID_CUDA_FUSE=0 as controls.
 * `rapid_gpu_check qmvtime`: per shape, bits and setting, the host wall time of 200 back-to-
 * back calls (no graph, so launch gaps count where a call is shorter than its launch) and the
 * GB/s of weights + (scale, bias) that makes, beside the backend's read-bandwidth probe.
 * Threading: single-threaded test program. Errors: failures are counted by gpu_check_report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"

/* A CUDA backend with RAPID_CUDA_QMV2=val (NULL: unset, the default), which stays set until
 * qmv_done: the knob is read at the backend's first quantized matvec. The silu_mul prologue
 * is opt-in (RAPID_CUDA_QMV_SILU=1, slower in decode as it stands): on here, so the fused
 * checks cover it. */
static rp_backend *qmv_backend(const char *val)
{
    setenv("RAPID_CUDA_QMV_SILU", "1", 1);
    if (val)
        setenv("RAPID_CUDA_QMV2", val, 1);
    else
        unsetenv("RAPID_CUDA_QMV2");
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.5, &be, &err)) {
        gpu_check_report(0, "cuda backend", err.msg, 1, 0);
        unsetenv("RAPID_CUDA_QMV2");
        unsetenv("RAPID_CUDA_QMV_SILU");
        return NULL;
    }
    return be;
}

static void qmv_done(rp_backend *be)
{
    rp_backend_free(be);
    unsetenv("RAPID_CUDA_QMV2");
    unsetenv("RAPID_CUDA_QMV_SILU");
}

/* The 8B layer's fusions at 4 and 8 bits: rmsnorm into q/k/v, the o projection and its
 * residual add, rmsnorm into gate/up, silu_mul into down and its residual add. */
static void qmv_fused_8b(rp_backend *be)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096};
    for (int bits = 4; bits <= 8; bits += 4) {
        gpu_qfused_check(be, 0, 1, bits, 64, 3, qkv, 4096);
        gpu_qfused_check(be, 2, 0, bits, 64, 1, o, 4096);
        gpu_qfused_check(be, 0, 1, bits, 64, 2, gu, 4096);
        gpu_qfused_check(be, 1, 0, bits, 64, 1, o, 14336);
    }
}

/* qmv_fused_8b, then the other norm weights, a norm into one matrix and its add, an
 * in-place norm (not fused), and odd shapes (fewer runs than lanes, a stack straddling
 * tiles, split k with a norm) */
static void qmv_fused_all(rp_backend *be)
{
    const long o[1] = {4096}, odd3[3] = {5, 3, 7}, one[1] = {1}, r3[1] = {3}, r37[1] = {37},
               head[1] = {32000};
    qmv_fused_8b(be);
    gpu_qfused_check(be, 0, 2, 4, 64, 1, o, 4096);
    gpu_qfused_check(be, 0, 0, 4, 64, 1, o, 4096);
    gpu_qfused_check(be, 3, 1, 4, 64, 1, o, 4096);
    gpu_qfused_check(be, 0, 1, 4, 64, 1, head, 4096);
    gpu_qfused_check(be, 0, 1, 4, 32, 3, odd3, 96);
    gpu_qfused_check(be, 0, 2, 8, 32, 1, one, 1056);
    gpu_qfused_check(be, 1, 0, 4, 32, 1, r3, 2080);
    gpu_qfused_check(be, 0, 1, 4, 64, 1, r37, 8256);
    gpu_qfused_check(be, 0, 2, 8, 32, 3, odd3, 16416);
    gpu_qfused_check(be, 1, 0, 8, 64, 1, r37, 14336);
    gpu_qfused_check(be, 2, 0, 4, 64, 1, r37, 14336);
}

void gpu_qmv_checks(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               down[1] = {4096}, head[1] = {65536}, odd3[3] = {5, 7, 3}, big2[2] = {8191, 8193},
               odd1[1] = {1001}, odd37[1] = {37}, many[1] = {20000};
    rp_backend *be = qmv_backend(NULL);
    if (be) {
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, odd3, 4096, 1);
        gpu_qmm_check(be, 4, 32, RP_DT_BF16, 3, odd3, 96, 1);  /* 3 runs a row */
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 2, big2, 256, 1); /* two-row tiles over 2 mats */
        gpu_qmm_check(be, 4, 128, RP_DT_F16, 1, odd1, 14336, 1);
        gpu_qmm_check(be, 4, 32, RP_DT_F32, 1, odd1, 4096, 1);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 2, gu, 4096, 1);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 1, head, 4096, 1);
        gpu_qmm_check(be, 8, 32, RP_DT_F32, 1, o, 4096, 1);
        gpu_qmm_check(be, 8, 128, RP_DT_F16, 3, odd3, 14336, 1);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 2, big2, 256, 1);
        qmv_fused_all(be);
        qmv_done(be);
    }
    /* the opt-in kernels with the fusions: split k (RAPID_CUDA_QMV2=6, qmv2k_kernel for rows
     * of more than 8192 elements: slices of 33 runs (the last 26), rows not a multiple of the
     * row group, 64 rows a block (QK_ROWS), 16416 and 32768 columns (4 runs a lane), a stack
     * straddling blocks) and two items in flight (=7) */
    const char *os[] = {"6", "7"};
    for (size_t i = 0; i < sizeof os / sizeof *os; i++) {
        printf("info  qmv2               RAPID_CUDA_QMV2=%s (opt-in, fused)\n", os[i]);
        if (!(be = qmv_backend(os[i])))
            continue;
        gpu_qmm_check(be, 4, 32, RP_DT_BF16, 1, odd37, 8224, 1);
        gpu_qmm_check(be, 8, 32, RP_DT_BF16, 1, odd37, 8224, 1);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, many, 8256, 1);
        gpu_qmm_check(be, 4, 32, RP_DT_F16, 3, odd3, 16416, 1);
        gpu_qmm_check(be, 4, 128, RP_DT_BF16, 1, odd1, 32768, 1);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 1, odd1, 32768, 1);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 14336, 1);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, odd3, 4096, 1);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 2, big2, 256, 1);
        qmv_fused_all(be);
        qmv_done(be);
    }
    /* the fusions off, as controls: session 5's kernel (=5), RAPID_CUDA_FUSE=0 */
    printf("info  qmv2               RAPID_CUDA_QMV2=5 (fused checks)\n");
    if ((be = qmv_backend("5"))) {
        qmv_fused_8b(be);
        qmv_done(be);
    }
    printf("info  qmv2               RAPID_CUDA_FUSE=0 (fused checks)\n");
    setenv("RAPID_CUDA_FUSE", "0", 1);
    if ((be = qmv_backend(NULL))) {
        qmv_fused_8b(be);
        qmv_done(be);
    }
    unsetenv("RAPID_CUDA_FUSE");
    const char *vs[] = {"1", "3", "4", "5", "0"};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
        printf("info  qmv2               RAPID_CUDA_QMV2=%s\n", vs[i]);
        if (!(be = qmv_backend(vs[i])))
            continue;
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 1);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, down, 14336, 1);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, odd3, 4096, 1);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 2, big2, 256, 1);
        if (vs[i][0] == '5' || vs[i][0] == '4') {
            gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, o, 4096, 1);
            gpu_qmm_check(be, 8, 64, RP_DT_BF16, 1, down, 14336, 1);
            gpu_qmm_check(be, 4, 64, RP_DT_BF16, 2, big2, 256, 1);
        }
        qmv_done(be);
    }
}

void gpu_qmv_timing(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               down[1] = {4096}, head[1] = {128256};
    const struct {
        const char *what;
        int n;
        const long *rows;
        long cols;
    } sh[] = {{"q/k/v 6144x4096", 3, qkv, 4096},
              {"o 4096x4096", 1, o, 4096},
              {"gate/up 28672x4096", 2, gu, 4096},
              {"down 4096x14336", 1, down, 14336},
              {"head 128256x4096", 1, head, 4096}};
    const char *vs[] = {NULL, "5", "7", "6"};
    double probe = 0;
    for (size_t v = 0; v < sizeof vs / sizeof *vs; v++)
        for (int bits = 4; bits <= 8; bits += 4)
            for (size_t i = 0; i < sizeof sh / sizeof *sh; i++) {
                if (i == 4 && (bits == 8 || v >= 1))
                    continue; /* 525 MB of host weights */
                if (v == 3 && i != 3)
                    continue; /* QMV2=6 differs from the default only in rows > 8192 long */
                /* a backend each: under RAPID_CUDA_PROFILE=2 its "matvec" line (stderr, at
                 * rp_backend_free) is this shape's GPU time per call */
                rp_backend *be = qmv_backend(vs[v]);
                if (!be)
                    return;
                if (probe == 0)
                    probe = rp_backend_read_bandwidth(be, (size_t)1 << 30, 3);
                double bytes = 0,
                       us = gpu_qmv_time(be, bits, sh[i].n, sh[i].rows, sh[i].cols, 200, &bytes);
                printf("qmvtime QMV2=%s mlx%d %-20s host %8.2f us  %6.0f GB/s  (%.1f MB; probe "
                       "%.0f GB/s)\n",
                       vs[v] ? vs[v] : "default", bits, sh[i].what, us, bytes / us * 1e-3,
                       bytes * 1e-6, probe);
                fflush(stdout);
                qmv_done(be);
                fflush(stderr);
            }
}
