/* backend/cuda/cuda_quant.h - MLX affine 4-bit / 8-bit weights on the CUDA backend.
 *
 * A quantized weight on the device (rp_cuda_qw): the packed words exactly as stored (uint32,
 * element 0 in the lowest bits, rows of cols * bits / 32 words) and one array of
 * (scale, bias) pairs, [rows][cols / group_size], interleaved at upload by cuda_backend.c:
 * two bf16 or two f16 in one 32-bit word (sf RP_CUDA_SB_BF16 / _F16, scale in the low half)
 * or two floats (RP_CUDA_SB_F32), in the checkpoint's own scale type.
 *
 * The kernels (cuda_quant.cu):
 *   n_tok <= 4 (decode): x is split per 32-element run into two int8 parts,
 *     x ~= d q1 + (d / 254) q2 with d = max |x| / 127 (round to nearest even): the error per
 *     element is at most d / 508, 1/64516 of the run's largest |x| (one int8 part, as the
 *     CPU's rp_qact, would leave d / 2); with it the run's f32 sum. One warp per 2 weight rows
 *     (1 token; 1 row for 2..4), 16-byte streaming loads, integer dot products (dp4a) per run
 *     and part, y += scale * (d dot1 + d / 254 dot2) + bias * sum in f32. One token with
 *     bf16 / f16 scales (qmv2_kernel, RAPID_CUDA_QMV2=0 for the path above): the same, with
 *     the split made by every block into its shared memory and q2 = rint(r * (1 / (d / 254)))
 *     by a reciprocal (differs by one from the division's only within an ulp of a half).
 *     A held one-token rmsnorm or silu_mul of x (cuda_kernels.cu's deferred ops) is computed
 *     in its prologue, x split from the op's inputs, and a residual add of its output in its
 *     epilogue (rp_cuda_hook_take_pro, rp_cuda_hook_defer below; RAPID_CUDA_QMV2=5 or
 *     RAPID_CUDA_FUSE=0: apart).
 *   n_tok > 4 (batched decode, prefill): x is rounded to bf16, each weight element is
 *     dequantized to bf16 in registers (scale * q + bias, one rounding; the fma in bf16 for
 *     bf16 scales, in f32 for f32 / f16 ones) and multiplied on the
 *     tensor cores (mma.sync m16n8k16, f32 accumulators), 64 tokens per pass; grids too small
 *     for the GPU split k, a second kernel sums the splits in order (deterministic).
 *   5..64 tokens, 4-bit: on sm_90 the wgmma kernel (cuda_wgmma_q4.cu, RAPID_CUDA_Q4WG=N,
 *     default 5; 0: never), A the weights dequantized into registers as qmm_kernel rounds
 *     them; elsewhere (RAPID_CUDA_QMM2) the same numerics with the weights, scales and x
 *     staged through shared memory by cp.async (qmm2_kernel, cuda_quant.cu).
 *   n_tok >= RAPID_CUDA_QDQ (default 128; prefill): each weight is dequantized once into a
 *     bf16 scratch (rounded as above, at most 256 MB of rows at a time) and multiplied by the
 *     bf16 GEMM (rp_cuda_matmul, cuBLASLt).
 *
 * Ownership: nothing here owns device memory except the scratch cuda_kernels.cu keeps for
 *            it (rp_cuda_qscratch). Threading: the context's thread, as cuda_kernels.h.
 * Errors:    none at run time (shapes are checked by rp_cuda_qw_ok at upload; launch failures
 *            abort, as in cuda_kernels.cu).
 */
#ifndef RP_BACKEND_CUDA_QUANT_H
#define RP_BACKEND_CUDA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RP_CUDA_SB_F32 = 0, RP_CUDA_SB_BF16 = 1, RP_CUDA_SB_F16 = 2 };

typedef struct rp_cuda_qw {
    const uint32_t *q; /* [rows][cols * bits / 32] */
    const void *sb;    /* [rows][cols / gs] (scale, bias) pairs */
    long rows, cols;
    int bits, gs, sf;
} rp_cuda_qw;

/* Whether the kernels take this shape: bits 4 or 8, gs 32/64/128 dividing cols, cols a
 * multiple of 32. */
int rp_cuda_qw_ok(int bits, int gs, long rows, long cols);
/* y[i] = w[i] x for n <= 3 matrices over the same x [n_tok][cols] (one launch where their
 * bits, group size and scale type agree). */
void rp_cuda_qmatmul_n(rp_cuda_ctx *c, int n, const rp_cuda_qw *const *w, const float *x, int n_tok,
                       float *const *y);
