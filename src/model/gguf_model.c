/* model/gguf_model.c - GGUF model files: config from metadata, tensors under HF names.
 *
 * Architectures (llama.cpp's general.architecture names, tensor names and metadata keys, read
 * from its documentation and the files it writes): llama, qwen2, qwen3 (the Llama recipe),
 * qwen3moe (experts as 3-D stacks ffn_{gate,up,down}_exps -> mlp.switch_mlp.*), gemma3 (the
 * converter stores the (1 + w) RMSNorm weights as 1 + w: undone here; sliding layers every
 * 6th-but-one as llama.cpp decides unless {arch}.attention.sliding_window_pattern says), phi3
 * (fused attn_qkv; ffn_up holds gate and up, as HF's gate_up_proj; LongRoPE factors from
 * rope_factors_long / rope_factors_short), lfm2 (layer types from the per-layer
 * head_count_kv, 0 = short conv; the squeezed conv kernels [C][K] back to [C][1][K]), qwen35
 * (Qwen3.5 dense: ssm_* / attn_qkv / attn_gate names, ssm_a = -exp(A_log), 1 + w norms, value
 * heads reordered by the converter put back), gpt-oss (ffn_*_exps stacks in any type, MXFP4
 * re-laid from ggml's nibble order; attn_sinks; every other layer sliding as llama.cpp
 * decides). Others (qwen3next, qwen35moe, ...) are refused by name. rope_freqs (Llama 3.1+: the llama3 scaling as a per-frequency divisor)
 * becomes rope_parameters.freq_factors, which model/rope.c applies.
 */
#include "model/gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/file.h"
#include "base/gguf.h"

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
    {35, -1, "TQ2_0"},        {39, RP_DT_MXFP4, "MXFP4"},
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
    rp_gguf_type et;
    uint64_t n;
    if (!required && rp_gguf_get_arr(m->g, key, &et, &n, NULL) == RP_OK)
        return RP_OK; /* per-layer values (lfm2's head_count_kv): the family reads them */
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

typedef struct arch_def {
    const char *gguf, *hf, *model_type;
} arch_def;

static const arch_def k_archs[] = {
    {"llama", "LlamaForCausalLM", "llama"},     {"qwen2", "Qwen2ForCausalLM", "qwen2"},
    {"qwen3", "Qwen3ForCausalLM", "qwen3"},     {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text"}, {"phi3", "Phi3ForCausalLM", "phi3"},
    {"lfm2", "Lfm2ForCausalLM", "lfm2"},       {"qwen35", "Qwen3_5ForCausalLM", "qwen3_5_text"},
    {"gpt-oss", "GptOssForCausalLM", "gpt_oss"},
};

static const arch_def *find_arch_def(const char *arch)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_archs); i++)
        if (strcmp(k_archs[i].gguf, arch) == 0)
            return &k_archs[i];
    return NULL;
}

/* A 1-D F32 tensor's values as a JSON array (rope factor tensors); NULL when absent. */
static json_t *f32_array(const rp_st *st, const char *name, rp_err *err, rp_status *rc)
{
    const rp_st_tensor *t = rp_st_find(st, name);
    *rc = RP_OK;
    if (!t)
        return NULL;
    if (t->t.dtype != RP_DT_F32 || t->t.n_dims != 1) {
        *rc = rp_err_set(err, RP_ERR_INVALID, "GGUF tensor '%s' should be 1-D F32", name);
        return NULL;
    }
    json_t *a = json_array();
    const float *v = t->t.data;
    for (int64_t i = 0; i < t->t.shape[0]; i++) {
        float x;
        memcpy(&x, v + i, sizeof x);
        json_array_append_new(a, json_real(x));
    }
    return a;
}

