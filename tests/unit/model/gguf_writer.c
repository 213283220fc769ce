/* tests/unit/model/gguf_writer.c - a GGUF v3 writer for test model files (see gguf_writer.h). */
#include "gguf_writer.h"

#include <jansson.h>
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

typedef struct out_t {
    char name[128];
    const rp_st_tensor *src;
    rp_dtype dt;     /* stored type */
    int permute;     /* heads to un-interleave by, 0: none */
    uint64_t offset; /* in the data section */
    size_t n_bytes;
} out_t;

static int gguf_name(const char *hf, char *out, size_t n)
{
    static const char *const top[][2] = {{"model.embed_tokens.weight", "token_embd.weight"},
                                         {"model.norm.weight", "output_norm.weight"},
                                         {"lm_head.weight", "output.weight"}};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(hf, top[i][0]) == 0) {
            snprintf(out, n, "%s", top[i][1]);
            return 0;
        }
    static const char *const blk[][2] = {
        {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
        {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
        {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
        {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"}};
    int layer, len = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &len) != 1 || !len)
        return -1;
    const char *rest = hf + len, *dot = strrchr(rest, '.');
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++)
        if (dot && strlen(blk[i][0]) == (size_t)(dot - rest) &&
            strncmp(rest, blk[i][0], (size_t)(dot - rest)) == 0) {
            snprintf(out, n, "blk.%d.%s%s", layer, blk[i][1], dot);
            return 0;
        }
    return -1;
}

/* Row r of the stored tensor (GGUF order) as f32, from the HF tensor. */
static void stored_row(const out_t *o, int64_t r, float *row)
{
    const rp_tensor *t = &o->src->t;
    int64_t src = r;
    if (o->permute) {
        int64_t rows = t->shape[0], hd = rows / o->permute, half = hd / 2;
        int64_t h = r / hd, j = r % hd, i = j / 2, a = j % 2;
        src = h * hd + a * half + i;
    }
    if (t->n_dims == 1) {
        float all[16384];
        rp_tensor_to_f32(t, all, t->shape[0]);
        row[0] = all[src];
    } else {
        rp_tensor_row_f32(t, src, row);
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
    int64_t rows = t->shape[0], cols = t->shape[1];
    float *row = rp_alloc(sizeof(float) * (size_t)cols);
    void *q = rp_alloc(rp_dtype_row_bytes(RP_DT_F32, cols));
    for (int64_t r = 0; r < rows; r++) {
        stored_row(o, r, row);
        if (quant_as != o->dt && !rp_dtype_is_quant(quant_as)) { /* f16/bf16 twin */
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

int gguf_write_from_dir(const char *dir, rp_dtype dt, int dequant_twin, const char *out_path)
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
    const char *arch = hf && strstr(hf, "Qwen3") ? "qwen3" : hf && strstr(hf, "Qwen2") ? "qwen2"
                                                                                       : "llama";
    int dim = cfg_int(c, "hidden_size", 0), heads = cfg_int(c, "num_attention_heads", 0);
    int kvh = cfg_int(c, "num_key_value_heads", heads);
    int hd = cfg_int(c, "head_dim", dim / heads);
    json_t *rp = json_object_get(c, "rope_parameters");
    json_t *theta = json_object_get(json_is_object(rp) ? rp : c, "rope_theta");
    json_t *eps = json_object_get(c, "rms_norm_eps");

    int n = rp_st_count(st);
    out_t *o = rp_calloc((size_t)n, sizeof *o);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const rp_st_tensor *t = rp_st_at(st, i);
        o[i].src = t;
        if (gguf_name(t->name, o[i].name, sizeof o[i].name)) {
            fprintf(stderr, "gguf_writer: no GGUF name for %s\n", t->name);
            return -1;
        }
        rp_dtype sd = RP_DT_F32;
        if (t->t.n_dims == 2 && t->t.shape[1] % rp_dtype_block(dt) == 0)
            sd = dequant_twin ? RP_DT_F32 : dt;
        o[i].dt = sd;
        if (strcmp(arch, "llama") == 0) {
            if (strstr(t->name, "self_attn.q_proj."))
                o[i].permute = heads;
            if (strstr(t->name, "self_attn.k_proj."))
                o[i].permute = kvh;
        }
        int64_t nel = t->t.n_dims == 2 ? t->t.shape[0] * t->t.shape[1] : t->t.shape[0];
        o[i].n_bytes = t->t.n_dims == 2 ? rp_dtype_row_bytes(sd, t->t.shape[1]) *
                                              (size_t)t->t.shape[0]
                                        : (size_t)nel * 4;
        o[i].offset = off;
        off += (o[i].n_bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f)
        return -1;
    char k[128];
    fwrite("GGUF", 1, 4, f);
    w_u32(f, 3);
    w_u64(f, (uint64_t)n);
    w_u64(f, 15);
    kv_str(f, "general.architecture", arch);
    kv_u32(f, "general.alignment", ALIGN);
    kv_str(f, "general.name", "rapid test model");
#define KU(suffix, v)                                                                          \
    snprintf(k, sizeof k, "%s.%s", arch, suffix);                                              \
    kv_u32(f, k, (uint32_t)(v));
    KU("context_length", cfg_int(c, "max_position_embeddings", 2048));
    KU("embedding_length", dim);
    KU("block_count", cfg_int(c, "num_hidden_layers", 0));
    KU("feed_forward_length", cfg_int(c, "intermediate_size", 0));
    KU("attention.head_count", heads);
    KU("attention.head_count_kv", kvh);
    KU("attention.key_length", hd);
    KU("vocab_size", cfg_int(c, "vocab_size", 0));
#undef KU
    snprintf(k, sizeof k, "%s.rope.freq_base", arch);
    kv_f32(f, k, theta ? (float)json_number_value(theta) : 10000.0f);
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    kv_f32(f, k, eps ? (float)json_number_value(eps) : 1e-6f);
    kv_u32(f, "tokenizer.ggml.bos_token_id", (uint32_t)cfg_int(c, "bos_token_id", 1));
    kv_u32(f, "tokenizer.ggml.eos_token_id", (uint32_t)cfg_int(c, "eos_token_id", 2));
    for (int i = 0; i < n; i++) {
        const rp_tensor *t = &o[i].src->t;
        w_str(f, o[i].name);
        w_u32(f, (uint32_t)t->n_dims);
        if (t->n_dims == 2) {
            w_u64(f, (uint64_t)t->shape[1]);
            w_u64(f, (uint64_t)t->shape[0]);
        } else {
            w_u64(f, (uint64_t)t->shape[0]);
        }
        w_u32(f, rp_gguf_model_ggml_type(o[i].dt));
        w_u64(f, o[i].offset);
    }
    long pos = ftell(f);
    for (; pos % ALIGN; pos++)
        fputc(0, f);
    for (int i = 0; i < n; i++) {
        write_tensor(f, &o[i], dequant_twin && o[i].src->t.n_dims == 2 &&
                                       o[i].src->t.shape[1] % rp_dtype_block(dt) == 0
                                   ? dt
                                   : o[i].dt);
        for (size_t p = o[i].n_bytes; p % ALIGN; p++)
            fputc(0, f);
    }
    int rc = fclose(f) == 0 ? 0 : -1;
    rp_free(o);
    rp_st_close(st);
    json_decref(c);
    return rc;
}
