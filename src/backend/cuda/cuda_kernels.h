/* backend/cuda/cuda_kernels.h - the CUDA side of the CUDA backend, as plain C launchers.
 *
 * cuda_kernels.cu (CUDA C++) implements these; cuda_backend.c (C17) is the backend vtable
 * that calls them. Everything runs on the context's one stream, in call order: a launcher
 * returns once the work is queued. Pointers named *_dev are device memory; host arrays are
 * copied (staged through pinned memory) before the launcher returns.
 *
 * Ownership: rp_cuda_ctx_new -> rp_cuda_ctx_free (frees the context's scratch, not the
 *            buffers handed out by rp_cuda_malloc: those are freed with rp_cuda_free).
 * Threading: one thread at a time per context (the engine thread).
 * Errors:    ctx_new / malloc return NULL (with a message in err where given); a failed
 *            launch or copy is fatal (message on stderr, abort), as a wild pointer is on the CPU.
 */
#ifndef RP_BACKEND_CUDA_KERNELS_H
#define RP_BACKEND_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_cuda_ctx rp_cuda_ctx;

/* dtype codes: the same numbering as rp_dtype (f32 0, f16 1, bf16 2) */
enum { RP_CUDA_F32 = 0, RP_CUDA_F16 = 1, RP_CUDA_BF16 = 2 };

/* One token of a step: where its sequence's block table starts in the step's tables, and
 * its position. */
typedef struct rp_cuda_tok {
    int tbl;
    int pos;
} rp_cuda_tok;

/* The step's KV pool: layout as rp_kv_layout in backend.h, with the offsets counted in
 * elements of the stored type dt (RP_CUDA_F32, RP_CUDA_BF16 or RP_CUDA_F16: rows of
 * head_dim elements, rounded to nearest even on store as the host codec rounds). */
typedef struct rp_cuda_kv {
    void *base;
    int dt;
    int block_tokens;
    long block_elems, half_elems;
} rp_cuda_kv;

int rp_cuda_device_count(void);
rp_cuda_ctx *rp_cuda_ctx_new(int device, char *err, size_t err_len);
void rp_cuda_ctx_free(rp_cuda_ctx *c);
/* "NVIDIA H200, 132 SMs, 139.8 GiB" */
const char *rp_cuda_ctx_name(const rp_cuda_ctx *c);
void rp_cuda_mem_info(rp_cuda_ctx *c, size_t *free_b, size_t *total_b);

void *rp_cuda_malloc(rp_cuda_ctx *c, size_t n);
void rp_cuda_free(rp_cuda_ctx *c, void *p);
/* Host -> device, synchronous (weights at load). */
void rp_cuda_upload(rp_cuda_ctx *c, void *dst_dev, const void *src, size_t n);
/* Device -> host after everything queued; synchronous. */
void rp_cuda_to_host(rp_cuda_ctx *c, void *dst, const void *src_dev, size_t n);

/* y[t][r] = sum_c w[r][c] x[t][c]; w dtype as above, [rows][cols] row-major. */
void rp_cuda_matmul(rp_cuda_ctx *c, int dtype, const void *w_dev, long rows, long cols,
                    const float *x, int n_tok, float *y);
/* n <= 3 matmuls over the same x [n_tok][cols] (one launch for decode). */
void rp_cuda_matmul_n(rp_cuda_ctx *c, int n, const int *dtype, const void *const *w_dev,
                      const long *rows, long cols, const float *x, int n_tok, float *const *y);
void rp_cuda_rmsnorm(rp_cuda_ctx *c, float *out, const float *x, const float *w_dev,
                     int n_rows, int dim, float eps, int add_one);
/* pos (n_tok) and inv_freq (rot_dim/2) are host arrays. */
void rp_cuda_rope(rp_cuda_ctx *c, float *x, int n_tok, int n_heads, int head_dim, int rot_dim,
                  const int32_t *pos, const float *inv_freq, float attn_factor, int neox);
void rp_cuda_silu_mul(rp_cuda_ctx *c, float *out, const float *gate, const float *up, int64_t n);
void rp_cuda_add(rp_cuda_ctx *c, float *y, const float *x, int64_t n);
void rp_cuda_add_bias(rp_cuda_ctx *c, float *y, const float *bias_dev, int n_tok, int dim);
/* x[t] = table[ids[t]] as f32 (ids on the host). */
void rp_cuda_embed(rp_cuda_ctx *c, int dtype, const void *table_dev, long cols,
                   const int32_t *ids, int n, float *x);
/* dst[i] = src[rows[i]] (rows on the host); dst may alias src. */
void rp_cuda_gather_rows(rp_cuda_ctx *c, float *dst, const float *src, const int32_t *rows,
                         int n, int dim);
/* The step's tokens, its sequences' block tables (n_tbl entries) and its pool (host arrays,
 * copied). Steps that attend through the flash kernel also get their tile list (runs of
 * <= 64 consecutive positions of one sequence) here. */
void rp_cuda_step(rp_cuda_ctx *c, const rp_cuda_tok *toks, int n_tok, const int32_t *tbl,
                  int n_tbl, const rp_cuda_kv *kv);
void rp_cuda_kv_store(rp_cuda_ctx *c, int layer, const float *k, const float *v, int kv_dim);
void rp_cuda_attention(rp_cuda_ctx *c, int layer, const float *q, float *out, int n_heads,
                       int n_kv_heads, int head_dim, float scale, int window);
/* out[i] = argmax of row i of x [n_rows][n] (lowest index among equals); out is a host
 * array, filled when this returns (synchronous). */
void rp_cuda_argmax(rp_cuda_ctx *c, const float *x, int n_rows, long n, int32_t *out);
/* out[i] = rp_sample_draw of row i of x under p[i] (backend/sample.h), or -1 where the row
 * needs more than RP_SAMPLE_MAX_SORTED sorted candidates (cuda_sample.cu); p and out are host
 * arrays, out filled when this returns (synchronous). */
struct rp_sample_row;
void rp_cuda_sample(rp_cuda_ctx *c, const float *x, int n_rows, long n,
                    const struct rp_sample_row *p, int32_t *out);
/* out[i] = gelu_tanh(gate[i]) * up[i]; x[i] *= s; y[rows[i]] += w[i] * x[i] (rows and w on the
 * host, rows distinct). */
void rp_cuda_gelu_mul(rp_cuda_ctx *c, float *out, const float *gate, const float *up, int64_t n);
void rp_cuda_scale(rp_cuda_ctx *c, float *x, float s, int64_t n);
/* gpt-oss's clamped SwiGLU (rp_op_swiglu_clamp); out may be gate. */
void rp_cuda_swiglu_clamp(rp_cuda_ctx *c, float *out, const float *gate, const float *up,
                          int64_t n, float limit, float alpha);
/* After rp_cuda_attention with the same arguments: scales out by 1 / (1 + exp(sink[h] - lse))
 * for each token and head, lse over the keys the query sees (sinks: a device array, one
 * logit per query head). */
void rp_cuda_attn_sinks(rp_cuda_ctx *c, int layer, const float *q, float *out,
                        const float *sinks_dev, int n_heads, int n_kv_heads, int head_dim,
                        float scale, int window);
void rp_cuda_scatter_add(rp_cuda_ctx *c, float *y, const float *x, const int32_t *rows,
                         const float *w, int n, int dim);
/* Device read bandwidth in GB/s over an n-byte buffer, best of reps. */
double rp_cuda_read_bw(rp_cuda_ctx *c, size_t n, int reps);
/* f32 -> host-side conversion for 1-D weights lives in the C file; this converts nothing. */

#ifdef __cplusplus
}
#endif

#endif
