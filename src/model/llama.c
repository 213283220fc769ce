/* model/llama.c - the Llama family recipe: Llama (1-3.x), Mistral, Qwen2, Qwen3, Phi-3.
 *
 * One pre-norm decoder block per layer:
 *   h = rmsnorm(x) ; q,k,v = Wq h (+bq), Wk h (+bk), Wv h (+bv)
 *   [Qwen3: per-head rmsnorm of q and k] ; rope(q, k) ; attention over the cache ; x += Wo a
 *   h = rmsnorm(x) ; x += Wdown (silu(Wgate h) * Wup h)
 * then logits = lm_head(rmsnorm(x)) (lm_head = embed_tokens when tied).
 * The family members differ only in which tensors exist (biases, q/k norms), in the
 * attention window and in the rotary embedding (rope.c: partial rotary, LongRoPE and the other
 * scalings come from config.json), so one forward serves all; required tensors are checked per
 * architecture. Phi-3 (Phi-3.5, Phi-4-mini) stores q/k/v as one qkv_proj ([q | k | v] rows)
 * and gate/up as one gate_up_proj ([gate | up]); they are bound as row views of the fused
 * tensors (nothing is copied on the CPU) and its sliding window, when set, covers every layer.
 *
 * Backend-agnostic: every touch of activation or cache memory is a backend op (embedding
 * lookup, bias, KV store, row gather), buffers come from rp_backend_buf_alloc and weights
 * from rp_backend_weight, so the same forward runs on the CPU and on CUDA. Logits are
 * written straight into the caller's array on a host-buffer backend, else computed into a
 * backend buffer and copied out.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "model/blocks.h"
#include "model/model_impl.h"
#include "model/rope.h"

typedef struct layer {
    const rp_tensor *attn_norm, *ffn_norm;
    const rp_tensor *wq, *wk, *wv, *wo;
    const rp_tensor *bq, *bk, *bv, *bo;
    const rp_tensor *q_norm, *k_norm;
    const rp_tensor *w_gate, *w_up, *w_down;
    const rp_tensor *b_gate, *b_up, *b_down;
    rp_tensor fused[5]; /* Phi-3: the row views wq, wk, wv, w_gate, w_up point at */
    int window;         /* sliding window, 0 = full */
} layer;

typedef struct llama {
    layer *layers;
    const rp_tensor *embed, *final_norm, *lm_head;
    rp_blk_weights weights; /* the backend's copies the layer pointers point into */
    rp_rope rope;
    /* activations for m->eval_chunk tokens (backend buffers) */
    float *x, *h, *q, *k, *v, *att, *gate, *up;
    float *act; /* silu(gate) * up: apart from both, so a backend may fuse the product into
                 * the down projection (CUDA's one-token matvecs refuse aliased buffers) */
    float *logits; /* eval_chunk rows, only when buffers are not host memory */
    int32_t pos[RP_MAX_EVAL_CHUNK];
} llama;

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
    if (strcmp(c->arch, "Phi3ForCausalLM") == 0) {
        const rp_tensor *qkv, *gu;
        snprintf(name, sizeof name, "model.layers.%d.self_attn.qkv_proj.weight", i);
        if ((rc = rp_model_tensor(m, name, qd + 2 * kvd, dim, &qkv, err)))
            return rc;
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate_up_proj.weight", i);
        if ((rc = rp_model_tensor(m, name, 2 * ffn, dim, &gu, err)))
            return rc;
        L->fused[0] = rp_blk_rows(qkv, 0, qd);
        L->fused[1] = rp_blk_rows(qkv, qd, kvd);
        L->fused[2] = rp_blk_rows(qkv, qd + kvd, kvd);
        L->fused[3] = rp_blk_rows(gu, 0, ffn);
        L->fused[4] = rp_blk_rows(gu, ffn, ffn);
        L->wq = &L->fused[0];
        L->wk = &L->fused[1];
        L->wv = &L->fused[2];
        L->w_gate = &L->fused[3];
        L->w_up = &L->fused[4];
        T(wo, "self_attn.o_proj.weight", dim, qd);
        T(w_down, "mlp.down_proj.weight", dim, ffn);
        return RP_OK;
    }
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
    if (strcmp(c->arch, "MistralForCausalLM") == 0 || strcmp(c->arch, "Phi3ForCausalLM") == 0)
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

