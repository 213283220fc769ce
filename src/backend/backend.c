/* backend/backend.c - dtype facts shared by every backend, and the op dispatch. */
#include "backend/backend_impl.h"

const float rp_fp4_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

#include "backend/quant.h"

const char *rp_dtype_name(rp_dtype dt)
{
    static const char *const names[RP_DT_COUNT] = {
        [RP_DT_F32] = "f32",   [RP_DT_F16] = "f16",   [RP_DT_BF16] = "bf16",
        [RP_DT_Q8_0] = "q8_0", [RP_DT_Q4_0] = "q4_0", [RP_DT_Q4_1] = "q4_1",
        [RP_DT_Q5_0] = "q5_0", [RP_DT_Q5_1] = "q5_1", [RP_DT_Q4_K] = "q4_k",
        [RP_DT_Q5_K] = "q5_k", [RP_DT_Q6_K] = "q6_k", [RP_DT_MLX4] = "mlx4",
        [RP_DT_MLX8] = "mlx8",   [RP_DT_MXFP4] = "mxfp4",
    };
    return (unsigned)dt < RP_DT_COUNT ? names[dt] : "?";
}

int rp_dtype_block(rp_dtype dt)
{
    switch (dt) {
    case RP_DT_F32:
    case RP_DT_F16:
    case RP_DT_BF16: return 1;
    case RP_DT_Q4_K:
    case RP_DT_Q5_K:
    case RP_DT_Q6_K: return 256;
    default: return 32;
    }
}

int rp_dtype_is_quant(rp_dtype dt) { return dt >= RP_DT_Q8_0 && dt < RP_DT_COUNT; }

size_t rp_dtype_row_bytes(rp_dtype dt, int64_t n)
{
    switch (dt) {
    case RP_DT_F32: return (size_t)n * 4;
    case RP_DT_F16:
    case RP_DT_BF16: return (size_t)n * 2;
    case RP_DT_MXFP4: return (size_t)(n / 32) * 17;
    case RP_DT_MLX4: return (size_t)n / 2;
    case RP_DT_MLX8: return (size_t)n;
    default: break;
    }
    size_t bb = rp_quant_block_bytes(dt);
    return bb ? (size_t)(n / rp_dtype_block(dt)) * bb : 0;
}

/* ---- dispatch through the vtable (backend_impl.h) -------------------------------------- */

void rp_backend_free(rp_backend *b)
{
    if (b)
        b->vt->destroy(b);
}

int rp_backend_n_threads(const rp_backend *b) { return b->n_threads; }
const char *rp_backend_describe(const rp_backend *b) { return b->desc; }
int rp_backend_is_cuda(const rp_backend *b) { return b->is_cuda; }
int rp_backend_host_buffers(const rp_backend *b) { return b->host_buffers; }

void *rp_backend_buf_alloc(rp_backend *b, size_t n_bytes, int tag)
{
    return b->vt->buf_alloc(b, n_bytes, tag);
}

void rp_backend_buf_free(rp_backend *b, void *p)
{
    if (p)
        b->vt->buf_free(b, p);
}

void rp_backend_to_host(rp_backend *b, void *dst, const void *src, size_t n)
{
    b->vt->to_host(b, dst, src, n);
}

void rp_backend_from_host(rp_backend *b, void *dst, const void *src, size_t n)
{
    b->vt->from_host(b, dst, src, n);
}

rp_status rp_backend_weight(rp_backend *b, const rp_tensor *src, rp_tensor *dst, rp_err *err)
{
    return b->vt->weight(b, src, dst, err);
}

double rp_backend_read_bandwidth(rp_backend *b, size_t n_bytes, int reps)
{
    return b->vt->read_bandwidth(b, n_bytes, reps);
}

void rp_op_matmul(rp_backend *b, const rp_tensor *w, const float *x, int n_tok, float *y)
{
    b->vt->matmul(b, w, x, n_tok, y);
}

void rp_op_matmul_n(rp_backend *b, int n, const rp_tensor *const *w, const float *x, int n_tok,
                    float *const *y)
{
    RP_ASSERT(n >= 1 && n <= 3);
    if (b->vt->matmul_n) {
        b->vt->matmul_n(b, n, w, x, n_tok, y);
        return;
    }
    for (int i = 0; i < n; i++)
        b->vt->matmul(b, w[i], x, n_tok, y[i]);
}

void rp_op_rmsnorm(rp_backend *b, float *out, const float *x, const rp_tensor *w, int n_tok,
                   int dim, float eps, int add_one)
{
    b->vt->rmsnorm(b, out, x, w, n_tok, dim, eps, add_one);
}

