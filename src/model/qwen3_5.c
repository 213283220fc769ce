/* model/qwen3_5.c - Qwen3.5 (qwen3_5_text), Qwen3.5-MoE (qwen3_5_moe_text) and Qwen3-Next
 * (qwen3_next, same layers with fused head-grouped in_proj_qkvz / in_proj_ba): Gated DeltaNet
 * linear-attention layers interleaved with gated full-attention layers (config layer_types,
 * or every full_attention_interval-th layer).
 *
 * Every layer: x += mixer(norm1(x)) ; x += mlp(norm2(x)), with zero-centred norms
 * (x / rms * (1 + w)), final (1 + w) norm, untied or tied lm_head. The MLP is a dense SwiGLU,
 * or (a layer with a router, mlp.gate) the Qwen3-Next mixture: softmax over num_experts router
 * logits, top num_experts_per_tok renormalised when norm_topk_prob, sum of weight * SwiGLU
 * expert, plus a shared SwiGLU expert scaled by sigmoid(shared_expert_gate h). Experts are
 * read per expert (experts.E.gate_proj...) or fused (experts.gate_up_proj [E][2I][D] with gate
 * rows first, experts.down_proj [E][D][I]) or stacked as mlx_lm writes them
 * (mlp.switch_mlp.{gate,up,down}_proj.weight [E][out][in]), as row views, never copied.
 *
 * Full attention: q_proj gives per head [q | gate] (2 * head_dim; just q when
 * attn_output_gate is false); q and k get a (1 + w) per-head norm, partial rotary
 * (partial_rotary_factor of head_dim, rotate-half), softmax attention, then
 * out *= sigmoid(gate) before o_proj.
 *
 * Gated DeltaNet: qkv = in_proj_qkv(h) through a causal depthwise conv (kernel
 * linear_conv_kernel_dim, no bias) and SiLU, split into q, k ([n_k_heads][dk]) and v
 * ([n_v_heads][dv]); q and k are L2-normalised (q also scaled by dk^-1/2) and shared by
 * n_v_heads / n_k_heads value heads. Per value head with beta = sigmoid(in_proj_b h) and
 * decay = exp(-exp(A_log) * softplus(in_proj_a h + dt_bias)) the state S [dk][dv] follows
 *   S = decay S ; S += k (beta (v - S^T k))^T ; o = S^T q
 * and o goes through an RMS norm (weight w, not 1 + w) times silu(in_proj_z h) into out_proj.
 * The recurrence is the backend's rp_op_gated_delta (heads in parallel, tokens in order within
 * a head so its state stays in cache); prefill runs it token by token too, which is exact
 * (the chunked form GPUs use reorders the same sums).
 *
 * Cache: attention layers keep K/V; linear layers keep their conv window and S, all in one
 * flat block (kv->rec) so rp_kv_snapshot can copy it.
 *
 * Backends: the weights go through rp_blk_to_backend and the matmuls, norms, RoPE, softmax
 * attention and the experts' SwiGLU run on the model's backend; the experts' and the shared
 * expert's outputs are added to the residual rows by rp_op_scatter_add. The pieces in
 * between run on the host, where the recurrent state lives (the engine snapshots it): the
 * DeltaNet conv, normalisations and recurrence (rp_op_gated_delta on a host CPU backend the
 * recipe keeps for it when the model's is a device), the q / gate split and the output gate
 * of full attention, the router's top-k. On a device those are round trips through
 * rp_backend_to_host / rp_backend_from_host; device kernels for them are not written yet.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/blocks.h"
#include "model/rope.h"

typedef struct layer {
    int linear;
    const rp_tensor *router, *sh_gate_w, *sh_gate, *sh_up, *sh_down; /* MoE layer */
    rp_tensor *ex_gate, *ex_up, *ex_down;                            /* n_exp views each */
    const rp_tensor *in_norm, *post_norm, *w_gate, *w_up, *w_down;
    const rp_tensor *wq, *wk, *wv, *wo, *q_norm, *k_norm;      /* full attention */
    const rp_tensor *w_qkv, *w_z, *w_b, *w_a, *w_out, *g_norm; /* linear attention */
    const rp_tensor *w_qkvz, *w_ba;  /* Qwen3-Next's fused, head-grouped projections */
    float *conv_w, *neg_a, *dt_bias, *g_norm_f; /* f32 host copies */
    size_t rec_off;                  /* this layer's conv window then S inside kv->rec */
} layer;

/* A backend buffer and the host rows it is read into / written from (the same memory on a
 * host backend). */
typedef struct mirror {
    float *dev, *host;
} mirror;

