/* model/qwen3_moe.c - Qwen3-MoE (Qwen3-30B-A3B and relatives).
 *
 * Attention as Qwen3 (per-head RMS norm of q and k, rotate-half RoPE, GQA). The MLP of a
 * sparse layer (not in mlp_only_layers, (i + 1) % decoder_sparse_step == 0) routes every token
 * to num_experts_per_tok of num_experts SwiGLU experts: softmax over the router logits, the
 * top k kept (renormalised to sum 1 when norm_topk_prob), output = sum of weight * expert(h).
 * Other layers have a dense SwiGLU MLP of intermediate_size.
 *
 * Expert dispatch groups the chunk's tokens by expert: each expert gathers its tokens and runs
 * three matmuls over them, so in prefill an expert's weights are read once per chunk and in
 * decode only the k selected experts are read. Experts are per-expert tensors
 * (mlp.experts.E.gate_proj.weight, transformers) or stacks [E][out][in]
 * (mlp.switch_mlp.gate_proj.weight, what mlx_lm writes), viewed per expert.
 *
 * Backend-agnostic as llama.c is: weights through rp_backend_weight, backend activation
 * buffers, every touch of them a backend op. Routing is decided on the host: the router's
 * logits (n_tok x num_experts floats) come back with rp_backend_to_host (on the CPU they are
 * already there), the experts gather their tokens (rp_op_gather_rows) and add their weighted
 * outputs back into the residual stream (rp_op_scatter_add), in expert order.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/blocks.h"
#include "model/rope.h"

typedef struct expert {
    const rp_tensor *gate, *up, *down;
    rp_tensor view[3]; /* stacked experts: this expert's slices of gate, up, down */
} expert;

typedef struct layer {
    const rp_tensor *attn_norm, *ffn_norm, *wq, *wk, *wv, *wo, *q_norm, *k_norm;
    const rp_tensor *router;
    expert *experts;                         /* n_exp, NULL for a dense layer */
    const rp_tensor *w_gate, *w_up, *w_down; /* dense layer */
} layer;

typedef struct qmoe {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_blk_weights weights; /* the backend's copies the pointers above point into */
    rp_rope rope;
    int n_exp, top_k, moe_ffn, norm_topk;
    rp_blk_route route;
    /* backend buffers, RP_MAX_CHUNK rows; out: the vocabulary logits when buffers are not
     * host memory */
    float *x, *h, *q, *k, *v, *att, *logits, *xe, *ga, *up, *ye, *out;
    float *router; /* host: the router logits */
    int32_t pos[RP_MAX_CHUNK];
    int32_t rows[RP_MAX_CHUNK]; /* one expert's tokens */
    float rw[RP_MAX_CHUNK];     /* and their routing weights */
} qmoe;

static int is_sparse(const rp_model_config *c, int i, int n_exp)
{
    json_t *only = json_object_get(c->json, "mlp_only_layers");
    size_t j;
    json_t *e;
    json_array_foreach(only, j, e) if (json_integer_value(e) == i) return 0;
    int step = rp_config_int(c, "decoder_sparse_step", 1);
    return n_exp > 0 && step > 0 && (i + 1) % step == 0;
}

static rp_status bind_layer(rp_model *m, qmoe *s, int i, layer *L, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    const char *p = rp_blk_prefix(m);
    int64_t dim = c->dim, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
            kvd = (int64_t)c->n_kv_heads * hd;
    rp_status rc;
#define T(field, d0, d1, ...)                                                                      \
    if ((rc = rp_blk_tensor(m, err, &L->field, 0, d0, d1, "%slayers.%d." __VA_ARGS__))) return rc;
    T(attn_norm, dim, 0, "input_layernorm.weight", p, i);
    T(ffn_norm, dim, 0, "post_attention_layernorm.weight", p, i);
    T(wq, qd, dim, "self_attn.q_proj.weight", p, i);
    T(wk, kvd, dim, "self_attn.k_proj.weight", p, i);
    T(wv, kvd, dim, "self_attn.v_proj.weight", p, i);
    T(wo, dim, qd, "self_attn.o_proj.weight", p, i);
    T(q_norm, hd, 0, "self_attn.q_norm.weight", p, i);
    T(k_norm, hd, 0, "self_attn.k_norm.weight", p, i);
    if (!is_sparse(c, i, s->n_exp)) {
        T(w_gate, c->ffn_dim, dim, "mlp.gate_proj.weight", p, i);
        T(w_up, c->ffn_dim, dim, "mlp.up_proj.weight", p, i);
        T(w_down, dim, c->ffn_dim, "mlp.down_proj.weight", p, i);
        return RP_OK;
    }
    T(router, s->n_exp, dim, "mlp.gate.weight", p, i);
#undef T
    L->experts = rp_calloc((size_t)s->n_exp, sizeof(expert));
    if (!L->experts) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    int64_t f = s->moe_ffn;
    const rp_tensor *sg, *su, *sd; /* MLX layout: experts stacked in switch_mlp */
    if ((rc = rp_blk_tensor_nd(m, err, &sg, 1, 3, (int64_t[]){s->n_exp, f, dim},
                               "%slayers.%d.mlp.switch_mlp.gate_proj.weight", p, i)))
        return rc;
    if (sg) {
        if ((rc = rp_blk_tensor_nd(m, err, &su, 0, 3, (int64_t[]){s->n_exp, f, dim},
                                   "%slayers.%d.mlp.switch_mlp.up_proj.weight", p, i)) ||
            (rc = rp_blk_tensor_nd(m, err, &sd, 0, 3, (int64_t[]){s->n_exp, dim, f},
                                   "%slayers.%d.mlp.switch_mlp.down_proj.weight", p, i)))
            return rc;
        for (int e = 0; e < s->n_exp; e++) {
            expert *E = &L->experts[e];
            E->view[0] = rp_blk_expert(sg, e);
            E->view[1] = rp_blk_expert(su, e);
            E->view[2] = rp_blk_expert(sd, e);
            E->gate = &E->view[0];
            E->up = &E->view[1];
            E->down = &E->view[2];
        }
        return RP_OK;
    }
    for (int e = 0; e < s->n_exp; e++) {
        expert *E = &L->experts[e];
        if ((rc = rp_blk_tensor(m, err, &E->gate, 0, f, dim,
                                "%slayers.%d.mlp.experts.%d.gate_proj.weight", p, i, e)) ||
            (rc = rp_blk_tensor(m, err, &E->up, 0, f, dim,
                                "%slayers.%d.mlp.experts.%d.up_proj.weight", p, i, e)) ||
            (rc = rp_blk_tensor(m, err, &E->down, 0, dim, f,
                                "%slayers.%d.mlp.experts.%d.down_proj.weight", p, i, e)))
            return rc;
    }
    return RP_OK;
}

