/* model/llama.c - the Llama family recipe: Llama (1-3.x), Mistral, Qwen2, Qwen3.
 *
 * One pre-norm decoder block per layer:
 *   h = rmsnorm(x) ; q,k,v = Wq h (+bq), Wk h (+bk), Wv h (+bv)
 *   [Qwen3: per-head rmsnorm of q and k] ; rope(q, k) ; attention over the cache ; x += Wo a
 *   h = rmsnorm(x) ; x += Wdown (silu(Wgate h) * Wup h)
 * then logits = lm_head(rmsnorm(x)) (lm_head = embed_tokens when tied).
 * The family members differ only in which tensors exist (biases, q/k norms) and in the
 * attention window, so one forward serves all; required tensors are checked per architecture.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/model_impl.h"
#include "model/rope.h"

typedef struct layer {
    const rp_tensor *attn_norm, *ffn_norm;
    const rp_tensor *wq, *wk, *wv, *wo;
    const rp_tensor *bq, *bk, *bv, *bo;
    const rp_tensor *q_norm, *k_norm;
    const rp_tensor *w_gate, *w_up, *w_down;
    const rp_tensor *b_gate, *b_up, *b_down;
    int window; /* sliding window, 0 = full */
} layer;

typedef struct llama {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_rope rope;
    /* activations for RP_MAX_CHUNK tokens */
    float *x, *h, *q, *k, *v, *att, *gate, *up;
    int32_t pos[RP_MAX_CHUNK];
} llama;

typedef struct llama_kv {
    float **k, **v; /* per layer: [cap][n_kv_heads * head_dim] */
} llama_kv;

static rp_status bind_layer(rp_model *m, int i, layer *L, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    int64_t dim = c->dim, qd = (int64_t)c->n_heads * c->head_dim,
            kvd = (int64_t)c->n_kv_heads * c->head_dim, ffn = c->ffn_dim;
    char name[160];
    rp_status rc = RP_OK;
#define T(field, suffix, d0, d1)                                                               \
    snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix);                           \
    if ((rc = rp_model_tensor(m, name, d0, d1, &L->field, err)))                              \
        return rc;
#define OPT(field, suffix, d0, d1)                                                             \
    snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix);                           \
    if ((rc = rp_model_tensor_opt(m, name, d0, d1, &L->field, err)))                          \
        return rc;
    T(attn_norm, "input_layernorm.weight", dim, 0);
    T(ffn_norm, "post_attention_layernorm.weight", dim, 0);
    T(wq, "self_attn.q_proj.weight", qd, dim);
    T(wk, "self_attn.k_proj.weight", kvd, dim);
    T(wv, "self_attn.v_proj.weight", kvd, dim);
    T(wo, "self_attn.o_proj.weight", dim, qd);
    OPT(bq, "self_attn.q_proj.bias", qd, 0);
    OPT(bk, "self_attn.k_proj.bias", kvd, 0);
    OPT(bv, "self_attn.v_proj.bias", kvd, 0);
    OPT(bo, "self_attn.o_proj.bias", dim, 0);
    T(w_gate, "mlp.gate_proj.weight", ffn, dim);
    T(w_up, "mlp.up_proj.weight", ffn, dim);
    T(w_down, "mlp.down_proj.weight", dim, ffn);
    OPT(b_gate, "mlp.gate_proj.bias", ffn, 0);
    OPT(b_up, "mlp.up_proj.bias", ffn, 0);
    OPT(b_down, "mlp.down_proj.bias", dim, 0);
    if (strcmp(c->arch, "Qwen3ForCausalLM") == 0) {
        T(q_norm, "self_attn.q_norm.weight", c->head_dim, 0);
        T(k_norm, "self_attn.k_norm.weight", c->head_dim, 0);
    }
#undef T
#undef OPT
    return RP_OK;
}

