/* backend/backend.h - the op set every architecture's forward pass is written in.
 *
 * A model recipe (src/model/) calls these ops; the backend picks the kernel for the weight's
 * dtype and the CPU's ISA (AVX-512, AVX2, scalar) at run time, or the plain-C reference for
 * every op when ref_kernels is set (`--ref-kernels`). Activations are f32 row-major:
 * x[t * dim + i] is element i of token t. Weights are rp_tensor views (usually into an mmap).
 *
 * Ownership: rp_backend_new -> rp_backend_free. Tensors are borrowed views; ops never keep
 *            pointers past the call.
 * Threading: one caller thread at a time per backend (the engine thread); ops fan out over the
 *            backend's own thread pool.
 * Errors:    ops cannot fail at run time: shapes are validated when the model is loaded
 *            (RP_ASSERT guards the contracts).
 */
#ifndef RP_BACKEND_BACKEND_H
#define RP_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef enum rp_dtype {
    RP_DT_F32 = 0,
    RP_DT_F16,
    RP_DT_BF16,
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

rp_backend *rp_backend_new(int n_threads, int ref_kernels);
void rp_backend_free(rp_backend *b);
int rp_backend_n_threads(const rp_backend *b);
const char *rp_backend_describe(const rp_backend *b); /* "cpu avx512, 2 threads" */

/* Measured read bandwidth of this machine in GB/s (1e9 bytes/s): every pool thread streams
 * its share of an n_bytes buffer (make it several times the last-level cache), best of reps. */
double rp_backend_read_bandwidth(rp_backend *b, size_t n_bytes, int reps);

/* y[t][r] = sum_c w[r][c] * x[t][c] for t < n_tok, r < rows; x is [n_tok][cols]. */
void rp_op_matmul(rp_backend *b, const rp_tensor *w, const float *x, int n_tok, float *y);

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
 * window > 0 limits each query to the last `window` keys (sliding window). */
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
} rp_attn_args;
void rp_op_attention(rp_backend *b, const rp_attn_args *a);

/* out[i] = silu(gate[i]) * up[i] for n elements. */
void rp_op_silu_mul(rp_backend *b, float *out, const float *gate, const float *up, int64_t n);
/* y[i] += x[i] */
void rp_op_add(rp_backend *b, float *y, const float *x, int64_t n);

#endif
