/* model/model.c - loading a model directory and dispatching to its architecture recipe. */
#include "model/model.h"

#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "model/gguf_model.h"
#include "model/kv_cache.h"
#include "model/mlx.h"
#include "model/model_impl.h"

typedef struct arch_entry {
    const char *hf_arch; /* config.json architectures[0] */
    const rp_arch *arch;
} arch_entry;

static const arch_entry g_archs[] = {
    {"LlamaForCausalLM", &rp_arch_llama},
    {"MistralForCausalLM", &rp_arch_llama},
    {"Qwen2ForCausalLM", &rp_arch_llama},
    {"Qwen3ForCausalLM", &rp_arch_llama},
    {"Phi3ForCausalLM", &rp_arch_llama},
    {"Gemma3ForCausalLM", &rp_arch_gemma3},
    {"Gemma3ForConditionalGeneration", &rp_arch_gemma3},
    {"Qwen3MoeForCausalLM", &rp_arch_qwen3_moe},
    {"Lfm2ForCausalLM", &rp_arch_lfm2},
    {"Qwen3_5ForCausalLM", &rp_arch_qwen3_5},
    {"Qwen3_5ForConditionalGeneration", &rp_arch_qwen3_5},
    {"Qwen3_5MoeForCausalLM", &rp_arch_qwen3_5},
    {"Qwen3_5MoeForConditionalGeneration", &rp_arch_qwen3_5},
    {"Qwen3NextForCausalLM", &rp_arch_qwen3_5},
    {"GptOssForCausalLM", &rp_arch_gpt_oss},
    {"RapidScriptedForCausalLM", &rp_arch_scripted}, /* test model: scripted output */
};

static const rp_arch *find_arch(const char *name)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(g_archs); i++)
        if (strcmp(g_archs[i].hf_arch, name) == 0)
            return g_archs[i].arch;
    return NULL;
}

static rp_status check_tensor(const rp_st_tensor *t, const char *name, int64_t d0, int64_t d1,
                              rp_err *err)
{
    if (!t->known)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "tensor '%s' has dtype %s, not supported here",
                          name, t->dtype);
    if (d0 && t->t.shape[0] != d0)
        return rp_err_set(err, RP_ERR_INVALID, "tensor '%s' has %lld rows, the config says %lld",
                          name, (long long)t->t.shape[0], (long long)d0);
    if (d1 && (t->t.n_dims < 2 || t->t.shape[1] != d1))
        return rp_err_set(err, RP_ERR_INVALID,
                          "tensor '%s' has %lld columns, the config says %lld", name,
                          t->t.n_dims < 2 ? 1LL : (long long)t->t.shape[1], (long long)d1);
    if (!d1 && t->t.n_dims != 1 && d0)
        return rp_err_set(err, RP_ERR_INVALID, "tensor '%s' should be 1-D", name);
    return RP_OK;
}

rp_status rp_model_tensor_opt(rp_model *m, const char *name, int64_t d0, int64_t d1,
                              const rp_tensor **out, rp_err *err)
{
    const rp_st_tensor *t = rp_st_find(m->st, name);
    *out = NULL;
    if (!t)
        return RP_OK;
    rp_status rc = check_tensor(t, name, d0, d1, err);
    if (rc == RP_OK)
        *out = &t->t;
    return rc;
}

rp_status rp_model_tensor(rp_model *m, const char *name, int64_t d0, int64_t d1,
                          const rp_tensor **out, rp_err *err)
{
    rp_status rc = rp_model_tensor_opt(m, name, d0, d1, out, err);
    if (rc == RP_OK && !*out)
        return rp_err_set(err, RP_ERR_NOT_FOUND, "the checkpoint has no tensor '%s'", name);
    return rc;
}

static void fill_info(rp_model *m)
{
    rp_model_info *in = &m->info;
    rp_model_config *c = &m->cfg;
    snprintf(in->arch, sizeof in->arch, "%s", c->arch);
    snprintf(in->model_type, sizeof in->model_type, "%s", c->model_type);
    in->vocab_size = c->vocab_size;
    in->n_layers = c->n_layers;
    in->dim = c->dim;
    in->n_heads = c->n_heads;
    in->n_kv_heads = c->n_kv_heads;
    in->head_dim = c->head_dim;
    in->ffn_dim = c->ffn_dim;
    in->max_context = c->max_pos;
    in->tied_embeddings = c->tied_embeddings;
    in->bos_id = c->bos_id;
    in->n_eos = c->n_eos;
    memcpy(in->eos_ids, c->eos_ids, sizeof in->eos_ids);
    int counts[RP_DT_COUNT] = {0};
    for (int i = 0; i < rp_st_count(m->st); i++) {
        const rp_st_tensor *t = rp_st_at(m->st, i);
        int64_t n = 1;
        for (int d = 0; d < t->t.n_dims; d++)
            n *= t->t.shape[d];
        in->n_params += n;
        in->weight_bytes += (int64_t)t->t.n_bytes;
        if (t->known && t->t.n_dims == 2)
            counts[t->t.dtype]++;
    }
    int best = 0;
    for (int d = 1; d < RP_DT_COUNT; d++)
        if (counts[d] > counts[best])
            best = d;
    snprintf(in->dtype, sizeof in->dtype, "%s", rp_dtype_name((rp_dtype)best));
}

