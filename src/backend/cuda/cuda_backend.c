/* backend/cuda/cuda_backend.c - the CUDA backend's vtable over the launchers of cuda_kernels.cu.
 *
 * Design notes:
 *  1. Weights: 2-D tensors are uploaded as stored (f32/f16/bf16, decoded in the kernels);
 *     1-D tensors (norm weights, biases) are converted to f32 on the host first, so every
 *     elementwise kernel reads f32. Uploads are freed with the backend.
 *  2. Every device allocation (weights, activations, KV, the kernels' scratch excepted) is
 *     counted against the budget, mem_fraction of the GPU's memory; past it buf_alloc and
 *     weight fail (RP_ERR_NOMEM at the caller), before cudaMalloc would.
 *  3. The step layout becomes one token table on the device (rp_cuda_step), read by RoPE,
 *     the KV store and attention of every layer.
 *  4. MLX 4/8-bit weights stay quantized: the packed words as stored, and the scales and
 *     biases interleaved into one (scale, bias) array in their own type (cuda_quant.h); the
 *     device tensor's scales and biases both point at it. Matmuls and embedding lookups of
 *     them go to cuda_quant.cu.
 *  5. GGUF weights: the types whose groups are affine (Q4_0, Q4_1, Q4_K as 4-bit; Q8_0, Q5_0,
 *     Q5_1, Q5_K as 8-bit) are rewritten at upload into that MLX form with group 32 and f16
 *     scales (backend/quant_affine.h: exact but for the K types' scale products, rounded
 *     once to f16), so they run on the same kernels. Q6_K (16-element sub-blocks) is expanded
 *     to f16 (each value rounded once: 2^-11 relative, 1/32 of a Q6_K step or less), MXFP4
 *     (gpt-oss experts) to bf16, which holds its values exactly; 4-bit kernels for these two
 *     are not written yet.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_quant.h"
#include "backend/quant.h"
#include "backend/quant_affine.h"
#include "base/alloc.h"
#include "base/half.h"
#include "base/status.h"

typedef struct cuda_backend {
    rp_backend base; /* first */
    rp_cuda_ctx *ctx;
    size_t budget, used;
    void **weights; /* uploads, freed with the backend */
    size_t *weight_bytes;
    int n_weights, cap_weights;
    rp_cuda_tok *toks;
    int toks_cap;
    int32_t *tbl; /* the step's block tables, concatenated */
    int tbl_cap;
    void **bufs; /* live buffers and their sizes, for the budget */
    size_t *buf_bytes;
    int n_bufs, cap_bufs;
    int no_sample; /* RAPID_CUDA_SAMPLE=0: draws left to the host, as before the GPU draw */
} cuda_backend;

#define CB(bk) ((cuda_backend *)(bk))

static const rp_backend_vt g_cuda_vt;
static void cuda_buf_free(rp_backend *bk, void *p);

int rp_backend_cuda_devices(void) { return rp_cuda_device_count(); }

static void cuda_destroy(rp_backend *bk)
{
    cuda_backend *b = CB(bk);
    for (int i = 0; i < b->n_weights; i++)
        cuda_buf_free(bk, b->weights[i]);
    rp_free(b->weights);
    rp_free(b->weight_bytes);
    rp_free(b->bufs);
    rp_free(b->buf_bytes);
    rp_free(b->toks);
    rp_free(b->tbl);
    rp_cuda_ctx_free(b->ctx);
    rp_free(b);
}

