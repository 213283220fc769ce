/* model/phi3.c - Phi-3 / Phi-3.5 / Phi-4-mini (Phi3ForCausalLM).
 *
 * A Llama-shaped pre-norm decoder with fused projections: qkv_proj rows are [q | k | v] and
 * gate_up_proj rows are [gate | up]; both are bound as row views of the fused tensor, so no
 * weight is copied. Partial rotary (partial_rotary_factor of head_dim, rotate-half), LongRoPE
 * scaling when the config has it (rope.c picks short or long factors by length), optional
 * sliding window, plain RMS norms, SwiGLU MLP.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/blocks.h"
#include "model/rope.h"

typedef struct layer {
    const rp_tensor *attn_norm, *ffn_norm, *wo, *w_down;
    rp_tensor wq, wk, wv, w_gate, w_up; /* views into qkv_proj / gate_up_proj */
} layer;

typedef struct phi3 {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_rope rope;
    float *x, *h, *q, *k, *v, *att, *ffa, *ffb;
    int32_t pos[RP_MAX_CHUNK];
} phi3;

static void phi3_deinit(rp_model *m)
{
    phi3 *s = m->arch_state;
    if (!s) return;
    rp_free(s->layers);
    rp_rope_deinit(&s->rope);
    float *bufs[] = {s->x, s->h, s->q, s->k, s->v, s->att, s->ffa, s->ffb};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        rp_free_aligned(bufs[i]);
    rp_free(s);
    m->arch_state = NULL;
}

static rp_status phi3_init(rp_model *m, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    if (strcmp(c->hidden_act, "silu") != 0)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "hidden_act '%s' is not supported (silu only)",
                          c->hidden_act);
    phi3 *s = rp_calloc(1, sizeof *s);
    if (!s) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->layers = rp_calloc((size_t)c->n_layers, sizeof(layer));
    if (!s->layers) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    const char *p = rp_blk_prefix(m);
    int64_t dim = c->dim, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
            kvd = (int64_t)c->n_kv_heads * hd, ffn = c->ffn_dim;
    rp_status rc;
    for (int i = 0; i < c->n_layers; i++) {
        layer *L = &s->layers[i];
        const rp_tensor *qkv, *gu;
        if ((rc = rp_blk_tensor(m, err, &L->attn_norm, 0, dim, 0,
                                "%slayers.%d.input_layernorm.weight", p, i)) ||
            (rc = rp_blk_tensor(m, err, &L->ffn_norm, 0, dim, 0,
                                "%slayers.%d.post_attention_layernorm.weight", p, i)) ||
            (rc = rp_blk_tensor(m, err, &qkv, 0, qd + 2 * kvd, dim,
                                "%slayers.%d.self_attn.qkv_proj.weight", p, i)) ||
            (rc = rp_blk_tensor(m, err, &L->wo, 0, dim, qd, "%slayers.%d.self_attn.o_proj.weight",
                                p, i)) ||
            (rc = rp_blk_tensor(m, err, &gu, 0, 2 * ffn, dim, "%slayers.%d.mlp.gate_up_proj.weight",
                                p, i)) ||
            (rc = rp_blk_tensor(m, err, &L->w_down, 0, dim, ffn, "%slayers.%d.mlp.down_proj.weight",
                                p, i)))
            return rc;
        L->wq = rp_blk_rows(qkv, 0, qd);
        L->wk = rp_blk_rows(qkv, qd, kvd);
        L->wv = rp_blk_rows(qkv, qd + kvd, kvd);
        L->w_gate = rp_blk_rows(gu, 0, ffn);
        L->w_up = rp_blk_rows(gu, ffn, ffn);
    }
    if ((rc =
             rp_blk_tensor(m, err, &s->embed, 0, c->vocab_size, dim, "%sembed_tokens.weight", p)) ||
        (rc = rp_blk_tensor(m, err, &s->final_norm, 0, dim, 0, "%snorm.weight", p)) ||
        (rc = rp_blk_lm_head(m, s->embed, &s->lm_head, err)) ||
        (rc = rp_rope_init(&s->rope, c, c->head_dim, err)))
        return rc;
    size_t n = RP_MAX_CHUNK;
    s->x = rp_blk_falloc(n * dim);
    s->h = rp_blk_falloc(n * (size_t)(dim > qd ? dim : qd));
    s->q = rp_blk_falloc(n * qd);
    s->k = rp_blk_falloc(n * kvd);
    s->v = rp_blk_falloc(n * kvd);
    s->att = rp_blk_falloc(n * qd);
    s->ffa = rp_blk_falloc(n * ffn);
    s->ffb = rp_blk_falloc(n * ffn);
    if (!s->x || !s->h || !s->q || !s->k || !s->v || !s->att || !s->ffa || !s->ffb)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations");
    return RP_OK;
}

static rp_status phi3_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                              int n_logits, rp_err *err)
{
    phi3 *s = m->arch_state;
    rp_blk_kv *kvs = kv->state;
    rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    int pos0 = kv->len, D = c->dim, hd = c->head_dim, F = c->ffn_dim;
    rp_rope_update(&s->rope, pos0 + n);
    for (int t = 0; t < n; t++) {
        s->pos[t] = pos0 + t;
        rp_tensor_row_f32(s->embed, ids[t], s->x + (size_t)t * D);
    }
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &s->layers[l];
        rp_op_rmsnorm(be, s->h, s->x, L->attn_norm, n, D, c->norm_eps, 0);
        rp_op_matmul(be, &L->wq, s->h, n, s->q);
        rp_op_matmul(be, &L->wk, s->h, n, s->k);
        rp_op_matmul(be, &L->wv, s->h, n, s->v);
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
                          .window = c->sliding_window};
        rp_blk_attend(be, kvs, l, s->k, s->v, &a);
        rp_op_matmul(be, L->wo, s->att, n, s->h);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
        rp_op_rmsnorm(be, s->h, s->x, L->ffn_norm, n, D, c->norm_eps, 0);
        rp_op_matmul(be, &L->w_gate, s->h, n, s->ffa);
        rp_op_matmul(be, &L->w_up, s->h, n, s->ffb);
        rp_op_silu_mul(be, s->ffa, s->ffa, s->ffb, (int64_t)n * F);
        rp_op_matmul(be, L->w_down, s->ffa, n, s->h);
        rp_op_add(be, s->x, s->h, (int64_t)n * D);
    }
    kv->len = pos0 + n;
    if (logits && n_logits > 0) {
        const float *last = s->x + (size_t)(n - n_logits) * D;
        rp_op_rmsnorm(be, s->h, last, s->final_norm, n_logits, D, c->norm_eps, 0);
        rp_op_matmul(be, s->lm_head, s->h, n_logits, logits);
    }
    (void)err;
    return RP_OK;
}

const rp_arch rp_arch_phi3 = {
    .name = "phi3",
    .init = phi3_init,
    .deinit = phi3_deinit,
    .forward = phi3_forward,
    .kv_init = rp_blk_attn_kv_init,
    .kv_deinit = rp_blk_attn_kv_deinit,
};