/* LFM2: head_count_kv per layer (0 = a short-conv layer), the conv length, its norm eps. */
static rp_status lfm2_config(const meta *m, json_t *c, rp_err *err)
{
    char key[128];
    int64_t n_layers = json_integer_value(json_object_get(c, "num_hidden_layers")), kv = 0;
    rp_gguf_type et;
    uint64_t n = 0;
    json_t *types = json_array();
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch);
    int64_t ia = rp_gguf_find(m->g, key);
    int is_arr = ia >= 0 && rp_gguf_get_arr(m->g, key, &et, &n, NULL) == RP_OK;
    for (int64_t i = 0; i < n_layers; i++) {
        int64_t h = json_integer_value(json_object_get(c, "num_key_value_heads"));
        if (is_arr && ((uint64_t)i >= n || rp_gguf_arr_i64(m->g, ia, (uint64_t)i, &h) != RP_OK)) {
            json_decref(types);
            return rp_err_set(err, RP_ERR_INVALID, "GGUF '%s' has %llu entries for %lld layers",
                              key, (unsigned long long)n, (long long)n_layers);
        }
        kv = h > kv ? h : kv;
        json_array_append_new(types, json_string(h > 0 ? "full_attention" : "conv"));
    }
    json_object_set_new(c, "layer_types", types);
    if (kv > 0)
        json_object_set_new(c, "num_key_value_heads", json_integer(kv));
    json_object_set_new(c, "block_auto_adjust_ff_dim", json_false());
    put_int(m, c, "shortconv.l_cache", "conv_L_cache", 0, NULL);
    put_float(m, c, "attention.layer_norm_rms_epsilon", "norm_eps");
    return RP_OK;
}

/* Qwen3.5: the Gated DeltaNet sizes from ssm.*, layer types from full_attention_interval. */
static rp_status qwen35_config(const meta *m, json_t *c, rp_err *err)
{
    rp_status rc;
    if ((rc = put_int(m, c, "ssm.conv_kernel", "linear_conv_kernel_dim", 1, err)) ||
        (rc = put_int(m, c, "ssm.state_size", "linear_key_head_dim", 1, err)) ||
        (rc = put_int(m, c, "ssm.group_count", "linear_num_key_heads", 1, err)) ||
        (rc = put_int(m, c, "ssm.time_step_rank", "linear_num_value_heads", 1, err)) ||
        (rc = put_int(m, c, "ssm.inner_size", "linear_value_head_dim", 1, err)) ||
        (rc = put_int(m, c, "full_attention_interval", "full_attention_interval", 0, err)))
        return rc;
    int64_t nv = json_integer_value(json_object_get(c, "linear_num_value_heads")),
            inner = json_integer_value(json_object_get(c, "linear_value_head_dim"));
    if (nv <= 0 || inner % nv)
        return rp_err_set(err, RP_ERR_INVALID, "GGUF ssm.inner_size %lld is not a multiple of "
                          "ssm.time_step_rank %lld", (long long)inner, (long long)nv);
    json_object_set_new(c, "linear_value_head_dim", json_integer(inner / nv));
    int64_t n_layers = json_integer_value(json_object_get(c, "num_hidden_layers"));
    json_t *fi = json_object_get(c, "full_attention_interval");
    int64_t every = json_is_integer(fi) ? json_integer_value(fi) : 4;
    json_t *types = json_array();
    for (int64_t i = 0; i < n_layers; i++)
        json_array_append_new(types, json_string(every > 0 && (i + 1) % every == 0
                                                     ? "full_attention"
                                                     : "linear_attention"));
    json_object_set_new(c, "layer_types", types);
    return RP_OK;
}

/* Family-specific keys: MoE sizes, Gemma 3's layer pattern / local RoPE / attention scale,
 * Phi-3's partial rotary and LongRoPE. rope: the rope_parameters object being built. */