typedef struct qwen35 {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_blk_weights weights; /* the backend's copies the pointers above point into */
    rp_backend *host_be;    /* the host-side recurrence's CPU backend when m->be is a device */
    int host;               /* m->be's buffers are host memory */
    rp_rope rope;
    int nk, nv, dk, dv, K, conv_dim;
    int out_gate; /* attn_output_gate */
    int n_exp, top_k, moe_ffn, sh_ffn, norm_topk, any_moe;
    rp_blk_route route;
    size_t rec_n;
    uint8_t *has_attn;
    /* backend buffers, RP_MAX_CHUNK rows */
    float *x, *h, *k, *v, *ffa, *ffb, *xe, *ye, *out;
    /* backend buffers with host rows */
    mirror qg, q, att, qkv, z, b, a, o, fused, rlog, shg;
    float *gate, *conv; /* host only */
    int32_t pos[RP_MAX_CHUNK];
    int32_t rows[RP_MAX_CHUNK]; /* one expert's tokens (or all, for the shared expert) */
    float rw[RP_MAX_CHUNK];     /* and their weights */
} qwen35;

typedef rp_blk_hybrid_kv qwen35_kv;

static rp_tensor *alloc_views(int n)
{
    return rp_calloc((size_t)n, sizeof(rp_tensor));
}

/* The router, the experts (per-expert tensors or fused stacks) and the shared expert. */
static rp_status bind_moe(rp_model *m, qwen35 *s, int i, layer *L, rp_err *err)
{
    const char *p = rp_blk_prefix(m);
    int64_t D = m->cfg.dim, I = s->moe_ffn, E = s->n_exp;
    if (E <= 0 || I <= 0)
        return rp_err_set(err, RP_ERR_INVALID,
                          "config.json: layer %d has a router but "
                          "num_experts / moe_intermediate_size are missing",
                          i);
    L->ex_gate = alloc_views((int)E);
    L->ex_up = alloc_views((int)E);
    L->ex_down = alloc_views((int)E);
    if (!L->ex_gate || !L->ex_up || !L->ex_down)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_status rc;
    const rp_tensor *gu, *dn;
    if ((rc = rp_blk_tensor_nd(m, err, &gu, 1, 3, (int64_t[]){E, 2 * I, D},
                               "%slayers.%d.mlp.experts.gate_up_proj", p, i)))
        return rc;
    if (gu) {
        if ((rc = rp_blk_tensor_nd(m, err, &dn, 0, 3, (int64_t[]){E, D, I},
                                   "%slayers.%d.mlp.experts.down_proj", p, i)))
            return rc;
        for (int64_t e = 0; e < E; e++) {
            L->ex_gate[e] = rp_blk_rows(gu, e * 2 * I, I);
            L->ex_up[e] = rp_blk_rows(gu, e * 2 * I + I, I);
            L->ex_down[e] = rp_blk_expert(dn, e);
        }
    } else if ((rc = rp_blk_tensor_nd(m, err, &gu, 1, 3, (int64_t[]){E, I, D},
                                      "%slayers.%d.mlp.switch_mlp.gate_proj.weight", p, i)) ||
               gu) {
        const rp_tensor *up;
        if (rc || (rc = rp_blk_tensor_nd(m, err, &up, 0, 3, (int64_t[]){E, I, D},
                                         "%slayers.%d.mlp.switch_mlp.up_proj.weight", p, i)) ||
            (rc = rp_blk_tensor_nd(m, err, &dn, 0, 3, (int64_t[]){E, D, I},
                                   "%slayers.%d.mlp.switch_mlp.down_proj.weight", p, i)))
            return rc;
        for (int64_t e = 0; e < E; e++) { /* MLX layout: one stack per projection */
            L->ex_gate[e] = rp_blk_expert(gu, e);
            L->ex_up[e] = rp_blk_expert(up, e);
            L->ex_down[e] = rp_blk_expert(dn, e);
        }
    } else {
        for (int e = 0; e < E; e++) {
            const rp_tensor *g, *u, *d;
            if ((rc = rp_blk_tensor(m, err, &g, 0, I, D,
                                    "%slayers.%d.mlp.experts.%d.gate_proj.weight", p, i, e)) ||
                (rc = rp_blk_tensor(m, err, &u, 0, I, D,
                                    "%slayers.%d.mlp.experts.%d.up_proj.weight", p, i, e)) ||
                (rc = rp_blk_tensor(m, err, &d, 0, D, I,
                                    "%slayers.%d.mlp.experts.%d.down_proj.weight", p, i, e)))
                return rc;
            L->ex_gate[e] = *g;
            L->ex_up[e] = *u;
            L->ex_down[e] = *d;
        }
    }
    if ((rc = rp_blk_tensor(m, err, &L->sh_gate, 1, s->sh_ffn, D,
                            "%slayers.%d.mlp.shared_expert.gate_proj.weight", p, i)))
        return rc;
    if (L->sh_gate &&
        ((rc = rp_blk_tensor(m, err, &L->sh_up, 0, s->sh_ffn, D,
                             "%slayers.%d.mlp.shared_expert.up_proj.weight", p, i)) ||
         (rc = rp_blk_tensor(m, err, &L->sh_down, 0, D, s->sh_ffn,
                             "%slayers.%d.mlp.shared_expert.down_proj.weight", p, i)) ||
         (rc = rp_blk_tensor(m, err, &L->sh_gate_w, 0, 1, D,
                             "%slayers.%d.mlp.shared_expert_gate.weight", p, i))))
        return rc;
    s->any_moe = 1;
    return RP_OK;
}

