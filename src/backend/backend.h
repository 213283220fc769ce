/* backend/backend.h - the op set every architecture's forward pass is written in.
 *
 * A model recipe (src/model/) calls these ops through an rp_backend, which is the CPU one
 * (rp_backend_new: kernels for the weight's dtype and the CPU's ISA, AVX-512, AVX2, scalar,
 * or the plain-C reference for every op when ref_kernels is set) or the CUDA one
 * (rp_backend_new_cuda, when built with nvcc). Activations are f32 row-major:
 * x[t * dim + i] is element i of token t.
 *
 * Memory: activation and KV buffers come from rp_backend_buf_alloc (host memory on the CPU,
 * device memory on CUDA); every float pointer an op takes is such a buffer. Weights go
 * through rp_backend_weight once at load: the CPU backend keeps the view (an mmap), except
 * that on x86-64 it records bf16 / f16 matrices for a copy into huge pages and quantized ones
 * for a repacked copy, each made at the matrix's first matmul (a table only read a row at a
 * time, an untied embedding, is never copied); CUDA uploads it (1-D tensors as f32). rp_backend_to_host
 * copies a buffer's bytes out (logits);
 * rp_backend_host_buffers says whether buffers are plain host memory (then a caller may pass
 * its own host arrays, as the CPU tests do).
 *
 * Ownership: rp_backend_new / rp_backend_new_cuda -> rp_backend_free (which also frees the
 *            uploaded weights). Buffers: rp_backend_buf_alloc -> rp_backend_buf_free, before
 *            the backend. Tensors passed to ops are borrowed; ops keep no pointers past the call
 *            except the step layout (rp_op_step_begin), valid until the next step.
 * Threading: one caller thread at a time per backend (the engine thread); CPU ops fan out over
 *            the backend's own thread pool, CUDA ops are queued on the backend's one stream.
 * Errors:    ops cannot fail at run time: shapes are validated when the model is loaded
 *            (RP_ASSERT guards the contracts; a CUDA launch failure is fatal, as a wild
 *            pointer would be on the CPU). Allocation and upload return rp_status.
 */
#ifndef RP_BACKEND_BACKEND_H
#define RP_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum rp_dtype {
    RP_DT_F32 = 0,
    RP_DT_F16,
    RP_DT_BF16,
    /* MXFP4 (OCP microscaling, gpt-oss experts): blocks of 32 FP4 (e2m1) values sharing one
     * E8M0 scale 2^(s - 127). A row of n elements (n % 32 == 0) is n / 32 blocks of 17 bytes:
     * the scale byte, then 16 bytes of nibbles (element 2i in the low nibble, 2i + 1 high). */
    RP_DT_MXFP4,
    /* GGUF block types (layouts in backend/quant.h) */
    RP_DT_Q8_0,
    RP_DT_Q4_0,
    RP_DT_Q4_1,
    RP_DT_Q5_0,
    RP_DT_Q5_1,
    RP_DT_Q4_K,
    RP_DT_Q5_K,
    RP_DT_Q6_K,
    /* MLX affine: w = scale * q + bias per group of group_size elements of a row; q packed
     * little-endian into uint32 words (8 x 4-bit or 4 x 8-bit per word, element 0 in the
     * lowest bits); scales/biases are separate [rows][cols / group_size] arrays. */
    RP_DT_MLX4,
    RP_DT_MLX8,
    RP_DT_COUNT
} rp_dtype;

const char *rp_dtype_name(rp_dtype dt);
/* Bytes of one row of n elements (n must be a multiple of the block size for block types;
 * MLX types: the packed weights only, scales and biases are extra). */
size_t rp_dtype_row_bytes(rp_dtype dt, int64_t n);
/* Elements per block: 1 (f32/f16/bf16), 32 (Q*_0/Q*_1; MLX packs in 32-element runs), 256
 * (K types). A quantized row's length must be a multiple of it. */
int rp_dtype_block(rp_dtype dt);
int rp_dtype_is_quant(rp_dtype dt);

/* The 16 FP4 (e2m1) values by nibble, sign in bit 3 (MXFP4 elements before scaling). */
extern const float rp_fp4_values[16];

/* A weight: shape[0] rows of shape[1] elements (1-D tensors have shape[1] == 1 semantics:
 * n_dims == 1, shape[0] elements). */
typedef struct rp_tensor {
    rp_dtype dtype;
    int n_dims;
    int64_t shape[4];
    const void *data;
    size_t n_bytes;
    /* MLX types only: scales and biases, [shape[0]][shape[1] / group_size] of scale_dtype
     * (f32, f16 or bf16); group_size is 32, 64 or 128. */
    const void *scales, *biases;
    rp_dtype scale_dtype;
    int group_size;
} rp_tensor;