static void qmoe_deinit(rp_model *m)
{
    qmoe *s = m->arch_state;
    if (!s) return;
    if (s->layers)
        for (int i = 0; i < m->cfg.n_layers; i++)
            rp_free(s->layers[i].experts);
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

/* Every bound weight to the backend (rp_blk_to_backend): layers, experts, embed, norm, head. */
static rp_status to_backend(rp_model *m, qmoe *s, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    rp_status rc = rp_blk_weights_init(&s->weights, c->n_layers * (12 + 3 * s->n_exp) + 3, err);
    for (int i = 0; i < c->n_layers && !rc; i++) {
        layer *L = &s->layers[i];
        const rp_tensor **f[] = {&L->attn_norm, &L->ffn_norm, &L->wq,     &L->wk,
                                 &L->wv,        &L->wo,       &L->q_norm, &L->k_norm,
                                 &L->router,    &L->w_gate,   &L->w_up,   &L->w_down};
        if (!rc)
            rc = rp_blk_to_backend_n(m, &s->weights, f, RP_ARRAY_LEN(f), err);
        for (int e = 0; L->experts && e < s->n_exp && !rc; e++) {
            expert *E = &L->experts[e];
            const rp_tensor **ex[] = {&E->gate, &E->up, &E->down};
            rc = rp_blk_to_backend_n(m, &s->weights, ex, RP_ARRAY_LEN(ex), err);
        }
    }
    const rp_tensor **top[] = {&s->embed, &s->final_norm, &s->lm_head};
    return rc ? rc : rp_blk_to_backend_n(m, &s->weights, top, RP_ARRAY_LEN(top), err);
}

static rp_status qmoe_init(rp_model *m, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    if (strcmp(c->hidden_act, "silu") != 0)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "hidden_act '%s' is not supported (silu only)",
                          c->hidden_act);
    qmoe *s = rp_calloc(1, sizeof *s);
    if (!s) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->n_exp = rp_config_int(c, "num_experts", rp_config_int(c, "num_local_experts", 0));
    s->top_k = rp_config_int(c, "num_experts_per_tok", 0);
    s->moe_ffn = rp_config_int(c, "moe_intermediate_size", 0);
    s->norm_topk = rp_config_bool(c, "norm_topk_prob", 0);
    if (s->n_exp <= 0 || s->moe_ffn <= 0)
        return rp_err_set(err, RP_ERR_INVALID,
                          "config.json: num_experts and moe_intermediate_size are required");
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
        (rc = rp_rope_init(&s->rope, c, c->head_dim, err)))
        return rc;
    if ((rc = to_backend(m, s, err)))
        return rc;
    size_t n = RP_MAX_CHUNK;
    size_t ff = (size_t)(c->ffn_dim > s->moe_ffn ? c->ffn_dim : s->moe_ffn);
    int host = rp_backend_host_buffers(m->be);
    rp_blk_attn_acts(m, n, &s->x, &s->h, &s->q, &s->k, &s->v, &s->att);
    s->logits = rp_blk_act(m, n * s->n_exp);
    s->xe = rp_blk_act(m, n * c->dim);
    s->ga = rp_blk_act(m, n * ff);
    s->up = rp_blk_act(m, n * ff);
    s->ye = rp_blk_act(m, n * c->dim);
    if (!host)
        s->out = rp_blk_act(m, n * (size_t)c->vocab_size);
    s->router = host ? s->logits : rp_alloc(sizeof(float) * n * (size_t)s->n_exp);
    float *bufs[] = {s->x,  s->h,  s->q,  s->k,  s->v,  s->att, s->logits,
                     s->xe, s->ga, s->up, s->ye, s->router, host ? s->x : s->out};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        if (!bufs[i])
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations (%s)",
                              rp_backend_describe(m->be));
    return RP_OK;
}