static rp_status bind_layer(rp_model *m, qwen35 *s, int i, layer *L, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    const char *p = rp_blk_prefix(m);
    int64_t dim = c->dim, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
            kvd = (int64_t)c->n_kv_heads * hd, ffn = c->ffn_dim;
    rp_status rc;
#define T(field, d0, d1, ...)                                                                      \
    if ((rc = rp_blk_tensor(m, err, &L->field, 0, d0, d1, "%slayers.%d." __VA_ARGS__))) return rc;
    T(in_norm, dim, 0, "input_layernorm.weight", p, i);
    T(post_norm, dim, 0, "post_attention_layernorm.weight", p, i);
    if ((rc = rp_blk_tensor(m, err, &L->router, 1, s->n_exp, dim, "%slayers.%d.mlp.gate.weight", p,
                            i)))
        return rc;
    if (L->router) {
        if ((rc = bind_moe(m, s, i, L, err))) return rc;
    } else {
        T(w_gate, ffn, dim, "mlp.gate_proj.weight", p, i);
        T(w_up, ffn, dim, "mlp.up_proj.weight", p, i);
        T(w_down, dim, ffn, "mlp.down_proj.weight", p, i);
    }
    if (!L->linear) {
        T(wq, (s->out_gate ? 2 : 1) * qd, dim, "self_attn.q_proj.weight", p, i);
        T(wk, kvd, dim, "self_attn.k_proj.weight", p, i);
        T(wv, kvd, dim, "self_attn.v_proj.weight", p, i);
        T(wo, dim, qd, "self_attn.o_proj.weight", p, i);
        T(q_norm, hd, 0, "self_attn.q_norm.weight", p, i);
        T(k_norm, hd, 0, "self_attn.k_norm.weight", p, i);
        return RP_OK;
    }
    int64_t vd = (int64_t)s->nv * s->dv;
    if ((rc = rp_blk_tensor(m, err, &L->w_qkvz, 1, s->conv_dim + vd, dim,
                            "%slayers.%d.linear_attn.in_proj_qkvz.weight", p, i)))
        return rc;
    if (L->w_qkvz) {
        T(w_ba, 2 * s->nv, dim, "linear_attn.in_proj_ba.weight", p, i);
    } else {
        T(w_qkv, s->conv_dim, dim, "linear_attn.in_proj_qkv.weight", p, i);
        T(w_z, vd, dim, "linear_attn.in_proj_z.weight", p, i);
        T(w_b, s->nv, dim, "linear_attn.in_proj_b.weight", p, i);
        T(w_a, s->nv, dim, "linear_attn.in_proj_a.weight", p, i);
    }
    T(w_out, dim, vd, "linear_attn.out_proj.weight", p, i);
    T(g_norm, s->dv, 0, "linear_attn.norm.weight", p, i);
    const rp_tensor *alog, *dtb, *cw;
    if ((rc = rp_blk_tensor(m, err, &alog, 0, s->nv, 0, "%slayers.%d.linear_attn.A_log", p, i)) ||
        (rc = rp_blk_tensor(m, err, &dtb, 0, s->nv, 0, "%slayers.%d.linear_attn.dt_bias", p, i)) ||
        (rc = rp_blk_tensor_nd(m, err, &cw, 0, 3, (int64_t[]){s->conv_dim, 1, s->K},
                               "%slayers.%d.linear_attn.conv1d.weight", p, i)))
        return rc;
#undef T
    L->neg_a = rp_blk_f32(alog);
    L->dt_bias = rp_blk_f32(dtb);
    L->conv_w = rp_blk_f32(cw);
    L->g_norm_f = rp_blk_f32(L->g_norm);
    if (!L->neg_a || !L->dt_bias || !L->conv_w || !L->g_norm_f)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int h = 0; h < s->nv; h++)
        L->neg_a[h] = -expf(L->neg_a[h]);
    L->rec_off = s->rec_n;
    s->rec_n += (size_t)(s->K - 1) * s->conv_dim + (size_t)s->nv * s->dk * s->dv;
    return RP_OK;
}

