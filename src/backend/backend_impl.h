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
    void (*from_host)(rp_backend *b, void *dst, const void *src, size_t n);
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
    void (*step_begin)(rp_backend *b, const rp_kv_layout *kv, const rp_step_seq *seqs,
                       int n_seqs);
    void (*kv_store)(rp_backend *b, int layer, const float *k, const float *v, int kv_dim);
    void (*attention_step)(rp_backend *b, int layer, const rp_step_attn *a);
    /* (optional) rp_op_argmax_rows; NULL: the plain loop over host buffers (backend.c) */
    void (*argmax_rows)(rp_backend *b, const float *x, int n_rows, int n, int32_t *out);
    /* (optional) rp_op_sample_rows; NULL: the op returns 0 */
    void (*sample_rows)(rp_backend *b, const float *x, int n_rows, int n,
                        const struct rp_sample_row *p, int32_t *out);
    void (*gelu_mul)(rp_backend *b, float *out, const float *gate, const float *up, int64_t n);
    void (*swiglu_clamp)(rp_backend *b, float *out, const float *gate, const float *up, int64_t n,
                         float limit, float alpha);
    void (*scale)(rp_backend *b, float *x, float s, int64_t n);
    void (*scatter_add)(rp_backend *b, float *y, const float *x, const int32_t *rows,
                        const float *w, int n, int dim);
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

/* Activations quantized to int8 once per matmul call, for the int8 dot-product kernels of
 * quantized weights. Per token, per 32-element run k: x ~= d[k] * q[32k ..], q in [-127, 127]
 * (d = max |x| / 127 over the run: the added error per element is at most d / 2, i.e. 1/254
 * of the run's largest |x|), and s[k] the exact f32 sum of x[32k .. 32k + 31] (for bias/min
 * terms). Runs are natural (elements 32k .. 32k + 31), or with even_odd (MLX 4-bit, whose
 * packed bytes hold an even and an odd element) run 2j holds the even elements of the 64-block
 * j in order and run 2j + 1 its odd ones (cols a multiple of 64); s stays natural either way. */
typedef struct rp_qact {
    const int8_t *q; /* [n_tok][cols] */
    const float *d;  /* [n_tok][cols / 32], or [n_tok][cols / 64] with run64 */
    const float *s;  /* [n_tok][cols / 32] */
    int run64;       /* one scale per 64-block (both its runs): d[k / 2] (max error 1/254 of
                      * the block's max |x|); lets a kernel scale a 64-element step by one
                      * scalar */
} rp_qact;

typedef void (*rp_qmatmul_kernel)(const rp_tensor *w, long r0, long r1, const rp_qact *x,
                                  int n_tok, float *y);

typedef struct rp_cpu_kernels {
    const char *isa;
    /* f32/f16/bf16: f32 activations. Quantized types: a kernel here takes f32 activations
     * too (scalar table: dequantize + f32 dot); qmatmul, when set, is preferred. */
    rp_matmul_kernel matmul[RP_DT_COUNT];
    rp_qmatmul_kernel qmatmul[RP_DT_COUNT];
    unsigned char act_run64[RP_DT_COUNT]; /* qmatmul prefers run64 activations (MLX groups >= 64) */
    /* matmul[dt] takes its f32 activations in even/odd order (rp_x_even_odd16) */
    unsigned char x_even_odd16[RP_DT_COUNT];
    rp_read_kernel read;
} rp_cpu_kernels;

/* Quantizes n_tok rows of cols floats (cols a multiple of 32; of 64 with even_odd or run64)
 * as rp_qact describes. */
void rp_quant_act(const float *x, int n_tok, long cols, int even_odd, int run64, int8_t *q,
                  float *d, float *s);
/* Each token's row of cols floats in even/odd order, per whole 16-block: out[16b + i] =
 * x[16b + 2i] and out[16b + 8 + i] = x[16b + 2i + 1] (i < 8); the columns past the last
 * whole block are copied as they are. */
void rp_x_even_odd16(const float *x, int n_tok, long cols, float *out);

/* Whether a weight type's int8 kernels want even_odd activations. */
static inline int rp_quant_act_even_odd(rp_dtype dt) { return dt == RP_DT_MLX4; }
/* Whether the int8 kernels take this shape (MLX 4-bit needs rows of 64-blocks; the scalar
 * dequantizing kernel runs the others). */
static inline int rp_qmatmul_fits(rp_dtype dt, long cols)
{
    return dt == RP_DT_MLX4 ? cols % 64 == 0 : cols % 32 == 0;
}

/* Each ISA file fills its table (kernels it lacks stay NULL), with the activation layout of
 * each kernel it sets (x_even_odd16, act_run64). */
void rp_cpu_kernels_scalar(rp_cpu_kernels *k);
void rp_cpu_kernels_avx2(rp_cpu_kernels *k);
void rp_cpu_kernels_avx512(rp_cpu_kernels *k);
/* The CPU backend's table for an x86 CPU of this ISA (rp_isa, base/cpu.h): the scalar one
 * with each ISA file's laid over it, in order, up to isa; a kernel replaced takes its own
 * activation layout along, never the one it replaces (cpu_backend.c). */