void rp_op_rope(rp_backend *b, float *x, int n_tok, int n_heads, int head_dim, int rot_dim,
                const int32_t *pos, const float *inv_freq, float attn_factor, int neox)
{
    b->vt->rope(b, x, n_tok, n_heads, head_dim, rot_dim, pos, inv_freq, attn_factor, neox);
}

void rp_op_attention(rp_backend *b, const rp_attn_args *a)
{
    RP_ASSERT(b->vt->attention); /* host-buffer backends only */
    b->vt->attention(b, a);
}

void rp_op_silu_mul(rp_backend *b, float *out, const float *gate, const float *up, int64_t n)
{
    b->vt->silu_mul(b, out, gate, up, n);
}

void rp_op_add(rp_backend *b, float *y, const float *x, int64_t n) { b->vt->add(b, y, x, n); }

void rp_op_gelu_mul(rp_backend *b, float *out, const float *gate, const float *up, int64_t n)
{
    b->vt->gelu_mul(b, out, gate, up, n);
}

void rp_op_swiglu_clamp(rp_backend *b, float *out, const float *gate, const float *up, int64_t n,
                        float limit, float alpha)
{
    b->vt->swiglu_clamp(b, out, gate, up, n, limit, alpha);
}

void rp_op_scale(rp_backend *b, float *x, float s, int64_t n) { b->vt->scale(b, x, s, n); }

void rp_op_scatter_add(rp_backend *b, float *y, const float *x, const int32_t *rows,
                       const float *w, int n, int dim)
{
    if (n > 0)
        b->vt->scatter_add(b, y, x, rows, w, n, dim);
}

void rp_op_add_bias(rp_backend *b, float *y, const rp_tensor *bias, int n_tok, int dim)
{
    if (bias)
        b->vt->add_bias(b, y, bias, n_tok, dim);
}

void rp_op_embed(rp_backend *b, const rp_tensor *table, const int32_t *ids, int n, float *x)
{
    b->vt->embed(b, table, ids, n, x);
}

void rp_op_gather_rows(rp_backend *b, float *dst, const float *src, const int32_t *rows, int n,
                       int dim)
{
    b->vt->gather_rows(b, dst, src, rows, n, dim);
}

void rp_op_step_begin(rp_backend *b, const rp_kv_layout *kv, const rp_step_seq *seqs,
                      int n_seqs)
{
    b->vt->step_begin(b, kv, seqs, n_seqs);
}

void rp_op_kv_copy_block(rp_backend *b, const rp_kv_layout *kv, int dst, int src)
{
    RP_ASSERT(kv->block_bytes % sizeof(float) == 0 && dst != src);
    int32_t row = 0;
    char *base = kv->base;
    b->vt->gather_rows(b, (float *)(void *)(base + (size_t)dst * kv->block_bytes),
                       (const float *)(void *)(base + (size_t)src * kv->block_bytes), &row, 1,
                       (int)(kv->block_bytes / sizeof(float)));
}

int rp_backend_kv_dtype_ok(const rp_backend *b, rp_kv_dtype dt)
{
    return !b->is_cuda || dt == RP_KV_F32 || dt == RP_KV_BF16 || dt == RP_KV_F16;
}

void rp_op_kv_store(rp_backend *b, int layer, const float *k, const float *v, int kv_dim)
{
    b->vt->kv_store(b, layer, k, v, kv_dim);
}

void rp_op_attention_step(rp_backend *b, int layer, const rp_step_attn *a)
{
    b->vt->attention_step(b, layer, a);
}

int rp_op_sample_rows(rp_backend *b, const float *x, int n_rows, int n,
                      const struct rp_sample_row *p, int32_t *out)
{
    if (!b->vt->sample_rows)
        return 0;
    b->vt->sample_rows(b, x, n_rows, n, p, out);
    return 1;
}

void rp_op_argmax_rows(rp_backend *b, const float *x, int n_rows, int n, int32_t *out)
{
    if (b->vt->argmax_rows) {
        b->vt->argmax_rows(b, x, n_rows, n, out);
        return;
    }
    RP_ASSERT(b->host_buffers);
    for (int r = 0; r < n_rows; r++) {
        const float *row = x + (size_t)r * (size_t)n;
        int32_t best = 0;
        for (int i = 1; i < n; i++)
            if (row[i] > row[best])
                best = i;
        out[r] = best;
    }
}

#ifndef RP_HAVE_CUDA
rp_status rp_backend_new_cuda(int device, double mem_fraction, rp_backend **out, rp_err *err)
{
    *out = NULL;
    return rp_err_set(err, RP_ERR_UNSUPPORTED, "this rapid was built without CUDA (CUDA=0 or no "
                                               "nvcc at build time)");
}

int rp_backend_cuda_devices(void) { return 0; }
#endif