static void mirror_free(rp_model *m, qwen35 *s, mirror *mr)
{
    if (mr->host != mr->dev)
        rp_free(mr->host);
    rp_backend_buf_free(m->be, mr->dev);
    (void)s;
}

static void q35_deinit(rp_model *m)
{
    qwen35 *s = m->arch_state;
    if (!s) return;
    if (s->layers)
        for (int i = 0; i < m->cfg.n_layers; i++) {
            rp_free_aligned(s->layers[i].conv_w);
            rp_free_aligned(s->layers[i].neg_a);
            rp_free_aligned(s->layers[i].dt_bias);
            rp_free_aligned(s->layers[i].g_norm_f);
            rp_free(s->layers[i].ex_gate);
            rp_free(s->layers[i].ex_up);
            rp_free(s->layers[i].ex_down);
        }
    rp_blk_route_free(&s->route);
    rp_free(s->layers);
    rp_free(s->has_attn);
    rp_blk_weights_free(&s->weights);
    rp_rope_deinit(&s->rope);
    float *bufs[] = {s->x, s->h, s->k, s->v, s->ffa, s->ffb, s->xe, s->ye, s->out};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        rp_backend_buf_free(m->be, bufs[i]);
    mirror *mm[] = {&s->qg,  &s->q, &s->att, &s->qkv,   &s->z,   &s->b,
                    &s->a,   &s->o, &s->fused, &s->rlog, &s->shg};
    for (size_t i = 0; i < RP_ARRAY_LEN(mm); i++)
        mirror_free(m, s, mm[i]);
    rp_free(s->gate);
    rp_free(s->conv);
    rp_backend_free(s->host_be);
    rp_free(s);
    m->arch_state = NULL;
}

/* Every bound weight to the backend (rp_blk_to_backend); the f32 host copies stay. */
static rp_status to_backend(rp_model *m, qwen35 *s, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    rp_status rc = rp_blk_weights_init(&s->weights, c->n_layers * (24 + 3 * s->n_exp) + 3, err);
    for (int i = 0; i < c->n_layers && !rc; i++) {
        layer *L = &s->layers[i];
        const rp_tensor **f[] = {&L->router, &L->sh_gate_w, &L->sh_gate, &L->sh_up,  &L->sh_down,
                                 &L->in_norm, &L->post_norm, &L->w_gate, &L->w_up,   &L->w_down,
                                 &L->wq,     &L->wk,        &L->wv,      &L->wo,     &L->q_norm,
                                 &L->k_norm, &L->w_qkv,     &L->w_z,     &L->w_b,    &L->w_a,
                                 &L->w_out,  &L->w_qkvz,    &L->w_ba};
        rc = rp_blk_to_backend_n(m, &s->weights, f, RP_ARRAY_LEN(f), err);
        for (int e = 0; L->ex_gate && e < s->n_exp && !rc; e++) {
            const rp_tensor *g = &L->ex_gate[e], *u = &L->ex_up[e], *d = &L->ex_down[e];
            const rp_tensor **ex[] = {&g, &u, &d};
            if (!(rc = rp_blk_to_backend_n(m, &s->weights, ex, RP_ARRAY_LEN(ex), err))) {
                L->ex_gate[e] = *g; /* the views become the backend's copies */
                L->ex_up[e] = *u;
                L->ex_down[e] = *d;
            }
        }
    }
    const rp_tensor **top[] = {&s->embed, &s->final_norm, &s->lm_head};
    return rc ? rc : rp_blk_to_backend_n(m, &s->weights, top, RP_ARRAY_LEN(top), err);
}

/* A backend buffer of n floats and its host rows. 0 ok. */
static int mirror_alloc(rp_model *m, qwen35 *s, mirror *mr, size_t n)
{
    mr->dev = rp_blk_act(m, n);
    mr->host = s->host ? mr->dev : rp_alloc(sizeof(float) * (n ? n : 1));
    return mr->dev && mr->host ? 0 : -1;
}

static void to_host(rp_backend *be, mirror *mr, size_t n)
{
    if (mr->host != mr->dev)
        rp_backend_to_host(be, mr->host, mr->dev, sizeof(float) * n);
}

