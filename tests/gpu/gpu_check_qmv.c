/* tests/gpu/gpu_check_qmv.c - the one-token MLX matvec of cuda_quant.cu (qmv2_kernel, the x
 * split folded in, a persistent grid) in each RAPID_CUDA_QMV2 setting, and its timing.
 *
 * Checks (gpu_qmm_check, gpu_check_quant.c: a double-precision host reference on the same
 * two-part int8 x as the kernel, tolerance 1e-3): on a backend per setting (the knob is read
 * once per context), the 8B shapes and the edges of the kernel's tiling: stacks whose rows
 * straddle two-row tiles (odd row counts, R = 2 forced by RAPID_CUDA_QMV2=5), fewer runs than
 * lanes (96 and 256 columns), 14336 columns (a partial last item), every scale type and group
 * size, 8-bit weights; RAPID_CUDA_QMV2=0 (the old two-kernel path) as a control.
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
 * qmv_done: the knob is read at the backend's first quantized matvec. */
static rp_backend *qmv_backend(const char *val)
{
    if (val)
        setenv("RAPID_CUDA_QMV2", val, 1);
    else
        unsetenv("RAPID_CUDA_QMV2");
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.5, &be, &err)) {
        gpu_check_report(0, "cuda backend", err.msg, 1, 0);
        unsetenv("RAPID_CUDA_QMV2");
        return NULL;
    }
    return be;
}

static void qmv_done(rp_backend *be)
{
    rp_backend_free(be);
    unsetenv("RAPID_CUDA_QMV2");
}

void gpu_qmv_checks(void)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               down[1] = {4096}, head[1] = {65536}, odd3[3] = {5, 7, 3}, big2[2] = {8191, 8193},
               odd1[1] = {1001};
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
        qmv_done(be);
    }
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
    const char *vs[] = {NULL, "0", "4", "5"};
    double probe = 0;
    for (size_t v = 0; v < sizeof vs / sizeof *vs; v++)
        for (int bits = 4; bits <= 8; bits += 4)
            for (size_t i = 0; i < sizeof sh / sizeof *sh; i++) {
                if (i == 4 && (bits == 8 || v >= 2))
                    continue; /* 525 MB of host weights; the forced tilings change nothing */
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