typedef struct rp_backend rp_backend;

/* The CPU backend (never fails short of memory: NULL then). */
rp_backend *rp_backend_new(int n_threads, int ref_kernels);
/* ref_kernels = RP_BACKEND_EXACT: the optimised kernels, but prefill of bf16 weights keeps
 * the activations f32-exact (AMX: three bf16 parts each, 3x the tile work) instead of
 * rounding them to bf16; for tests that compare kernels against f32 math. */
#define RP_BACKEND_EXACT 2
/* The CUDA backend on GPU `device`, allowed mem_fraction (0..1, <= 0: 0.9) of its memory for
 * weights, activations and KV. RP_ERR_UNSUPPORTED when built without CUDA or no GPU is
 * there, RP_ERR_BACKEND for a driver/runtime failure (named). */
rp_status rp_backend_new_cuda(int device, double mem_fraction, rp_backend **out, rp_err *err);
/* Number of usable CUDA GPUs (0 when built without CUDA or the driver finds none). */
int rp_backend_cuda_devices(void);
void rp_backend_free(rp_backend *b);
int rp_backend_n_threads(const rp_backend *b);
const char *rp_backend_describe(const rp_backend *b); /* "cpu avx512, 2 threads" */
int rp_backend_is_cuda(const rp_backend *b);

/* Buffers for activations and caches (64-byte aligned host memory on the CPU, device memory
 * on CUDA, counted against --gpu-memory-fraction there). tag is an rp_alloc_tag. */
void *rp_backend_buf_alloc(rp_backend *b, size_t n_bytes, int tag);
void rp_backend_buf_free(rp_backend *b, void *p);
int rp_backend_host_buffers(const rp_backend *b);
/* Copies n bytes of a buffer to host memory (waits for the queued ops). */
void rp_backend_to_host(rp_backend *b, void *dst, const void *src, size_t n);
/* Copies n bytes of host memory into a buffer, ordered after the queued ops and before the
 * later ones (synchronous: src may go away on return). For the host-side pieces of a recipe
 * (LFM2's short convolutions) between backend ops. */
void rp_backend_from_host(rp_backend *b, void *dst, const void *src, size_t n);
/* Makes *dst the backend's copy of weight *src (see the memory note above). */
rp_status rp_backend_weight(rp_backend *b, const rp_tensor *src, rp_tensor *dst, rp_err *err);

/* Measured read bandwidth of this machine in GB/s (1e9 bytes/s): every pool thread streams
 * its share of an n_bytes buffer (make it several times the last-level cache), best of reps. */
double rp_backend_read_bandwidth(rp_backend *b, size_t n_bytes, int reps);

/* y[t][r] = sum_c w[r][c] * x[t][c] for t < n_tok, r < rows; x is [n_tok][cols]. */
void rp_op_matmul(rp_backend *b, const rp_tensor *w, const float *x, int n_tok, float *y);

/* y[i] = w[i] x for i < n (n <= 3) over the same x, as n calls of rp_op_matmul would give;
 * a backend may run them as one pass (CUDA's decode matvec: one launch). */
void rp_op_matmul_n(rp_backend *b, int n, const rp_tensor *const *w, const float *x, int n_tok,
                    float *const *y);

/* out[t] = x[t] / rms(x[t]) * (w (+1 when add_one)); w may be NULL (no scale). out may be x. */
void rp_op_rmsnorm(rp_backend *b, float *out, const float *x, const rp_tensor *w, int n_tok,
                   int dim, float eps, int add_one);

/* Reads a 1-D tensor into f32 (n elements). */
void rp_tensor_to_f32(const rp_tensor *t, float *out, int64_t n);
/* Row `row` of a 2-D tensor into f32 (embedding lookup; quantized rows are dequantized). */
void rp_tensor_row_f32(const rp_tensor *t, int64_t row, float *out);

/* Rotary embedding, in place on x[t][n_heads][head_dim] for the first rot_dim dims of each head,
 * with positions pos[t]. inv_freq has rot_dim/2 entries; cos/sin are scaled by attn_factor.
 * neox: rotate halves (HF rotate_half); else interleaved pairs (GPT-J). */
void rp_op_rope(rp_backend *b, float *x, int n_tok, int n_heads, int head_dim, int rot_dim,
                const int32_t *pos, const float *inv_freq, float attn_factor, int neox);