static void from_host(rp_backend *be, mirror *mr, size_t n)
{
    if (mr->host != mr->dev)
        rp_backend_from_host(be, mr->dev, mr->host, sizeof(float) * n);
}

static rp_status q35_init(rp_model *m, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    if (strcmp(c->hidden_act, "silu") != 0)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "hidden_act '%s' is not supported (silu only)",
                          c->hidden_act);
    qwen35 *s = rp_calloc(1, sizeof *s);
    if (!s) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->nk = rp_config_int(c, "linear_num_key_heads", 16);
    s->nv = rp_config_int(c, "linear_num_value_heads", 32);
    s->dk = rp_config_int(c, "linear_key_head_dim", 128);
    s->dv = rp_config_int(c, "linear_value_head_dim", 128);
    s->K = rp_config_int(c, "linear_conv_kernel_dim", 4);
    s->out_gate = rp_config_bool(c, "attn_output_gate", 1);
    s->n_exp = rp_config_int(c, "num_experts", 0);
    s->top_k = rp_config_int(c, "num_experts_per_tok", 0);
    s->moe_ffn = rp_config_int(c, "moe_intermediate_size", 0);
    s->sh_ffn = rp_config_int(c, "shared_expert_intermediate_size", 0);
    s->norm_topk = rp_config_bool(c, "norm_topk_prob", 1);
    if (s->nk <= 0 || s->nv % s->nk != 0 || s->dk > 1024 || s->dv > 1024 || s->K < 1)
        return rp_err_set(err, RP_ERR_INVALID,
                          "config.json: linear_num_value_heads (%d) must be a multiple of "
                          "linear_num_key_heads (%d), head dims at most 1024",
                          s->nv, s->nk);
    s->conv_dim = 2 * s->nk * s->dk + s->nv * s->dv;
    s->layers = rp_calloc((size_t)c->n_layers, sizeof(layer));
    s->has_attn = rp_calloc((size_t)c->n_layers, 1);
    if (!s->layers || !s->has_attn) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    json_t *lt = json_object_get(c->json, "layer_types");
    int interval = rp_config_int(c, "full_attention_interval", 4);
    rp_status rc;
    for (int i = 0; i < c->n_layers; i++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)i));
        layer *L = &s->layers[i];
        L->linear = t ? strcmp(t, "linear_attention") == 0 : (i + 1) % interval != 0;
        if (t && !L->linear && strcmp(t, "full_attention") != 0)
            return rp_err_set(err, RP_ERR_UNSUPPORTED, "config.json: layer type '%s'", t);
        s->has_attn[i] = !L->linear;
        if ((rc = bind_layer(m, s, i, L, err))) return rc;
    }
    const char *p = rp_blk_prefix(m);
    if (s->any_moe &&
        (rc = rp_blk_route_alloc(&s->route, s->n_exp, s->top_k, RP_MAX_CHUNK, err)))
        return rc;
    if ((rc = rp_blk_tensor(m, err, &s->embed, 0, c->vocab_size, c->dim, "%sembed_tokens.weight",
                            p)) ||
        (rc = rp_blk_tensor(m, err, &s->final_norm, 0, c->dim, 0, "%snorm.weight", p)) ||
        (rc = rp_blk_lm_head(m, s->embed, &s->lm_head, err)) ||
        (rc = rp_rope_init(&s->rope, c, c->head_dim, err)) || (rc = to_backend(m, s, err)))
        return rc;
    s->host = rp_backend_host_buffers(m->be);
    if (!s->host && !(s->host_be = rp_backend_new(0, 0)))
        return rp_err_set(err, RP_ERR_NOMEM, "cannot start the host backend");
    size_t n = RP_MAX_CHUNK, qd = (size_t)c->n_heads * c->head_dim,
           kvd = (size_t)c->n_kv_heads * c->head_dim, vd = (size_t)s->nv * s->dv;
    size_t hmax = (size_t)c->dim > qd ? (size_t)c->dim : qd;
    size_t ff = (size_t)c->ffn_dim;
    ff = ff > (size_t)s->moe_ffn ? ff : (size_t)s->moe_ffn;
    ff = ff > (size_t)s->sh_ffn ? ff : (size_t)s->sh_ffn;
    s->x = rp_blk_act(m, n * c->dim);
    s->h = rp_blk_act(m, n * (hmax > vd ? hmax : vd));
    s->k = rp_blk_act(m, n * kvd);
    s->v = rp_blk_act(m, n * kvd);
    s->ffa = rp_blk_act(m, n * ff);
    s->ffb = rp_blk_act(m, n * ff);
    s->xe = rp_blk_act(m, n * c->dim);
    s->ye = rp_blk_act(m, n * c->dim);
    if (!s->host)
        s->out = rp_blk_act(m, n * (size_t)c->vocab_size);
    s->gate = rp_alloc(sizeof(float) * n * qd);
    s->conv = rp_alloc(sizeof(float) * n * (size_t)s->conv_dim);
    int bad = mirror_alloc(m, s, &s->qg, n * 2 * qd) | mirror_alloc(m, s, &s->q, n * qd) |
              mirror_alloc(m, s, &s->att, n * qd) |
              mirror_alloc(m, s, &s->qkv, n * (size_t)s->conv_dim) |
              mirror_alloc(m, s, &s->z, n * vd) | mirror_alloc(m, s, &s->b, n * (size_t)s->nv) |
              mirror_alloc(m, s, &s->a, n * (size_t)s->nv) | mirror_alloc(m, s, &s->o, n * vd) |
              mirror_alloc(m, s, &s->fused, n * ((size_t)s->conv_dim + vd)) |
              mirror_alloc(m, s, &s->rlog, n * (size_t)(s->n_exp > 0 ? s->n_exp : 1)) |
              mirror_alloc(m, s, &s->shg, n);
    float *bufs[] = {s->x, s->h, s->k, s->v, s->ffa, s->ffb, s->xe, s->ye, s->gate, s->conv,
                     s->host ? s->x : s->out};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        bad |= !bufs[i];
    if (bad)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations (%s)",
                          rp_backend_describe(m->be));
    return RP_OK;
}

