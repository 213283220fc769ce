/* backend/backend_impl.h - what a backend implementation fills in (CPU, CUDA).
 *
 * Every backend starts with `struct rp_backend` (its vtable and description); backend.c
 * forwards each public op through the vtable. CPU kernel tables are indexed by dtype; a NULL
 * slot means "no optimised kernel, use the reference". Only backend implementations (and
 * the backend tests) include this header.
 */
#ifndef RP_BACKEND_BACKEND_IMPL_H
#define RP_BACKEND_BACKEND_IMPL_H

#include "backend/backend.h"

typedef struct rp_backend_vt {
    void (*destroy)(rp_backend *b);
    void *(*buf_alloc)(rp_backend *b, size_t n_bytes, int tag);
    void (*buf_free)(rp_backend *b, void *p);
    void (*to_host)(rp_backend *b, void *dst, const void *src, size_t n);
    rp_status (*weight)(rp_backend *b, const rp_tensor *src, rp_tensor *dst, rp_err *err);
    double (*read_bandwidth)(rp_backend *b, size_t n_bytes, int reps);
    void (*matmul)(rp_backend *b, const rp_tensor *w, const float *x, int n_tok, float *y);
    /* (optional) several matmuls over one x; NULL: one matmul call each */
    void (*matmul_n)(rp_backend *b, int n, const rp_tensor *const *w, const float *x, int n_tok,
                     float *const *y);
    void (*rmsnorm)(rp_backend *b, float *out, const float *x, const rp_tensor *w, int n_tok,
                    int dim, float eps, int add_one);
    void (*rope)(rp_backend *b, float *x, int n_tok, int n_heads, int head_dim, int rot_dim,
                 const int32_t *pos, const float *inv_freq, float attn_factor, int neox);
    void (*attention)(rp_backend *b, const rp_attn_args *a); /* host buffers only; may be NULL */
    void (*silu_mul)(rp_backend *b, float *out, const float *gate, const float *up, int64_t n);
    void (*add)(rp_backend *b, float *y, const float *x, int64_t n);
    void (*add_bias)(rp_backend *b, float *y, const rp_tensor *bias, int n_tok, int dim);
    void (*embed)(rp_backend *b, const rp_tensor *table, const int32_t *ids, int n, float *x);
    void (*gather_rows)(rp_backend *b, float *dst, const float *src, const int32_t *rows, int n,
                        int dim);
    void (*step_begin)(rp_backend *b, const rp_step_seq *seqs, int n_seqs);
    void (*kv_store)(rp_backend *b, int layer, const float *k, const float *v, int kv_dim);
    void (*attention_step)(rp_backend *b, int layer, const rp_step_attn *a);
} rp_backend_vt;

struct rp_backend {
    const rp_backend_vt *vt;
    int n_threads;
    int host_buffers; /* 1: buffers are host memory */
    int is_cuda;
    char desc[128];
};

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
void rp_ref_gated_delta_head(const rp_delta_args *a, int h);

#endif