static rp_status arch_config(const meta *m, const rp_st *st, json_t *c, json_t *rope,
                             rp_err *err)
{
    char key[128];
    int64_t v;
    rp_status rc = RP_OK;
    int64_t n_layers = json_integer_value(json_object_get(c, "num_hidden_layers"));
    int64_t hd = json_integer_value(json_object_get(c, "head_dim"));
    if (strcmp(m->arch, "qwen3moe") == 0) {
        if ((rc = put_int(m, c, "expert_count", "num_experts", 1, err)) ||
            (rc = put_int(m, c, "expert_used_count", "num_experts_per_tok", 1, err)) ||
            (rc = put_int(m, c, "expert_feed_forward_length", "moe_intermediate_size", 1, err)))
            return rc;
        int norm = 1; /* llama.cpp renormalises the top-k weights of qwen3moe */
        if (has(m, "expert_weights_norm", key, sizeof key))
            rp_gguf_get_bool(m->g, key, &norm, NULL);
        json_object_set_new(c, "norm_topk_prob", json_boolean(norm));
        json_object_set_new(c, "decoder_sparse_step", json_integer(1));
    } else if (strcmp(m->arch, "gemma3") == 0) {
        json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
        json_object_set_new(c, "hidden_act", json_string("gelu_pytorch_tanh"));
        int64_t dim = json_integer_value(json_object_get(c, "hidden_size")),
                heads = json_integer_value(json_object_get(c, "num_attention_heads"));
        /* llama.cpp: 1/sqrt(head_dim), but hidden/heads for the 62-layer 27B */
        json_object_set_new(c, "query_pre_attn_scalar",
                            json_integer(n_layers == 62 && heads ? dim / heads : hd));
        json_t *types = json_array();
        int64_t ipat = has(m, "attention.sliding_window_pattern", key, sizeof key)
                           ? rp_gguf_find(m->g, key)
                           : -1;
        rp_gguf_type et;
        uint64_t n = 0;
        int64_t period = 6;
        if (ipat >= 0 && rp_gguf_get_arr(m->g, key, &et, &n, NULL) != RP_OK &&
            rp_gguf_get_i64(m->g, key, &period, NULL) != RP_OK) {
            json_decref(types);
            return rp_err_set(err, RP_ERR_INVALID, "GGUF '%s' is neither a number nor an array",
                              key);
        }
        for (int64_t i = 0; i < n_layers; i++) {
            int sliding = period > 0 && (i + 1) % period != 0;
            if (ipat >= 0 && n > 0) { /* one flag per layer: true = sliding window */
                int64_t f = 0;
                if ((uint64_t)i >= n || rp_gguf_arr_i64(m->g, ipat, (uint64_t)i, &f) != RP_OK) {
                    json_decref(types);
                    return rp_err_set(err, RP_ERR_INVALID, "GGUF '%s' has %llu flags for %lld "
                                      "layers", key, (unsigned long long)n, (long long)n_layers);
                }
                sliding = f != 0;
            }
            json_array_append_new(types, json_string(sliding ? "sliding_attention"
                                                             : "full_attention"));
        }
        json_object_set_new(c, "layer_types", types);
        json_t *local = json_pack("{s:s, s:f}", "rope_type", "default", "rope_theta", 10000.0);
        json_t *global = json_deep_copy(rope);
        json_object_clear(rope);
        json_object_set_new(rope, "full_attention", global);
        json_object_set_new(rope, "sliding_attention", local);
    } else if (strcmp(m->arch, "phi3") == 0) {
        if (has(m, "rope.dimension_count", key, sizeof key) &&
            rp_gguf_get_i64(m->g, key, &v, NULL) == RP_OK && hd > 0 && v != hd)
            json_object_set_new(c, "partial_rotary_factor", json_real((double)v / (double)hd));
        json_t *lf = f32_array(st, "rope_factors_long.weight", err, &rc), *sf = NULL;
        if (rc == RP_OK && lf)
            sf = f32_array(st, "rope_factors_short.weight", err, &rc);
        if (rc == RP_OK && lf && !sf)
            rc = rp_err_set(err, RP_ERR_INVALID, "GGUF has rope_factors_long but no "
                                                 "rope_factors_short");
        if (rc != RP_OK) {
            json_decref(lf);
            json_decref(sf);
            return rc;
        }
        if (lf) {
            json_object_set_new(rope, "rope_type", json_string("longrope"));
            json_object_set_new(rope, "long_factor", lf);
            json_object_set_new(rope, "short_factor", sf);
            put_int(m, c, "rope.scaling.original_context_length",
                    "original_max_position_embeddings", 0, NULL);
            put_float(m, rope, "rope.scaling.attn_factor", "attention_factor");
        }
    }
    if (strcmp(m->arch, "lfm2") == 0 && (rc = lfm2_config(m, c, err)))
        return rc;
    if (strcmp(m->arch, "gpt-oss") == 0) {
        if ((rc = put_int(m, c, "expert_count", "num_local_experts", 1, err)) ||
            (rc = put_int(m, c, "expert_used_count", "num_experts_per_tok", 1, err)) ||
            (rc = put_int(m, c, "expert_feed_forward_length", "intermediate_size", 1, err)))
            return rc;
        json_t *types = json_array(); /* llama.cpp: every other layer, from 0, is sliding */
        for (int64_t i = 0; i < n_layers; i++)
            json_array_append_new(types,
                                  json_string(i % 2 ? "full_attention" : "sliding_attention"));
        json_object_set_new(c, "layer_types", types);
        if (json_object_get(rope, "factor")) /* gpt-oss's published YaRN does not truncate */
            json_object_set_new(rope, "truncate", json_false());
    }
    if (strcmp(m->arch, "qwen35") == 0) {
        if ((rc = qwen35_config(m, c, err)))
            return rc;
        if (has(m, "rope.dimension_count", key, sizeof key) &&
            rp_gguf_get_i64(m->g, key, &v, NULL) == RP_OK && hd > 0)
            json_object_set_new(c, "partial_rotary_factor", json_real((double)v / (double)hd));
    }
    if (json_object_get(c, "partial_rotary_factor"))
        json_object_set(rope, "partial_rotary_factor",
                        json_object_get(c, "partial_rotary_factor"));
    return rc;
}

