/* model/gpt_oss.c - gpt-oss (GptOssForCausalLM), with bf16 / f16 / f32 expert weights.
 *
 * Per layer: x += o(attn(norm(x))) ; x += moe(norm(x)); plain RMS norms; untied lm_head.
 * Attention: q/k/v/o with biases, YaRN RoPE (rotate-half), GQA, a learned sink logit per head
 * in the softmax denominator, sliding window on "sliding_attention" layers.
 * MoE: router logits = W h + b; the top num_experts_per_tok logits, softmax over those;
 * expert(h): [gate, up] = interleaved columns of h W_gu + b_gu ; gate = min(gate, limit),
 * up = clamp(up, -limit, limit) ; down((up + 1) * gate * sigmoid(alpha gate)) + b_down, with
 * limit = swiglu_limit (7) and alpha = 1.702.
 *
 * transformers stores the experts as [E][hidden][2 * I] (gate_up, columns interleaved) and
 * [E][I][hidden] (down), i.e. input-major; they are transposed once at load into row-major
 * [out][in] copies in the same dtype (gate rows and up rows de-interleaved), so the usual
 * matmul kernels run them.
 * The published checkpoints keep the experts in MXFP4 instead: *_blocks (U8 [E][out][in/32]
 * [16], two FP4 values a byte, low nibble first) and *_scales (U8 [E][out][in/32], E8M0),
 * out-major with gate_up's rows interleaved. Those are repacked at load into RP_DT_MXFP4 rows
 * (scale byte + 16 block bytes, 4.25 bits a weight), gate and up rows separated.
 * Experts already split into out-major stacks (mlp.experts.{gate,up,down}_proj.weight, as a
 * GGUF file's ffn_*_exps are mapped) are used in place, in whatever dtype they come.
 *
 * Backends: the recipe runs on any backend (its weights go through rp_blk_to_backend). The
 * biases, the sinks and the experts' biases are kept as f32 host arrays and handed to the
 * backend as 1-D f32 tensors (so on CUDA they live on the device, and the attention reads the
 * sinks there); the router's logits come back to the host for the top-k, and each expert's
 * output is added to its tokens' residual rows by rp_op_scatter_add.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/blocks.h"
#include "model/rope.h"

enum { B_Q, B_K, B_V, B_O, B_SINKS, B_ROUTER, N_BIAS };

typedef struct layer {
    const rp_tensor *attn_norm, *ffn_norm, *wq, *wk, *wv, *wo, *router;
    float *bias[N_BIAS];         /* host f32: q, k, v, o biases, sinks, router bias */
    rp_tensor bias_t[N_BIAS];    /* 1-D f32 views of them */
    const rp_tensor *b[N_BIAS];  /* the backend's copies */
    rp_tensor *gate, *up, *down; /* n_exp views into the transposed copies */
    const rp_tensor **ew;        /* [3][n_exp]: the backend's gate, up, down per expert */
    void *gate_data, *up_data, *down_data;
    float *gate_b, *up_b, *down_b; /* [E][I], [E][I], [E][D] */
    rp_tensor *eb_t;               /* [3][n_exp] 1-D f32 views of the expert biases */
    const rp_tensor **eb;          /* [3][n_exp] the backend's copies */
    int window;
} layer;

typedef struct gptoss {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_blk_weights weights; /* the backend's copies the pointers above point into */
    rp_rope rope;
    int n_exp, top_k, I;
    float limit, alpha;
    rp_blk_route route;
    /* backend buffers, RP_MAX_CHUNK rows; out: the vocabulary logits when buffers are not
     * host memory */
    float *x, *h, *q, *k, *v, *att, *logits, *xe, *ga, *up, *ye, *out;
    float *router; /* host: the router logits */
    int32_t pos[RP_MAX_CHUNK];
    int32_t rows[RP_MAX_CHUNK]; /* one expert's tokens */
    float rw[RP_MAX_CHUNK];     /* and their routing weights */
} gptoss;

static size_t elem_size(rp_dtype dt)
{
    return dt == RP_DT_F32 ? 4 : 2;
}

/* dst[e][r][c] = src[e][c][col0 + r * step] for r < rows, c < cols: expert e's matrix
 * transposed, taking every step-th source column from col0 (de-interleaving gate/up). */