/* The attention window of layer i, as the HF implementations decide it. */
static int layer_window(const rp_model_config *c, int i)
{
    if (c->sliding_window <= 0)
        return 0;
    if (strcmp(c->arch, "MistralForCausalLM") == 0)
        return c->sliding_window;
    if (strcmp(c->arch, "Qwen2ForCausalLM") == 0 || strcmp(c->arch, "Qwen3ForCausalLM") == 0) {
        json_t *lt = json_object_get(c->json, "layer_types");
        if (json_is_array(lt))
            return strcmp(json_string_value(json_array_get(lt, (size_t)i)) ?: "",
                          "sliding_attention") == 0
                       ? c->sliding_window
                       : 0;
        if (rp_config_bool(c, "use_sliding_window", 0) &&
            i >= rp_config_int(c, "max_window_layers", c->n_layers))
            return c->sliding_window;
    }
    return 0;
}

static float *alloc_act(size_t n)
{
    return rp_alloc_aligned(n * sizeof(float), RP_TAG_MODEL);
}

static void llama_deinit(rp_model *m)
{
    llama *s = m->arch_state;
    if (!s)
        return;
    rp_free(s->layers);
    rp_rope_deinit(&s->rope);
    float *bufs[] = {s->x, s->h, s->q, s->k, s->v, s->att, s->gate, s->up};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        rp_free_aligned(bufs[i]);
    rp_free(s);
    m->arch_state = NULL;
}

static rp_status llama_init(rp_model *m, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    if (strcmp(c->hidden_act, "silu") != 0)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "hidden_act '%s' is not supported (silu only)",
                          c->hidden_act);
    if (c->ffn_dim <= 0)
        return rp_err_set(err, RP_ERR_INVALID, "config.json: 'intermediate_size' is missing");
    llama *s = rp_calloc(1, sizeof *s);
    if (!s)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->layers = rp_calloc((size_t)c->n_layers, sizeof(layer));
    if (!s->layers)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_status rc;
    for (int i = 0; i < c->n_layers; i++) {
        if ((rc = bind_layer(m, i, &s->layers[i], err)))
            return rc;
        s->layers[i].window = layer_window(c, i);
    }
    if ((rc = rp_model_tensor(m, "model.embed_tokens.weight", c->vocab_size, c->dim, &s->embed,
                              err)) ||
        (rc = rp_model_tensor(m, "model.norm.weight", c->dim, 0, &s->final_norm, err)))
        return rc;
    if ((rc = rp_model_tensor_opt(m, "lm_head.weight", c->vocab_size, c->dim, &s->lm_head, err)))
        return rc;
    if (!s->lm_head) {
        if (!c->tied_embeddings)
            return rp_err_set(err, RP_ERR_NOT_FOUND,
                              "the checkpoint has no tensor 'lm_head.weight' and "
                              "tie_word_embeddings is false");
        s->lm_head = s->embed;
    }
    if ((rc = rp_rope_init(&s->rope, c, c->head_dim, err)))
        return rc;
    size_t n = RP_MAX_CHUNK, qd = (size_t)c->n_heads * c->head_dim,
           kvd = (size_t)c->n_kv_heads * c->head_dim;
    s->x = alloc_act(n * c->dim);
    s->h = alloc_act(n * ((size_t)c->dim > qd ? (size_t)c->dim : qd));
    s->q = alloc_act(n * qd);
    s->k = alloc_act(n * kvd);
    s->v = alloc_act(n * kvd);
    s->att = alloc_act(n * qd);
    s->gate = alloc_act(n * c->ffn_dim);
    s->up = alloc_act(n * c->ffn_dim);
    if (!s->x || !s->h || !s->q || !s->k || !s->v || !s->att || !s->gate || !s->up)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations");
    return RP_OK;
}

static rp_status llama_kv_init(rp_model *m, rp_kv *kv, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    llama_kv *s = rp_calloc(1, sizeof *s);
    if (!s)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    kv->state = s;
    s->k = rp_calloc((size_t)c->n_layers, sizeof(float *));
    s->v = rp_calloc((size_t)c->n_layers, sizeof(float *));
    size_t row = (size_t)c->n_kv_heads * c->head_dim;
    if (!s->k || !s->v)
        goto nomem;
    /* Not zeroed: only positions < len are read, so untouched pages never get committed. */
    for (int l = 0; l < c->n_layers; l++) {
        s->k[l] = rp_alloc_aligned((size_t)kv->cap * row * sizeof(float), RP_TAG_KV);
        s->v[l] = rp_alloc_aligned((size_t)kv->cap * row * sizeof(float), RP_TAG_KV);
        if (!s->k[l] || !s->v[l])
            goto nomem;
    }
    return RP_OK;
nomem:
    kv->model->arch->kv_deinit(kv);
    kv->state = NULL;
    return rp_err_set(err, RP_ERR_NOMEM, "out of memory for a KV cache of %d tokens", kv->cap);
}