static rp_status q35_kv_init(rp_model *m, rp_kv *kv, rp_err *err)
{
    qwen35 *s = m->arch_state;
    return rp_blk_hybrid_kv_init(m, kv, s->has_attn, s->rec_n, err);
}

static void full_attention(rp_model *m, qwen35 *s, qwen35_kv *kvs, int l, int pos0, int n)
{
    rp_model_config *c = &m->cfg;
    layer *L = &s->layers[l];
    rp_backend *be = m->be;
    int hd = c->head_dim, H = c->n_heads, qd = H * hd;
    rp_op_matmul(be, L->wq, s->h, n, s->out_gate ? s->qg.dev : s->q.dev);
    rp_op_matmul(be, L->wk, s->h, n, s->k);
    rp_op_matmul(be, L->wv, s->h, n, s->v);
    if (s->out_gate) {
        to_host(be, &s->qg, (size_t)n * 2 * qd);
        for (int t = 0; t < n; t++) /* per head: [q | gate] */
            for (int h = 0; h < H; h++) {
                const float *src = s->qg.host + ((size_t)t * H + h) * 2 * hd;
                memcpy(s->q.host + ((size_t)t * H + h) * hd, src, sizeof(float) * hd);
                memcpy(s->gate + ((size_t)t * H + h) * hd, src + hd, sizeof(float) * hd);
            }
        from_host(be, &s->q, (size_t)n * qd);
    }
    rp_op_rmsnorm(be, s->q.dev, s->q.dev, L->q_norm, n * H, hd, c->norm_eps, 1);
    rp_op_rmsnorm(be, s->k, s->k, L->k_norm, n * c->n_kv_heads, hd, c->norm_eps, 1);
    rp_op_rope(be, s->q.dev, n, H, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
               s->rope.attn_factor, 1);
    rp_op_rope(be, s->k, n, c->n_kv_heads, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
               s->rope.attn_factor, 1);
    rp_attn_args a = {.q = s->q.dev,
                      .out = s->att.dev,
                      .n_tok = n,
                      .pos0 = pos0,
                      .n_heads = H,
                      .n_kv_heads = c->n_kv_heads,
                      .head_dim = hd,
                      .scale = 1.0f / sqrtf((float)hd)};
    rp_blk_attend(be, &kvs->attn, l, s->k, s->v, &a);
    if (s->out_gate) {
        to_host(be, &s->att, (size_t)n * qd);
        for (long i = 0; i < (long)n * qd; i++)
            s->att.host[i] *= rp_blk_sigmoid(s->gate[i]);
        from_host(be, &s->att, (size_t)n * qd);
    }
    rp_op_matmul(be, L->wo, s->att.dev, n, s->h);
}

static float softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

/* Qwen3-Next: in_proj_qkvz rows come per key head g as [q_g | k_g | v_g | z_g] (dk, dk,
 * r * dv, r * dv with r = n_v_heads / n_k_heads) and in_proj_ba rows as [b_g | a_g] (r, r);
 * one matmul each into s->fused, then the columns go (on the host) where Qwen3.5's split
 * projections put them: qkv = [all q | all k | all v], z, b, a. */