static void transpose_experts(void *dst, const rp_tensor *src, int E, int rows, int cols,
                              int src_cols, int col0, int step)
{
    size_t es = elem_size(src->dtype);
    const char *s = src->data;
    char *d = dst;
    for (int e = 0; e < E; e++)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                size_t si = ((size_t)e * cols + c) * src_cols + (size_t)(col0 + r * step);
                size_t di = ((size_t)e * rows + r) * cols + c;
                memcpy(d + di * es, s + si * es, es);
            }
}

static rp_tensor *expert_views(void *data, rp_dtype dt, int E, int rows, int cols)
{
    rp_tensor *v = rp_calloc((size_t)E, sizeof *v);
    if (!v) return NULL;
    size_t nb = (size_t)rows * rp_dtype_row_bytes(dt, cols);
    for (int e = 0; e < E; e++)
        v[e] = (rp_tensor){.dtype = dt,
                           .n_dims = 2,
                           .shape = {rows, cols},
                           .data = (const char *)data + e * nb,
                           .n_bytes = nb};
    return v;
}

static rp_status f32_of(rp_model *m, rp_err *err, float **out, int64_t d0, int64_t d1,
                        const char *fmt, const char *p, int i)
{
    const rp_tensor *t;
    rp_status rc = rp_blk_tensor(m, err, &t, 0, d0, d1, fmt, p, i);
    if (rc) return rc;
    if (!(*out = rp_blk_f32(t))) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    return RP_OK;
}

/* A raw U8 tensor of the given shape (MXFP4 blocks / scales). */
static rp_status raw_u8(rp_model *m, const char *name, int n_dims, const int64_t *shape,
                        const rp_st_tensor **out, rp_err *err)
{
    const rp_st_tensor *t = rp_st_find(m->st, name);
    if (!t) return rp_err_set(err, RP_ERR_NOT_FOUND, "the checkpoint has no tensor '%s'", name);
    if (strcmp(t->dtype, "U8") != 0 || t->t.n_dims != n_dims)
        return rp_err_set(err, RP_ERR_INVALID, "tensor '%s' should be U8 with %d dimensions", name,
                          n_dims);
    for (int d = 0; d < n_dims; d++)
        if (t->t.shape[d] != shape[d])
            return rp_err_set(err, RP_ERR_INVALID,
                              "tensor '%s' has %lld in dimension %d, expected %lld", name,
                              (long long)t->t.shape[d], d, (long long)shape[d]);
    *out = t;
    return RP_OK;
}

/* dst: E * rows MXFP4 rows of `cols` elements, row r of expert e taken from packed row
 * src_row0 + r * step of [E][src_rows][cols / 32] blocks and scales. */
static void repack_mxfp4(uint8_t *dst, const rp_st_tensor *blocks, const rp_st_tensor *scales,
                         int E, int rows, int cols, int src_rows, int src_row0, int step)
{
    int nb = cols / 32;
    const uint8_t *bl = blocks->t.data, *sc = scales->t.data;
    for (int e = 0; e < E; e++)
        for (int r = 0; r < rows; r++) {
            size_t src = (size_t)e * src_rows + (size_t)(src_row0 + r * step);
            uint8_t *d = dst + ((size_t)e * rows + r) * (size_t)nb * 17;
            for (int b = 0; b < nb; b++) {
                d[b * 17] = sc[src * nb + b];
                memcpy(d + b * 17 + 1, bl + (src * nb + b) * 16, 16);
            }
        }
}