rp_status rp_backend_new_cuda(int device, double mem_fraction, rp_backend **out, rp_err *err)
{
    *out = NULL;
    char msg[256] = "";
    rp_cuda_ctx *ctx = rp_cuda_ctx_new(device, msg, sizeof msg);
    if (!ctx)
        return rp_err_set(err, strstr(msg, "no CUDA GPU") ? RP_ERR_UNSUPPORTED : RP_ERR_BACKEND,
                          "%s", msg);
    cuda_backend *b = rp_calloc(1, sizeof *b);
    if (!b) {
        rp_cuda_ctx_free(ctx);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    b->ctx = ctx;
    const char *no_draw = getenv("RAPID_CUDA_SAMPLE");
    b->no_sample = no_draw && strcmp(no_draw, "0") == 0;
    b->base.vt = &g_cuda_vt;
    b->base.n_threads = 1;
    b->base.is_cuda = 1;
    size_t free_b, total_b;
    rp_cuda_mem_info(ctx, &free_b, &total_b);
    if (mem_fraction <= 0 || mem_fraction > 1)
        mem_fraction = 0.9;
    b->budget = (size_t)((double)total_b * mem_fraction);
    snprintf(b->base.desc, sizeof b->base.desc, "cuda %s (budget %.1f GiB)", rp_cuda_ctx_name(ctx),
             (double)b->budget / (1024.0 * 1024 * 1024));
    *out = &b->base;
    return RP_OK;
}

/* ---- memory ------------------------------------------------------------------------------ */

static void *cuda_buf_alloc(rp_backend *bk, size_t n, int tag)
{
    cuda_backend *b = CB(bk);
    if (b->used + n > b->budget)
        return NULL;
    if (b->n_bufs == b->cap_bufs) {
        int cap = b->cap_bufs ? b->cap_bufs * 2 : 64;
        void **p = rp_realloc(b->bufs, sizeof(void *) * (size_t)cap);
        if (!p)
            return NULL;
        b->bufs = p;
        size_t *q = rp_realloc(b->buf_bytes, sizeof(size_t) * (size_t)cap);
        if (!q)
            return NULL;
        b->buf_bytes = q;
        b->cap_bufs = cap;
    }
    void *p = rp_cuda_malloc(b->ctx, n);
    if (!p)
        return NULL;
    b->used += n;
    b->bufs[b->n_bufs] = p;
    b->buf_bytes[b->n_bufs++] = n;
    return p;
}

static void cuda_buf_free(rp_backend *bk, void *p)
{
    cuda_backend *b = CB(bk);
    for (int i = 0; i < b->n_bufs; i++)
        if (b->bufs[i] == p) {
            b->used -= b->buf_bytes[i];
            b->bufs[i] = b->bufs[--b->n_bufs];
            b->buf_bytes[i] = b->buf_bytes[b->n_bufs];
            break;
        }
    rp_cuda_free(b->ctx, p);
}

static void cuda_to_host(rp_backend *bk, void *dst, const void *src, size_t n)
{
    rp_cuda_to_host(CB(bk)->ctx, dst, src, n);
}

static void cuda_from_host(rp_backend *bk, void *dst, const void *src, size_t n)
{
    rp_cuda_upload(CB(bk)->ctx, dst, src, n);
}

/* Uploads n bytes of host memory into a new tracked device allocation. */
static rp_status upload(cuda_backend *b, const void *host, size_t bytes, void **out, rp_err *err)
{
    if (b->n_weights == b->cap_weights) {
        int cap = b->cap_weights ? b->cap_weights * 2 : 512;
        void **w = rp_realloc(b->weights, sizeof(void *) * (size_t)cap);
        size_t *wb = w ? rp_realloc(b->weight_bytes, sizeof(size_t) * (size_t)cap) : NULL;
        if (w)
            b->weights = w;
        if (!w || !wb)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        b->weight_bytes = wb;
        b->cap_weights = cap;
    }
    void *d = cuda_buf_alloc(&b->base, bytes, RP_TAG_MODEL);
    if (!d)
        return rp_err_set(err, RP_ERR_NOMEM,
                          "GPU memory: %.2f GiB of weights so far, the next tensor (%zu bytes) "
                          "does not fit in the budget of %.2f GiB (--gpu-memory-fraction)",
                          (double)b->used / (1 << 30), bytes, (double)b->budget / (1 << 30));
    rp_cuda_upload(b->ctx, d, host, bytes);
    b->weights[b->n_weights] = d;
    b->weight_bytes[b->n_weights++] = bytes;
    *out = d;
    return RP_OK;
}

static int is_mlx(rp_dtype dt) { return dt == RP_DT_MLX4 || dt == RP_DT_MLX8; }

/* An MLX weight: the packed words as they are, scales and biases interleaved (note 4). */
static rp_status mlx_weight(cuda_backend *b, const rp_tensor *src, rp_tensor *dst, rp_err *err)
{
    int bits = src->dtype == RP_DT_MLX4 ? 4 : 8;
    long rows = (long)src->shape[0], cols = (long)src->shape[1];
    rp_dtype sd = src->scale_dtype;
    if (src->n_dims != 2 || !rp_cuda_qw_ok(bits, src->group_size, rows, cols) ||
        (sd != RP_DT_F32 && sd != RP_DT_BF16 && sd != RP_DT_F16))
        return rp_err_set(err, RP_ERR_UNSUPPORTED,
                          "%s weight %ld x %ld (group %d, %s scales): the CUDA kernels take "
                          "columns a multiple of 32 and of the group size (32, 64 or 128); use "
                          "--device cpu",
                          rp_dtype_name(src->dtype), rows, cols, src->group_size,
                          rp_dtype_name(sd));
    size_t ng = (size_t)rows * (size_t)(cols / src->group_size), es = sd == RP_DT_F32 ? 4 : 2;
    unsigned char *sb = rp_alloc(2 * es * (ng ? ng : 1));
    if (!sb)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    const unsigned char *sc = src->scales, *bi = src->biases;
    for (size_t g = 0; g < ng; g++) {
        memcpy(sb + 2 * es * g, sc + es * g, es);
        memcpy(sb + 2 * es * g + es, bi + es * g, es);
    }
    void *dq = NULL, *dsb = NULL;
    rp_status rc = upload(b, src->data, rp_dtype_row_bytes(src->dtype, cols) * (size_t)rows, &dq,
                          err);
    if (rc == RP_OK)
        rc = upload(b, sb, 2 * es * ng, &dsb, err);
    rp_free(sb);
    if (rc)
        return rc;
    *dst = *src;
    dst->data = dq;
    dst->scales = dst->biases = dsb;
    return RP_OK;
}

/* A GGUF block-type weight (note 5): as an MLX one, or expanded to f16. */
static rp_status gguf_weight(cuda_backend *b, const rp_tensor *src, rp_tensor *dst, rp_err *err)
{
    rp_dtype dt = src->dtype;
    int bits = rp_quant_affine_bits(dt);
    long rows = (long)src->shape[0], cols = (long)src->shape[1];
    if (src->n_dims != 2)
        return rp_err_set(err, RP_ERR_UNSUPPORTED,
                          "%s tensor of %d dimensions: the CUDA backend takes 2-D quantized "
                          "weights; use --device cpu",
                          rp_dtype_name(dt), src->n_dims);
    size_t n = (size_t)rows * (size_t)cols, rb = rp_dtype_row_bytes(dt, cols);
    if (bits) {
        uint32_t *q = rp_alloc(n * (size_t)bits / 8 + 4);
        uint16_t *sc = rp_alloc(2 * (n / 32) + 2), *bi = rp_alloc(2 * (n / 32) + 2);
        rp_status rc = RP_OK;
        if (!q || !sc || !bi)
            rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        for (long r = 0; rc == RP_OK && r < rows; r++) {
            size_t e = (size_t)r * (size_t)cols;
            rp_quant_affine_row(dt, (const uint8_t *)src->data + (size_t)r * rb, cols,
                                q + e * (size_t)bits / 32, sc + e / 32, bi + e / 32);
        }
        rp_tensor m = {.dtype = bits == 4 ? RP_DT_MLX4 : RP_DT_MLX8,
                       .n_dims = 2,
                       .shape = {rows, cols},
                       .data = q,
                       .n_bytes = n * (size_t)bits / 8,
                       .scales = sc,
                       .biases = bi,
                       .scale_dtype = RP_DT_F16,
                       .group_size = 32};
        if (rc == RP_OK)
            rc = mlx_weight(b, &m, dst, err);
        rp_free(q);
        rp_free(sc);
        rp_free(bi);
        return rc;
    }
    if (rp_dtype_block(dt) <= 1)
        return rp_err_set(err, RP_ERR_UNSUPPORTED,
                          "%s weights: the CUDA backend takes f32, f16, bf16, MLX 4/8-bit, MXFP4 "
                          "and the GGUF Q4/Q5/Q6/Q8 types; use --device cpu",
                          rp_dtype_name(dt));
    /* MXFP4 values are e2m1 times a power of two: exact in bf16 (same exponent range);
     * Q6_K's products of a 6-bit code, an int8 scale and d are rounded once to f16 */
    int bf = dt == RP_DT_MXFP4;
    uint16_t *h = rp_alloc(2 * n + 2);
    float *row = rp_alloc(sizeof(float) * (size_t)cols);
    rp_status rc = h && row ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (long r = 0; rc == RP_OK && r < rows; r++) {
        rp_quant_dequant_row(src, r, row);
        for (long c = 0; c < cols; c++)
            h[(size_t)r * (size_t)cols + (size_t)c] = bf ? rp_f32_to_bf16(row[c])
                                                         : rp_f32_to_f16(row[c]);
    }
    void *d = NULL;
    if (rc == RP_OK)
        rc = upload(b, h, 2 * n, &d, err);
    rp_free(h);
    rp_free(row);
    if (rc)
        return rc;
    *dst = *src;
    dst->dtype = bf ? RP_DT_BF16 : RP_DT_F16;
    dst->data = d;
    dst->n_bytes = 2 * n;
    return RP_OK;
}

static rp_status cuda_weight(rp_backend *bk, const rp_tensor *src, rp_tensor *dst, rp_err *err)
{
    cuda_backend *b = CB(bk);
    if (src->n_dims >= 2 && is_mlx(src->dtype))
        return mlx_weight(b, src, dst, err);
    if (src->n_dims >= 2 && src->dtype != RP_DT_F32 && src->dtype != RP_DT_F16 &&
        src->dtype != RP_DT_BF16)
        return gguf_weight(b, src, dst, err);
    *dst = *src;
    int64_t n = src->n_dims == 1 ? src->shape[0] : src->shape[0] * src->shape[1];
    float *f32 = NULL;
    const void *host = src->data;
    size_t bytes = src->n_bytes;
    if (src->n_dims == 1) { /* norms and biases: f32 for the elementwise kernels */
        f32 = rp_alloc(sizeof(float) * (size_t)(n ? n : 1));
        if (!f32)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        rp_tensor_to_f32(src, f32, n);
        host = f32;
        bytes = sizeof(float) * (size_t)n;
        dst->dtype = RP_DT_F32;
        dst->n_bytes = bytes;
    }
    void *d = NULL;
    rp_status rc = upload(b, host, bytes, &d, err);
    rp_free(f32);
    if (rc)
        return rc;
    dst->data = d;
    return RP_OK;
}

/* The device view of an uploaded MLX weight. */
static rp_cuda_qw qw_of(const rp_tensor *w)
{
    return (rp_cuda_qw){.q = w->data,
                        .sb = w->scales,
                        .rows = (long)w->shape[0],
                        .cols = (long)w->shape[1],
                        .bits = w->dtype == RP_DT_MLX4 ? 4 : 8,
                        .gs = w->group_size,
                        .sf = w->scale_dtype == RP_DT_F32    ? RP_CUDA_SB_F32
                              : w->scale_dtype == RP_DT_BF16 ? RP_CUDA_SB_BF16
                                                             : RP_CUDA_SB_F16};
}

static double cuda_read_bandwidth(rp_backend *bk, size_t n, int reps)
{
    return rp_cuda_read_bw(CB(bk)->ctx, n, reps);
}

/* ---- ops --------------------------------------------------------------------------------- */

static void cuda_matmul(rp_backend *bk, const rp_tensor *w, const float *x, int n_tok, float *y)
{
    RP_ASSERT(w->n_dims == 2);
    if (is_mlx(w->dtype)) {
        rp_cuda_qw q = qw_of(w);
        const rp_cuda_qw *qp = &q;
        if (w->shape[0] < 16 && n_tok > 4) {
            /* a router or a DeltaNet gate projection (a few rows): its activations stay
             * near-f32 through the decode kernels (two int8 parts), as the dense path keeps
             * them f32 there: top-k routing and the decay's exp turn bf16 rounding into
             * different experts / states */
            for (int t0 = 0; t0 < n_tok; t0 += 4) {
                float *yt = y + (size_t)t0 * (size_t)w->shape[0];
                rp_cuda_qmatmul_n(CB(bk)->ctx, 1, &qp, x + (size_t)t0 * (size_t)w->shape[1],
                                  n_tok - t0 < 4 ? n_tok - t0 : 4, &yt);
            }
            return;
        }
        rp_cuda_qmatmul_n(CB(bk)->ctx, 1, &qp, x, n_tok, &y);
        return;
    }
    rp_cuda_matmul(CB(bk)->ctx, (int)w->dtype, w->data, (long)w->shape[0], (long)w->shape[1], x,
                   n_tok, y);
}

static void cuda_matmul_n(rp_backend *bk, int n, const rp_tensor *const *w, const float *x,
                          int n_tok, float *const *y)
{
    int dt[3], n_q = 0;
    const void *wd[3];
    long rows[3];
    rp_cuda_qw q[3];
    const rp_cuda_qw *qp[3] = {&q[0], &q[1], &q[2]};
    for (int i = 0; i < n; i++)
        if (is_mlx(w[i]->dtype))
            q[n_q++] = qw_of(w[i]);
    int small = 0; /* a few-row quantized matrix takes cuda_matmul's near-f32 route */
    for (int i = 0; i < n; i++)
        small |= is_mlx(w[i]->dtype) && w[i]->shape[0] < 16 && n_tok > 4;
    if (n_q == n && !small) {
        rp_cuda_qmatmul_n(CB(bk)->ctx, n, qp, x, n_tok, y);
        return;
    }
    if (n_q) { /* mixed (or a few-row matrix): one call each */
        for (int i = 0; i < n; i++)
            cuda_matmul(bk, w[i], x, n_tok, y[i]);
        return;
    }
    for (int i = 0; i < n; i++) {
        RP_ASSERT(w[i]->n_dims == 2 && w[i]->shape[1] == w[0]->shape[1]);
        dt[i] = (int)w[i]->dtype;
        wd[i] = w[i]->data;
        rows[i] = (long)w[i]->shape[0];
    }
    rp_cuda_matmul_n(CB(bk)->ctx, n, dt, wd, rows, (long)w[0]->shape[1], x, n_tok, y);
}

static void cuda_rmsnorm(rp_backend *bk, float *out, const float *x, const rp_tensor *w,
                         int n_tok, int dim, float eps, int add_one)
{
    RP_ASSERT(!w || w->dtype == RP_DT_F32); /* 1-D weights are uploaded as f32 */
    rp_cuda_rmsnorm(CB(bk)->ctx, out, x, w ? w->data : NULL, n_tok, dim, eps, add_one);
}

static void cuda_rope(rp_backend *bk, float *x, int n_tok, int n_heads, int head_dim, int rot_dim,
                      const int32_t *pos, const float *inv_freq, float attn_factor, int neox)
{
    rp_cuda_rope(CB(bk)->ctx, x, n_tok, n_heads, head_dim, rot_dim, pos, inv_freq, attn_factor,
                 neox);
}

static void cuda_silu_mul(rp_backend *bk, float *out, const float *g, const float *u, int64_t n)
{
    rp_cuda_silu_mul(CB(bk)->ctx, out, g, u, n);
}

static void cuda_add(rp_backend *bk, float *y, const float *x, int64_t n)
{
    rp_cuda_add(CB(bk)->ctx, y, x, n);
}

static void cuda_add_bias(rp_backend *bk, float *y, const rp_tensor *bias, int n_tok, int dim)
{
    RP_ASSERT(bias->dtype == RP_DT_F32);
    rp_cuda_add_bias(CB(bk)->ctx, y, bias->data, n_tok, dim);
}

static void cuda_embed(rp_backend *bk, const rp_tensor *table, const int32_t *ids, int n, float *x)
{
    if (is_mlx(table->dtype)) {
        rp_cuda_qw q = qw_of(table);
        rp_cuda_qembed(CB(bk)->ctx, &q, ids, n, x);
        return;
    }
    rp_cuda_embed(CB(bk)->ctx, (int)table->dtype, table->data, (long)table->shape[1], ids, n, x);
}

static void cuda_gather_rows(rp_backend *bk, float *dst, const float *src, const int32_t *rows,
                             int n, int dim)
{
    rp_cuda_gather_rows(CB(bk)->ctx, dst, src, rows, n, dim);
}

static void cuda_step_begin(rp_backend *bk, const rp_kv_layout *kv, const rp_step_seq *seqs,
                            int n_seqs)
{
    cuda_backend *b = CB(bk);
    int n = 0, n_tbl = 0;
    for (int s = 0; s < n_seqs; s++) {
        n += seqs[s].n_tok;
        n_tbl += seqs[s].n_blocks;
    }
    if (n > b->toks_cap) {
        rp_cuda_tok *p = rp_realloc(b->toks, sizeof *p * (size_t)n);
        RP_ASSERT(p); /* a few KB; failing here means the host is gone */
        b->toks = p;
        b->toks_cap = n;
    }
    if (n_tbl > b->tbl_cap) {
        int cap = n_tbl < 1024 ? 1024 : n_tbl * 2;
        int32_t *p = rp_realloc(b->tbl, sizeof *p * (size_t)cap);
        RP_ASSERT(p);
        b->tbl = p;
        b->tbl_cap = cap;
    }
    int off = 0;
    for (int s = 0; s < n_seqs; s++) {
        memcpy(b->tbl + off, seqs[s].blocks, sizeof(int32_t) * (size_t)seqs[s].n_blocks);
        for (int i = 0; i < seqs[s].n_tok; i++)
            b->toks[seqs[s].t0 + i] = (rp_cuda_tok){.tbl = off, .pos = seqs[s].pos0 + i};
        off += seqs[s].n_blocks;
    }
    /* rp_backend_kv_dtype_ok admits only the types the kernels store (cuda_kv.cuh) */
    RP_ASSERT(kv->dtype == RP_KV_F32 || kv->dtype == RP_KV_BF16 || kv->dtype == RP_KV_F16);
    size_t esz = kv->dtype == RP_KV_F32 ? 4 : 2;
    rp_cuda_kv ck = {.base = kv->base,
                     .dt = kv->dtype == RP_KV_BF16  ? RP_CUDA_BF16
                           : kv->dtype == RP_KV_F16 ? RP_CUDA_F16
                                                    : RP_CUDA_F32,
                     .block_tokens = kv->block_tokens,
                     .block_elems = (long)(kv->block_bytes / esz),
                     .half_elems = (long)(kv->half_bytes / esz)};
    rp_cuda_step(b->ctx, b->toks, n, b->tbl, n_tbl, &ck);
}

static void cuda_kv_store(rp_backend *bk, int layer, const float *k, const float *v, int kv_dim)
{
    rp_cuda_kv_store(CB(bk)->ctx, layer, k, v, kv_dim);
}

static void cuda_attention_step(rp_backend *bk, int layer, const rp_step_attn *a)
{
    rp_cuda_attention(CB(bk)->ctx, layer, a->q, a->out, a->n_heads, a->n_kv_heads, a->head_dim,
                      a->scale, a->window);
    if (a->sinks) /* a device array (the model uploads it as a 1-D weight) */
        rp_cuda_attn_sinks(CB(bk)->ctx, layer, a->q, a->out, a->sinks, a->n_heads,
                           a->n_kv_heads, a->head_dim, a->scale, a->window);
}

static void cuda_sample_rows(rp_backend *bk, const float *x, int n_rows, int n,
                             const struct rp_sample_row *p, int32_t *out)
{
    if (CB(bk)->no_sample) {
        for (int r = 0; r < n_rows; r++)
            out[r] = -1;
        return;
    }
    rp_cuda_sample(CB(bk)->ctx, x, n_rows, n, p, out);
}

static void cuda_argmax_rows(rp_backend *bk, const float *x, int n_rows, int n, int32_t *out)
{
    rp_cuda_argmax(CB(bk)->ctx, x, n_rows, n, out);
}

static void cuda_gelu_mul(rp_backend *bk, float *out, const float *g, const float *u, int64_t n)
{
    rp_cuda_gelu_mul(CB(bk)->ctx, out, g, u, n);
}

static void cuda_swiglu_clamp(rp_backend *bk, float *out, const float *g, const float *u,
                              int64_t n, float limit, float alpha)
{
    rp_cuda_swiglu_clamp(CB(bk)->ctx, out, g, u, n, limit, alpha);
}

static void cuda_scale(rp_backend *bk, float *x, float s, int64_t n)
{
    rp_cuda_scale(CB(bk)->ctx, x, s, n);
}

static void cuda_scatter_add(rp_backend *bk, float *y, const float *x, const int32_t *rows,
                             const float *w, int n, int dim)
{
    rp_cuda_scatter_add(CB(bk)->ctx, y, x, rows, w, n, dim);
}

static const rp_backend_vt g_cuda_vt = {
    .destroy = cuda_destroy,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .weight = cuda_weight,
    .read_bandwidth = cuda_read_bandwidth,
    .matmul = cuda_matmul,
    .matmul_n = cuda_matmul_n,
    .rmsnorm = cuda_rmsnorm,
    .rope = cuda_rope,
    .attention = NULL,
    .silu_mul = cuda_silu_mul,
    .add = cuda_add,
    .add_bias = cuda_add_bias,
    .embed = cuda_embed,
    .gather_rows = cuda_gather_rows,
    .step_begin = cuda_step_begin,
    .kv_store = cuda_kv_store,
    .attention_step = cuda_attention_step,
    .argmax_rows = cuda_argmax_rows,
    .sample_rows = cuda_sample_rows,
    .gelu_mul = cuda_gelu_mul,
    .swiglu_clamp = cuda_swiglu_clamp,
    .scale = cuda_scale,
    .scatter_add = cuda_scatter_add,
};
