/* model/lfm2.c - LFM2 / LFM2.5 (Liquid): gated short-convolution blocks and attention blocks
 * (config layer_types "conv" / "full_attention", or full_attn_idxs).
 *
 * Per layer: x += op(operator_norm(x)) ; x += w2(silu(w1 h) * w3 h) with h = ffn_norm(x);
 * logits = lm_head(embedding_norm(x)) (the final norm carries that name; lm_head tied).
 * Norms are plain RMS norms (x / rms * w, eps norm_eps).
 * Attention: q_layernorm / k_layernorm per head, rotate-half RoPE, GQA, out_proj.
 * Short conv: [B | C | x] = in_proj(h) ; y = C * conv(B * x) ; out_proj(y), where conv is a
 * causal depthwise convolution of kernel conv_L_cache (optional bias), no activation. Its state
 * is the last conv_L_cache - 1 values of B * x, kept in the cache's flat recurrent block.
 *
 * Backends: the weights go through rp_blk_to_backend and every matmul, norm, RoPE and
 * attention runs on the model's backend. The short convolution runs on the host, where the
 * recurrent state lives (the engine snapshots it for the prefix cache): on a device backend
 * in_proj's output is copied to the host and the convolved rows back (a round trip per conv
 * layer; a device kernel with the state on the device is not written yet).
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/blocks.h"
#include "model/rope.h"

typedef struct layer {
    int conv;
    const rp_tensor *op_norm, *ffn_norm, *w1, *w2, *w3;
    const rp_tensor *wq, *wk, *wv, *wo, *q_norm, *k_norm; /* attention */
    const rp_tensor *in_proj, *out_proj;                  /* short conv */
    float *conv_w, *conv_b;
    size_t rec_off;
} layer;

typedef struct lfm2 {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_blk_weights weights; /* the backend's copies the pointers above point into */
    rp_rope rope;
    int K, ffn;
    float eps;
    size_t rec_n;
    uint8_t *has_attn;
    /* backend buffers, RP_MAX_CHUNK rows; out: the vocabulary logits when buffers are not
     * host memory */
    float *x, *h, *q, *k, *v, *att, *bcx, *cv, *ffa, *ffb, *out;
    /* host: the short convolution's rows (bcx_h, cv_h alias bcx, cv on a host backend) */
    float *bcx_h, *bx_h, *cv_h;
    int32_t pos[RP_MAX_CHUNK];
} lfm2;

typedef rp_blk_hybrid_kv lfm2_kv;

static int is_attention(const rp_model_config *c, int i)
{
    json_t *lt = json_object_get(c->json, "layer_types");
    const char *t = json_string_value(json_array_get(lt, (size_t)i));
    if (t) return strcmp(t, "full_attention") == 0;
    json_t *idx = json_object_get(c->json, "full_attn_idxs");
    size_t j;
    json_t *e;
    json_array_foreach(idx, j, e) if (json_integer_value(e) == i) return 1;
    return 0;
}

static rp_status bind_layer(rp_model *m, lfm2 *s, int i, layer *L, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    const char *p = rp_blk_prefix(m);
    int64_t dim = c->dim, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
            kvd = (int64_t)c->n_kv_heads * hd;
    rp_status rc;
#define T(field, d0, d1, name)                                                                     \
    if ((rc = rp_blk_tensor(m, err, &L->field, 0, d0, d1, "%slayers.%d." name, p, i))) return rc;
    T(op_norm, dim, 0, "operator_norm.weight");
    T(ffn_norm, dim, 0, "ffn_norm.weight");
    T(w1, 0, dim, "feed_forward.w1.weight");
    if (i == 0)
        s->ffn = (int)L->w1->shape[0]; /* auto-adjusted from intermediate_size in the config */
    T(w1, s->ffn, dim, "feed_forward.w1.weight");
    T(w3, s->ffn, dim, "feed_forward.w3.weight");
    T(w2, dim, s->ffn, "feed_forward.w2.weight");
    if (!L->conv) {
        T(wq, qd, dim, "self_attn.q_proj.weight");
        T(wk, kvd, dim, "self_attn.k_proj.weight");
        T(wv, kvd, dim, "self_attn.v_proj.weight");
        T(wo, dim, qd, "self_attn.out_proj.weight");
        T(q_norm, hd, 0, "self_attn.q_layernorm.weight");
        T(k_norm, hd, 0, "self_attn.k_layernorm.weight");
        return RP_OK;
    }
    T(in_proj, 3 * dim, dim, "conv.in_proj.weight");
    T(out_proj, dim, dim, "conv.out_proj.weight");
#undef T
    const rp_tensor *cw, *cb;
    if ((rc = rp_blk_tensor_nd(m, err, &cw, 0, 3, (int64_t[]){dim, 1, s->K},
                               "%slayers.%d.conv.conv.weight", p, i)) ||
        (rc = rp_blk_tensor(m, err, &cb, 1, dim, 0, "%slayers.%d.conv.conv.bias", p, i)))
        return rc;
    L->conv_w = rp_blk_f32(cw);
    if (!L->conv_w || (cb && !(L->conv_b = rp_blk_f32(cb))))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    L->rec_off = s->rec_n;
    s->rec_n += (size_t)(s->K - 1) * dim;
    return RP_OK;
}