static rp_status bind_mxfp4_experts(rp_model *m, gptoss *s, int i, layer *L, rp_err *err)
{
    const char *p = rp_blk_prefix(m);
    int E = s->n_exp, I = s->I, D = m->cfg.dim;
    if (D % 32 || I % 32)
        return rp_err_set(err, RP_ERR_INVALID,
                          "MXFP4 experts need hidden and intermediate "
                          "sizes that are multiples of 32");
    char name[200];
    const rp_st_tensor *gb, *gs, *db, *ds;
    rp_status rc;
#define RAW(var, suffix, nd, ...)                                                                  \
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.%s", p, i, suffix);                       \
    if ((rc = raw_u8(m, name, nd, (int64_t[]){__VA_ARGS__}, &var, err))) return rc;
    RAW(gb, "gate_up_proj_blocks", 4, E, 2 * I, D / 32, 16);
    RAW(gs, "gate_up_proj_scales", 3, E, 2 * I, D / 32);
    RAW(db, "down_proj_blocks", 4, E, D, I / 32, 16);
    RAW(ds, "down_proj_scales", 3, E, D, I / 32);
#undef RAW
    size_t gate_bytes = (size_t)E * I * rp_dtype_row_bytes(RP_DT_MXFP4, D),
           down_bytes = (size_t)E * D * rp_dtype_row_bytes(RP_DT_MXFP4, I);
    L->gate_data = rp_alloc_aligned(gate_bytes, RP_TAG_MODEL);
    L->up_data = rp_alloc_aligned(gate_bytes, RP_TAG_MODEL);
    L->down_data = rp_alloc_aligned(down_bytes, RP_TAG_MODEL);
    if (!L->gate_data || !L->up_data || !L->down_data)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for the experts of layer %d", i);
    repack_mxfp4(L->gate_data, gb, gs, E, I, D, 2 * I, 0, 2);
    repack_mxfp4(L->up_data, gb, gs, E, I, D, 2 * I, 1, 2);
    repack_mxfp4(L->down_data, db, ds, E, D, I, D, 0, 1);
    snprintf(m->info.dtype, sizeof m->info.dtype, "mxfp4"); /* the bulk of the weights */
    L->gate = expert_views(L->gate_data, RP_DT_MXFP4, E, I, D);
    L->up = expert_views(L->up_data, RP_DT_MXFP4, E, I, D);
    L->down = expert_views(L->down_data, RP_DT_MXFP4, E, D, I);
    if (!L->gate || !L->up || !L->down) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    return RP_OK;
}

/* Experts already split and out-major, one stack per projection (a GGUF file's
 * ffn_{gate,up,down}_exps, or mlx_lm's layout): mlp.experts.{gate,up}_proj.weight [E][I][D],
 * down_proj.weight [E][D][I], any matmul dtype, with biases [E][I] / [E][D]; viewed, not
 * copied. *found = 0 when the checkpoint has no such stacks. */
static rp_status bind_split_experts(rp_model *m, gptoss *s, int i, layer *L, int *found,
                                    rp_err *err)
{
    const char *p = rp_blk_prefix(m);
    int64_t E = s->n_exp, I = s->I, D = m->cfg.dim;
    const rp_tensor *g, *u, *d;
    rp_status rc;
    *found = 0;
    if ((rc = rp_blk_tensor_nd(m, err, &g, 1, 3, (int64_t[]){E, I, D},
                               "%slayers.%d.mlp.experts.gate_proj.weight", p, i)) ||
        !g)
        return rc;
    *found = 1;
    if ((rc = rp_blk_tensor_nd(m, err, &u, 0, 3, (int64_t[]){E, I, D},
                               "%slayers.%d.mlp.experts.up_proj.weight", p, i)) ||
        (rc = rp_blk_tensor_nd(m, err, &d, 0, 3, (int64_t[]){E, D, I},
                               "%slayers.%d.mlp.experts.down_proj.weight", p, i)) ||
        (rc = f32_of(m, err, &L->gate_b, E, I, "%slayers.%d.mlp.experts.gate_proj.bias", p, i)) ||
        (rc = f32_of(m, err, &L->up_b, E, I, "%slayers.%d.mlp.experts.up_proj.bias", p, i)) ||
        (rc = f32_of(m, err, &L->down_b, E, D, "%slayers.%d.mlp.experts.down_proj.bias", p, i)))
        return rc;
    L->gate = rp_calloc((size_t)E, sizeof(rp_tensor));
    L->up = rp_calloc((size_t)E, sizeof(rp_tensor));
    L->down = rp_calloc((size_t)E, sizeof(rp_tensor));
    if (!L->gate || !L->up || !L->down) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int64_t e = 0; e < E; e++) {
        L->gate[e] = rp_blk_expert(g, e);
        L->up[e] = rp_blk_expert(u, e);
        L->down[e] = rp_blk_expert(d, e);
    }
    return RP_OK;
}

