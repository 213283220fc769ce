/* tests/unit/model/gguf_writer.c - a GGUF v3 writer for test model files (see gguf_writer.h). */
#include "gguf_writer.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "backend/quant.h"
#include "base/alloc.h"
#include "base/file.h"
#include "base/half.h"
#include "model/gguf_model.h"
#include "model/safetensors.h"

#define ALIGN 32

static void w_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void w_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void w_str(FILE *f, const char *s)
{
    w_u64(f, strlen(s));
    fwrite(s, 1, strlen(s), f);
}

/* metadata values: type ids from the GGUF spec */
static void kv_u32(FILE *f, const char *k, uint32_t v)
{
    w_str(f, k);
    w_u32(f, 4);
    w_u32(f, v);
}
static void kv_f32(FILE *f, const char *k, float v)
{
    w_str(f, k);
    w_u32(f, 6);
    fwrite(&v, 4, 1, f);
}
static void kv_str(FILE *f, const char *k, const char *v)
{
    w_str(f, k);
    w_u32(f, 8);
    w_str(f, v);
}

#define MAX_STACK 64

typedef struct out_t {
    char name[128];
    const rp_st_tensor *src;
    const rp_st_tensor *stack[MAX_STACK]; /* experts stacked into one 3-D tensor (n_stack) */
    int n_stack;
    rp_dtype dt;     /* stored type */
    int permute;     /* heads to un-interleave by, 0: none */
    float shift;     /* added to every value (Gemma 3 norms: 1) */
    rp_st_tensor own; /* a reshaped view of the source (LFM2's conv [C][1][K] -> [C][K]) */
    int neg_exp;      /* qwen35 A_log: stored as -exp(A_log) */
    /* gpt-oss experts from transformers' layout (1 gate / 2 up of gate_up [E][D][2I],
     * 3 down [E][I][D], all transposed to [E][out][in]; 4 / 5 gate / up of the [E][2I]
     * bias), from full (the source in f32) */
    int kind;
    float *full;
    /* qwen35 value heads, grouped -> tiled: rows [vfirst, vfirst + nv * vhd) (vhd > 0), or
     * columns in units of chd (chd > 0) */
    int64_t vfirst, vhd, chd, nk, nv;
    uint64_t offset; /* in the data section */
    size_t n_bytes;
} out_t;

typedef struct name_map {
    const char *hf, *gguf;
} name_map;

static const name_map k_gemma3[] = {{"pre_feedforward_layernorm", "ffn_norm"},
                                    {"post_attention_layernorm", "post_attention_norm"},
                                    {"post_feedforward_layernorm", "post_ffw_norm"}};
static const name_map k_qwen3moe[] = {{"mlp.gate", "ffn_gate_inp"}};
static const name_map k_phi3[] = {{"self_attn.qkv_proj", "attn_qkv"},
                                  {"mlp.gate_up_proj", "ffn_up"}};
static const name_map k_lfm2[] = {
    {"operator_norm", "attn_norm"},           {"ffn_norm", "ffn_norm"},
    {"conv.conv", "shortconv.conv"},          {"conv.in_proj", "shortconv.in_proj"},
    {"conv.out_proj", "shortconv.out_proj"},  {"self_attn.out_proj", "attn_output"},
    {"self_attn.q_layernorm", "attn_q_norm"}, {"self_attn.k_layernorm", "attn_k_norm"},
    {"feed_forward.w1", "ffn_gate"},          {"feed_forward.w3", "ffn_up"},
    {"feed_forward.w2", "ffn_down"}};
static const name_map k_qwen35[] = {
    {"post_attention_layernorm", "post_attention_norm"},
    {"linear_attn.in_proj_qkv", "attn_qkv"}, {"linear_attn.in_proj_z", "attn_gate"},
    {"linear_attn.in_proj_a", "ssm_alpha"},  {"linear_attn.in_proj_b", "ssm_beta"},
    {"linear_attn.out_proj", "ssm_out"},     {"linear_attn.norm", "ssm_norm"},
    {"linear_attn.conv1d", "ssm_conv1d"}};
static const name_map k_gptoss[] = {{"post_attention_layernorm", "post_attention_norm"},
                                    {"mlp.router", "ffn_gate_inp"}};
