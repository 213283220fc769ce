/* tests/gpu/gpu_check_gemm.c - rapid_gpu_check's checks of the batched-decode / prefill GEMM
 * paths added for issue #12's 64-stream and 4-bit prefill targets (cuda_kernels.cu's staged
 * skinny GEMM tc2_kernel, cuda_quant.cu's dequantize-then-bf16-GEMM path).
 *
 * Staged GEMM: y = W x for 16-bit weights (bf16 and f16) at the 8B shapes and awkward ones
 * (rows not a multiple of the 128-row block, 1 and 3 stacked matrices, 5..64 tokens, split
 * and unsplit grids) against a double-precision host reference on x rounded to the weight's
 * type as the kernel does (then only the f32 summation order differs: tolerance 2e-3 on
 * outputs of order 1), run twice (the results must be bit-identical): gpu_gemm16_check
 * (gpu_check.c), the same check as the wgmma kernel's. Run on a backend made with
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
#include "gpu_check.h"

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
    rp_backend *be = gpu_backend_with("RAPID_CUDA_TC2", "5");
    if (be) {
        const int ns[] = {5, 9, 17, 33, 64};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            gpu_gemm16_check(be, "tc2", RP_DT_BF16, 3, qkv, 4096, ns[i]); /* split over 5 */
            gpu_gemm16_check(be, "tc2", RP_DT_BF16, 3, odd3, 4096, ns[i]); /* 11 row blocks, 8 splits */
        }
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, o, 4096, 40);
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, o, 4096, 64);
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 2, gu, 4096, 64); /* 224 blocks: no split */
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 2, gu, 4096, 23);
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, down, 14336, 64);
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, down, 14336, 17);
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, head, 4096, 64);
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, r4112, 4096, 64); /* last block: 16 rows */
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, r16, 256, 33);    /* one block, one step */
        gpu_gemm16_check(be, "tc2", RP_DT_BF16, 1, odd1, 320, 12);
        gpu_gemm16_check(be, "tc2", RP_DT_F16, 1, odd1, 4096, 33);
        gpu_gemm16_check(be, "tc2", RP_DT_F16, 3, qkv, 4096, 64);
        rp_backend_free(be);
    }
    be = gpu_backend_with("RAPID_CUDA_TC2", "0");
    if (be) {
        gpu_gemm16_check(be, "tc (old)", RP_DT_BF16, 3, qkv, 4096, 64);
        gpu_gemm16_check(be, "tc (old)", RP_DT_BF16, 3, odd3, 4096, 33);
        rp_backend_free(be);
    }
    if (wg)
        setenv("RAPID_CUDA_WG", wg_keep, 1);
    else
        unsetenv("RAPID_CUDA_WG");
    be = gpu_backend_with("RAPID_CUDA_QMM2", "5"); /* the staged 4-bit kernel from 5 tokens */
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
    be = gpu_backend_with("RAPID_CUDA_QMM2", "0"); /* control: the register-fed kernel */
    if (be) {
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 64);
        rp_backend_free(be);
    }
    be = gpu_backend_with("RAPID_CUDA_QDQ", "5");
    if (be) {
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 17);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 3, qkv, 4096, 64);
        gpu_qmm_check(be, 4, 64, RP_DT_BF16, 1, down, 14336, 64);
        gpu_qmm_check(be, 8, 64, RP_DT_BF16, 2, gu, 4096, 33);
        rp_backend_free(be);
    }
    be = gpu_backend_with("RAPID_CUDA_QDQ", "128"); /* the default, stated */
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