static rp_status bind_experts(rp_model *m, gptoss *s, int i, layer *L, rp_err *err)
{
    const char *p = rp_blk_prefix(m);
    int E = s->n_exp, I = s->I, D = m->cfg.dim;
    const rp_tensor *gu, *dn, *gub;
    rp_status rc;
    int split;
    if ((rc = bind_split_experts(m, s, i, L, &split, err)) || split)
        return rc;
    if ((rc = rp_blk_tensor(m, err, &gub, 0, E, 2 * I, "%slayers.%d.mlp.experts.gate_up_proj_bias",
                            p, i)) ||
        (rc = f32_of(m, err, &L->down_b, E, D, "%slayers.%d.mlp.experts.down_proj_bias", p, i)))
        return rc;
    char name[200];
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.gate_up_proj_blocks", p, i);
    if (rp_st_find(m->st, name)) {
        if ((rc = bind_mxfp4_experts(m, s, i, L, err))) return rc;
    } else {
        if ((rc = rp_blk_tensor_nd(m, err, &gu, 0, 3, (int64_t[]){E, D, 2 * I},
                                   "%slayers.%d.mlp.experts.gate_up_proj", p, i)) ||
            (rc = rp_blk_tensor_nd(m, err, &dn, 0, 3, (int64_t[]){E, I, D},
                                   "%slayers.%d.mlp.experts.down_proj", p, i)))
            return rc;
        if (gu->dtype != dn->dtype)
            return rp_err_set(err, RP_ERR_UNSUPPORTED, "layer %d: expert tensors of two dtypes", i);
        size_t half = (size_t)E * I * D * elem_size(gu->dtype);
        L->gate_data = rp_alloc_aligned(half, RP_TAG_MODEL);
        L->up_data = rp_alloc_aligned(half, RP_TAG_MODEL);
        L->down_data = rp_alloc_aligned(half, RP_TAG_MODEL);
        if (!L->gate_data || !L->up_data || !L->down_data)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory for the experts of layer %d", i);
        transpose_experts(L->gate_data, gu, E, I, D, 2 * I, 0, 2);
        transpose_experts(L->up_data, gu, E, I, D, 2 * I, 1, 2);
        transpose_experts(L->down_data, dn, E, D, I, D, 0, 1);
        L->gate = expert_views(L->gate_data, gu->dtype, E, I, D);
        L->up = expert_views(L->up_data, gu->dtype, E, I, D);
        L->down = expert_views(L->down_data, gu->dtype, E, D, I);
        if (!L->gate || !L->up || !L->down) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    float *gub32 = rp_blk_f32(gub);
    L->gate_b = rp_blk_falloc((size_t)E * I);
    L->up_b = rp_blk_falloc((size_t)E * I);
    if (!gub32 || !L->gate_b || !L->up_b) {
        rp_free_aligned(gub32);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    for (int e = 0; e < E; e++)
        for (int j = 0; j < I; j++) {
            L->gate_b[(size_t)e * I + j] = gub32[(size_t)e * 2 * I + 2 * j];
            L->up_b[(size_t)e * I + j] = gub32[(size_t)e * 2 * I + 2 * j + 1];
        }
    rp_free_aligned(gub32);
    return RP_OK;
}

static rp_status bind_layer(rp_model *m, gptoss *s, int i, layer *L, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    const char *p = rp_blk_prefix(m);
    int64_t dim = c->dim, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
            kvd = (int64_t)c->n_kv_heads * hd;
    rp_status rc;
#define T(field, d0, d1, name)                                                                     \
    if ((rc = rp_blk_tensor(m, err, &L->field, 0, d0, d1, "%slayers.%d." name, p, i))) return rc;
#define B(field, d0, name)                                                                         \
    if ((rc = f32_of(m, err, &L->field, d0, 0, "%slayers.%d." name, p, i))) return rc;
    T(attn_norm, dim, 0, "input_layernorm.weight");
    T(ffn_norm, dim, 0, "post_attention_layernorm.weight");
    T(wq, qd, dim, "self_attn.q_proj.weight");
    T(wk, kvd, dim, "self_attn.k_proj.weight");
    T(wv, kvd, dim, "self_attn.v_proj.weight");
    T(wo, dim, qd, "self_attn.o_proj.weight");
    T(router, s->n_exp, dim, "mlp.router.weight");
    B(bias[B_Q], qd, "self_attn.q_proj.bias");
    B(bias[B_K], kvd, "self_attn.k_proj.bias");
    B(bias[B_V], kvd, "self_attn.v_proj.bias");
    B(bias[B_O], dim, "self_attn.o_proj.bias");
    B(bias[B_SINKS], c->n_heads, "self_attn.sinks");
    B(bias[B_ROUTER], s->n_exp, "mlp.router.bias");
#undef T
#undef B
    json_t *lt = json_object_get(c->json, "layer_types");
    const char *t = json_string_value(json_array_get(lt, (size_t)i));
    int sliding = t ? strcmp(t, "sliding_attention") == 0 : i % 2 == 0;
    L->window = sliding ? c->sliding_window : 0;
    return bind_experts(m, s, i, L, err);
}

static void gptoss_deinit(rp_model *m)
{
    gptoss *s = m->arch_state;
    if (!s) return;
    if (s->layers)
        for (int i = 0; i < m->cfg.n_layers; i++) {
            layer *L = &s->layers[i];
            float *f[] = {L->gate_b, L->up_b, L->down_b};
            for (size_t j = 0; j < RP_ARRAY_LEN(f); j++)
                rp_free_aligned(f[j]);
            for (int j = 0; j < N_BIAS; j++)
                rp_free_aligned(L->bias[j]);
            rp_free(L->ew);
            rp_free(L->eb_t);
            rp_free(L->eb);
            rp_free_aligned(L->gate_data);
            rp_free_aligned(L->up_data);
            rp_free_aligned(L->down_data);
            rp_free(L->gate);
            rp_free(L->up);
            rp_free(L->down);
        }
    rp_free(s->layers);
    rp_blk_weights_free(&s->weights);
    rp_rope_deinit(&s->rope);
    rp_blk_route_free(&s->route);
    float *bufs[] = {s->x,      s->h,  s->q,  s->k,  s->v,  s->att,
                     s->logits, s->xe, s->ga, s->up, s->ye, s->out};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        rp_backend_buf_free(m->be, bufs[i]);
    if (s->router != s->logits)
        rp_free(s->router);
    rp_free(s);
    m->arch_state = NULL;
}

static rp_tensor f32_view(const float *p, int64_t n)
{
    return (rp_tensor){.dtype = RP_DT_F32,
                       .n_dims = 1,
                       .shape = {n},
                       .data = p,
                       .n_bytes = sizeof(float) * (size_t)n};
}

/* Every weight to the backend (rp_blk_to_backend): layers with their biases and experts,
 * then embed, norm and head. */
static rp_status to_backend(rp_model *m, gptoss *s, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    int E = s->n_exp;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t blen[N_BIAS] = {qd, kvd, kvd, c->dim, c->n_heads, E};
    rp_status rc = rp_blk_weights_init(&s->weights, c->n_layers * (7 + N_BIAS + 6 * E) + 3, err);
    for (int i = 0; i < c->n_layers && !rc; i++) {
        layer *L = &s->layers[i];
        const rp_tensor **f[] = {&L->attn_norm, &L->ffn_norm, &L->wq, &L->wk,
                                 &L->wv,        &L->wo,       &L->router};
        rc = rp_blk_to_backend_n(m, &s->weights, f, RP_ARRAY_LEN(f), err);
        for (int j = 0; j < N_BIAS && !rc; j++) {
            L->bias_t[j] = f32_view(L->bias[j], blen[j]);
            L->b[j] = &L->bias_t[j];
            rc = rp_blk_to_backend(m, &s->weights, &L->b[j], err);
        }
        L->ew = rc ? NULL : rp_calloc(3 * (size_t)E, sizeof *L->ew);
        L->eb = L->ew ? rp_calloc(3 * (size_t)E, sizeof *L->eb) : NULL;
        L->eb_t = L->eb ? rp_calloc(3 * (size_t)E, sizeof *L->eb_t) : NULL;
        if (!rc && !L->eb_t)
            rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        for (int e = 0; e < E && !rc; e++) {
            L->ew[e] = &L->gate[e];
            L->ew[E + e] = &L->up[e];
            L->ew[2 * E + e] = &L->down[e];
            L->eb_t[e] = f32_view(L->gate_b + (size_t)e * s->I, s->I);
            L->eb_t[E + e] = f32_view(L->up_b + (size_t)e * s->I, s->I);
            L->eb_t[2 * E + e] = f32_view(L->down_b + (size_t)e * c->dim, c->dim);
            for (int k = 0; k < 3 && !rc; k++) {
                L->eb[k * E + e] = &L->eb_t[k * E + e];
                if (!(rc = rp_blk_to_backend(m, &s->weights, &L->ew[k * E + e], err)))
                    rc = rp_blk_to_backend(m, &s->weights, &L->eb[k * E + e], err);
            }
        }
    }
    const rp_tensor **top[] = {&s->embed, &s->final_norm, &s->lm_head};
    return rc ? rc : rp_blk_to_backend_n(m, &s->weights, top, RP_ARRAY_LEN(top), err);
}

static rp_status gptoss_init(rp_model *m, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    gptoss *s = rp_calloc(1, sizeof *s);
    if (!s) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->n_exp = rp_config_int(c, "num_local_experts", rp_config_int(c, "num_experts", 0));
    s->top_k = rp_config_int(c, "num_experts_per_tok", rp_config_int(c, "experts_per_token", 0));
    s->I = c->ffn_dim;
    s->limit = (float)rp_config_num(c, "swiglu_limit", 7.0);
    s->alpha = 1.702f;
    if (s->n_exp <= 0 || s->I <= 0)
        return rp_err_set(err, RP_ERR_INVALID,
                          "config.json: num_local_experts and intermediate_size are required");
    rp_status rc;
    if ((rc = rp_blk_route_alloc(&s->route, s->n_exp, s->top_k, RP_MAX_CHUNK, err))) return rc;
    s->layers = rp_calloc((size_t)c->n_layers, sizeof(layer));
    if (!s->layers) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = bind_layer(m, s, i, &s->layers[i], err))) return rc;
    const char *p = rp_blk_prefix(m);
    if ((rc = rp_blk_tensor(m, err, &s->embed, 0, c->vocab_size, c->dim, "%sembed_tokens.weight",
                            p)) ||
        (rc = rp_blk_tensor(m, err, &s->final_norm, 0, c->dim, 0, "%snorm.weight", p)) ||
        (rc = rp_blk_lm_head(m, s->embed, &s->lm_head, err)) ||
        (rc = rp_rope_init(&s->rope, c, c->head_dim, err)) || (rc = to_backend(m, s, err)))
        return rc;
    size_t n = RP_MAX_CHUNK, D = (size_t)c->dim;
    int host = rp_backend_host_buffers(m->be);
    rp_blk_attn_acts(m, n, &s->x, &s->h, &s->q, &s->k, &s->v, &s->att);
    s->logits = rp_blk_act(m, n * s->n_exp);
    s->xe = rp_blk_act(m, n * D);
    s->ga = rp_blk_act(m, n * s->I);
    s->up = rp_blk_act(m, n * s->I);
    s->ye = rp_blk_act(m, n * D);
    if (!host)
        s->out = rp_blk_act(m, n * (size_t)c->vocab_size);
    s->router = host ? s->logits : rp_alloc(sizeof(float) * n * (size_t)s->n_exp);
    float *bufs[] = {s->x,  s->h,  s->q,  s->k,  s->v,      s->att,
                     s->logits, s->xe, s->ga, s->up, s->ye, s->router, host ? s->x : s->out};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        if (!bufs[i])
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations (%s)",
                              rp_backend_describe(m->be));
    return RP_OK;
}