static void llama_kv_deinit(rp_kv *kv)
{
    llama_kv *s = kv->state;
    if (!s)
        return;
    int n_layers = kv->model->cfg.n_layers;
    for (int l = 0; l < n_layers; l++) {
        if (s->k)
            rp_free_aligned(s->k[l]);
        if (s->v)
            rp_free_aligned(s->v[l]);
    }
    rp_free(s->k);
    rp_free(s->v);
    rp_free(s);
    kv->state = NULL;
}

static void add_bias(float *y, const rp_tensor *b, int n_tok, int dim)
{
    if (!b)
        return;
    float tmp[16384];
    RP_ASSERT(dim <= 16384);
    rp_tensor_to_f32(b, tmp, dim);
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < dim; i++)
            y[(long)t * dim + i] += tmp[i];
}

static void linear(rp_backend *be, const rp_tensor *w, const rp_tensor *b, const float *x, int n,
                   float *y)
{
    rp_op_matmul(be, w, x, n, y);
    add_bias(y, b, n, (int)w->shape[0]);
}

/* The tokens of one forward step: each with its cache and position; runs of consecutive
 * tokens with the same cache are one sequence's causal block. */
typedef struct step {
    int n;
    rp_kv *const *kv;
} step;

static void attention_block(rp_model *m, llama *s, const step *st, int l)
{
    rp_model_config *c = &m->cfg;
    layer *L = &s->layers[l];
    rp_backend *be = m->be;
    int n = st->n, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    rp_op_rmsnorm(be, s->h, s->x, L->attn_norm, n, c->dim, c->norm_eps, 0);
    linear(be, L->wq, L->bq, s->h, n, s->q);
    linear(be, L->wk, L->bk, s->h, n, s->k);
    linear(be, L->wv, L->bv, s->h, n, s->v);
    if (L->q_norm) {
        rp_op_rmsnorm(be, s->q, s->q, L->q_norm, n * c->n_heads, hd, c->norm_eps, 0);
        rp_op_rmsnorm(be, s->k, s->k, L->k_norm, n * c->n_kv_heads, hd, c->norm_eps, 0);
    }
    rp_op_rope(be, s->q, n, c->n_heads, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
               s->rope.attn_factor, 1);
    rp_op_rope(be, s->k, n, c->n_kv_heads, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
               s->rope.attn_factor, 1);
    for (int t = 0; t < n; t++) {
        llama_kv *kvs = st->kv[t]->state;
        memcpy(kvs->k[l] + (size_t)s->pos[t] * kvd, s->k + (size_t)t * kvd, sizeof(float) * kvd);
        memcpy(kvs->v[l] + (size_t)s->pos[t] * kvd, s->v + (size_t)t * kvd, sizeof(float) * kvd);
    }
    for (int t0 = 0; t0 < n;) { /* one sequence's run at a time */
        int t1 = t0 + 1;
        while (t1 < n && st->kv[t1] == st->kv[t0])
            t1++;
        llama_kv *kvs = st->kv[t0]->state;
        rp_attn_args a = {.q = s->q + (size_t)t0 * qd,
                          .k = kvs->k[l],
                          .v = kvs->v[l],
                          .out = s->att + (size_t)t0 * qd,
                          .n_tok = t1 - t0,
                          .pos0 = s->pos[t0],
                          .n_heads = c->n_heads,
                          .n_kv_heads = c->n_kv_heads,
                          .head_dim = hd,
                          .scale = 1.0f / sqrtf((float)hd),
                          .window = L->window};
        rp_op_attention(be, &a);
        t0 = t1;
    }
    linear(be, L->wo, L->bo, s->att, n, s->h);
    rp_op_add(be, s->x, s->h, (int64_t)n * c->dim);
}