void rp_cpu_kernels_for(rp_cpu_kernels *k, int isa);

/* AMX (backend/cpu/x86/kernels_amx.c), prefill of bf16 weights: rp_amx_enable asks Linux
 * for the tile state (1 ok); activations are packed once per call (rp_amx_pack_bf16, into
 * rp_amx_packed_bytes) as `parts` bf16 numbers each (1: rounded to bf16, relative error
 * <= 2^-9; 3: f32-exact), then rp_amx_matmul_bf16 computes rows [r0, r) in blocks of 16 and
 * returns r (r1 - r < 16 rows are left to the caller). */
int rp_amx_enable(void);
size_t rp_amx_packed_bytes(int n_tok, long cols, int parts);
void rp_amx_pack_bf16(const float *x, int n_tok, long cols, int parts, uint16_t *out);
long rp_amx_matmul_bf16(const rp_tensor *w, long r0, long r1, const uint16_t *xb, int n_tok,
                        int parts, float *y);

/* Attention inner loops for AVX-512 (backend/cpu/x86/attn_avx512.c): a dot product of n
 * floats with 16 lanes of partial sums combined in a fixed order, and y += a x. */
float rp_attn_dot_avx512(const float *a, const float *b, int n);
void rp_attn_axpy_avx512(float *y, float a, const float *x, int n);
/* p[j] = e^(p[j] - mx) for j < n (within 2 ulp of expf); returns their sum. */
float rp_attn_exp_sum_avx512(float *p, int n, float mx);
/* out[i] = gate[i] / (1 + e^-gate[i]) * up[i], the same vector e^x. */
void rp_silu_mul_avx512(float *out, const float *gate, const float *up, int64_t n);
/* One paged-attention group with f32 rows and head_dim 64: G query heads (q, G x d)
 * over the keys/values [j0, j0 + n) of KV head kvh (the sinks, G of them, or NULL); out G x
 * d; sc G * n scratch. q.k 16 keys at a time (a fixed summation order per key), then the
 * same exp_sum and p.v as the generic loops, the sums in registers. Returns 0, doing
 * nothing, for other shapes or dtypes. */
int rp_attn_group_f32_avx512(const rp_kv_layout *L, const int32_t *table, int layer, int kvh,
                             int j0, int n, const float *q, int G, float scale,
                             const float *sinks, float *sc, float *out);
/* rp_kv_row_load, vectorised (bit-identical results). */
void rp_attn_load_row_avx512(rp_kv_dtype dt, const void *src, int hd, float *out);
/* The dot product and y += a x on AVX2 (backend/cpu/x86/attn_avx2.c): 8 lanes, two chains of
 * partial sums combined in a fixed order. */
float rp_attn_dot_avx2(const float *a, const float *b, int n);
void rp_attn_axpy_avx2(float *y, float a, const float *x, int n);
/* rp_attn_exp_sum_avx512 and rp_silu_mul_avx512 on 8 lanes: the same e^x arithmetic and sum
 * order, yet not the same bits on an AVX-512 CPU (ops_test holds each to expf). */
float rp_attn_exp_sum_avx2(float *p, int n, float mx);
void rp_silu_mul_avx2(float *out, const float *gate, const float *up, int64_t n);
/* rp_attn_group_f32_avx512's contract on AVX2 (its own summation order, fixed per key). */
int rp_attn_group_f32_avx2(const rp_kv_layout *L, const int32_t *table, int layer, int kvh,
                           int j0, int n, const float *q, int G, float scale,
                           const float *sinks, float *sc, float *out);
/* ... for nh consecutive KV heads from kvh in one walk over the positions (q, out, sinks:
 * their nh G query heads in order; sc nh G n scratch): each query head's bits are
 * rp_attn_group_f32_avx2's; also 0 when nh G > 256 or the heads run past the pool's. */
int rp_attn_groups_f32_avx2(const rp_kv_layout *L, const int32_t *table, int layer, int kvh,
                            int nh, int j0, int n, const float *q, int G, float scale,
                            const float *sinks, float *sc, float *out);

/* Plain-C references (src/backend/cpu/ref_ops.c): obvious loops, never optimised. */
void rp_ref_matmul(const rp_tensor *w, long r0, long r1, const float *x, int n_tok, float *y);
void rp_ref_rmsnorm(float *out, const float *x, const float *w, int n_tok, int dim, float eps,
                    int add_one);
void rp_ref_rope(float *x, int n_tok, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
                 const float *inv_freq, float attn_factor, int neox);
void rp_ref_attention_head(const rp_attn_args *a, int t, int h, float *scores);
/* One (query token t of seq, head h) of rp_op_attention_step over paged blocks: every row
 * decoded with rp_kv_row_load, then the loops of rp_ref_attention_head. scores: at least
 * pos + 1 floats; row: head_dim floats. */
void rp_ref_attention_paged_head(const rp_kv_layout *kv, const rp_step_seq *seq, int layer,
                                 const rp_step_attn *a, int t, int h, float *scores, float *row);
void rp_ref_gated_delta_head(const rp_delta_args *a, int h);

#endif