static void llama_deinit(rp_model *m)
{
    llama *s = m->arch_state;
    if (!s)
        return;
    rp_free(s->layers);
    rp_blk_weights_free(&s->weights);
    rp_rope_deinit(&s->rope);
    float *bufs[] = {s->x, s->h, s->q, s->k, s->v, s->att, s->gate, s->up, s->act, s->logits};
    for (size_t i = 0; i < RP_ARRAY_LEN(bufs); i++)
        rp_backend_buf_free(m->be, bufs[i]);
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
    /* weights to the backend: every layer field, then embed / norm / lm_head */
    int cap = c->n_layers * (int)(sizeof(layer) / sizeof(const rp_tensor *)) + 3;
    if ((rc = rp_blk_weights_init(&s->weights, cap, err)))
        return rc;
    for (int i = 0; i < c->n_layers; i++) {
        layer *L = &s->layers[i];
        const rp_tensor **f[] = {&L->attn_norm, &L->ffn_norm, &L->wq,     &L->wk,     &L->wv,
                                 &L->wo,        &L->bq,       &L->bk,     &L->bv,     &L->bo,
                                 &L->q_norm,    &L->k_norm,   &L->w_gate, &L->w_up,   &L->w_down,
                                 &L->b_gate,    &L->b_up,     &L->b_down};
        if ((rc = rp_blk_to_backend_n(m, &s->weights, f, RP_ARRAY_LEN(f), err)))
            return rc;
    }
    const rp_tensor **top[] = {&s->embed, &s->final_norm, &s->lm_head};
    if ((rc = rp_blk_to_backend_n(m, &s->weights, top, RP_ARRAY_LEN(top), err)))
        return rc;
    if ((rc = rp_rope_init(&s->rope, c, c->head_dim, err)))
        return rc;
    /* on the GPU, steps of up to RP_MAX_EVAL_CHUNK tokens (prompt chunks, engine batches) */
    m->eval_chunk = rp_backend_is_cuda(m->be) ? RP_MAX_EVAL_CHUNK : RP_MAX_CHUNK;
    size_t n = (size_t)m->eval_chunk;
    rp_blk_attn_acts(m, n, &s->x, &s->h, &s->q, &s->k, &s->v, &s->att);
    s->gate = rp_blk_act(m, n * c->ffn_dim);
    s->up = rp_blk_act(m, n * c->ffn_dim);
    s->act = rp_blk_act(m, n * c->ffn_dim);
    if (!rp_backend_host_buffers(m->be))
        s->logits = rp_blk_act(m, n * (size_t)c->vocab_size);
    if (!s->x || !s->h || !s->q || !s->k || !s->v || !s->att || !s->gate || !s->up || !s->act ||
        (!rp_backend_host_buffers(m->be) && !s->logits))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for activations (%s)",
                          rp_backend_describe(m->be));
    return RP_OK;
}

static void linear(rp_backend *be, const rp_tensor *w, const rp_tensor *b, const float *x, int n,
                   float *y)
{
    rp_op_matmul(be, w, x, n, y);
    rp_op_add_bias(be, y, b, n, (int)w->shape[0]);
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
    int n = st->n, hd = c->head_dim, kvd = c->n_kv_heads * hd;
    rp_op_rmsnorm(be, s->h, s->x, L->attn_norm, n, c->dim, c->norm_eps, 0);
    const rp_tensor *wqkv[3] = {L->wq, L->wk, L->wv};
    float *yqkv[3] = {s->q, s->k, s->v};
    rp_op_matmul_n(be, 3, wqkv, s->h, n, yqkv);
    rp_op_add_bias(be, s->q, L->bq, n, (int)L->wq->shape[0]);
    rp_op_add_bias(be, s->k, L->bk, n, kvd);
    rp_op_add_bias(be, s->v, L->bv, n, kvd);
    if (L->q_norm) {
        rp_op_rmsnorm(be, s->q, s->q, L->q_norm, n * c->n_heads, hd, c->norm_eps, 0);
        rp_op_rmsnorm(be, s->k, s->k, L->k_norm, n * c->n_kv_heads, hd, c->norm_eps, 0);
    }
    rp_op_rope(be, s->q, n, c->n_heads, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
               s->rope.attn_factor, 1);
    rp_op_rope(be, s->k, n, c->n_kv_heads, hd, s->rope.rot_dim, s->pos, s->rope.inv_freq,
               s->rope.attn_factor, 1);
    rp_op_kv_store(be, l, s->k, s->v, kvd);
    rp_step_attn a = {.q = s->q,
                      .out = s->att,
                      .n_heads = c->n_heads,
                      .n_kv_heads = c->n_kv_heads,
                      .head_dim = hd,
                      .scale = 1.0f / sqrtf((float)hd),
                      .window = L->window};
    rp_op_attention_step(be, l, &a);
    linear(be, L->wo, L->bo, s->att, n, s->h);
    rp_op_add(be, s->x, s->h, (int64_t)n * c->dim);
}

