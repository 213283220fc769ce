/* model/gguf_model.c - GGUF model files: config from metadata, tensors under HF names. */
#include "model/gguf_model.h"

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/file.h"
#include "base/gguf.h"
#include "base/log.h"

static const struct {
    uint32_t ggml;
    int dt;
    const char *name;
} k_types[] = {
    {0, RP_DT_F32, "F32"},    {1, RP_DT_F16, "F16"},    {2, RP_DT_Q4_0, "Q4_0"},
    {3, RP_DT_Q4_1, "Q4_1"},  {6, RP_DT_Q5_0, "Q5_0"},  {7, RP_DT_Q5_1, "Q5_1"},
    {8, RP_DT_Q8_0, "Q8_0"},  {9, -1, "Q8_1"},          {10, -1, "Q2_K"},
    {11, -1, "Q3_K"},         {12, RP_DT_Q4_K, "Q4_K"}, {13, RP_DT_Q5_K, "Q5_K"},
    {14, RP_DT_Q6_K, "Q6_K"}, {15, -1, "Q8_K"},         {16, -1, "IQ2_XXS"},
    {17, -1, "IQ2_XS"},       {18, -1, "IQ3_XXS"},      {19, -1, "IQ1_S"},
    {20, -1, "IQ4_NL"},       {21, -1, "IQ3_S"},        {22, -1, "IQ2_S"},
    {23, -1, "IQ4_XS"},       {24, -1, "I8"},           {25, -1, "I16"},
    {26, -1, "I32"},          {27, -1, "I64"},          {28, -1, "F64"},
    {29, -1, "IQ1_M"},        {30, RP_DT_BF16, "BF16"}, {34, -1, "TQ1_0"},
    {35, -1, "TQ2_0"},        {39, -1, "MXFP4"},
};

int rp_gguf_model_dtype(uint32_t ggml_type)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_types); i++)
        if (k_types[i].ggml == ggml_type)
            return k_types[i].dt;
    return -1;
}

uint32_t rp_gguf_model_ggml_type(rp_dtype dt)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_types); i++)
        if (k_types[i].dt == (int)dt)
            return k_types[i].ggml;
    return 0xffffffffu;
}

const char *rp_gguf_model_type_name(uint32_t ggml_type)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_types); i++)
        if (k_types[i].ggml == ggml_type)
            return k_types[i].name;
    return "unknown";
}

int rp_gguf_model_is(const char *path)
{
    size_t n = strlen(path);
    return n > 5 && strcmp(path + n - 5, ".gguf") == 0 && !rp_path_is_dir(path);
}

/* ---- metadata -> config.json ----------------------------------------------------------- */

typedef struct meta {
    const rp_gguf *g;
    char arch[32];
} meta;

static int has(const meta *m, const char *suffix, char *key, size_t n)
{
    snprintf(key, n, "%s.%s", m->arch, suffix);
    return rp_gguf_find(m->g, key) >= 0;
}

static rp_status put_int(const meta *m, json_t *c, const char *suffix, const char *hf,
                         int required, rp_err *err)
{
    char key[128];
    int64_t v;
    if (!has(m, suffix, key, sizeof key))
        return required ? rp_err_set(err, RP_ERR_INVALID, "GGUF metadata has no '%s'", key)
                        : RP_OK;
    rp_status rc = rp_gguf_get_i64(m->g, key, &v, err);
    if (rc == RP_OK)
        json_object_set_new(c, hf, json_integer(v));
    return rc;
}

static void put_float(const meta *m, json_t *c, const char *suffix, const char *hf)
{
    char key[128];
    double v;
    if (has(m, suffix, key, sizeof key) && rp_gguf_get_f64(m->g, key, &v, NULL) == RP_OK)
        json_object_set_new(c, hf, json_real(v));
}