/* Causal attention of n_tok queries (at positions pos0 .. pos0+n_tok-1) over the cache
 * k/v [n_ctx][n_kv_heads][head_dim] (the queries' own keys included), GQA by
 * n_heads / n_kv_heads. q: [n_tok][n_heads][head_dim], out: same shape.
 * window > 0 limits each query to the last `window` keys (sliding window).
 * sinks (NULL: none) holds one logit per query head that joins the softmax's denominator
 * without a value (gpt-oss attention sinks): p_j = exp(s_j) / (sum_i exp(s_i) + exp(sink)).
 * The models attend through the paged rp_op_attention_step; this contiguous form is the
 * plain-C reference on every CPU backend (the oracle the paged kernels are tested against),
 * host buffers only. */
typedef struct rp_attn_args {
    const float *q;
    const float *k;
    const float *v;
    float *out;
    int n_tok;
    int pos0;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int window;
    const float *sinks;
} rp_attn_args;
void rp_op_attention(rp_backend *b, const rp_attn_args *a);

/* Gated delta rule (Gated DeltaNet, Qwen3.5 / Qwen3-Next linear attention) over n_tok tokens
 * for n_v_heads heads, each with its state S [dk][dv] (state + h * dk * dv, updated in place).
 * Token t, value head h, key head kh = h / (n_v_heads / n_k_heads):
 *   S = exp(g[t][h]) S ; S += k (beta[t][h] (v - S^T k))^T ; out = S^T q
 * q, k, v, out: token t's row at t * (q|k|v|out)_stride floats, key heads at kh * dk, value
 * heads at h * dv; q and k already L2-normalised (q scaled). g, beta: [n_tok][n_v_heads].
 * Heads fan out over the pool; tokens run in order within a head (the state stays in cache). */
typedef struct rp_delta_args {
    const float *q, *k, *v, *g, *beta;
    float *state, *out;
    int n_tok, n_k_heads, n_v_heads, dk, dv;
    long q_stride, k_stride, v_stride, out_stride;
} rp_delta_args;
void rp_op_gated_delta(rp_backend *b, const rp_delta_args *a);

/* ---- paged KV cache storage ------------------------------------------------------------ */

/* How K and V rows are stored. A row is one token's one KV head (head_dim elements):
 *   F32, BF16, F16: head_dim elements of that type;
 *   INT8: head_dim int8 q then one f32 scale d, x ~= d * q, d = max |x| / 127 (symmetric,
 *         round to nearest): the error per element is at most d / 2;
 *   INT4: head_dim / 2 bytes (element 2i in the low nibble, 2i + 1 high, stored q + 8,
 *         q in [-7, 7]) then one f32 scale d = max |x| / 7; the error is at most d / 2.
 * The group of a scale is therefore one head of one token. Row sizes are multiples of 4
 * bytes (INT4 needs head_dim % 8 == 0). */
typedef enum rp_kv_dtype {
    RP_KV_F32 = 0,
    RP_KV_BF16,
    RP_KV_F16,
    RP_KV_INT8,
    RP_KV_INT4,
    RP_KV_DTYPE_COUNT
} rp_kv_dtype;

const char *rp_kv_dtype_name(rp_kv_dtype dt);
/* "f32", "bf16", "f16", "int8", "int4" -> 0; -1 for anything else. */
int rp_kv_dtype_parse(const char *s, rp_kv_dtype *out);
/* Bytes of one stored row (0 when head_dim does not suit the type). */
size_t rp_kv_row_bytes(rp_kv_dtype dt, int head_dim);
/* Encodes / decodes one row (the one codec every backend and the reference use). */
void rp_kv_row_store(rp_kv_dtype dt, const float *x, int head_dim, void *dst);
void rp_kv_row_load(rp_kv_dtype dt, const void *src, int head_dim, float *out);

/* A pool of KV blocks in one backend buffer. Block b starts at base + b * block_bytes; in it,
 * cache layer l (0 .. n_layers-1: the model's layers that have attention) holds K then V,
 * each half_bytes = block_tokens * n_kv_heads * row_bytes: the row of position p (p % block_tokens
 * within the block), head h is at (p % block_tokens) * n_kv_heads + h rows from the half's
 * start. A sequence's position p lives in block table[p / block_tokens]. */
typedef struct rp_kv_layout {
    void *base;
    rp_kv_dtype dtype;
    int block_tokens;
    int n_layers;
    int n_kv_heads, head_dim;
    size_t row_bytes, half_bytes, block_bytes;
} rp_kv_layout;

/* Address of the K (v = 0) or V (v = 1) row of (layer, position, head) of a sequence. */
static inline void *rp_kv_row_at(const rp_kv_layout *L, const int32_t *table, int layer, int v,
                                 int pos, int head)
{
    size_t b = (size_t)table[pos / L->block_tokens];
    return (char *)L->base + b * L->block_bytes + (size_t)(2 * layer + v) * L->half_bytes +
           ((size_t)(pos % L->block_tokens) * (size_t)L->n_kv_heads + (size_t)head) * L->row_bytes;
}

