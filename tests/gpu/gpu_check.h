/* tests/gpu/gpu_check.h - what the parts of rapid_gpu_check share: the one check reporter
 * (gpu_check.c counts passes and failures), the MLX 4/8-bit checks (gpu_check_quant.c),
 * the GGUF ones (gpu_check_gguf.c) and the decode attention and one-token matvec ones
 * (gpu_check_decode.c).
 * Threading: single-threaded test program. Errors: a failed check is counted, never fatal.
 */
#ifndef RP_TESTS_GPU_CHECK_H
#define RP_TESTS_GPU_CHECK_H

#include "backend/backend.h"
#include "fixture_util.h"

/* Prints one line ("ok"/"FAIL", name, what, value, tolerance) and counts it. */
void gpu_check_report(int ok, const char *name, const char *what, double v, double tol);
/* A sequence of a paged-attention step: positions 0..cached-1 stored by an earlier step,
 * then n_new tokens. */
typedef struct gpu_attn_seq {
    int cached, n_new;
} gpu_attn_seq;
/* RoPE before an attention step: q and the new keys rotated by rp_op_rope (rot_dim of each
 * head, neox or interleaved pairs, theta 10000 frequencies, cos / sin times attn_factor), as
 * a model's layer does before its KV store. */
typedef struct gpu_attn_rope {
    int rot_dim, neox;
    float attn_factor;
} gpu_attn_rope;
/* One attention step over ss (at most 64 sequences: their cached positions stored by a step
 * before, then every sequence's n_new tokens; random K/V in [-1, 1), q times q_amp) on cache
 * layer 1 of 2 of a pool whose blocks are handed out in a scrambled order, run 1 + reps
 * times (timing), against a double-precision host reference: on the inputs as they are, or
 * (rounded) with q * scale * log2(e), K and V rounded to bf16 as the flash kernel does.
 * With rope (reps 0), q and the new keys go through rp_op_rope first (the reference
 * rotates them in double precision). The pool stores rows as kv_dt (f32, bf16, f16); the
 * reference reads K and V as the host codec (rp_kv_row_store) rounds them. Returns the worst
 * error (INFINITY when anything failed). gpu_check.c. */
double gpu_attn_run(rp_backend *be, const gpu_attn_seq *ss, int n_seqs, int H, int KVH, int D,
                    int window, int rounded, float q_amp, int reps, const gpu_attn_rope *rope,
                    rp_kv_dtype kv_dt);
/* y = x W^T for n_mat 16-bit (bf16 / f16) random matrices stacked over n tokens on be, run
 * twice (the two results must be bit-identical: the kernels are deterministic), against a
 * double-precision reference on sampled rows (both ends, every 61st, the edges of 64- and
 * 128-row tiles) with x rounded to the weight's type as the kernels do; reported as "gemm"
 * with tolerance 2e-3, the first bad and the worst element printed. gpu_check.c. */
void gpu_gemm16_check(rp_backend *be, const char *tag, rp_dtype dt, int n_mat, const long *rows,
                      long cols, int n);
/* A CUDA backend made with env var `var` set to val (NULL: unset; the knobs are read at
 * creation), the variable restored after; NULL (reported) when it cannot be made. */
rp_backend *gpu_backend_with(const char *var, const char *val);
/* The bf16-vs-f32 logit tolerance of a fixture of this rounding sensitivity: BF16_TOL, or
 * the CPU's own bf16 distance plus BF16_GPU_EXTRA when that is more (gpu_check.c). */
float gpu_bf16_tol(float sensitivity);
/* The quantized-weight kernels at the 8B shapes against a host reference. */
void gpu_quant_kernel_checks(rp_backend *be);
/* One MLX GEMM check (gpu_check_quant.c): n_mat stacked matrices over n tokens. */
void gpu_qmm_check(rp_backend *be, int bits, int gs, rp_dtype sd, int n_mat, const long *rows,
                   long cols, int n);
/* A one-token rmsnorm (mode 0; wmode 0 no weight, 1 w, 2 1 + w; mode 3 in place), silu_mul
 * (1) or nothing (2) before a one-token MLX matvec of n_mat stacked matrices (bf16 scales)
 * and (n_mat == 1) a residual add of its output, as the deferred-op machinery fuses them
 * (gpu_check_quant.c): the op's output, y and the residual against host references. */
void gpu_qfused_check(rp_backend *be, int mode, int wmode, int bits, int gs, int n_mat,
                      const long *rows, long cols);
/* Host wall time per one-token call (us, best of 3 passes of reps calls, synchronised at
 * each pass's end) of n_mat stacked random MLX matrices (group 64, bf16 scales) on be; *bytes:
 * the weight and (scale, bias) bytes one call reads (gpu_check_quant.c). */
double gpu_qmv_time(rp_backend *be, int bits, int n_mat, const long *rows, long cols, int reps,
                    double *bytes);
/* The one-token MLX matvec (qmv2_kernel) in each RAPID_CUDA_QMV2 setting against the host
 * reference, and `rapid_gpu_check qmvtime`: its GB/s at the 8B shapes, each setting
 * (gpu_check_qmv.c). */
void gpu_qmv_checks(void);
void gpu_qmv_timing(void);
/* The staged skinny GEMM and the MLX dequantize path (gpu_check_gemm.c; own backends). */
void gpu_gemm_kernel_checks(void);
/* The wgmma skinny GEMM (gpu_check_wgmma.c; own backends) and `rapid_gpu_check wgtime`. */
void gpu_wg_checks(void);
void gpu_wg_timing(void);
/* The MLX 4-bit wgmma GEMM (gpu_check_q4wg.c; own backends) and `rapid_gpu_check q4wgtime`. */
void gpu_q4wg_checks(void);
void gpu_q4wg_timing(void);
/* Fixture `name` quantized to MLX 4/8-bit: GPU vs CPU logits and greedy tokens; the prefill
 * tolerance is scaled by the fixture's rounding sensitivity (>= 1, gpu_check.c). */
void gpu_quant_fixture(const char *name, float sensitivity);
/* GPU vs the CPU's reference kernels on the quantized model at path (a checkpoint dir or a
 * GGUF file): prefill, decode, greedy tokens (gpu_check_quant.c); label names the format. */
void gpu_quant_compare(const fixture *f, const char *name, const char *path, const char *label,
                       float sensitivity);
/* GGUF weights on the GPU (gpu_check_gguf.c): random Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K
 * matrices against a host reference, and GGUF twins of fixture `name` (Q8_0, Q4_0; more
 * types for llama_gqa) against the CPU's reference kernels. */
void gpu_gguf_kernel_checks(rp_backend *be);
void gpu_gguf_fixture(const char *name, float sensitivity);
/* The decode attention kernel against a host reference (gpu_check_decode.c); the timing
 * runs of `rapid_gpu_check dectime`. */
void gpu_decode_checks(void);
void gpu_decode_timing(void);
/* The one-token matvec with its fused norm / silu_mul / residual add (gpu_check_mv1.c) and
 * the timing runs of `rapid_gpu_check mvtime`. */
void gpu_mv1_checks(void);
void gpu_mv1_timing(void);

/* The draw on the GPU against the host's, token for token (gpu_check_sample.c). */
void gpu_sample_checks(void);

#endif
