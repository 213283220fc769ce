/* model/gemma3.c - Gemma 3 text models (gemma3_text, and the text tower of Gemma3 multimodal
 * checkpoints).
 *
 *   x = embed(ids) * sqrt(hidden_size)
 *   per layer: x += post_attn_norm(attn(in_norm(x))) ; x += post_ffw_norm(mlp(pre_ffw_norm(x)))
 *   logits = lm_head(norm(x))   (tied to the embedding)
 * Every norm is zero-centred (x / rms * (1 + w)), q and k too (per head). Attention scale is
 * query_pre_attn_scalar^-1/2. Sliding layers (layer_types, or every layer but each
 * sliding_window_pattern-th) see the last sliding_window keys and use their own RoPE (the
 * "sliding_attention" rope parameters, or rope_local_base_freq in transformers-4 configs);
 * full layers use the "full_attention" ones (or rope_theta / rope_scaling). MLP is
 * down(gelu_tanh(gate(h)) * up(h)). Optional attention/final logit soft-capping is refused.
 *
 * Backend-agnostic as llama.c is: weights go through rp_backend_weight, activations are
 * backend buffers, and every touch of them is a backend op (embedding, scale, gelu), so the
 * same forward runs on the CPU and on CUDA.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/blocks.h"
#include "model/rope.h"

typedef struct layer {
    const rp_tensor *in_norm, *post_attn_norm, *pre_ffw_norm, *post_ffw_norm;
    const rp_tensor *wq, *wk, *wv, *wo, *q_norm, *k_norm, *w_gate, *w_up, *w_down;
    int sliding;
} layer;

typedef struct gemma3 {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_blk_weights weights; /* the backend's copies the pointers above point into */
    rp_rope rope_global, rope_local;
    float embed_scale, attn_scale;
    float *x, *h, *q, *k, *v, *att, *ffa, *ffb; /* backend buffers, RP_MAX_CHUNK rows */
    float *logits; /* RP_MAX_CHUNK rows, only when buffers are not host memory */
    int32_t pos[RP_MAX_CHUNK];
} gemma3;

/* The rope parameters of one layer type: transformers 5 nests them per type. */
static rp_status init_ropes(rp_model *m, gemma3 *s, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    rp_model_config g = *c, l = *c;
    json_t *rp = json_object_get(c->json, "rope_parameters");
    json_t *full = json_object_get(rp, "full_attention"),
           *slide = json_object_get(rp, "sliding_attention");
    rp_rope_config *cf[2] = {&g.rope, &l.rope};
    json_t *obj[2] = {full, slide};
    if (json_is_object(full) || json_is_object(slide)) {
        for (int i = 0; i < 2; i++) {
            rp_rope_config *r = cf[i];
            json_t *o = obj[i];
            const char *t = json_string_value(json_object_get(o, "rope_type"));
            snprintf(r->type, sizeof r->type, "%s", t ? t : "default");
            json_t *th = json_object_get(o, "rope_theta");
            r->theta = json_is_number(th) ? (float)json_number_value(th) : (i ? 10000.f : 1e6f);
            json_t *f = json_object_get(o, "factor");
            r->factor = json_is_number(f) ? (float)json_number_value(f) : 1.0f;
        }
    } else {
        /* transformers 4: rope_theta / rope_scaling are the global ones */
        snprintf(l.rope.type, sizeof l.rope.type, "default");
        l.rope.theta = (float)rp_config_num(c, "rope_local_base_freq", 10000.0);
        l.rope.factor = 1.0f;
    }
    for (int i = 0; i < 2; i++)
        if (strcmp(cf[i]->type, "default") != 0 && strcmp(cf[i]->type, "linear") != 0)
            return rp_err_set(err, RP_ERR_UNSUPPORTED,
                              "Gemma 3: rope type '%s' is not supported (default, linear)",
                              cf[i]->type);
    rp_status rc = rp_rope_init(&s->rope_global, &g, c->head_dim, err);
    if (!rc) rc = rp_rope_init(&s->rope_local, &l, c->head_dim, err);
    return rc;
}

static void gemma3_deinit(rp_model *m)
{
    gemma3 *s = m->arch_state;
    if (!s) return;
    rp_free(s->layers);
    rp_blk_weights_free(&s->weights);
    rp_rope_deinit(&s->rope_global);
    rp_rope_deinit(&s->rope_local);
    float *bufs[] = {s->x, s->h, s->q, s->k, s->v, s->att, s->ffa, s->ffb, s->logits};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        rp_backend_buf_free(m->be, bufs[i]);
    rp_free(s);
    m->arch_state = NULL;
}