static void fused_projections(rp_backend *be, qwen35 *s, layer *L, int n)
{
    int nk = s->nk, dk = s->dk, dv = s->dv, r = s->nv / s->nk, CD = s->conv_dim, vd = s->nv * s->dv,
        kd = nk * dk, W = CD + vd, grp = 2 * dk + 2 * r * dv;
    rp_op_matmul(be, L->w_qkvz, s->h, n, s->fused.dev);
    to_host(be, &s->fused, (size_t)n * W);
    for (int t = 0; t < n; t++) {
        const float *src = s->fused.host + (size_t)t * W;
        float *qkv = s->qkv.host + (size_t)t * CD, *z = s->z.host + (size_t)t * vd;
        for (int g = 0; g < nk; g++) {
            const float *G = src + (size_t)g * grp;
            memcpy(qkv + g * dk, G, sizeof(float) * dk);
            memcpy(qkv + kd + g * dk, G + dk, sizeof(float) * dk);
            memcpy(qkv + 2 * kd + g * r * dv, G + 2 * dk, sizeof(float) * r * dv);
            memcpy(z + g * r * dv, G + 2 * dk + r * dv, sizeof(float) * r * dv);
        }
    }
    rp_op_matmul(be, L->w_ba, s->h, n, s->fused.dev);
    to_host(be, &s->fused, (size_t)n * 2 * s->nv);
    for (int t = 0; t < n; t++)
        for (int g = 0; g < nk; g++) {
            const float *G = s->fused.host + (size_t)t * 2 * s->nv + g * 2 * r;
            memcpy(s->b.host + (size_t)t * s->nv + g * r, G, sizeof(float) * r);
            memcpy(s->a.host + (size_t)t * s->nv + g * r, G + r, sizeof(float) * r);
        }
}

static void linear_attention(rp_model *m, qwen35 *s, qwen35_kv *kvs, int l, int n)
{
    rp_model_config *c = &m->cfg;
    layer *L = &s->layers[l];
    rp_backend *be = m->be;
    int nk = s->nk, nv = s->nv, dk = s->dk, dv = s->dv, CD = s->conv_dim, vd = nv * dv;
    float *conv_state = kvs->rec + L->rec_off;
    float *S = conv_state + (size_t)(s->K - 1) * CD;
    if (L->w_qkvz) {
        fused_projections(be, s, L, n);
    } else {
        rp_op_matmul(be, L->w_qkv, s->h, n, s->qkv.dev);
        rp_op_matmul(be, L->w_z, s->h, n, s->z.dev);
        rp_op_matmul(be, L->w_b, s->h, n, s->b.dev);
        rp_op_matmul(be, L->w_a, s->h, n, s->a.dev);
        to_host(be, &s->qkv, (size_t)n * CD);
        to_host(be, &s->z, (size_t)n * vd);
        to_host(be, &s->b, (size_t)n * nv);
        to_host(be, &s->a, (size_t)n * nv);
    }
    float *b = s->b.host, *a = s->a.host, *o = s->o.host;
    rp_blk_conv1d(s->conv, s->qkv.host, conv_state, L->conv_w, NULL, n, CD, s->K);
    for (long i = 0; i < (long)n * CD; i++)
        s->conv[i] = rp_blk_silu(s->conv[i]);
    float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        float *q = s->conv + (size_t)t * CD, *k = q + nk * dk;
        for (int h = 0; h < nk; h++) {
            rp_blk_l2norm(q + h * dk, dk, 1e-6f);
            rp_blk_l2norm(k + h * dk, dk, 1e-6f);
            for (int i = 0; i < dk; i++)
                q[h * dk + i] *= qscale;
        }
        for (int h = 0; h < nv; h++) { /* in place: b becomes beta, a the log decay g */
            b[t * nv + h] = rp_blk_sigmoid(b[t * nv + h]);
            a[t * nv + h] = L->neg_a[h] * softplus(a[t * nv + h] + L->dt_bias[h]);
        }
    }
    rp_delta_args da = {.q = s->conv,
                        .k = s->conv + nk * dk,
                        .v = s->conv + 2 * nk * dk,
                        .g = a,
                        .beta = b,
                        .state = S,
                        .out = o,
                        .n_tok = n,
                        .n_k_heads = nk,
                        .n_v_heads = nv,
                        .dk = dk,
                        .dv = dv,
                        .q_stride = CD,
                        .k_stride = CD,
                        .v_stride = CD,
                        .out_stride = vd};
    rp_op_gated_delta(s->host_be ? s->host_be : be, &da);
    const float *gw = L->g_norm_f;
    for (int t = 0; t < n; t++) {
        float *ot = o + (size_t)t * vd, *z = s->z.host + (size_t)t * vd;
        for (int h = 0; h < nv; h++) {
            /* gated RMS norm of the head's output */
            float ss = 0.0f;
            for (int j = 0; j < dv; j++)
                ss += ot[h * dv + j] * ot[h * dv + j];
            float inv = 1.0f / sqrtf(ss / (float)dv + c->norm_eps);
            for (int j = 0; j < dv; j++)
                ot[h * dv + j] = ot[h * dv + j] * inv * gw[j] * rp_blk_silu(z[h * dv + j]);
        }
    }
    from_host(be, &s->o, (size_t)n * vd);
    rp_op_matmul(be, L->w_out, s->o.dev, n, s->h);
}

