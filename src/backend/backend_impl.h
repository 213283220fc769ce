/* backend/backend_impl.h - what a backend implementation fills in (the CPU one today).
 *
 * Kernel tables are indexed by dtype; a NULL slot means "no optimised kernel, use the
 * reference". Only backend implementations include this header.
 */
#ifndef RP_BACKEND_BACKEND_IMPL_H
#define RP_BACKEND_BACKEND_IMPL_H

#include "backend/backend.h"

/* Computes rows [r0, r1) of y = w x for n_tok tokens (see rp_op_matmul for layouts). */
typedef void (*rp_matmul_kernel)(const rp_tensor *w, long r0, long r1, const float *x,
                                 int n_tok, float *y);

/* Reads n bytes (a multiple of 64) as fast as the ISA allows; returns a value depending on
 * every byte so the loop cannot be elided. The memory-bandwidth probe. */
typedef uint64_t (*rp_read_kernel)(const void *p, size_t n);

typedef struct rp_cpu_kernels {
    const char *isa;
    rp_matmul_kernel matmul[RP_DT_COUNT];
    rp_read_kernel read;
} rp_cpu_kernels;

/* Each ISA file fills its table (kernels it lacks stay NULL). */
void rp_cpu_kernels_scalar(rp_cpu_kernels *k);
void rp_cpu_kernels_avx2(rp_cpu_kernels *k);
void rp_cpu_kernels_avx512(rp_cpu_kernels *k);

/* Plain-C references (src/backend/cpu/ref_ops.c): obvious loops, never optimised. */
void rp_ref_matmul(const rp_tensor *w, long r0, long r1, const float *x, int n_tok, float *y);
void rp_ref_rmsnorm(float *out, const float *x, const float *w, int n_tok, int dim, float eps,
                    int add_one);
void rp_ref_rope(float *x, int n_tok, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
                 const float *inv_freq, float attn_factor, int neox);
void rp_ref_attention_head(const rp_attn_args *a, int t, int h, float *scores);

#endif