/* ---- step ops: the recipe's whole batch at once ----------------------------------------- */

/* One sequence of a forward step: its tokens are rows t0 .. t0+n_tok-1 of the activations,
 * at positions pos0 ..; its cache is the blocks of its block table (host memory, covering
 * positions 0 .. pos0 + n_tok - 1) in the step's pool. */
typedef struct rp_step_seq {
    const int32_t *blocks;
    int n_blocks;
    int t0, n_tok, pos0;
} rp_step_seq;

/* Declares the layout of the next ops' step (kv and seqs are copied; the block tables are
 * borrowed until the step's last op). */
void rp_op_step_begin(rp_backend *b, const rp_kv_layout *kv, const rp_step_seq *seqs,
                      int n_seqs);
/* Stores rows k, v [n_tok][kv_dim] at each token's position in cache layer `layer`. */
void rp_op_kv_store(rp_backend *b, int layer, const float *k, const float *v, int kv_dim);
/* rp_op_attention for every sequence of the step over cache layer `layer`, reading the
 * blocks in their stored type; q and out are [n_tok][n_heads][head_dim] for the whole step.
 * sinks as in rp_attn_args (NULL: none). */
typedef struct rp_step_attn {
    const float *q;
    float *out;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int window;
    const float *sinks;
} rp_step_attn;
void rp_op_attention_step(rp_backend *b, int layer, const rp_step_attn *a);
/* Copies pool block src to block dst (copy on write of a shared block). */
void rp_op_kv_copy_block(rp_backend *b, const rp_kv_layout *kv, int dst, int src);
/* Whether the backend's step ops take this storage type (CUDA: F32, BF16, F16). */
int rp_backend_kv_dtype_ok(const rp_backend *b, rp_kv_dtype dt);

/* x[t] = row ids[t] of the 2-D table, as f32 (ids on the host). */
void rp_op_embed(rp_backend *b, const rp_tensor *table, const int32_t *ids, int n, float *x);
/* y[t][i] += bias[i] for t < n_tok, i < dim (bias 1-D, NULL: nothing). */
void rp_op_add_bias(rp_backend *b, float *y, const rp_tensor *bias, int n_tok, int dim);
/* dst[i] = src[rows[i]] for i < n rows of dim floats (rows on the host, increasing; dst may
 * be src when rows[i] >= i). */
void rp_op_gather_rows(rp_backend *b, float *dst, const float *src, const int32_t *rows, int n,
                       int dim);

/* out[i] = argmax of row i of x [n_rows][n] (the lowest index among equal maxima), for the
 * greedy sampler: on CUDA only the ids come back to the host, not the rows. out is a host
 * array; waits for the queued ops. */
void rp_op_argmax_rows(rp_backend *b, const float *x, int n_rows, int n, int32_t *out);

/* out[i] = rp_sample_draw(row i of x [n_rows][n], &p[i]) (backend/sample.h), drawn where x
 * lives so that only the ids come back (the CPU backend: rows shared over its pool); -1
 * for a row the backend leaves to the caller (on CUDA: top_k above RP_SAMPLE_MAX_SORTED, or a
 * nucleus longer than it). Returns 0, out untouched, when the backend has no such op.
 * p and out are host arrays; waits for the queued ops. */
struct rp_sample_row;
int rp_op_sample_rows(rp_backend *b, const float *x, int n_rows, int n,
                      const struct rp_sample_row *p, int32_t *out);

/* out[i] = silu(gate[i]) * up[i] for n elements. */
void rp_op_silu_mul(rp_backend *b, float *out, const float *gate, const float *up, int64_t n);
/* y[i] += x[i] */
void rp_op_add(rp_backend *b, float *y, const float *x, int64_t n);
/* out[i] = gelu_tanh(gate[i]) * up[i] (the tanh approximation, Gemma's MLP); out may be gate. */
void rp_op_gelu_mul(rp_backend *b, float *out, const float *gate, const float *up, int64_t n);
/* gpt-oss's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
 * out[i] = (u + 1) * g * sigmoid(alpha * g); out may be gate. */
void rp_op_swiglu_clamp(rp_backend *b, float *out, const float *gate, const float *up, int64_t n,
                        float limit, float alpha);
/* x[i] *= s */
void rp_op_scale(rp_backend *b, float *x, float s, int64_t n);
/* y[rows[i]] += w[i] * x[i] for n rows of dim floats (rows and w on the host; the rows of
 * one call distinct): a mixture of experts adds each expert's output to its tokens. */
void rp_op_scatter_add(rp_backend *b, float *y, const float *x, const int32_t *rows,
                       const float *w, int n, int dim);

#endif