static rp_status make_config(const meta *m, const rp_st *st, int tied, json_t **out,
                             rp_err *err)
{
    const arch_def *ad = find_arch_def(m->arch);
    const char *hf = ad->hf;
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", hf));
    json_object_set_new(c, "model_type", json_string(ad->model_type));
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
    json_t *rope = json_pack("{s:s}", "rope_type", "default");
    put_float(m, rope, "rope.freq_base", "rope_theta");
    if (!json_object_get(rope, "rope_theta"))
        json_object_set_new(rope, "rope_theta", json_real(10000.0));
    char key[128];
    const char *stype = NULL;
    size_t stl = 0;
    if (has(m, "rope.scaling.type", key, sizeof key) &&
        rp_gguf_get_str(m->g, key, &stype, &stl, NULL) == RP_OK && stl &&
        strncmp(stype, "none", stl)) {
        json_object_set_new(rope, "rope_type", json_stringn(stype, stl));
        put_float(m, rope, "rope.scaling.factor", "factor");
        put_int(m, rope, "rope.scaling.original_context_length",
                "original_max_position_embeddings", 0, NULL);
    }
    json_t *ff = f32_array(st, "rope_freqs.weight", err, &rc); /* Llama 3.1+ */
    if (rc == RP_OK && ff)
        json_object_set_new(rope, "freq_factors", ff);
    if (rc == RP_OK)
        rc = arch_config(m, st, c, rope, err);
    json_object_set_new(c, "rope_parameters", rope);
    if (rc) {
        json_decref(c);
        return rc;
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

typedef struct name_map {
    const char *gguf, *hf;
} name_map;

/* Per-architecture block tensor names, looked up before the common ones. */
static const name_map k_gemma3[] = {{"ffn_norm", "pre_feedforward_layernorm"},
                                    {"post_attention_norm", "post_attention_layernorm"},
                                    {"post_ffw_norm", "post_feedforward_layernorm"}};
static const name_map k_qwen3moe[] = {{"ffn_gate_inp", "mlp.gate"},
                                      {"ffn_gate_exps", "mlp.switch_mlp.gate_proj"},
                                      {"ffn_up_exps", "mlp.switch_mlp.up_proj"},
                                      {"ffn_down_exps", "mlp.switch_mlp.down_proj"}};
static const name_map k_phi3[] = {{"attn_qkv", "self_attn.qkv_proj"},
                                  {"ffn_up", "mlp.gate_up_proj"}};
static const name_map k_lfm2[] = {
    {"attn_norm", "operator_norm"},           {"ffn_norm", "ffn_norm"},
    {"shortconv.conv", "conv.conv"},          {"shortconv.in_proj", "conv.in_proj"},
    {"shortconv.out_proj", "conv.out_proj"},  {"attn_output", "self_attn.out_proj"},
    {"attn_q_norm", "self_attn.q_layernorm"}, {"attn_k_norm", "self_attn.k_layernorm"},
    {"ffn_gate", "feed_forward.w1"},          {"ffn_up", "feed_forward.w3"},
    {"ffn_down", "feed_forward.w2"}};
static const name_map k_qwen35[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"attn_qkv", "linear_attn.in_proj_qkv"}, {"attn_gate", "linear_attn.in_proj_z"},
    {"ssm_alpha", "linear_attn.in_proj_a"},  {"ssm_beta", "linear_attn.in_proj_b"},
    {"ssm_out", "linear_attn.out_proj"},     {"ssm_norm", "linear_attn.norm"},
    {"ssm_conv1d", "linear_attn.conv1d"},    {"ssm_a", "linear_attn.A_log"},
    {"ssm_dt", "linear_attn.dt"}};
static const name_map k_gptoss[] = {
    {"post_attention_norm", "post_attention_layernorm"}, {"attn_sinks", "self_attn.sinks"},
    {"ffn_gate_inp", "mlp.router"},                      {"ffn_gate_exps", "mlp.experts.gate_proj"},
    {"ffn_up_exps", "mlp.experts.up_proj"},              {"ffn_down_exps", "mlp.experts.down_proj"}};
static const name_map k_common[] = {
    {"attn_norm", "input_layernorm"},    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"}};

static const char *map_block(const name_map *t, size_t n, const char *rest, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i].gguf) == len && strncmp(rest, t[i].gguf, len) == 0)
            return t[i].hf;
    return NULL;
}