static const name_map k_common[] = {
    {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
    {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
    {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"}};

static const char *lookup(const name_map *t, size_t n, const char *rest, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i].hf) == len && strncmp(rest, t[i].hf, len) == 0)
            return t[i].gguf;
    return NULL;
}

/* HF name -> GGUF name in llama.cpp's naming for arch. Qwen3-MoE experts
 * (mlp.experts.E.P.weight) go to the stack ffn_P_exps (*expert = E), else *expert = -1. */
static int gguf_name(const char *arch, const char *hf, char *out, size_t n, int *expert)
{
    static const char *const top[][2] = {{"model.embed_tokens.weight", "token_embd.weight"},
                                         {"model.norm.weight", "output_norm.weight"},
                                         {"lm_head.weight", "output.weight"},
                                         {"model.embedding_norm.weight", "token_embd_norm.weight"}};
    *expert = -1;
    for (size_t i = 0; i < 4; i++)
        if (strcmp(hf, top[i][0]) == 0) {
            snprintf(out, n, "%s", top[i][1]);
            return 0;
        }
    int layer, len = 0, e, elen = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &len) != 1 || !len)
        return -1;
    const char *rest = hf + len, *dot = strrchr(rest, '.');
    if (!dot)
        return -1;
    if (sscanf(rest, "mlp.experts.%d.%n", &e, &elen) == 1 && elen) {
        const char *proj = rest + elen;
        const char *stack = strncmp(proj, "gate_proj.", 10) == 0 ? "ffn_gate_exps"
                            : strncmp(proj, "up_proj.", 8) == 0  ? "ffn_up_exps"
                            : strncmp(proj, "down_proj.", 10) == 0 ? "ffn_down_exps"
                                                                   : NULL;
        if (!stack)
            return -1;
        *expert = e;
        snprintf(out, n, "blk.%d.%s%s", layer, stack, dot);
        return 0;
    }
    size_t bl = (size_t)(dot - rest);
    const char *g = NULL;
    if (strcmp(arch, "gemma3") == 0)
        g = lookup(k_gemma3, RP_ARRAY_LEN(k_gemma3), rest, bl);
    else if (strcmp(arch, "qwen3moe") == 0)
        g = lookup(k_qwen3moe, RP_ARRAY_LEN(k_qwen3moe), rest, bl);
    else if (strcmp(arch, "phi3") == 0)
        g = lookup(k_phi3, RP_ARRAY_LEN(k_phi3), rest, bl);
    else if (strcmp(arch, "lfm2") == 0)
        g = lookup(k_lfm2, RP_ARRAY_LEN(k_lfm2), rest, bl);
    else if (strcmp(arch, "gpt-oss") == 0) {
        if (strcmp(rest, "self_attn.sinks") == 0) {
            snprintf(out, n, "blk.%d.attn_sinks.weight", layer);
            return 0;
        }
        g = lookup(k_gptoss, RP_ARRAY_LEN(k_gptoss), rest, bl);
    } else if (strcmp(arch, "qwen35") == 0) {
        if (strcmp(rest, "linear_attn.A_log") == 0) { /* llama.cpp: no suffix */
            snprintf(out, n, "blk.%d.ssm_a", layer);
            return 0;
        }
        if (strcmp(rest, "linear_attn.dt_bias") == 0) {
            snprintf(out, n, "blk.%d.ssm_dt.bias", layer);
            return 0;
        }
        g = lookup(k_qwen35, RP_ARRAY_LEN(k_qwen35), rest, bl);
    }
    if (!g)
        g = lookup(k_common, RP_ARRAY_LEN(k_common), rest, bl);
    if (!g)
        return -1;
    snprintf(out, n, "blk.%d.%s%s", layer, g, dot);
    return 0;
}

/* Row r of the stored tensor (GGUF order) as f32, from the HF tensor(s). */
static void stored_row(const out_t *o, int64_t r, float *row)
{
    const rp_tensor *t = &o->src->t;
    int64_t src = r;
    if (o->kind) { /* gpt-oss: t is the output's [rows per expert][cols] */
        int64_t R = t->shape[0], C = t->shape[1], e = r / R, i = r % R;
        for (int64_t c = 0; c < C; c++)
            row[c] = o->kind <= 2   ? o->full[(e * C + c) * 2 * R + 2 * i + (o->kind - 1)]
                     : o->kind == 3 ? o->full[(e * C + c) * R + i]
                                    : o->full[r * 2 * C + 2 * c + (o->kind - 4)];
        return;
    }
    if (o->n_stack) { /* rows of expert 0, then expert 1, ... */
        t = &o->stack[r / t->shape[0]]->t;
        src = r % t->shape[0];
    }
    if (o->permute) {
        int64_t rows = t->shape[0], hd = rows / o->permute, half = hd / 2;
        int64_t h = r / hd, j = r % hd, i = j / 2, a = j % 2;
        src = h * hd + a * half + i;
    }
    int64_t rr = r - o->vfirst, per = o->nk ? o->nv / o->nk : 1;
    if (o->vhd && rr >= 0 && rr < o->nv * o->vhd) { /* GGUF head g = j * nk + k: HF k * per + j */
        int64_t g = rr / o->vhd, j = g / o->nk, k = g % o->nk;
        src = o->vfirst + (k * per + j) * o->vhd + rr % o->vhd;
    }
    if (t->n_dims == 1) {
        float all[16384];
        rp_tensor_to_f32(t, all, t->shape[0]);
        row[0] = (o->neg_exp ? -expf(all[src]) : all[src]) + o->shift;
    } else {
        rp_tensor_row_f32(t, src, row);
        if (o->chd) {
            float tmp[8192];
            memcpy(tmp, row, sizeof(float) * (size_t)t->shape[1]);
            for (int64_t g = 0; g < o->nv; g++) {
                int64_t j = g / o->nk, k = g % o->nk;
                memcpy(row + g * o->chd, tmp + (k * per + j) * o->chd, sizeof(float) * (size_t)o->chd);
            }
        }
    }
}