static rp_status gemma3_init(rp_model *m, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    json_t *act = json_object_get(c->json, "hidden_activation");
    const char *a = json_is_string(act) ? json_string_value(act) : c->hidden_act;
    if (strcmp(a, "gelu_pytorch_tanh") != 0 && strcmp(a, "gelu_tanh") != 0)
        return rp_err_set(err, RP_ERR_UNSUPPORTED,
                          "Gemma 3: hidden_activation '%s' is not supported (gelu_pytorch_tanh)",
                          a);
    if (json_is_number(json_object_get(c->json, "attn_logit_softcapping")) ||
        json_is_number(json_object_get(c->json, "final_logit_softcapping")))
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "Gemma 3: logit soft-capping is not supported");
    gemma3 *s = rp_calloc(1, sizeof *s);
    if (!s) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->layers = rp_calloc((size_t)c->n_layers, sizeof(layer));
    if (!s->layers) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    const char *p = rp_blk_prefix(m);
    int64_t dim = c->dim, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
            kvd = (int64_t)c->n_kv_heads * hd, ffn = c->ffn_dim;
    json_t *lt = json_object_get(c->json, "layer_types");
    int pattern =
        rp_config_int(c, "sliding_window_pattern", rp_config_int(c, "_sliding_window_pattern", 6));
    rp_status rc;
    for (int i = 0; i < c->n_layers; i++) {
        layer *L = &s->layers[i];
        const char *t = json_string_value(json_array_get(lt, (size_t)i));
        L->sliding =
            t ? strcmp(t, "sliding_attention") == 0 : pattern > 0 && (i + 1) % pattern != 0;
#define T(field, d0, d1, name)                                                                     \
    if ((rc = rp_blk_tensor(m, err, &L->field, 0, d0, d1, "%slayers.%d." name, p, i))) return rc;
        T(in_norm, dim, 0, "input_layernorm.weight");
        T(post_attn_norm, dim, 0, "post_attention_layernorm.weight");
        T(pre_ffw_norm, dim, 0, "pre_feedforward_layernorm.weight");
        T(post_ffw_norm, dim, 0, "post_feedforward_layernorm.weight");
        T(wq, qd, dim, "self_attn.q_proj.weight");
        T(wk, kvd, dim, "self_attn.k_proj.weight");
        T(wv, kvd, dim, "self_attn.v_proj.weight");
        T(wo, dim, qd, "self_attn.o_proj.weight");
        T(q_norm, hd, 0, "self_attn.q_norm.weight");
        T(k_norm, hd, 0, "self_attn.k_norm.weight");
        T(w_gate, ffn, dim, "mlp.gate_proj.weight");
        T(w_up, ffn, dim, "mlp.up_proj.weight");
        T(w_down, dim, ffn, "mlp.down_proj.weight");
#undef T
    }
    if ((rc =
             rp_blk_tensor(m, err, &s->embed, 0, c->vocab_size, dim, "%sembed_tokens.weight", p)) ||
        (rc = rp_blk_tensor(m, err, &s->final_norm, 0, dim, 0, "%snorm.weight", p)) ||
        (rc = rp_blk_lm_head(m, s->embed, &s->lm_head, err)) || (rc = init_ropes(m, s, err)))
        return rc;
    s->embed_scale = sqrtf((float)c->dim);
    s->attn_scale = 1.0f / sqrtf((float)rp_config_num(c, "query_pre_attn_scalar", hd));
    if ((rc = rp_blk_weights_init(&s->weights, c->n_layers * 13 + 3, err)))
        return rc;
    for (int i = 0; i < c->n_layers; i++) {
        layer *L = &s->layers[i];
        const rp_tensor **f[] = {&L->in_norm, &L->post_attn_norm, &L->pre_ffw_norm,
                                 &L->post_ffw_norm, &L->wq, &L->wk, &L->wv, &L->wo,
                                 &L->q_norm, &L->k_norm, &L->w_gate, &L->w_up, &L->w_down};
        if ((rc = rp_blk_to_backend_n(m, &s->weights, f, RP_ARRAY_LEN(f), err)))
            return rc;
    }
    const rp_tensor **top[] = {&s->embed, &s->final_norm, &s->lm_head};
    if ((rc = rp_blk_to_backend_n(m, &s->weights, top, RP_ARRAY_LEN(top), err)))
        return rc;
    size_t n = RP_MAX_CHUNK;
    rp_blk_attn_acts(m, n, &s->x, &s->h, &s->q, &s->k, &s->v, &s->att);
    s->ffa = rp_blk_act(m, n * ffn);
    s->ffb = rp_blk_act(m, n * ffn);
    int host = rp_backend_host_buffers(m->be);
    if (!host)
        s->logits = rp_blk_act(m, n * (size_t)c->vocab_size);
    if (!s->x || !s->h || !s->q || !s->k || !s->v || !s->att || !s->ffa || !s->ffb ||
        (!host && !s->logits))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations (%s)",
                          rp_backend_describe(m->be));
    return RP_OK;
}