rp_status rp_model_load(const char *dir, const rp_model_opts *opts, rp_model **out, rp_err *err)
{
    rp_model *m = rp_calloc(1, sizeof *m);
    if (!m)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_status rc;
    if (rp_gguf_model_is(dir)) { /* a GGUF file: config and tensors both come from it */
        json_t *root = NULL;
        if ((rc = rp_gguf_model_open(dir, &root, &m->st, err)))
            goto fail;
        rc = rp_model_config_parse(root, NULL, &m->cfg, err);
        json_decref(root);
    } else {
        rc = rp_model_config_load(dir, &m->cfg, err);
    }
    if (rc)
        goto fail;
    m->arch = find_arch(m->cfg.arch);
    if (!m->arch) {
        rc = rp_err_set(err, RP_ERR_UNSUPPORTED,
                        "architecture '%s' is not supported (rapid runs: LlamaForCausalLM, "
                        "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                        "Phi3ForCausalLM, Gemma3ForCausalLM, Qwen3MoeForCausalLM, "
                        "Lfm2ForCausalLM, Qwen3_5ForCausalLM, GptOssForCausalLM)",
                        m->cfg.arch[0] ? m->cfg.arch : "(none in config.json)");
        goto fail;
    }
    if ((!m->st && (rc = rp_st_open(dir, &m->st, err))) ||
        (rc = rp_mlx_bind(m->st, &m->cfg, err)))
        goto fail;
    rp_device dev = opts ? opts->device : RP_DEVICE_CPU;
    if (dev == RP_DEVICE_AUTO) /* families that touch host memory directly stay on the CPU */
        dev = rp_backend_cuda_devices() > 0 && m->arch->gpu ? RP_DEVICE_CUDA : RP_DEVICE_CPU;
    if (dev == RP_DEVICE_CUDA && !m->arch->gpu) {
        rc = rp_err_set(err, RP_ERR_UNSUPPORTED,
                        "%s runs on the CPU only so far: use --device cpu", m->cfg.arch);
        goto fail;
    }
    if (dev == RP_DEVICE_CUDA) {
        if ((rc = rp_backend_new_cuda(0, opts->gpu_memory_fraction, &m->be, err)))
            goto fail;
    } else {
        m->be = rp_backend_new(opts ? opts->n_threads : 0, opts ? opts->ref_kernels : 0);
        if (!m->be) {
            rc = rp_err_set(err, RP_ERR_NOMEM, "cannot start the CPU backend");
            goto fail;
        }
    }
    fill_info(m);
    if ((rc = m->arch->init(m, err)) || (rc = rp_kv_probe(m, err)))
        goto fail;
    RP_INFO("loaded %s (%s, %lld params, %s) on %s", dir, m->cfg.arch,
            (long long)m->info.n_params, m->info.dtype, rp_backend_describe(m->be));
    *out = m;
    return RP_OK;
fail:
    rp_model_free(m);
    return rc;
}

void rp_model_free(rp_model *m)
{
    if (!m)
        return;
    if (m->arch && m->arch_state)
        m->arch->deinit(m);
    rp_backend_free(m->be);
    rp_free(m->kv_layer);
    rp_st_close(m->st);
    rp_model_config_deinit(&m->cfg);
    rp_free(m);
}

const rp_model_info *rp_model_get_info(const rp_model *m) { return &m->info; }

rp_status rp_model_eval(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                        int all_logits, rp_err *err)
{
    if (n <= 0)
        return rp_err_set(err, RP_ERR_INVALID, "nothing to evaluate");
    if (kv->len + n > kv->cap)
        return rp_err_set(err, RP_ERR_LIMIT,
                          "%d tokens do not fit: the context holds %d and %d are used", n,
                          kv->cap, kv->len);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->info.vocab_size)
            return rp_err_set(err, RP_ERR_INVALID, "token id %d is outside the vocabulary (%d)",
                              ids[i], m->info.vocab_size);
    if (kv->rec_n && kv->rec_pos != kv->len)
        return rp_err_set(err, RP_ERR_INVALID,
                          "the recurrent state describes position %d but the cache was "
                          "truncated to %d: restore a snapshot taken there",
                          kv->rec_pos, kv->len);
    rp_status rc = rp_kv_prepare(kv, ids, n, err);
    if (rc)
        return rc;
    size_t vocab = (size_t)m->info.vocab_size;
    int max_chunk = rp_model_max_batch(m);
    for (int done = 0; done < n;) {
        int chunk = n - done < max_chunk ? n - done : max_chunk;
        int last_chunk = done + chunk == n;
        float *dst = NULL;
        int n_logits = 0;
        if (logits && all_logits) {
            dst = logits + (size_t)done * vocab;
            n_logits = chunk;
        } else if (logits && last_chunk) {
            dst = logits;
            n_logits = 1;
        }
        rc = m->arch->forward(m, kv, ids + done, chunk, dst, n_logits, err);
        if (rc)
            return rc;
        kv->rec_pos = kv->len;
        rp_kv_indexed(kv);
        done += chunk;
    }
    return RP_OK;
}