static void attention_block(rp_model *m, qmoe *s, rp_blk_kv *kvs, int l, int pos0, int n)
{
    rp_model_config *c = &m->cfg;
    layer *L = &s->layers[l];
    rp_backend *be = m->be;
    int hd = c->head_dim;
    rp_op_rmsnorm(be, s->h, s->x, L->attn_norm, n, c->dim, c->norm_eps, 0);
    rp_op_matmul(be, L->wq, s->h, n, s->q);
    rp_op_matmul(be, L->wk, s->h, n, s->k);
    rp_op_matmul(be, L->wv, s->h, n, s->v);
    rp_op_rmsnorm(be, s->q, s->q, L->q_norm, n * c->n_heads, hd, c->norm_eps, 0);
    rp_op_rmsnorm(be, s->k, s->k, L->k_norm, n * c->n_kv_heads, hd, c->norm_eps, 0);
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
                      .window = 0};
    rp_blk_attend(be, kvs, l, s->k, s->v, &a);
    rp_op_matmul(be, L->wo, s->att, n, s->h);
    rp_op_add(be, s->x, s->h, (int64_t)n * c->dim);
}

static void moe_block(rp_model *m, qmoe *s, layer *L, int n)
{
    rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    int D = c->dim, F = s->moe_ffn, K = s->top_k;
    rp_op_matmul(be, L->router, s->h, n, s->logits);
    if (s->router != s->logits)
        rp_backend_to_host(be, s->router, s->logits, sizeof(float) * (size_t)n * s->n_exp);
    rp_blk_route_compute(&s->route, s->router, n,
                         s->norm_topk ? RP_ROUTE_SOFTMAX_TOPK_NORM : RP_ROUTE_SOFTMAX_TOPK);
    for (int e = 0; e < s->n_exp; e++) {
        int b = s->route.start[e], cnt = s->route.start[e + 1] - b;
        if (cnt == 0) continue;
        for (int i = 0; i < cnt; i++) {
            int slot = s->route.order[b + i];
            s->rows[i] = slot / K;
            s->rw[i] = s->route.w[slot];
        }
        rp_op_gather_rows(be, s->xe, s->h, s->rows, cnt, D);
        expert *E = &L->experts[e];
        rp_op_matmul(be, E->gate, s->xe, cnt, s->ga);
        rp_op_matmul(be, E->up, s->xe, cnt, s->up);
        rp_op_silu_mul(be, s->ga, s->ga, s->up, (int64_t)cnt * F);
        rp_op_matmul(be, E->down, s->ga, cnt, s->ye);
        rp_op_scatter_add(be, s->x, s->ye, s->rows, s->rw, cnt, D);
    }
}

static void dense_block(rp_model *m, qmoe *s, layer *L, int n)
{
    rp_backend *be = m->be;
    int D = m->cfg.dim, F = m->cfg.ffn_dim;
    rp_op_matmul(be, L->w_gate, s->h, n, s->ga);
    rp_op_matmul(be, L->w_up, s->h, n, s->up);
    rp_op_silu_mul(be, s->ga, s->ga, s->up, (int64_t)n * F);
    rp_op_matmul(be, L->w_down, s->ga, n, s->ye);
    rp_op_add(be, s->x, s->ye, (int64_t)n * D);
}

static rp_status qmoe_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                              int n_logits, rp_err *err)
{
    qmoe *s = m->arch_state;
    rp_blk_kv *kvs = kv->state;
    rp_model_config *c = &m->cfg;
    int pos0 = kv->len;
    rp_rope_update(&s->rope, pos0 + n);
    for (int t = 0; t < n; t++)
        s->pos[t] = pos0 + t;
    rp_op_embed(m->be, s->embed, ids, n, s->x);
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &s->layers[l];
        attention_block(m, s, kvs, l, pos0, n);
        rp_op_rmsnorm(m->be, s->h, s->x, L->ffn_norm, n, c->dim, c->norm_eps, 0);
        if (L->experts)
            moe_block(m, s, L, n);
        else
            dense_block(m, s, L, n);
    }
    kv->len = pos0 + n;
    if (logits && n_logits > 0)
        rp_blk_logits(m, s->x, s->h, s->out, s->final_norm, s->lm_head, n, n_logits, c->norm_eps,
                      0, logits);
    (void)err;
    return RP_OK;
}

const rp_arch rp_arch_qwen3_moe = {
    .name = "qwen3_moe",
    .gpu = 1,
    .init = qmoe_init,
    .deinit = qmoe_deinit,
    .forward = qmoe_forward,
    .kv_init = rp_blk_attn_kv_init,
    .kv_deinit = rp_blk_attn_kv_deinit,
};