static void mlp_block(rp_model *m, llama *s, int l, int n)
{
    rp_model_config *c = &m->cfg;
    layer *L = &s->layers[l];
    rp_backend *be = m->be;
    rp_op_rmsnorm(be, s->h, s->x, L->ffn_norm, n, c->dim, c->norm_eps, 0);
    const rp_tensor *wgu[2] = {L->w_gate, L->w_up};
    float *ygu[2] = {s->gate, s->up};
    rp_op_matmul_n(be, 2, wgu, s->h, n, ygu);
    rp_op_add_bias(be, s->gate, L->b_gate, n, c->ffn_dim);
    rp_op_add_bias(be, s->up, L->b_up, n, c->ffn_dim);
    rp_op_silu_mul(be, s->act, s->gate, s->up, (int64_t)n * c->ffn_dim);
    linear(be, L->w_down, L->b_down, s->act, n, s->h);
    rp_op_add(be, s->x, s->h, (int64_t)n * c->dim);
}

/* logits rows of the first n rows of s->x, into the caller's host array (or, with argmax,
 * only each row's argmax; with sample too, each row's draw, rp_batch). */
static void final_logits(rp_model *m, llama *s, int n, float *logits, int32_t *argmax,
                         const struct rp_sample_row *sample)
{
    rp_model_config *c = &m->cfg;
    rp_op_rmsnorm(m->be, s->h, s->x, s->final_norm, n, c->dim, c->norm_eps, 0);
    if (argmax) {
        int host = rp_backend_host_buffers(m->be);
        float *dst = host ? logits : s->logits;
        rp_op_matmul(m->be, s->lm_head, s->h, n, dst);
        if (!sample) {
            rp_op_argmax_rows(m->be, dst, n, c->vocab_size, argmax);
            return;
        }
        int ran = rp_op_sample_rows(m->be, dst, n, c->vocab_size, sample, argmax), all = ran;
        for (int r = 0; r < n; r++) {
            if (!ran)
                argmax[r] = -1; /* no such op: every row is the caller's */
            all = all && argmax[r] >= 0;
        }
        if (!all && !host) /* a row left to the caller: every row's logits */
            rp_backend_to_host(m->be, logits, s->logits,
                               sizeof(float) * (size_t)n * c->vocab_size);
        return;
    }
    if (rp_backend_host_buffers(m->be)) {
        rp_op_matmul(m->be, s->lm_head, s->h, n, logits);
        return;
    }
    rp_op_matmul(m->be, s->lm_head, s->h, n, s->logits);
    rp_backend_to_host(m->be, logits, s->logits, sizeof(float) * (size_t)n * c->vocab_size);
}

static rp_status llama_forward_batch(rp_model *m, const rp_batch *b, float *logits, rp_err *err)
{
    llama *s = m->arch_state;
    rp_model_config *c = &m->cfg;
    int n = b->n_tok, max_len = 0, n_seqs = 0;
    rp_step_seq seqs[RP_MAX_EVAL_CHUNK];
    for (int t = 0; t < n; t++) {
        int first = !(t > 0 && b->kv[t - 1] == b->kv[t]);
        s->pos[t] = first ? b->kv[t]->len : s->pos[t - 1] + 1;
        max_len = s->pos[t] + 1 > max_len ? s->pos[t] + 1 : max_len;
        if (first) {
            RP_ASSERT(rp_kv_layout_of(b->kv[t]) == rp_kv_layout_of(b->kv[0])); /* one pool */
            seqs[n_seqs++] = rp_kv_step_seq(b->kv[t], t, 0, s->pos[t]);
        }
        seqs[n_seqs - 1].n_tok++;
    }
    rp_op_embed(m->be, s->embed, b->ids, n, s->x);
    rp_op_step_begin(m->be, rp_kv_layout_of(b->kv[0]), seqs, n_seqs);
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
    int32_t rows[RP_MAX_EVAL_CHUNK];
    for (int t = 0; t < n && logits; t++) /* gather the rows asked for */
        if (b->want_logits[t])
            rows[n_rows++] = t;
    if (n_rows > 0) {
        rp_op_gather_rows(m->be, s->x, s->x, rows, n_rows, c->dim);
        final_logits(m, s, n_rows, logits, b->argmax, b->sample);
    }
    (void)err;
    return RP_OK;
}

/* One sequence: the batch of its n tokens, logits for the last n_logits of them. */
static rp_status llama_forward(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                               int n_logits, rp_err *err)
{
    rp_kv *kvs[RP_MAX_EVAL_CHUNK];
    uint8_t want[RP_MAX_EVAL_CHUNK];
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
        final_logits(m, s, n, logits, NULL, NULL);
        return RP_OK;
    }
    if (logits && n_logits > 0)
        want[n - 1] = 1;
    rp_batch b = {.n_tok = n, .ids = ids, .kv = kvs, .want_logits = want};
    return llama_forward_batch(m, &b, logits, err);
}

const rp_arch rp_arch_llama = {
    .name = "llama",
    .gpu = 1,
    .init = llama_init,
    .deinit = llama_deinit,
    .forward = llama_forward,
    .forward_batch = llama_forward_batch,
    .kv_init = rp_blk_attn_kv_init,
    .kv_deinit = rp_blk_attn_kv_deinit,
    .batch_argmax = 1,
};
