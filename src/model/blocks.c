/* model/blocks.c - shared pieces of the family recipes (see blocks.h). */
#include "model/blocks.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "model/kv_cache.h"

rp_status rp_blk_tensor(rp_model *m, rp_err *err, const rp_tensor **out, int opt, int64_t d0,
                        int64_t d1, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return opt ? rp_model_tensor_opt(m, name, d0, d1, out, err)
               : rp_model_tensor(m, name, d0, d1, out, err);
}

rp_status rp_blk_tensor_nd(rp_model *m, rp_err *err, const rp_tensor **out, int opt, int n_dims,
                           const int64_t *shape, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    *out = NULL;
    const rp_st_tensor *t = rp_st_find(m->st, name);
    if (!t)
        return opt ? RP_OK
                   : rp_err_set(err, RP_ERR_NOT_FOUND, "the checkpoint has no tensor '%s'", name);
    if (!t->known)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "tensor '%s' has dtype %s, not supported here",
                          name, t->dtype);
    if (t->t.n_dims != n_dims)
        return rp_err_set(err, RP_ERR_INVALID, "tensor '%s' has %d dimensions, expected %d", name,
                          t->t.n_dims, n_dims);
    for (int d = 0; d < n_dims; d++)
        if (shape[d] && t->t.shape[d] != shape[d])
            return rp_err_set(err, RP_ERR_INVALID,
                              "tensor '%s' has %lld in dimension %d, the config says %lld", name,
                              (long long)t->t.shape[d], d, (long long)shape[d]);
    *out = &t->t;
    return RP_OK;
}

const char *rp_blk_prefix(rp_model *m)
{
    static const char *const prefixes[] = {"model.", "model.language_model.",
                                           "language_model.model."};
    char name[96];
    for (size_t i = 0; i < RP_ARRAY_LEN(prefixes); i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (rp_st_find(m->st, name)) return prefixes[i];
    }
    return prefixes[0]; /* binding then names the missing tensor */
}

rp_status rp_blk_lm_head(rp_model *m, const rp_tensor *embed, const rp_tensor **out, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    rp_status rc = rp_model_tensor_opt(m, "lm_head.weight", c->vocab_size, c->dim, out, err);
    if (!rc && !*out)
        rc = rp_model_tensor_opt(m, "language_model.lm_head.weight", c->vocab_size, c->dim, out,
                                 err);
    if (rc || *out) return rc;
    if (!c->tied_embeddings)
        return rp_err_set(err, RP_ERR_NOT_FOUND,
                          "the checkpoint has no tensor 'lm_head.weight' and "
                          "tie_word_embeddings is false");
    *out = embed;
    return RP_OK;
}

int64_t rp_blk_numel(const rp_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= t->shape[d];
    return n;
}

float *rp_blk_falloc(size_t n)
{
    return rp_alloc_aligned((n ? n : 1) * sizeof(float), RP_TAG_MODEL);
}