/* GGUF name -> HF name; 0 when the tensor is not one the recipes use (kept under its own
 * name). */
static int hf_name(const char *arch, const char *g, char *out, size_t n)
{
    static const name_map top[] = {{"token_embd.weight", "model.embed_tokens.weight"},
                                   {"output_norm.weight", "model.norm.weight"},
                                   {"output.weight", "lm_head.weight"},
                                   {"token_embd_norm.weight", "model.embedding_norm.weight"}};
    for (size_t i = 0; i < RP_ARRAY_LEN(top); i++)
        if (strcmp(g, top[i].gguf) == 0) {
            snprintf(out, n, "%s", top[i].hf);
            return 1;
        }
    int layer, len = 0;
    if (sscanf(g, "blk.%d.%n", &layer, &len) != 1 || len == 0)
        return 0;
    const char *rest = g + len, *dot = strrchr(rest, '.');
    if (!dot) /* names without a .weight / .bias suffix (qwen35's ssm_a) */
        dot = rest + strlen(rest);
    size_t bl = (size_t)(dot - rest);
    const char *hf = NULL;
    if (strcmp(arch, "gemma3") == 0)
        hf = map_block(k_gemma3, RP_ARRAY_LEN(k_gemma3), rest, bl);
    else if (strcmp(arch, "qwen3moe") == 0)
        hf = map_block(k_qwen3moe, RP_ARRAY_LEN(k_qwen3moe), rest, bl);
    else if (strcmp(arch, "phi3") == 0)
        hf = map_block(k_phi3, RP_ARRAY_LEN(k_phi3), rest, bl);
    else if (strcmp(arch, "lfm2") == 0)
        hf = map_block(k_lfm2, RP_ARRAY_LEN(k_lfm2), rest, bl);
    else if (strcmp(arch, "qwen35") == 0)
        hf = map_block(k_qwen35, RP_ARRAY_LEN(k_qwen35), rest, bl);
    else if (strcmp(arch, "gpt-oss") == 0)
        hf = map_block(k_gptoss, RP_ARRAY_LEN(k_gptoss), rest, bl);
    if (!hf)
        hf = map_block(k_common, RP_ARRAY_LEN(k_common), rest, bl);
    if (!hf)
        return 0;
    if (strcmp(hf, "self_attn.sinks") == 0) { /* HF: no .weight */
        snprintf(out, n, "model.layers.%d.%s", layer, hf);
        return 1;
    }
    if (strcmp(hf, "linear_attn.A_log") == 0 || strcmp(hf, "linear_attn.dt") == 0) {
        /* ssm_a.weight holds -exp(A_log); ssm_dt.bias is dt_bias */
        snprintf(out, n, "model.layers.%d.%s", layer, hf[12] == 'A' ? hf : "linear_attn.dt_bias");
        return 1;
    }
    snprintf(out, n, "model.layers.%d.%s%s", layer, hf, dot);
    return 1;
}