static void mlp_block(rp_model *m, llama *s, int l, int n)
{
    rp_model_config *c = &m->cfg;
    layer *L = &s->layers[l];
    rp_backend *be = m->be;
    rp_op_rmsnorm(be, s->h, s->x, L->ffn_norm, n, c->dim, c->norm_eps, 0);
    linear(be, L->w_gate, L->b_gate, s->h, n, s->gate);
    linear(be, L->w_up, L->b_up, s->h, n, s->up);
    rp_op_silu_mul(be, s->gate, s->gate, s->up, (int64_t)n * c->ffn_dim);
    linear(be, L->w_down, L->b_down, s->gate, n, s->h);
    rp_op_add(be, s->x, s->h, (int64_t)n * c->dim);
}

static rp_status llama_forward_batch(rp_model *m, const rp_batch *b, float *logits, rp_err *err)
{
    llama *s = m->arch_state;
    rp_model_config *c = &m->cfg;
    int n = b->n_tok, max_len = 0;
    for (int t = 0; t < n; t++) {
        s->pos[t] = t > 0 && b->kv[t - 1] == b->kv[t] ? s->pos[t - 1] + 1 : b->kv[t]->len;
        max_len = s->pos[t] + 1 > max_len ? s->pos[t] + 1 : max_len;
        rp_tensor_row_f32(s->embed, b->ids[t], s->x + (size_t)t * c->dim);
    }
    rp_rope_update(&s->rope, max_len);
    step st = {.n = n, .kv = b->kv};
    for (int l = 0; l < c->n_layers; l++) {
        attention_block(m, s, &st, l);
        mlp_block(m, s, l, n);
    }
    for (int t = 0; t < n; t++)
        if (t + 1 == n || b->kv[t + 1] != b->kv[t])
            b->kv[t]->len = s->pos[t] + 1;
    int n_rows = 0;
    for (int t = 0; t < n && logits; t++) /* gather the rows asked for */
        if (b->want_logits[t])
            memmove(s->x + (size_t)n_rows++ * c->dim, s->x + (size_t)t * c->dim,
                    sizeof(float) * c->dim);
    if (n_rows > 0) {
        rp_op_rmsnorm(m->be, s->h, s->x, s->final_norm, n_rows, c->dim, c->norm_eps, 0);
        rp_op_matmul(m->be, s->lm_head, s->h, n_rows, logits);
    }
    (void)err;
    return RP_OK;
}

/* One sequence: the batch of its n tokens, logits for the last n_logits of them. */
static rp_status llama_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                               int n_logits, rp_err *err)
{
    rp_kv *kvs[RP_MAX_CHUNK];
    uint8_t want[RP_MAX_CHUNK];
    for (int t = 0; t < n; t++) {
        kvs[t] = kv;
        want[t] = 0;
    }
    if (n_logits == n) { /* all rows: give each token its own row (treated as run ends) */
        llama *s = m->arch_state;
        rp_batch b = {.n_tok = n, .ids = ids, .kv = kvs, .want_logits = want};
        rp_status rc = llama_forward_batch(m, &b, NULL, err);
        if (rc || !logits)
            return rc;
        rp_model_config *c = &m->cfg;
        rp_op_rmsnorm(m->be, s->h, s->x, s->final_norm, n, c->dim, c->norm_eps, 0);
        rp_op_matmul(m->be, s->lm_head, s->h, n, logits);
        return RP_OK;
    }
    if (logits && n_logits > 0)
        want[n - 1] = 1;
    rp_batch b = {.n_tok = n, .ids = ids, .kv = kvs, .want_logits = want};
    return llama_forward_batch(m, &b, logits, err);
}

const rp_arch rp_arch_llama = {
    .name = "llama",
    .init = llama_init,
    .deinit = llama_deinit,
    .forward = llama_forward,
    .forward_batch = llama_forward_batch,
    .kv_init = llama_kv_init,
    .kv_deinit = llama_kv_deinit,
};