static void lfm2_deinit(rp_model *m)
{
    lfm2 *s = m->arch_state;
    if (!s) return;
    if (s->layers)
        for (int i = 0; i < m->cfg.n_layers; i++) {
            rp_free_aligned(s->layers[i].conv_w);
            rp_free_aligned(s->layers[i].conv_b);
        }
    rp_free(s->layers);
    rp_free(s->has_attn);
    rp_blk_weights_free(&s->weights);
    rp_rope_deinit(&s->rope);
    float *bufs[] = {s->x, s->h, s->q, s->k, s->v, s->att, s->bcx, s->cv, s->ffa, s->ffb, s->out};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        rp_backend_buf_free(m->be, bufs[i]);
    if (s->bcx_h != s->bcx)
        rp_free(s->bcx_h);
    if (s->cv_h != s->cv)
        rp_free(s->cv_h);
    rp_free(s->bx_h);
    rp_free(s);
    m->arch_state = NULL;
}

/* Every bound weight to the backend (rp_blk_to_backend); the conv kernels stay host f32. */
static rp_status to_backend(rp_model *m, lfm2 *s, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    rp_status rc = rp_blk_weights_init(&s->weights, c->n_layers * 13 + 3, err);
    for (int i = 0; i < c->n_layers && !rc; i++) {
        layer *L = &s->layers[i];
        const rp_tensor **f[] = {&L->op_norm, &L->ffn_norm, &L->w1,     &L->w2,      &L->w3,
                                 &L->wq,      &L->wk,       &L->wv,     &L->wo,      &L->q_norm,
                                 &L->k_norm,  &L->in_proj,  &L->out_proj};
        rc = rp_blk_to_backend_n(m, &s->weights, f, RP_ARRAY_LEN(f), err);
    }
    const rp_tensor **top[] = {&s->embed, &s->final_norm, &s->lm_head};
    return rc ? rc : rp_blk_to_backend_n(m, &s->weights, top, RP_ARRAY_LEN(top), err);
}

static rp_status lfm2_init(rp_model *m, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    lfm2 *s = rp_calloc(1, sizeof *s);
    if (!s) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->K = rp_config_int(c, "conv_L_cache", 3);
    s->eps = (float)rp_config_num(c, "norm_eps", c->norm_eps);
    if (s->K < 1)
        return rp_err_set(err, RP_ERR_INVALID, "config.json: conv_L_cache must be positive");
    s->layers = rp_calloc((size_t)c->n_layers, sizeof(layer));
    s->has_attn = rp_calloc((size_t)c->n_layers, 1);
    if (!s->layers || !s->has_attn) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_status rc;
    for (int i = 0; i < c->n_layers; i++) {
        s->layers[i].conv = !is_attention(c, i);
        s->has_attn[i] = !s->layers[i].conv;
        if ((rc = bind_layer(m, s, i, &s->layers[i], err))) return rc;
    }
    const char *p = rp_blk_prefix(m);
    if ((rc = rp_blk_tensor(m, err, &s->embed, 0, c->vocab_size, c->dim, "%sembed_tokens.weight",
                            p)) ||
        (rc = rp_blk_tensor(m, err, &s->final_norm, 0, c->dim, 0, "%sembedding_norm.weight", p)) ||
        (rc = rp_blk_lm_head(m, s->embed, &s->lm_head, err)) ||
        (rc = rp_rope_init(&s->rope, c, c->head_dim, err)) || (rc = to_backend(m, s, err)))
        return rc;
    size_t n = RP_MAX_CHUNK, D = (size_t)c->dim;
    int host = rp_backend_host_buffers(m->be);
    rp_blk_attn_acts(m, n, &s->x, &s->h, &s->q, &s->k, &s->v, &s->att);
    s->bcx = rp_blk_act(m, n * 3 * D);
    s->cv = rp_blk_act(m, n * D);
    s->ffa = rp_blk_act(m, n * (size_t)s->ffn);
    s->ffb = rp_blk_act(m, n * (size_t)s->ffn);
    if (!host)
        s->out = rp_blk_act(m, n * (size_t)c->vocab_size);
    s->bcx_h = host ? s->bcx : rp_alloc(sizeof(float) * n * 3 * D);
    s->cv_h = host ? s->cv : rp_alloc(sizeof(float) * n * D);
    s->bx_h = rp_alloc(sizeof(float) * n * D);
    float *bufs[] = {s->x,   s->h,   s->q,    s->k,    s->v,    s->att, s->bcx,
                     s->cv,  s->ffa, s->ffb,  s->bcx_h, s->cv_h, s->bx_h, host ? s->x : s->out};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        if (!bufs[i])
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations (%s)",
                              rp_backend_describe(m->be));
    return RP_OK;
}