/* Gemma 3's and Qwen3.5's GGUF norms hold 1 + w (llama.cpp's converter adds the 1 of their
 * (1 + w) RMSNorms; Qwen3.5's gated-delta output norm excepted); the recipes add it
 * themselves, so the loader takes it off again. */
static int is_gemma_norm(const char *arch, const char *hf)
{
    size_t n = strlen(hf);
    int shifted = strcmp(arch, "gemma3") == 0 ||
                  (strcmp(arch, "qwen35") == 0 && !strstr(hf, "linear_attn.norm."));
    return shifted && n > 11 && strcmp(hf + n - 11, "norm.weight") == 0;
}

static float *minus_one(const rp_tensor *t)
{
    float *v = rp_alloc(sizeof(float) * (size_t)t->shape[0]);
    if (!v)
        return NULL;
    memcpy(v, t->data, sizeof(float) * (size_t)t->shape[0]);
    for (int64_t i = 0; i < t->shape[0]; i++)
        v[i] -= 1.0f;
    return v;
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

/* Qwen3.5's linear-attention value heads: llama.cpp's converter reorders them from grouped by
 * key head (HF: head h = k * r + j, r = n_v / n_k) to tiled (GGUF: head j * n_k + k). */
typedef struct vheads {
    int64_t nk, nv, dk, dv;
} vheads;

static int64_t tiled_of(const vheads *v, int64_t h)
{
    int64_t r = v->nv / v->nk;
    return (h % r) * v->nk + h / r;
}

/* dst rows [first, first + nv * hd) in HF order from src's tiled order; other rows copied. */
static void untile_rows(char *dst, const char *src, int64_t rows, size_t rb, int64_t first,
                        const vheads *v, int64_t hd)
{
    memcpy(dst, src, (size_t)rows * rb);
    for (int64_t h = 0; h < v->nv; h++)
        memcpy(dst + (size_t)(first + h * hd) * rb, src + (size_t)(first + tiled_of(v, h) * hd) * rb,
               (size_t)hd * rb);
}

/* Undoes the converter's Qwen3.5 changes to one tensor (name: its HF name): -exp(A_log) back
 * to A_log, squeezed conv kernels back to [C][1][K], and the value-head order in the rows
 * (in_proj_qkv's v part, in_proj_z, in_proj_a/b, conv channels, A_log, dt_bias) and columns
 * (out_proj) it touched. *owned gets the new data when one is needed. */
static rp_status qwen35_tensor(const vheads *v, const char *name, rp_tensor *t, void **owned,
                               rp_err *err)
{
    if (!strstr(name, ".linear_attn."))
        return RP_OK;
    int conv = strstr(name, ".conv1d.") != NULL;
    if (conv && t->n_dims == 2) {
        t->n_dims = 3;
        t->shape[2] = t->shape[1];
        t->shape[1] = 1;
    }
    int is_a = strstr(name, ".A_log") != NULL, vec = is_a || strstr(name, ".dt_bias") != NULL;
    int64_t first = -1, hd = 0;
    if (strstr(name, ".in_proj_qkv.") || conv)
        first = 2 * v->nk * v->dk, hd = v->dv;
    else if (strstr(name, ".in_proj_z."))
        first = 0, hd = v->dv;
    else if (strstr(name, ".in_proj_a.") || strstr(name, ".in_proj_b.") || vec)
        first = 0, hd = 1;
    int out = strstr(name, ".out_proj.") != NULL;
    if (first < 0 && !out)
        return RP_OK;
    if ((vec || conv) && t->dtype != RP_DT_F32 && !(conv && !rp_dtype_is_quant(t->dtype)))
        return rp_err_set(err, RP_ERR_INVALID, "GGUF tensor for '%s' should be F32", name);
    int64_t rows = t->n_dims == 1 ? t->shape[0] : t->shape[0];
    size_t rb = t->n_dims == 1 ? sizeof(float) : t->n_bytes / (size_t)rows;
    char *dst = rp_alloc(t->n_bytes);
    if (!dst)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    const char *src = t->data;
    if (out) { /* columns in units of one value head */
        int64_t cols = t->shape[1];
        if (cols != v->nv * v->dv || v->dv % rp_dtype_block(t->dtype)) {
            rp_free(dst);
            return rp_err_set(err, RP_ERR_UNSUPPORTED,
                              "'%s': value heads of %lld columns cannot be reordered in %s "
                              "blocks",
                              name, (long long)v->dv, rp_dtype_name(t->dtype));
        }
        size_t ub = rp_dtype_row_bytes(t->dtype, v->dv);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t h = 0; h < v->nv; h++)
                memcpy(dst + (size_t)r * rb + (size_t)h * ub,
                       src + (size_t)r * rb + (size_t)tiled_of(v, h) * ub, ub);
    } else if (v->nv != v->nk) {
        if (first + v->nv * hd > rows) {
            rp_free(dst);
            return rp_err_set(err, RP_ERR_INVALID, "'%s' has %lld rows, fewer than its value "
                              "heads need", name, (long long)rows);
        }
        untile_rows(dst, src, rows, rb, first, v, hd);
    } else {
        memcpy(dst, src, t->n_bytes);
    }
    if (is_a) {
        float *a = (float *)dst;
        for (int64_t i = 0; i < rows; i++)
            a[i] = a[i] < 0 ? logf(-a[i]) : -INFINITY;
    }
    t->data = dst;
    rp_free(*owned); /* an earlier copy (src) is no longer needed */
    *owned = dst;
    return RP_OK;
}