static void moe_block(rp_model *m, gptoss *s, layer *L, int n)
{
    rp_backend *be = m->be;
    int D = m->cfg.dim, I = s->I, K = s->top_k, E = s->n_exp;
    rp_op_matmul(be, L->router, s->h, n, s->logits);
    rp_op_add_bias(be, s->logits, L->b[B_ROUTER], n, E);
    if (s->router != s->logits)
        rp_backend_to_host(be, s->router, s->logits, sizeof(float) * (size_t)n * E);
    rp_blk_route_compute(&s->route, s->router, n, RP_ROUTE_TOPK_SOFTMAX);
    for (int e = 0; e < E; e++) {
        int b = s->route.start[e], cnt = s->route.start[e + 1] - b;
        if (cnt == 0) continue;
        for (int i = 0; i < cnt; i++) {
            int slot = s->route.order[b + i];
            s->rows[i] = slot / K;
            s->rw[i] = s->route.w[slot];
        }
        rp_op_gather_rows(be, s->xe, s->h, s->rows, cnt, D);
        rp_op_matmul(be, L->ew[e], s->xe, cnt, s->ga);
        rp_op_matmul(be, L->ew[E + e], s->xe, cnt, s->up);
        rp_op_add_bias(be, s->ga, L->eb[e], cnt, I);
        rp_op_add_bias(be, s->up, L->eb[E + e], cnt, I);
        rp_op_swiglu_clamp(be, s->ga, s->ga, s->up, (int64_t)cnt * I, s->limit, s->alpha);
        rp_op_matmul(be, L->ew[2 * E + e], s->ga, cnt, s->ye);
        rp_op_add_bias(be, s->ye, L->eb[2 * E + e], cnt, D);
        rp_op_scatter_add(be, s->x, s->ye, s->rows, s->rw, cnt, D);
    }
}