int rp_model_max_batch(const rp_model *m)
{
    return m->eval_chunk > 0 ? m->eval_chunk : RP_MAX_CHUNK;
}

static rp_status check_batch(const rp_model *m, const rp_batch *b, rp_err *err)
{
    if (b->n_tok <= 0 || b->n_tok > rp_model_max_batch(m))
        return rp_err_set(err, RP_ERR_INVALID, "batch of %d tokens (1..%d)", b->n_tok,
                          rp_model_max_batch(m));
    for (int i = 0; i < b->n_tok; i++) {
        if (b->ids[i] < 0 || b->ids[i] >= m->info.vocab_size)
            return rp_err_set(err, RP_ERR_INVALID, "token id %d is outside the vocabulary (%d)",
                              b->ids[i], m->info.vocab_size);
        if (b->kv[i]->pool != b->kv[0]->pool)
            return rp_err_set(err, RP_ERR_INVALID,
                              "the sequences of a batch must share one KV pool (rp_kv_new_in)");
        int j = i; /* start of this token's run */
        while (j > 0 && b->kv[j - 1] == b->kv[i])
            j--;
        if (b->kv[i]->len + (i - j) + 1 > b->kv[i]->cap)
            return rp_err_set(err, RP_ERR_LIMIT, "a sequence of the batch is past its context (%d)",
                              b->kv[i]->cap);
        if (b->want_logits && b->want_logits[i] && i + 1 < b->n_tok &&
            b->kv[i + 1] == b->kv[i] && !b->want_logits[i + 1])
            return rp_err_set(err, RP_ERR_INVALID,
                              "logits asked for a token not followed by asking ones of its run");
    }
    return RP_OK;
}

/* rp_batch.argmax from host logits rows, for the architectures that leave it to us (-1
 * with rp_batch.sample: the caller draws from the rows). */
static void argmax_host(const rp_batch *b, const float *logits, size_t vocab)
{
    int rows = 0;
    for (int i = 0; i < b->n_tok; i++)
        rows += b->want_logits && b->want_logits[i];
    for (int r = 0; r < rows; r++) {
        if (b->sample) { /* draws are the caller's here: the logits are on the host */
            b->argmax[r] = -1;
            continue;
        }
        const float *x = logits + (size_t)r * vocab;
        int32_t best = 0;
        for (size_t i = 1; i < vocab; i++)
            if (x[i] > x[best])
                best = (int32_t)i;
        b->argmax[r] = best;
    }
}

rp_status rp_model_eval_batch(rp_model *m, const rp_batch *b, float *logits, rp_err *err)
{
    rp_status rc = check_batch(m, b, err);
    if (rc)
        return rc;
    for (int i = 0; i < b->n_tok;) { /* room and ids for every sequence before any compute */
        int j = i;
        while (j < b->n_tok && b->kv[j] == b->kv[i])
            j++;
        if (b->kv[i]->rec_n && b->kv[i]->rec_pos != b->kv[i]->len)
            return rp_err_set(err, RP_ERR_INVALID,
                              "the recurrent state describes position %d but the cache was "
                              "truncated to %d: restore a snapshot taken there",
                              b->kv[i]->rec_pos, b->kv[i]->len);
        if ((rc = rp_kv_prepare(b->kv[i], b->ids + i, j - i, err)))
            return rc;
        i = j;
    }
    if (m->arch->forward_batch) {
        rc = m->arch->forward_batch(m, b, logits, err);
        for (int i = 0; i < b->n_tok && rc == RP_OK; i++)
            if (i + 1 == b->n_tok || b->kv[i + 1] != b->kv[i]) {
                b->kv[i]->rec_pos = b->kv[i]->len;
                rp_kv_indexed(b->kv[i]);
            }
        if (rc || !b->argmax || m->arch->batch_argmax)
            return rc;
        argmax_host(b, logits, (size_t)m->info.vocab_size);
        return RP_OK;
    }
    size_t vocab = (size_t)m->info.vocab_size;
    int row = 0;
    for (int i = 0; i < b->n_tok;) { /* one sequence's run at a time */
        int j = i;
        while (j < b->n_tok && b->kv[j] == b->kv[i])
            j++;
        int want = 0; /* the run's last `want` tokens ask (check_batch) */
        while (b->want_logits && want < j - i && b->want_logits[j - 1 - want])
            want++;
        rc = m->arch->forward(m, b->kv[i], b->ids + i, j - i,
                              want ? logits + (size_t)row * vocab : NULL, want, err);
        if (rc)
            return rc;
        b->kv[i]->rec_pos = b->kv[i]->len;
        rp_kv_indexed(b->kv[i]);
        row += want;
        i = j;
    }
    if (b->argmax)
        argmax_host(b, logits, vocab);
    return RP_OK;
}

int rp_model_recurrent(const rp_model *m) { return m->arch->recurrent; }