/* ggml's MXFP4 for a row of n (n % 32 == 0): per 32 values the E8M0 scale byte s (scale
 * 2^(s - 127), the smallest with max |x| / scale <= 6), then value j's e2m1 nibble in the low
 * half of byte j and value j + 16's in the high half. deq (may be NULL) gets the values the
 * bytes decode to. */
static void mxfp4_row(const float *x, int64_t n, uint8_t *out, float *deq)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int64_t b = 0; b < n / 32; b++) {
        const float *v = x + b * 32;
        uint8_t *blk = out + b * 17;
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
        int e = amax > 0 ? (int)ceilf(log2f(amax / 6.0f)) + 127 : 0;
        e = e < 0 ? 0 : e > 254 ? 254 : e;
        float scale = ldexpf(1.0f, e - 127);
        blk[0] = (uint8_t)e;
        memset(blk + 1, 0, 16);
        for (int i = 0; i < 32; i++) {
            float a = fabsf(v[i]) / scale;
            int best = 0;
            for (int k = 1; k < 8; k++)
                if (fabsf(a - mag[k]) < fabsf(a - mag[best]))
                    best = k;
            int nib = best | (v[i] < 0 && best ? 8 : 0);
            blk[1 + i % 16] |= (uint8_t)(i < 16 ? nib : nib << 4);
            if (deq)
                deq[b * 32 + i] = (nib & 8 ? -1.0f : 1.0f) * mag[best] * scale;
        }
    }
}

static int write_tensor(FILE *f, const out_t *o, rp_dtype quant_as)
{
    const rp_tensor *t = &o->src->t;
    if (t->n_dims == 1) {
        for (int64_t i = 0; i < t->shape[0]; i++) {
            float v;
            stored_row(o, i, &v);
            fwrite(&v, 4, 1, f);
        }
        return 0;
    }
    int64_t rows = t->shape[0] * (o->n_stack ? o->n_stack : 1), cols = t->shape[1];
    float *row = rp_alloc(sizeof(float) * (size_t)cols);
    void *q = rp_alloc(rp_dtype_row_bytes(RP_DT_F32, cols));
    for (int64_t r = 0; r < rows; r++) {
        stored_row(o, r, row);
        if (quant_as == RP_DT_MXFP4 && o->dt != RP_DT_MXFP4) { /* MXFP4 twin */
            mxfp4_row(row, cols, q, row);
        } else if (quant_as != o->dt && !rp_dtype_is_quant(quant_as)) { /* f16/bf16 twin */
            for (int64_t c = 0; c < cols; c++)
                row[c] = quant_as == RP_DT_F16 ? rp_f16_to_f32(rp_f32_to_f16(row[c]))
                                               : rp_bf16_to_f32(rp_f32_to_bf16(row[c]));
        } else if (quant_as != o->dt) { /* dequant twin: values through the quantized type */
            rp_quant_row(quant_as, row, cols, q);
            rp_tensor one = {.dtype = quant_as, .n_dims = 2, .shape = {1, cols}, .data = q};
            rp_quant_dequant_row(&one, 0, row);
        }
        switch (o->dt) {
        case RP_DT_F32: fwrite(row, 4, (size_t)cols, f); break;
        case RP_DT_F16:
        case RP_DT_BF16:
            for (int64_t c = 0; c < cols; c++) {
                uint16_t h = o->dt == RP_DT_F16 ? rp_f32_to_f16(row[c]) : rp_f32_to_bf16(row[c]);
                fwrite(&h, 2, 1, f);
            }
            break;
        case RP_DT_MXFP4:
            mxfp4_row(row, cols, q, NULL);
            fwrite(q, 1, rp_dtype_row_bytes(o->dt, cols), f);
            break;
        default:
            rp_quant_row(o->dt, row, cols, q);
            fwrite(q, 1, rp_dtype_row_bytes(o->dt, cols), f);
            break;
        }
    }
    rp_free(row);
    rp_free(q);
    return 0;
}