static rp_status gemma3_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                                int n_logits, rp_err *err)
{
    gemma3 *s = m->arch_state;
    rp_blk_kv *kvs = kv->state;
    rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    int pos0 = kv->len, D = c->dim, hd = c->head_dim, F = c->ffn_dim;
    float eps = c->norm_eps;
    for (int t = 0; t < n; t++)
        s->pos[t] = pos0 + t;
    rp_op_embed(be, s->embed, ids, n, s->x);
    rp_op_scale(be, s->x, s->embed_scale, (int64_t)n * D);
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &s->layers[l];
        const rp_rope *r = L->sliding ? &s->rope_local : &s->rope_global;
        rp_op_rmsnorm(be, s->h, s->x, L->in_norm, n, D, eps, 1);
        rp_op_matmul(be, L->wq, s->h, n, s->q);
        rp_op_matmul(be, L->wk, s->h, n, s->k);
        rp_op_matmul(be, L->wv, s->h, n, s->v);
        rp_op_rmsnorm(be, s->q, s->q, L->q_norm, n * c->n_heads, hd, eps, 1);
        rp_op_rmsnorm(be, s->k, s->k, L->k_norm, n * c->n_kv_heads, hd, eps, 1);
        rp_op_rope(be, s->q, n, c->n_heads, hd, r->rot_dim, s->pos, r->inv_freq, r->attn_factor, 1);
        rp_op_rope(be, s->k, n, c->n_kv_heads, hd, r->rot_dim, s->pos, r->inv_freq, r->attn_factor,
                   1);
        rp_attn_args a = {.q = s->q,
                          .out = s->att,
                          .n_tok = n,
                          .pos0 = pos0,
                          .n_heads = c->n_heads,
                          .n_kv_heads = c->n_kv_heads,
                          .head_dim = hd,
                          .scale = s->attn_scale,
                          .window = L->sliding ? c->sliding_window : 0};
        rp_blk_attend(be, kvs, l, s->k, s->v, &a);
        rp_op_matmul(be, L->wo, s->att, n, s->h);
        rp_op_rmsnorm(be, s->h, s->h, L->post_attn_norm, n, D, eps, 1);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
        rp_op_rmsnorm(be, s->h, s->x, L->pre_ffw_norm, n, D, eps, 1);
        rp_op_matmul(be, L->w_gate, s->h, n, s->ffa);
        rp_op_matmul(be, L->w_up, s->h, n, s->ffb);
        rp_op_gelu_mul(be, s->ffa, s->ffa, s->ffb, (int64_t)n * F);
        rp_op_matmul(be, L->w_down, s->ffa, n, s->h);
        rp_op_rmsnorm(be, s->h, s->h, L->post_ffw_norm, n, D, eps, 1);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
    }
    kv->len = pos0 + n;
    if (logits && n_logits > 0) {
        const float *last = s->x + (size_t)(n - n_logits) * D;
        rp_op_rmsnorm(be, s->h, last, s->final_norm, n_logits, D, eps, 1);
        rp_op_matmul(be, s->lm_head, s->h, n_logits, s->logits ? s->logits : logits);
        if (s->logits)
            rp_backend_to_host(be, logits, s->logits,
                               sizeof(float) * (size_t)n_logits * c->vocab_size);
    }
    (void)err;
    return RP_OK;
}

const rp_arch rp_arch_gemma3 = {
    .name = "gemma3",
    .gpu = 1,
    .init = gemma3_init,
    .deinit = gemma3_deinit,
    .forward = gemma3_forward,
    .kv_init = rp_blk_attn_kv_init,
    .kv_deinit = rp_blk_attn_kv_deinit,
};