/* SwiGLU of n rows x through gate/up/down into y. */
static void swiglu(rp_backend *be, qwen35 *s, const rp_tensor *g, const rp_tensor *u,
                   const rp_tensor *d, const float *x, int n, float *y)
{
    rp_op_matmul(be, g, x, n, s->ffa);
    rp_op_matmul(be, u, x, n, s->ffb);
    rp_op_silu_mul(be, s->ffa, s->ffa, s->ffb, (int64_t)n * g->shape[0]);
    rp_op_matmul(be, d, s->ffa, n, y);
}

/* Routed experts (tokens grouped by expert) plus the gated shared expert of the rows of
 * s->h, each added to the residual s->x with its weight. */
static void moe_mlp(rp_model *m, qwen35 *s, layer *L, int n)
{
    rp_backend *be = m->be;
    int D = m->cfg.dim, K = s->top_k;
    rp_op_matmul(be, L->router, s->h, n, s->rlog.dev);
    to_host(be, &s->rlog, (size_t)n * s->n_exp);
    rp_blk_route_compute(&s->route, s->rlog.host, n,
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
        swiglu(be, s, &L->ex_gate[e], &L->ex_up[e], &L->ex_down[e], s->xe, cnt, s->ye);
        rp_op_scatter_add(be, s->x, s->ye, s->rows, s->rw, cnt, D);
    }
    if (L->sh_gate) {
        rp_op_matmul(be, L->sh_gate_w, s->h, n, s->shg.dev);
        to_host(be, &s->shg, (size_t)n);
        for (int t = 0; t < n; t++) {
            s->rows[t] = t;
            s->rw[t] = rp_blk_sigmoid(s->shg.host[t]);
        }
        swiglu(be, s, L->sh_gate, L->sh_up, L->sh_down, s->h, n, s->ye);
        rp_op_scatter_add(be, s->x, s->ye, s->rows, s->rw, n, D);
    }
}

static rp_status q35_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                             int n_logits, rp_err *err)
{
    qwen35 *s = m->arch_state;
    qwen35_kv *kvs = kv->state;
    rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    int pos0 = kv->len, D = c->dim;
    rp_rope_update(&s->rope, pos0 + n);
    for (int t = 0; t < n; t++)
        s->pos[t] = pos0 + t;
    rp_op_embed(be, s->embed, ids, n, s->x);
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &s->layers[l];
        rp_op_rmsnorm(be, s->h, s->x, L->in_norm, n, D, c->norm_eps, 1);
        if (L->linear)
            linear_attention(m, s, kvs, l, n);
        else
            full_attention(m, s, kvs, l, pos0, n);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
        rp_op_rmsnorm(be, s->h, s->x, L->post_norm, n, D, c->norm_eps, 1);
        if (L->router) {
            moe_mlp(m, s, L, n); /* adds into s->x itself */
        } else {
            swiglu(be, s, L->w_gate, L->w_up, L->w_down, s->h, n, s->h);
            rp_op_add(be, s->x, s->h, (int64_t)n * D);
        }
    }
    kv->len = pos0 + n;
    if (logits && n_logits > 0)
        rp_blk_logits(m, s->x, s->h, s->out, s->final_norm, s->lm_head, n, n_logits, c->norm_eps,
                      1, logits);
    (void)err;
    return RP_OK;
}

const rp_arch rp_arch_qwen3_5 = {
    .name = "qwen3_5",
    .gpu = 1,
    .init = q35_init,
    .deinit = q35_deinit,
    .forward = q35_forward,
    .kv_init = q35_kv_init,
    .kv_deinit = rp_blk_hybrid_kv_deinit,
    .recurrent = 1,
};