static int cfg_int(json_t *c, const char *k, int def)
{
    json_t *v = json_object_get(c, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* The placeholder SentencePiece vocabulary of gguf_writer.h (opts->vocab): n tokens. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 }; /* GGUF token types */

static int vocab_token(int i, char *out, size_t n)
{
    static const char *const special[] = {"<unk>", "<s>", "</s>"};
    if (i < 3) {
        snprintf(out, n, "%s", special[i]);
        return i ? TT_CONTROL : TT_UNKNOWN;
    }
    if (i < 3 + 256) {
        snprintf(out, n, "<0x%02X>", i - 3);
        return TT_BYTE;
    }
    snprintf(out, n, "<filler_%d>", i);
    return TT_NORMAL;
}

static int write_vocab(FILE *m, int n)
{
    char tok[32];
    kv_str(m, "tokenizer.ggml.model", "llama");
    w_str(m, "tokenizer.ggml.tokens");
    w_u32(m, 9); /* array */
    w_u32(m, 8); /* of string */
    w_u64(m, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        vocab_token(i, tok, sizeof tok);
        w_str(m, tok);
    }
    w_str(m, "tokenizer.ggml.scores");
    w_u32(m, 9);
    w_u32(m, 6); /* of f32 */
    w_u64(m, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        float s = vocab_token(i, tok, sizeof tok) == TT_NORMAL ? -(float)i : 0.0f;
        fwrite(&s, 4, 1, m);
    }
    w_str(m, "tokenizer.ggml.token_type");
    w_u32(m, 9);
    w_u32(m, 5); /* of i32 */
    w_u64(m, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        int32_t t = vocab_token(i, tok, sizeof tok);
        fwrite(&t, 4, 1, m);
    }
    kv_u32(m, "tokenizer.ggml.unknown_token_id", 0);
    return 5; /* keys written */
}

static void kv_bool_arr(FILE *f, const char *k, const uint8_t *v, int n)
{
    w_str(f, k);
    w_u32(f, 9); /* array */
    w_u32(f, 7); /* of bool */
    w_u64(f, (uint64_t)n);
    fwrite(v, 1, (size_t)n, f);
}

/* llama.cpp's architecture name for a config.json; NULL when it has none we write. */
static const char *gguf_arch(const char *hf)
{
    static const char *const m[][2] = {
        {"Qwen3MoeForCausalLM", "qwen3moe"}, {"Qwen3ForCausalLM", "qwen3"},
        {"Qwen2ForCausalLM", "qwen2"},       {"Gemma3ForCausalLM", "gemma3"},
        {"Phi3ForCausalLM", "phi3"},         {"LlamaForCausalLM", "llama"},
        {"Lfm2ForCausalLM", "lfm2"},         {"Qwen3_5ForCausalLM", "qwen35"},
        {"GptOssForCausalLM", "gpt-oss"},
        {"MistralForCausalLM", "llama"}};
    for (size_t i = 0; hf && i < RP_ARRAY_LEN(m); i++)
        if (strcmp(hf, m[i][0]) == 0)
            return m[i][1];
    return NULL;
}

/* The llama3 rope scaling of config rope parameters rp as llama.cpp's converter stores it:
 * rope_freqs[i] = the divisor of frequency i. */
static void llama3_factors(json_t *rp, int rot, float theta, float *out)
{
    double factor = json_number_value(json_object_get(rp, "factor"));
    double lo = json_number_value(json_object_get(rp, "low_freq_factor"));
    double hi = json_number_value(json_object_get(rp, "high_freq_factor"));
    double old = json_number_value(json_object_get(rp, "original_max_position_embeddings"));
    double lo_wl = old / lo, hi_wl = old / hi;
    for (int i = 0; i < rot / 2; i++) {
        double freq = 1.0 / pow(theta, 2.0 * i / rot), wl = 2 * M_PI / freq;
        if (wl < hi_wl) {
            out[i] = 1.0f;
        } else if (wl > lo_wl) {
            out[i] = (float)factor;
        } else {
            double smooth = (old / wl - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

int gguf_write_from_dir(const char *dir, rp_dtype dt, int dequant_twin, const char *out_path)
{
    gguf_opts o = {0};
    return gguf_write_ex(dir, dt, dequant_twin, out_path, &o);
}

int gguf_write_ex(const char *dir, rp_dtype dt, int dequant_twin, const char *out_path,
                  const gguf_opts *opts)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    rp_st *st = NULL;
    if (!c || rp_st_open(dir, &st, NULL)) {
        fprintf(stderr, "gguf_writer: cannot read %s\n", dir);
        json_decref(c);
        return -1;
    }
    const char *hf = json_string_value(json_array_get(json_object_get(c, "architectures"), 0));
    const char *arch = opts->arch ? opts->arch : gguf_arch(hf);
    if (!arch) {
        fprintf(stderr, "gguf_writer: no GGUF architecture for %s\n", hf ? hf : "(none)");
        rp_st_close(st);
        json_decref(c);
        return -1;
    }
    int n_vocab = cfg_int(c, "vocab_size", 0);
    if (opts->vocab && n_vocab < 16) {
        fprintf(stderr, "gguf_writer: a vocabulary needs vocab_size >= 16 (%d)\n", n_vocab);
        rp_st_close(st);
        json_decref(c);
        return -1;
    }
    int dim = cfg_int(c, "hidden_size", 0), heads = cfg_int(c, "num_attention_heads", 0);
    int kvh = cfg_int(c, "num_key_value_heads", heads);
    int hd = cfg_int(c, "head_dim", dim / heads), n_layers = cfg_int(c, "num_hidden_layers", 0);
    json_t *rp = json_object_get(c, "rope_parameters");
    if (!json_is_object(rp))
        rp = c;
    json_t *rp_full = json_object_get(rp, "full_attention"); /* gemma3 */
    json_t *theta = json_object_get(rp_full ? rp_full : rp, "rope_theta");
    json_t *eps = json_object_get(c, "rms_norm_eps");
    if (!eps)
        eps = json_object_get(c, "norm_eps");
    json_t *partial = json_object_get(rp, "partial_rotary_factor");
    int rot = partial ? (int)(hd * json_number_value(partial)) : hd;
    const char *rope_type = json_string_value(json_object_get(rp, "rope_type"));
    int llama3 = rope_type && strcmp(rope_type, "llama3") == 0;
    int n = rp_st_count(st), k = 0;
    out_t *o = rp_calloc((size_t)n * 2 + 3, sizeof *o);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const rp_st_tensor *t = rp_st_at(st, i);
        char name[128];
        int e, layer, len = 0;
        if (strcmp(arch, "gpt-oss") == 0 &&
            sscanf(t->name, "model.layers.%d.mlp.experts.%n", &layer, &len) == 1 && len) {
            const char *rest = t->name + len;
            int64_t E = t->t.shape[0], a = t->t.n_dims > 1 ? t->t.shape[1] : 0,
                    b = t->t.n_dims > 2 ? t->t.shape[2] : 0;
            struct {
                const char *src, *dst;
                int kind;
                int64_t rows, cols, stack;
            } parts[] = {{"gate_up_proj", "ffn_gate_exps.weight", 1, b / 2, a, E},
                         {"gate_up_proj", "ffn_up_exps.weight", 2, b / 2, a, E},
                         {"down_proj", "ffn_down_exps.weight", 3, b, a, E},
                         {"gate_up_proj_bias", "ffn_gate_exps.bias", 4, E, a / 2, 0},
                         {"gate_up_proj_bias", "ffn_up_exps.bias", 5, E, a / 2, 0},
                         {"down_proj_bias", "ffn_down_exps.bias", 0, 0, 0, 0}};
            int any = 0;
            for (size_t j = 0; j < RP_ARRAY_LEN(parts); j++) {
                if (strcmp(rest, parts[j].src) != 0)
                    continue;
                out_t *x = &o[k++];
                snprintf(x->name, sizeof x->name, "blk.%d.%s", layer, parts[j].dst);
                x->src = t;
                any = 1;
                if (!parts[j].kind)
                    continue;
                x->kind = parts[j].kind;
                x->full = rp_alloc(t->t.n_bytes);
                rp_tensor_to_f32(&t->t, x->full, (int64_t)(t->t.n_bytes / 4));
                x->own = *t;
                x->own.t.n_dims = 2;
                x->own.t.shape[0] = parts[j].rows;
                x->own.t.shape[1] = parts[j].cols;
                x->own.t.shape[2] = 0;
                x->n_stack = (int)parts[j].stack;
                x->src = &x->own;
            }
            if (any)
                continue;
        }
        if (gguf_name(arch, t->name, name, sizeof name, &e)) {
            fprintf(stderr, "gguf_writer: no GGUF name for %s\n", t->name);
            return -1;
        }
        out_t *x = NULL;
        if (e >= 0) { /* an expert: into its stack */
            for (int j = 0; j < k && !x; j++)
                if (strcmp(o[j].name, name) == 0)
                    x = &o[j];
            if (!x) {
                x = &o[k++];
                snprintf(x->name, sizeof x->name, "%s", name);
                x->src = t;
            }
            if (e >= MAX_STACK)
                return -1;
            x->stack[e] = t;
            x->n_stack = e + 1 > x->n_stack ? e + 1 : x->n_stack;
            continue;
        }
        x = &o[k++];
        snprintf(x->name, sizeof x->name, "%s", name);
        x->src = t;
        if (t->t.n_dims == 3 && t->t.shape[1] == 1) { /* conv kernels: llama.cpp squeezes */
            x->own = *t;
            x->own.t.n_dims = 2;
            x->own.t.shape[1] = t->t.shape[2];
            x->own.t.shape[2] = 0;
            x->src = &x->own;
        }
        size_t nl = strlen(t->name);
        int q35 = strcmp(arch, "qwen35") == 0;
        if ((strcmp(arch, "gemma3") == 0 || (q35 && !strstr(t->name, "linear_attn.norm."))) &&
            nl > 11 && strcmp(t->name + nl - 11, "norm.weight") == 0)
            x->shift = 1.0f;
        if (q35 && strstr(t->name, ".linear_attn.")) {
            int nk = cfg_int(c, "linear_num_key_heads", 0), nv = cfg_int(c, "linear_num_value_heads", 0);
            int dk = cfg_int(c, "linear_key_head_dim", 0), dv = cfg_int(c, "linear_value_head_dim", 0);
            x->nk = nk;
            x->nv = nv;
            x->neg_exp = strstr(t->name, ".A_log") != NULL;
            if (strstr(t->name, ".in_proj_qkv.") || strstr(t->name, ".conv1d."))
                x->vfirst = 2 * nk * dk, x->vhd = dv;
            else if (strstr(t->name, ".in_proj_z."))
                x->vhd = dv;
            else if (strstr(t->name, ".in_proj_a.") || strstr(t->name, ".in_proj_b.") ||
                     strstr(t->name, ".A_log") || strstr(t->name, ".dt_bias"))
                x->vhd = 1;
            else if (strstr(t->name, ".out_proj."))
                x->chd = dv;
        }
        if (strcmp(arch, "llama") == 0) {
            if (strstr(t->name, "self_attn.q_proj."))
                x->permute = heads;
            if (strstr(t->name, "self_attn.k_proj."))
                x->permute = kvh;
        }
    }
    float freqs[256];
    rp_tensor ft = {.dtype = RP_DT_F32, .n_dims = 1, .shape = {rot / 2}, .data = freqs,
                    .n_bytes = sizeof(float) * (size_t)(rot / 2)};
    rp_st_tensor fst = {.name = "rope_freqs.weight", .dtype = "F32", .known = 1, .t = ft};
    if (llama3) { /* llama.cpp keeps the llama3 scaling as a tensor */
        llama3_factors(rp, rot, theta ? (float)json_number_value(theta) : 10000.0f, freqs);
        snprintf(o[k].name, sizeof o[k].name, "rope_freqs.weight");
        o[k++].src = &fst;
    }
    int longrope = rope_type && strcmp(rope_type, "longrope") == 0;
    float lfac[128], sfac[128];
    rp_st_tensor lst = fst, sst = fst;
    if (longrope) { /* Phi-3: the LongRoPE factors as two tensors */
        for (int i = 0; i < rot / 2 && i < 128; i++) {
            lfac[i] = (float)json_number_value(json_array_get(json_object_get(rp, "long_factor"), (size_t)i));
            sfac[i] = (float)json_number_value(json_array_get(json_object_get(rp, "short_factor"), (size_t)i));
        }
        lst.name = "rope_factors_long.weight";
        lst.t.data = lfac;
        sst.name = "rope_factors_short.weight";
        sst.t.data = sfac;
        snprintf(o[k].name, sizeof o[k].name, "%s", lst.name);
        o[k++].src = &lst;
        snprintf(o[k].name, sizeof o[k].name, "%s", sst.name);
        o[k++].src = &sst;
    }
    for (int i = 0; i < k; i++) {
        const rp_tensor *t = &o[i].src->t;
        rp_dtype sd = RP_DT_F32;
        size_t nl = strlen(o[i].name);
        int weight = nl > 7 && strcmp(o[i].name + nl - 7, ".weight") == 0; /* biases: F32 */
        if (dt == RP_DT_MXFP4 && !(o[i].kind >= 1 && o[i].kind <= 3))
            weight = 0; /* MXFP4: the experts only, as gpt-oss is published */
        if (t->n_dims == 2 && weight && t->shape[1] % rp_dtype_block(dt) == 0)
            sd = dequant_twin ? RP_DT_F32 : dt;
        o[i].dt = sd;
        int64_t rows = t->n_dims == 2 ? t->shape[0] * (o[i].n_stack ? o[i].n_stack : 1) : 0;
        o[i].n_bytes = t->n_dims == 2 ? rp_dtype_row_bytes(sd, t->shape[1]) * (size_t)rows
                                      : (size_t)t->shape[0] * 4;
        o[i].offset = off;
        off += (o[i].n_bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    /* metadata into memory first: its count goes in the header */
    char *kvbuf = NULL;
    size_t kvlen = 0;
    FILE *m = open_memstream(&kvbuf, &kvlen);
    int n_kv = 0;
    char key[128];
    kv_str(m, "general.architecture", arch), n_kv++;
    kv_u32(m, "general.alignment", ALIGN), n_kv++;
    kv_str(m, "general.name", "rapid test model"), n_kv++;
#define KU(suffix, v)                                                                          \
    do {                                                                                       \
        snprintf(key, sizeof key, "%s.%s", arch, suffix);                                      \
        kv_u32(m, key, (uint32_t)(v));                                                         \
        n_kv++;                                                                                \
    } while (0)
#define KF(suffix, v)                                                                          \
    do {                                                                                       \
        snprintf(key, sizeof key, "%s.%s", arch, suffix);                                      \
        kv_f32(m, key, (float)(v));                                                            \
        n_kv++;                                                                                \
    } while (0)
    KU("context_length", cfg_int(c, "max_position_embeddings", 2048));
    KU("embedding_length", dim);
    KU("block_count", n_layers);
    KU("feed_forward_length", cfg_int(c, "intermediate_size", 0));
    KU("attention.head_count", heads);
    if (strcmp(arch, "lfm2") == 0) { /* per layer, 0 for the conv layers */
        json_t *lt = json_object_get(c, "layer_types");
        snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
        w_str(m, key);
        w_u32(m, 9);
        w_u32(m, 4);
        w_u64(m, (uint64_t)n_layers);
        for (int i = 0; i < n_layers; i++)
            w_u32(m, strcmp(json_string_value(json_array_get(lt, (size_t)i)) ?: "", "conv") ? (uint32_t)kvh : 0);
        n_kv++;
        KU("shortconv.l_cache", cfg_int(c, "conv_L_cache", 3));
    } else {
        KU("attention.head_count_kv", kvh);
    }
    KU("attention.key_length", hd);
    KU("attention.value_length", hd);
    KU("vocab_size", cfg_int(c, "vocab_size", 0));
    KF("rope.freq_base", theta ? json_number_value(theta) : 10000.0);
    KF("attention.layer_norm_rms_epsilon", eps ? json_number_value(eps) : 1e-6);
    if (rot != hd)
        KU("rope.dimension_count", rot);
    if (strcmp(arch, "qwen3moe") == 0) {
        KU("expert_count", cfg_int(c, "num_experts", cfg_int(c, "num_local_experts", 0)));
        KU("expert_used_count", cfg_int(c, "num_experts_per_tok", 0));
        KU("expert_feed_forward_length", cfg_int(c, "moe_intermediate_size", 0));
    }
    if (strcmp(arch, "qwen35") == 0) {
        int nv = cfg_int(c, "linear_num_value_heads", 0);
        KU("ssm.conv_kernel", cfg_int(c, "linear_conv_kernel_dim", 4));
        KU("ssm.state_size", cfg_int(c, "linear_key_head_dim", 0));
        KU("ssm.group_count", cfg_int(c, "linear_num_key_heads", 0));
        KU("ssm.time_step_rank", nv);
        KU("ssm.inner_size", nv * cfg_int(c, "linear_value_head_dim", 0));
        json_t *lt = json_object_get(c, "layer_types");
        int every = cfg_int(c, "full_attention_interval", 0);
        for (int i = 0; !every && i < n_layers; i++)
            if (strcmp(json_string_value(json_array_get(lt, (size_t)i)) ?: "", "full_attention") == 0)
                every = i + 1;
        KU("full_attention_interval", every ? every : 4);
    }
    if (longrope) {
        int orig = cfg_int(c, "original_max_position_embeddings",
                           (int)json_integer_value(json_object_get(rp, "original_max_position_embeddings")));
        double scale = (double)cfg_int(c, "max_position_embeddings", 2048) / orig;
        KU("rope.scaling.original_context_length", orig);
        KF("rope.scaling.attn_factor", scale <= 1 ? 1.0 : sqrt(1 + log(scale) / log((double)orig)));
    }
    if (strcmp(arch, "gpt-oss") == 0) {
        KU("expert_count", cfg_int(c, "num_local_experts", 0));
        KU("expert_used_count", cfg_int(c, "num_experts_per_tok", 0));
        KU("expert_feed_forward_length", cfg_int(c, "intermediate_size", 0));
    }
    if (json_is_string(json_object_get(rp, "rope_type")) && strcmp(rope_type, "yarn") == 0) {
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        kv_str(m, key, "yarn"), n_kv++;
        KF("rope.scaling.factor", json_number_value(json_object_get(rp, "factor")));
        KU("rope.scaling.original_context_length",
           (int)json_integer_value(json_object_get(rp, "original_max_position_embeddings")));
    }
    if (cfg_int(c, "sliding_window", 0) > 0)
        KU("attention.sliding_window", cfg_int(c, "sliding_window", 0));
    if (strcmp(arch, "gemma3") == 0 && opts->gemma_pattern) {
        json_t *lt = json_object_get(c, "layer_types");
        uint8_t flags[256] = {0};
        for (int i = 0; i < n_layers && i < 256; i++)
            flags[i] = strcmp(json_string_value(json_array_get(lt, (size_t)i)) ?: "",
                              "sliding_attention") == 0;
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
        kv_bool_arr(m, key, flags, n_layers), n_kv++;
    }
#undef KU
#undef KF
    if (opts->vocab)
        n_kv += write_vocab(m, n_vocab);
    kv_u32(m, "tokenizer.ggml.bos_token_id",
           opts->vocab ? 1 : (uint32_t)cfg_int(c, "bos_token_id", 1)), n_kv++;
    kv_u32(m, "tokenizer.ggml.eos_token_id",
           opts->vocab ? 2 : (uint32_t)cfg_int(c, "eos_token_id", 2)), n_kv++;
    fclose(m);
    FILE *f = fopen(out_path, "wb");
    if (!f)
        return -1;
    fwrite("GGUF", 1, 4, f);
    w_u32(f, 3);
    w_u64(f, (uint64_t)k);
    w_u64(f, (uint64_t)n_kv);
    fwrite(kvbuf, 1, kvlen, f);
    free(kvbuf); /* open_memstream's buffer is libc's */
    for (int i = 0; i < k; i++) {
        const rp_tensor *t = &o[i].src->t;
        w_str(f, o[i].name);
        w_u32(f, (uint32_t)(t->n_dims + (o[i].n_stack > 0)));
        if (t->n_dims == 2) {
            w_u64(f, (uint64_t)t->shape[1]);
            w_u64(f, (uint64_t)t->shape[0]);
            if (o[i].n_stack)
                w_u64(f, (uint64_t)o[i].n_stack);
        } else {
            w_u64(f, (uint64_t)t->shape[0]);
        }
        w_u32(f, rp_gguf_model_ggml_type(o[i].dt));
        w_u64(f, o[i].offset);
    }
    long pos = ftell(f);
    for (; pos % ALIGN; pos++)
        fputc(0, f);
    for (int i = 0; i < k; i++) {
        const rp_tensor *t = &o[i].src->t;
        size_t nl = strlen(o[i].name);
        int weight = nl > 7 && strcmp(o[i].name + nl - 7, ".weight") == 0 &&
                     !(dt == RP_DT_MXFP4 && !(o[i].kind >= 1 && o[i].kind <= 3));
        write_tensor(f, &o[i],
                     dequant_twin && weight && t->n_dims == 2 && t->shape[1] % rp_dtype_block(dt) == 0
                         ? dt
                         : o[i].dt);
        for (size_t q = o[i].n_bytes; q % ALIGN; q++)
            fputc(0, f);
    }
    int rc = fclose(f) == 0 ? 0 : -1;
    for (int i = 0; i < k; i++)
        rp_free(o[i].full);
    rp_free(o);
    rp_st_close(st);
    json_decref(c);
    return rc;
}
