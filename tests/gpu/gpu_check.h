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
/* Fixture `name` quantized to MLX 4/8-bit: GPU vs CPU logits and greedy tokens; the prefill
 * tolerance is scaled by the fixture's rounding sensitivity (>= 1, gpu_check.c). */
void gpu_quant_fixture(const char *name, float sensitivity);
/* The decode attention kernel against a host reference (gpu_check_decode.c); the timing
 * runs of `rapid_gpu_check dectime`. */
void gpu_decode_checks(void);
void gpu_decode_timing(void);

#endif