rp_status rp_blk_weights_init(rp_blk_weights *ws, int cap, rp_err *err)
{
    ws->n = 0;
    ws->cap = cap;
    ws->w = rp_calloc((size_t)(cap > 0 ? cap : 1), sizeof(rp_tensor));
    ws->src = rp_calloc((size_t)(cap > 0 ? cap : 1), sizeof(*ws->src));
    return ws->w && ws->src ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

void rp_blk_weights_free(rp_blk_weights *ws)
{
    rp_free(ws->w);
    rp_free(ws->src);
    ws->w = NULL;
    ws->src = NULL;
    ws->n = ws->cap = 0;
}

rp_status rp_blk_to_backend(rp_model *m, rp_blk_weights *ws, const rp_tensor **t, rp_err *err)
{
    if (!*t)
        return RP_OK;
    for (int i = 0; i < ws->n; i++)
        if (ws->src[i] == *t) {
            *t = &ws->w[i];
            return RP_OK;
        }
    RP_ASSERT(ws->n < ws->cap);
    rp_tensor *dst = &ws->w[ws->n];
    rp_status rc = rp_backend_weight(m->be, *t, dst, err);
    if (rc)
        return rc;
    ws->src[ws->n++] = *t;
    *t = dst;
    return RP_OK;
}

rp_status rp_blk_to_backend_n(rp_model *m, rp_blk_weights *ws, const rp_tensor **const *t, size_t n,
                              rp_err *err)
{
    rp_status rc = RP_OK;
    for (size_t i = 0; i < n && !rc; i++)
        rc = rp_blk_to_backend(m, ws, t[i], err);
    return rc;
}

float *rp_blk_act(rp_model *m, size_t n)
{
    return rp_backend_buf_alloc(m->be, (n ? n : 1) * sizeof(float), RP_TAG_MODEL);
}

void rp_blk_attn_acts(rp_model *m, size_t n, float **x, float **h, float **q, float **k,
                      float **v, float **att)
{
    const rp_model_config *c = &m->cfg;
    size_t D = (size_t)c->dim, qd = (size_t)c->n_heads * c->head_dim,
           kvd = (size_t)c->n_kv_heads * c->head_dim;
    *x = rp_blk_act(m, n * D);
    *h = rp_blk_act(m, n * (D > qd ? D : qd));
    *q = rp_blk_act(m, n * qd);
    *k = rp_blk_act(m, n * kvd);
    *v = rp_blk_act(m, n * kvd);
    *att = rp_blk_act(m, n * qd);
}

float *rp_blk_f32(const rp_tensor *t)
{
    int64_t n = rp_blk_numel(t);
    float *f = rp_blk_falloc((size_t)n);
    if (f) rp_tensor_to_f32(t, f, n);
    return f;
}

rp_tensor rp_blk_rows(const rp_tensor *t, int64_t r0, int64_t rows)
{
    RP_ASSERT(t->n_dims == 2 || t->n_dims == 3);
    int64_t cols = t->shape[t->n_dims - 1],
            total = t->n_dims == 3 ? t->shape[0] * t->shape[1] : t->shape[0];
    RP_ASSERT(r0 >= 0 && r0 + rows <= total);
    size_t rb = rp_dtype_row_bytes(t->dtype, cols);
    rp_tensor v = *t;
    v.n_dims = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.shape[2] = 0;
    v.data = (const char *)t->data + (size_t)r0 * rb;
    v.n_bytes = (size_t)rows * rb;
    if (t->scales) { /* MLX: the groups of the rows go along */
        size_t sb = (size_t)(cols / t->group_size) * (t->scale_dtype == RP_DT_F32 ? 4 : 2);
        v.scales = (const char *)t->scales + (size_t)r0 * sb;
        v.biases = (const char *)t->biases + (size_t)r0 * sb;
    }
    return v;
}

rp_tensor rp_blk_expert(const rp_tensor *t, int64_t e)
{
    RP_ASSERT(t->n_dims == 3 && e >= 0 && e < t->shape[0]);
    return rp_blk_rows(t, e * t->shape[1], t->shape[1]);
}

void rp_blk_logits(rp_model *m, const float *x, float *h, float *out, const rp_tensor *norm,
                   const rp_tensor *head, int n, int n_logits, float eps, int add_one,
                   float *logits)
{
    int D = m->cfg.dim;
    rp_op_rmsnorm(m->be, h, x + (size_t)(n - n_logits) * D, norm, n_logits, D, eps, add_one);
    rp_op_matmul(m->be, head, h, n_logits, out ? out : logits);
    if (out)
        rp_backend_to_host(m->be, logits, out, sizeof(float) * (size_t)n_logits * m->cfg.vocab_size);
}

void rp_blk_add_bias(float *y, const float *b, int n_tok, int dim)
{
    if (!b) return;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < dim; i++)
            y[(long)t * dim + i] += b[i];
}

/* ---- attention caches ------------------------------------------------------------------ */

void rp_blk_attend(rp_backend *be, rp_blk_kv *c, int l, const float *k, const float *v,
                   rp_attn_args *a)
{
    rp_kv *kv = c->kv;
    int cl = kv->model->kv_layer[l];
    RP_ASSERT(cl >= 0 && a->pos0 + a->n_tok <= kv->n_blocks * RP_KV_BLOCK_TOKENS);
    rp_step_seq seq = rp_kv_step_seq(kv, 0, a->n_tok, a->pos0);
    rp_op_step_begin(be, rp_kv_layout_of(kv), &seq, 1);
    rp_op_kv_store(be, cl, k, v, a->n_kv_heads * a->head_dim);
    rp_step_attn sa = {.q = a->q,
                       .out = a->out,
                       .n_heads = a->n_heads,
                       .n_kv_heads = a->n_kv_heads,
                       .head_dim = a->head_dim,
                       .scale = a->scale,
                       .window = a->window,
                       .sinks = a->sinks};
    rp_op_attention_step(be, cl, &sa);
}

/* ---- mixture of experts ---------------------------------------------------------------- */