static rp_status make_config(const meta *m, int tied, json_t **out, rp_err *err)
{
    const char *hf = strcmp(m->arch, "qwen2") == 0   ? "Qwen2ForCausalLM"
                     : strcmp(m->arch, "qwen3") == 0 ? "Qwen3ForCausalLM"
                                                     : "LlamaForCausalLM";
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", hf));
    json_object_set_new(c, "model_type", json_string(m->arch));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "tie_word_embeddings", json_boolean(tied));
    rp_status rc;
    if ((rc = put_int(m, c, "embedding_length", "hidden_size", 1, err)) ||
        (rc = put_int(m, c, "block_count", "num_hidden_layers", 1, err)) ||
        (rc = put_int(m, c, "feed_forward_length", "intermediate_size", 1, err)) ||
        (rc = put_int(m, c, "attention.head_count", "num_attention_heads", 1, err)) ||
        (rc = put_int(m, c, "attention.head_count_kv", "num_key_value_heads", 0, err)) ||
        (rc = put_int(m, c, "attention.key_length", "head_dim", 0, err)) ||
        (rc = put_int(m, c, "context_length", "max_position_embeddings", 0, err)) ||
        (rc = put_int(m, c, "vocab_size", "vocab_size", 0, err)) ||
        (rc = put_int(m, c, "attention.sliding_window", "sliding_window", 0, err))) {
        json_decref(c);
        return rc;
    }
    if (!json_object_get(c, "vocab_size")) { /* older files: the token list's length */
        rp_gguf_type et;
        uint64_t n = 0;
        if (rp_gguf_get_arr(m->g, "tokenizer.ggml.tokens", &et, &n, NULL) == RP_OK)
            json_object_set_new(c, "vocab_size", json_integer((json_int_t)n));
    }
    put_float(m, c, "attention.layer_norm_rms_epsilon", "rms_norm_eps");
    put_float(m, c, "rope.freq_base", "rope_theta");
    char key[128];
    const char *st = NULL;
    size_t stl = 0;
    if (has(m, "rope.scaling.type", key, sizeof key) &&
        rp_gguf_get_str(m->g, key, &st, &stl, NULL) == RP_OK && stl && strncmp(st, "none", stl)) {
        json_t *rs = json_object();
        json_object_set_new(rs, "rope_type", json_stringn(st, stl));
        put_float(m, rs, "rope.scaling.factor", "factor");
        put_int(m, rs, "rope.scaling.original_context_length", "original_max_position_embeddings",
                0, NULL);
        json_object_set_new(c, "rope_scaling", rs);
    }
    int64_t v;
    if (rp_gguf_get_i64(m->g, "tokenizer.ggml.bos_token_id", &v, NULL) == RP_OK)
        json_object_set_new(c, "bos_token_id", json_integer(v));
    if (rp_gguf_get_i64(m->g, "tokenizer.ggml.eos_token_id", &v, NULL) == RP_OK)
        json_object_set_new(c, "eos_token_id", json_integer(v));
    *out = c;
    return RP_OK;
}

/* ---- tensors --------------------------------------------------------------------------- */

/* GGUF name -> HF name; 0 when the tensor is not one the recipes use (kept under its own
 * name). */