static rp_status lfm2_kv_init(rp_model *m, rp_kv *kv, rp_err *err)
{
    lfm2 *s = m->arch_state;
    return rp_blk_hybrid_kv_init(m, kv, s->has_attn, s->rec_n, err);
}

static void attention(rp_model *m, lfm2 *s, lfm2_kv *kvs, int l, int pos0, int n)
{
    rp_model_config *c = &m->cfg;
    layer *L = &s->layers[l];
    rp_backend *be = m->be;
    int hd = c->head_dim;
    rp_op_matmul(be, L->wq, s->h, n, s->q);
    rp_op_matmul(be, L->wk, s->h, n, s->k);
    rp_op_matmul(be, L->wv, s->h, n, s->v);
    rp_op_rmsnorm(be, s->q, s->q, L->q_norm, n * c->n_heads, hd, s->eps, 0);
    rp_op_rmsnorm(be, s->k, s->k, L->k_norm, n * c->n_kv_heads, hd, s->eps, 0);
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
                      .scale = 1.0f / sqrtf((float)hd)};
    rp_blk_attend(be, &kvs->attn, l, s->k, s->v, &a);
    rp_op_matmul(be, L->wo, s->att, n, s->h);
}

static void short_conv(rp_model *m, lfm2 *s, lfm2_kv *kvs, int l, int n)
{
    layer *L = &s->layers[l];
    int D = m->cfg.dim;
    rp_op_matmul(m->be, L->in_proj, s->h, n, s->bcx);
    if (s->bcx_h != s->bcx)
        rp_backend_to_host(m->be, s->bcx_h, s->bcx, sizeof(float) * (size_t)n * 3 * D);
    for (int t = 0; t < n; t++) {
        const float *B = s->bcx_h + (size_t)t * 3 * D, *x = B + 2 * D;
        for (int i = 0; i < D; i++)
            s->bx_h[(size_t)t * D + i] = B[i] * x[i];
    }
    rp_blk_conv1d(s->cv_h, s->bx_h, kvs->rec + L->rec_off, L->conv_w, L->conv_b, n, D, s->K);
    for (int t = 0; t < n; t++) {
        const float *C = s->bcx_h + (size_t)t * 3 * D + D;
        for (int i = 0; i < D; i++)
            s->cv_h[(size_t)t * D + i] *= C[i];
    }
    if (s->cv_h != s->cv)
        rp_backend_from_host(m->be, s->cv, s->cv_h, sizeof(float) * (size_t)n * D);
    rp_op_matmul(m->be, L->out_proj, s->cv, n, s->h);
}

static rp_status lfm2_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                              int n_logits, rp_err *err)
{
    lfm2 *s = m->arch_state;
    lfm2_kv *kvs = kv->state;
    rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    int pos0 = kv->len, D = c->dim;
    rp_rope_update(&s->rope, pos0 + n);
    for (int t = 0; t < n; t++)
        s->pos[t] = pos0 + t;
    rp_op_embed(be, s->embed, ids, n, s->x);
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &s->layers[l];
        rp_op_rmsnorm(be, s->h, s->x, L->op_norm, n, D, s->eps, 0);
        if (L->conv)
            short_conv(m, s, kvs, l, n);
        else
            attention(m, s, kvs, l, pos0, n);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
        rp_op_rmsnorm(be, s->h, s->x, L->ffn_norm, n, D, s->eps, 0);
        rp_op_matmul(be, L->w1, s->h, n, s->ffa);
        rp_op_matmul(be, L->w3, s->h, n, s->ffb);
        rp_op_silu_mul(be, s->ffa, s->ffa, s->ffb, (int64_t)n * s->ffn);
        rp_op_matmul(be, L->w2, s->ffa, n, s->h);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
    }
    kv->len = pos0 + n;
    if (logits && n_logits > 0)
        rp_blk_logits(m, s->x, s->h, s->out, s->final_norm, s->lm_head, n, n_logits, s->eps,
                      0, logits);
    (void)err;
    return RP_OK;
}

const rp_arch rp_arch_lfm2 = {
    .name = "lfm2",
    .gpu = 1,
    .init = lfm2_init,
    .deinit = lfm2_deinit,
    .forward = lfm2_forward,
    .kv_init = lfm2_kv_init,
    .kv_deinit = rp_blk_hybrid_kv_deinit,
    .recurrent = 1,
};