rp_status rp_blk_route_alloc(rp_blk_route *r, int n_exp, int top_k, int max_tok, rp_err *err)
{
    memset(r, 0, sizeof *r);
    if (top_k <= 0 || top_k > n_exp)
        return rp_err_set(err, RP_ERR_INVALID,
                          "config.json: num_experts_per_tok (%d) must be in 1..%d", top_k, n_exp);
    r->n_exp = n_exp;
    r->top_k = top_k;
    r->max_tok = max_tok;
    size_t slots = (size_t)max_tok * top_k;
    r->sel = rp_alloc(slots * sizeof(int));
    r->w = rp_alloc(slots * sizeof(float));
    r->order = rp_alloc(slots * sizeof(int));
    r->start = rp_alloc((size_t)(n_exp + 1) * sizeof(int));
    r->probs = rp_alloc((size_t)n_exp * sizeof(float));
    if (!r->sel || !r->w || !r->order || !r->start || !r->probs) {
        rp_blk_route_free(r);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    return RP_OK;
}

void rp_blk_route_free(rp_blk_route *r)
{
    rp_free(r->sel);
    rp_free(r->w);
    rp_free(r->order);
    rp_free(r->start);
    rp_free(r->probs);
    memset(r, 0, sizeof *r);
}

static void softmax(float *x, int n)
{
    float mx = x[0], sum = 0.0f;
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

void rp_blk_route_compute(rp_blk_route *r, const float *logits, int n_tok, rp_blk_route_mode mode)
{
    RP_ASSERT(n_tok <= r->max_tok);
    int E = r->n_exp, K = r->top_k;
    for (int t = 0; t < n_tok; t++) {
        float *p = r->probs;
        memcpy(p, logits + (size_t)t * E, sizeof(float) * (size_t)E);
        if (mode != RP_ROUTE_TOPK_SOFTMAX) softmax(p, E);
        int *sel = r->sel + (size_t)t * K;
        float *w = r->w + (size_t)t * K;
        for (int j = 0; j < K; j++) { /* k is small: selection by repeated scans */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[j] = best;
            w[j] = p[best];
        }
        if (mode == RP_ROUTE_TOPK_SOFTMAX) {
            softmax(w, K);
        } else if (mode == RP_ROUTE_SOFTMAX_TOPK_NORM) {
            float s = 0.0f;
            for (int j = 0; j < K; j++)
                s += w[j];
            for (int j = 0; j < K; j++)
                w[j] /= s;
        }
    }
    /* counting sort of the slots by expert */
    memset(r->start, 0, sizeof(int) * (size_t)(E + 1));
    for (int s = 0; s < n_tok * K; s++)
        r->start[r->sel[s] + 1]++;
    for (int e = 0; e < E; e++)
        r->start[e + 1] += r->start[e];
    int fill[1024];
    RP_ASSERT(E <= 1024);
    memcpy(fill, r->start, sizeof(int) * (size_t)E);
    for (int s = 0; s < n_tok * K; s++)
        r->order[fill[r->sel[s]]++] = s;
}

/* ---- recurrent blocks ------------------------------------------------------------------ */

void rp_blk_conv1d(float *out, const float *x, float *state, const float *w, const float *bias,
                   int n, int C, int K)
{
    int S = K - 1; /* state rows */
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * C;
        for (int c = 0; c < C; c++)
            o[c] = bias ? bias[c] : 0.0f;
        for (int k = 0; k < K; k++) {
            int src = t - S + k; /* < 0: from the state */
            const float *in = src < 0 ? state + (size_t)(S + src) * C : x + (size_t)src * C;
            for (int c = 0; c < C; c++)
                o[c] += w[(size_t)c * K + k] * in[c];
        }
    }
    /* new state: the last S inputs (from the old state when n < S) */
    if (S == 0) return;
    if (n >= S) {
        memcpy(state, x + (size_t)(n - S) * C, sizeof(float) * (size_t)S * C);
    } else {
        memmove(state, state + (size_t)n * C, sizeof(float) * (size_t)(S - n) * C);
        memcpy(state + (size_t)(S - n) * C, x, sizeof(float) * (size_t)n * C);
    }
}

void rp_blk_l2norm(float *x, int n, float eps)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss + eps);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

rp_status rp_blk_attn_kv_init(rp_model *m, rp_kv *kv, rp_err *err)
{
    if (kv->probe)
        return RP_OK; /* every layer is a cache layer: the loader's default */
    rp_blk_kv *k = rp_calloc(1, sizeof *k);
    if (!k)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    k->kv = kv;
    kv->state = k;
    (void)m;
    return RP_OK;
}

void rp_blk_attn_kv_deinit(rp_kv *kv)
{
    rp_free(kv->state);
    kv->state = NULL;
}

rp_status rp_blk_hybrid_kv_init(rp_model *m, rp_kv *kv, const uint8_t *has_attn, size_t rec_n,
                                rp_err *err)
{
    if (kv->probe) { /* the cache layers are the attention layers, in order */
        m->n_kv_layers = 0;
        for (int l = 0; l < m->cfg.n_layers; l++)
            m->kv_layer[l] = has_attn && !has_attn[l] ? -1 : m->n_kv_layers++;
        return RP_OK;
    }
    rp_blk_hybrid_kv *k = rp_calloc(1, sizeof *k);
    if (!k)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    k->attn.kv = kv;
    size_t nb = (rec_n ? rec_n : 1) * sizeof(float);
    k->rec = rp_alloc_aligned(nb, RP_TAG_KV);
    if (!k->rec) {
        rp_free(k);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for the recurrent state");
    }
    memset(k->rec, 0, nb); /* the state at position 0 */
    kv->state = k;
    kv->rec = k->rec;
    kv->rec_n = rec_n;
    kv->rec_pos = 0;
    return RP_OK;
}

void rp_blk_hybrid_kv_deinit(rp_kv *kv)
{
    rp_blk_hybrid_kv *k = kv->state;
    if (!k)
        return;
    rp_free_aligned(k->rec);
    rp_free(k);
    kv->state = NULL;
    kv->rec = NULL;
    kv->rec_n = 0;
}