/* x[t] = dequantized row ids[t] of w (ids on the host). */
void rp_cuda_qembed(rp_cuda_ctx *c, const rp_cuda_qw *w, const int32_t *ids, int n, float *x);

/* ---- hooks cuda_kernels.cu provides for cuda_quant.cu (not for other callers) ---------- */

/* Runs fn(args, stream, pdl) on the context's stream, now or recorded into the step's CUDA
 * graph (args, at most RP_CUDA_HOOK_ARGS bytes, are copied); timed as op kind `kind`
 * (0 matvec, 1 skinny GEMM, 2 embed) under RAPID_CUDA_PROFILE. */
enum { RP_CUDA_HOOK_ARGS = 192 };
typedef void (*rp_cuda_hook_fn)(const void *args, void *stream, int pdl);
void rp_cuda_hook_run(rp_cuda_ctx *c, int kind, rp_cuda_hook_fn fn, const void *args, size_t n);
/* The fused prologue of a one-token matvec: a held one-token rmsnorm (out = x * inv * w, w
 * or 1 + w (add_one) or none) or silu_mul (out = silu(x) * x2) whose output out [cols] is the
 * matvec's input; the kernel computes it from x / x2 and its block 0 writes out. */
enum { RP_CUDA_PRO_NONE = 0, RP_CUDA_PRO_NORM = 1, RP_CUDA_PRO_SILU = 2 };
typedef struct rp_cuda_pro {
    const float *x;  /* norm: its input; silu: the gate */
    const float *x2; /* norm: its weight (or NULL); silu: the up projection */
    float *out;
    float eps;
    int add_one, pro;
} rp_cuda_pro;
/* The held op of cuda_kernels.cu's deferred-op machinery whose output is x [cols] (a one-token
 * rmsnorm or silu_mul), taken into the caller's prologue: 1 and *p filled (the op is no longer
 * held), 0 when none fits (nothing held, RAPID_CUDA_FUSE=0, an in-place norm, an output that
 * meets an input); the caller's rp_cuda_hook_run / _defer then launches the held op first. */
int rp_cuda_hook_take_pro(rp_cuda_ctx *c, const float *x, long cols, rp_cuda_pro *p);
/* What a held one-token matvec reads and writes, for the residual add taken into its
 * epilogue: y its one output [rows] (NULL when it has several: no add is taken), the other
 * buffers of cols floats it reads or writes (NULL: none), and the byte offset in its args of
 * its `float *res` (NULL until an add h += y of its output is taken: then h). */
typedef struct rp_cuda_mvdesc {
    const float *y;
    long rows, cols;
    const float *x, *x2, *out;
    size_t res_off;
} rp_cuda_mvdesc;
/* As rp_cuda_hook_run(c, 0, ...), but held as the deferred op (launched by whatever comes
 * next, unless that is a residual add of its output: see rp_cuda_mvdesc); launched now under
 * RAPID_CUDA_FUSE=0. */
void rp_cuda_hook_defer(rp_cuda_ctx *c, rp_cuda_hook_fn fn, const void *args, size_t n,
                        const rp_cuda_mvdesc *d);
/* Device scratch slot (0..5) of at least n bytes; valid for work queued until the slot grows
 * (growing synchronises). */
void *rp_cuda_qscratch(rp_cuda_ctx *c, int slot, size_t n);
/* Host array -> device memory valid for the work queued after this call (the pinned ring). */
const void *rp_cuda_hook_stage(rp_cuda_ctx *c, const void *src, size_t n);
int rp_cuda_hook_sms(const rp_cuda_ctx *c);
/* Tuning knobs read once: RAPID_CUDA_QMV=1 adds 100, RAPID_CUDA_QMM=MT,F adds MT * 10 + F,
 * RAPID_CUDA_QMVF=N (2..9) adds N * 1000 (0 when unset). */
int rp_cuda_hook_knob(const rp_cuda_ctx *c);
/* Steps of at least this many tokens dequantize each weight to bf16 and use the bf16 GEMM
 * (RAPID_CUDA_QDQ=N, default 128; 0: never). */
int rp_cuda_hook_qdq(const rp_cuda_ctx *c);
/* 4-bit steps of this many tokens up to 64 use the shared-memory staged kernel
 * (RAPID_CUDA_QMM2=N, default 5; 0: never). */
int rp_cuda_hook_qmm2(const rp_cuda_ctx *c);
/* Flags of one-time set-ups (bit 0: qmm2's shared-memory limits), kept in the context. */
int *rp_cuda_hook_once(rp_cuda_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