static rp_status gptoss_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                                int n_logits, rp_err *err)
{
    gptoss *s = m->arch_state;
    rp_blk_kv *kvs = kv->state;
    rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    int pos0 = kv->len, D = c->dim, hd = c->head_dim, qd = c->n_heads * hd,
        kvd = c->n_kv_heads * hd;
    rp_rope_update(&s->rope, pos0 + n);
    for (int t = 0; t < n; t++)
        s->pos[t] = pos0 + t;
    rp_op_embed(be, s->embed, ids, n, s->x);
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &s->layers[l];
        rp_op_rmsnorm(be, s->h, s->x, L->attn_norm, n, D, c->norm_eps, 0);
        rp_op_matmul(be, L->wq, s->h, n, s->q);
        rp_op_matmul(be, L->wk, s->h, n, s->k);
        rp_op_matmul(be, L->wv, s->h, n, s->v);
        rp_op_add_bias(be, s->q, L->b[B_Q], n, qd);
        rp_op_add_bias(be, s->k, L->b[B_K], n, kvd);
        rp_op_add_bias(be, s->v, L->b[B_V], n, kvd);
        rp_op_rope(be, s->q, n, c->n_heads, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
                   s->rope.attn_factor, 1);
        rp_op_rope(be, s->k, n, c->n_kv_heads, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
                   s->rope.attn_factor, 1);
        rp_attn_args a = {.q = s->q,
                          .out = s->att,
                          .n_tok = n,
                          .pos0 = pos0,
                          .n_heads = c->n_heads,
                          .n_kv_heads = c->n_kv_heads,
                          .head_dim = hd,
                          .scale = 1.0f / sqrtf((float)hd),
                          .window = L->window,
                          .sinks = L->b[B_SINKS]->data};
        rp_blk_attend(be, kvs, l, s->k, s->v, &a);
        rp_op_matmul(be, L->wo, s->att, n, s->h);
        rp_op_add_bias(be, s->h, L->b[B_O], n, D);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
        rp_op_rmsnorm(be, s->h, s->x, L->ffn_norm, n, D, c->norm_eps, 0);
        moe_block(m, s, L, n);
    }
    kv->len = pos0 + n;
    if (logits && n_logits > 0)
        rp_blk_logits(m, s->x, s->h, s->out, s->final_norm, s->lm_head, n, n_logits, c->norm_eps,
                      0, logits);
    (void)err;
    return RP_OK;
}

const rp_arch rp_arch_gpt_oss = {
    .name = "gpt_oss",
    .gpu = 1,
    .init = gptoss_init,
    .deinit = gptoss_deinit,
    .forward = gptoss_forward,
    .kv_init = rp_blk_attn_kv_init,
    .kv_deinit = rp_blk_attn_kv_deinit,
};