/* ggml's MXFP4 blocks (scale byte, then element j in the low nibble of byte j and element
 * j + 16 in its high nibble) in rapid's order (elements 2i, 2i + 1 in byte i). */
static void *mxfp4_from_ggml(const void *src, size_t n_bytes)
{
    uint8_t *dst = rp_alloc(n_bytes);
    if (!dst)
        return NULL;
    const uint8_t *s = src;
    for (size_t b = 0; b + 17 <= n_bytes; b += 17) {
        dst[b] = s[b];
        for (int i = 0; i < 16; i++) {
            int e0 = 2 * i, e1 = 2 * i + 1;
            int n0 = e0 < 16 ? s[b + 1 + e0] & 15 : s[b + 1 + e0 - 16] >> 4;
            int n1 = e1 < 16 ? s[b + 1 + e1] & 15 : s[b + 1 + e1 - 16] >> 4;
            dst[b + 1 + i] = (uint8_t)(n0 | n1 << 4);
        }
    }
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
    if (!find_arch_def(m.arch)) {
        rc = rp_err_set(err, RP_ERR_UNSUPPORTED,
                        "%s: GGUF architecture '%s' is not supported (rapid runs llama, qwen2, "
                        "qwen3, qwen3moe, gemma3, phi3, lfm2, qwen35, gpt-oss from GGUF; convert other families from "
                        "their Hugging Face checkpoints)",
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
    vheads vh = {0};
    if (strcmp(m.arch, "qwen35") == 0) {
        int64_t inner = 0;
        const char *keys[] = {"ssm.group_count", "ssm.time_step_rank", "ssm.state_size",
                              "ssm.inner_size"};
        int64_t *vals[] = {&vh.nk, &vh.nv, &vh.dk, &inner};
        for (int k = 0; k < 4; k++) {
            snprintf(key, sizeof key, "%s.%s", m.arch, keys[k]);
            if ((rc = rp_gguf_get_i64(g, key, vals[k], err)))
                goto fail;
        }
        if (vh.nk <= 0 || vh.nv % vh.nk || inner % vh.nv) {
            rc = rp_err_set(err, RP_ERR_INVALID, "%s: bad ssm head counts", path);
            goto fail;
        }
        vh.dv = inner / vh.nv;
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
        if (!hf_name(m.arch, gname, name, sizeof name))
            snprintf(name, sizeof name, "%s", gname);
        int dt = rp_gguf_model_dtype(gt.type);
        if (dt < 0) {
            rc = rp_err_set(err, RP_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has ggml type %s (%u), which rapid does not run "
                            "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
                            "Q5_K, Q6_K, MXFP4)",
                            path, gname, rp_gguf_model_type_name(gt.type), gt.type);
            goto fail;
        }
        if (!gt.data || gt.n_dims < 1 || gt.n_dims > 3) {
            rc = rp_err_set(err, RP_ERR_INVALID, "%s: tensor '%s' has no data or %d dims", path,
                            gname, gt.n_dims);
            goto fail;
        }
        rp_tensor t = {.dtype = (rp_dtype)dt, .n_dims = gt.n_dims, .data = gt.data,
                       .n_bytes = (size_t)gt.n_bytes};
        for (int d = 0; d < gt.n_dims; d++) /* ggml ne[0] is the row: reversed */
            t.shape[d] = gt.dims[gt.n_dims - 1 - d];
        if (strstr(name, ".conv.conv.weight") && gt.n_dims == 2) { /* squeezed [C][K] */
            t.n_dims = 3;
            t.shape[2] = t.shape[1];
            t.shape[1] = 1;
        }
        if (gt.n_dims == 3 && !strstr(name, "switch_mlp") && !strstr(name, ".mlp.experts.")) {
            rc = rp_err_set(err, RP_ERR_UNSUPPORTED, "%s: 3-D tensor '%s' is not one rapid maps",
                            path, gname);
            goto fail;
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
                goto fail_owned;
            }
            owned = unpermute(t.data, rows, rb, heads);
            if (!owned) {
                rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
                goto fail_owned;
            }
            t.data = owned;
        }
        if (t.dtype == RP_DT_MXFP4) {
            void *re = mxfp4_from_ggml(t.data, t.n_bytes);
            if (!re) {
                rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
                goto fail_owned;
            }
            rp_free(owned);
            t.data = owned = re;
        }
        if (strcmp(m.arch, "qwen35") == 0 && (rc = qwen35_tensor(&vh, name, &t, &owned, err))) {
            rc = rp_err_wrap(err, "%s", path);
            goto fail_owned;
        }
        if (is_gemma_norm(m.arch, name)) {
            if (t.dtype != RP_DT_F32 || t.n_dims != 1) {
                rc = rp_err_set(err, RP_ERR_INVALID, "%s: norm '%s' should be 1-D F32", path,
                                gname);
                goto fail_owned;
            }
            void *re = minus_one(&t);
            if (!re) {
                rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
                goto fail_owned;
            }
            rp_free(owned);
            t.data = owned = re;
        }
        if ((rc = rp_st_add(st, name, rp_gguf_model_type_name(gt.type), 1, &t, owned, err)))
            goto fail; /* it freed owned */
        continue;
    fail_owned:
        rp_free(owned);
        goto fail;
    }
    if ((rc = rp_st_finish(st, err)))
        goto fail;
    if ((rc = make_config(&m, st, rp_st_find(st, "lm_head.weight") == NULL, config, err)))
        goto fail;
    *out = st;
    return RP_OK;
fail:
    rp_st_close(st);
    return rc;
}
