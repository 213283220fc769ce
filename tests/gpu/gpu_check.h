/* tests/gpu/gpu_check.h - what the parts of rapid_gpu_check share: the one check reporter
 * (gpu_check.c counts passes and failures) and the MLX 4/8-bit checks (gpu_check_quant.c).
 * Threading: single-threaded test program. Errors: a failed check is counted, never fatal.
 */
#ifndef RP_TESTS_GPU_CHECK_H
#define RP_TESTS_GPU_CHECK_H

#include "backend/backend.h"

/* Prints one line ("ok"/"FAIL", name, what, value, tolerance) and counts it. */
void gpu_check_report(int ok, const char *name, const char *what, double v, double tol);
/* The quantized-weight kernels at the 8B shapes against a host reference. */
void gpu_quant_kernel_checks(rp_backend *be);
/* One MLX GEMM check (gpu_check_quant.c): n_mat stacked matrices over n tokens. */
void gpu_qmm_check(rp_backend *be, int bits, int gs, rp_dtype sd, int n_mat, const long *rows,
                   long cols, int n);
/* The staged skinny GEMM and the MLX dequantize path (gpu_check_gemm.c; own backends). */
void gpu_gemm_kernel_checks(void);
/* Fixture `name` quantized to MLX 4/8-bit: GPU vs CPU logits and greedy tokens; the prefill
 * tolerance is scaled by the fixture's rounding sensitivity (>= 1, gpu_check.c). */
void gpu_quant_fixture(const char *name, float sensitivity);

#endif