static int hf_name(const char *g, char *out, size_t n)
{
    static const struct {
        const char *gguf, *hf;
    } top[] = {{"token_embd.weight", "model.embed_tokens.weight"},
               {"output_norm.weight", "model.norm.weight"},
               {"output.weight", "lm_head.weight"}};
    for (size_t i = 0; i < RP_ARRAY_LEN(top); i++)
        if (strcmp(g, top[i].gguf) == 0) {
            snprintf(out, n, "%s", top[i].hf);
            return 1;
        }
    static const struct {
        const char *gguf, *hf;
    } blk[] = {{"attn_norm", "input_layernorm"},    {"ffn_norm", "post_attention_layernorm"},
               {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
               {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"},
               {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
               {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
               {"ffn_down", "mlp.down_proj"}};
    int layer, len = 0;
    if (sscanf(g, "blk.%d.%n", &layer, &len) != 1 || len == 0)
        return 0;
    const char *rest = g + len, *dot = strrchr(rest, '.');
    if (!dot)
        return 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(blk); i++)
        if (strlen(blk[i].gguf) == (size_t)(dot - rest) &&
            strncmp(rest, blk[i].gguf, (size_t)(dot - rest)) == 0) {
            snprintf(out, n, "model.layers.%d.%s%s", layer, blk[i].hf, dot);
            return 1;
        }
    return 0;
}

/* Copies rows back from llama.cpp's RoPE permutation: HF row h*hd + a*hd/2 + i sits at
 * GGUF row h*hd + 2i + a. rows = n_head * hd; row_bytes per row. */
static void *unpermute(const void *src, int64_t rows, size_t row_bytes, int n_head)
{
    char *dst = rp_alloc((size_t)rows * row_bytes);
    if (!dst)
        return NULL;
    int64_t hd = rows / n_head, half = hd / 2;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t a = 0; a < 2; a++)
            for (int64_t i = 0; i < half; i++)
                memcpy(dst + (size_t)(h * hd + a * half + i) * row_bytes,
                       (const char *)src + (size_t)(h * hd + 2 * i + a) * row_bytes, row_bytes);
    return dst;
}

static void close_gguf(void *g) { rp_gguf_close(g); }

rp_status rp_gguf_model_open(const char *path, json_t **config, rp_st **out, rp_err *err)
{
    rp_gguf *g = NULL;
    rp_status rc = rp_gguf_open(path, &g, err);
    if (rc)
        return rc;
    rp_st *st = rp_st_new();
    if (!st) {
        rp_gguf_close(g);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    rp_st_on_close(st, close_gguf, g);
    meta m = {.g = g};
    const char *a;
    size_t al;
    if ((rc = rp_gguf_get_str(g, "general.architecture", &a, &al, err)))
        goto fail;
    snprintf(m.arch, sizeof m.arch, "%.*s", (int)(al < 31 ? al : 31), a);
    if (strcmp(m.arch, "llama") && strcmp(m.arch, "qwen2") && strcmp(m.arch, "qwen3")) {
        rc = rp_err_set(err, RP_ERR_UNSUPPORTED,
                        "%s: GGUF architecture '%s' is not supported (rapid runs llama, qwen2, "
                        "qwen3)",
                        path, m.arch);
        goto fail;
    }
    int permuted = strcmp(m.arch, "llama") == 0;
    int64_t n_head = 0, n_kv = 0;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count", m.arch);
    if ((rc = rp_gguf_get_i64(g, key, &n_head, err)))
        goto fail;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m.arch);
    if (rp_gguf_get_i64(g, key, &n_kv, NULL) != RP_OK)
        n_kv = n_head;
    if (n_head <= 0 || n_kv <= 0) {
        rc = rp_err_set(err, RP_ERR_INVALID, "%s: bad head counts", path);
        goto fail;
    }
    for (int64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        rp_gguf_tensor gt;
        if ((rc = rp_gguf_tensor_info(g, i, &gt))) {
            rc = rp_err_set(err, RP_ERR_INVALID, "%s: bad tensor info %lld", path, (long long)i);
            goto fail;
        }
        char gname[256], name[300];
        snprintf(gname, sizeof gname, "%.*s", (int)(gt.name_len < 255 ? gt.name_len : 255),
                 gt.name);
        if (!hf_name(gname, name, sizeof name))
            snprintf(name, sizeof name, "%s", gname);
        int dt = rp_gguf_model_dtype(gt.type);
        if (dt < 0) {
            rc = rp_err_set(err, RP_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has ggml type %s (%u), which rapid does not run "
                            "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
                            "Q5_K, Q6_K)",
                            path, gname, rp_gguf_model_type_name(gt.type), gt.type);
            goto fail;
        }
        if (!gt.data || gt.n_dims < 1 || gt.n_dims > 2) {
            rc = rp_err_set(err, RP_ERR_INVALID, "%s: tensor '%s' has no data or %d dims", path,
                            gname, gt.n_dims);
            goto fail;
        }
        rp_tensor t = {.dtype = (rp_dtype)dt, .n_dims = gt.n_dims, .data = gt.data,
                       .n_bytes = (size_t)gt.n_bytes};
        if (gt.n_dims == 2) {
            t.shape[0] = gt.dims[1];
            t.shape[1] = gt.dims[0];
        } else {
            t.shape[0] = gt.dims[0];
        }
        void *owned = NULL;
        size_t nl = strlen(name);
        int is_q = strstr(name, ".self_attn.q_proj.") != NULL,
            is_k = strstr(name, ".self_attn.k_proj.") != NULL;
        if (permuted && (is_q || is_k) && nl > 0) {
            int heads = (int)(is_q ? n_head : n_kv);
            int64_t rows = t.shape[0];
            size_t rb = gt.n_dims == 2 ? rp_dtype_row_bytes(t.dtype, t.shape[1])
                                       : rp_dtype_row_bytes(t.dtype, 1);
            if (rows % (2 * heads) != 0 || (gt.n_dims == 1 && rp_dtype_is_quant(t.dtype))) {
                rc = rp_err_set(err, RP_ERR_INVALID, "%s: '%s' has %lld rows for %d heads",
                                path, gname, (long long)rows, heads);
                goto fail;
            }
            owned = unpermute(t.data, rows, rb, heads);
            if (!owned) {
                rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
                goto fail;
            }
            t.data = owned;
        }
        if ((rc = rp_st_add(st, name, rp_gguf_model_type_name(gt.type), 1, &t, owned, err)))
            goto fail;
    }
    if ((rc = rp_st_finish(st, err)))
        goto fail;
    if (rp_st_find(st, "rope_freqs.weight"))
        RP_WARN("%s: rope_freqs.weight (Llama 3.1+ RoPE frequency factors) is not applied yet: "
                "logits will differ from llama.cpp's",
                path);
    if ((rc = make_config(&m, rp_st_find(st, "lm_head.weight") == NULL, config, err)))
        goto fail;
    *out = st;
    return RP_OK;
fail:
    rp_st_close(st);
    return rc;
}
