/* tests/unit/model/quant_model_test.c - quantized models end to end: MLX checkpoints written
 * by rp_quantize_dir (`rapid quantize`) and GGUF files written by tests/unit/model/gguf_writer.c
 * from the fixture checkpoints.
 *
 * Every quantized model is compared with its dequantized-f32 twin (the same weight values
 * stored as f32): with the plain-C reference kernels the logits agree to SAME_TOL (only f32
 * summation order differs), and with the int8 kernels (activations quantized per 32-run,
 * max error 1/254 of the run's max |x| per element) to INT8_TOL x max |logit|. GGUF F32 files
 * match transformers' logits like the safetensors checkpoints do (F32_TOL), which checks the
 * name mapping and the undoing of llama.cpp's Q/K permutation. K-quants need rows of 256:
 * they run on a random 256-wide model (no transformers reference; the twin is the reference).
 * Distances to transformers' logits of every type are logged for the record.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/quant.h"
#include "base/alloc.h"
#include "base/file.h"
#include "fixture_util.h"
#include "gguf_writer.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/safetensors.h"
#include <jansson.h>

#define F32_TOL 1e-3f
#define SAME_TOL 1e-4f
/* Of max |logit|, int8 kernels against the twin. Measured: 0.7-1.7% for 8-bit weights,
 * 1.5-4.4% for 4/5/6-bit ones (the activation error compounds with the weights'); for
 * comparison the weight quantization itself moves 4-bit logits by 10-25% of max |logit|
 * from transformers' (logged), so the int8 activations add a small fraction of that. */
#define INT8_TOL 0.06f



/* Compares a quantized model with its twin; returns max |diff| of the int8 path. */
static void check_pair(const char *what, const char *qpath, const char *twin,
                       const int32_t *ids, int n, int vocab, const float *hf)
{
    long len = (long)n * vocab;
    float *t = fixture_eval(twin, ids, n, vocab, 0, NULL);
    float *r = fixture_eval(qpath, ids, n, vocab, 1, NULL);
    float *q = fixture_eval(qpath, ids, n, vocab, 0, NULL);
    cr_assert(t && r && q, "%s: failed to run", what);
    float scale = max_abs(t, len), d_ref = max_abs_diff(r, t, len), d_q = max_abs_diff(q, t, len);
    cr_log_info("%-22s ref vs twin %.2e, int8 vs twin %.4f (%.2f%% of max |logit| %.2f)%s%.4f",
                what, d_ref, d_q, 100.0 * d_q / scale, scale, hf ? ", vs transformers " : "",
                hf ? max_abs_diff(q, hf, len) : 0.0f);
    cr_assert(d_ref <= SAME_TOL * (scale > 1 ? scale : 1), "%s: reference kernels %g from twin",
              what, d_ref);
    cr_assert(d_q <= INT8_TOL * scale, "%s: int8 kernels %g from twin (max |logit| %g)", what,
              d_q, scale);
    rp_free(t);
    rp_free(r);
    rp_free(q);
}

/* ---- MLX ------------------------------------------------------------------------------- */

typedef struct twin_ctx {
    const rp_st *st;
    int bits, gs;
} twin_ctx;

static int twin_write(void *vc, int i, FILE *fp)
{
    twin_ctx *c = vc;
    const rp_st_tensor *t = rp_st_at(c->st, i);
    size_t nl = strlen(t->name);
    if (t->t.n_dims != 2 || strcmp(t->name + nl - 7, ".weight") || t->t.shape[1] % c->gs)
        return fwrite(t->t.data, 1, t->t.n_bytes, fp) == t->t.n_bytes ? 0 : -1;
    int64_t cols = t->t.shape[1], ng = cols / c->gs;
    float row[4096], s[128], b[128];
    uint32_t q[4096];
    for (int64_t r = 0; r < t->t.shape[0]; r++) {
        rp_tensor_row_f32(&t->t, r, row);
        rp_quant_mlx_row(c->bits, c->gs, row, cols, q, s, b, 0);
        int per = 32 / c->bits;
        for (int64_t e = 0; e < cols; e++) {
            uint32_t v = (q[e / per] >> (c->bits * (e % per))) & ((1u << c->bits) - 1);
            row[e] = s[e / c->gs] * (float)v + b[e / c->gs];
        }
        (void)ng;
        fwrite(row, 4, (size_t)cols, fp);
    }
    return 0;
}

static void make_mlx_twin(const fixture *f, int bits, int gs, char *out)
{
    snprintf(out, 512, "/tmp/rp_mlxtwin_XXXXXX");
    cr_assert(mkdtemp(out));
    rp_st *st;
    cr_assert(rp_st_open(f->dir, &st, NULL) == RP_OK);
    int n = rp_st_count(st);
    rp_st_out *o = rp_calloc((size_t)n, sizeof *o);
    for (int i = 0; i < n; i++) {
        const rp_st_tensor *t = rp_st_at(st, i);
        o[i] = (rp_st_out){.name = t->name, .dtype = "F32", .n_dims = t->t.n_dims,
                           .n_bytes = t->t.n_bytes};
        memcpy(o[i].shape, t->t.shape, sizeof o[i].shape);
    }
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    twin_ctx c = {.st = st, .bits = bits, .gs = gs};
    cr_assert(rp_quantize_write_st(path, o, n, twin_write, &c, NULL) == RP_OK);
    rp_free(o);
    rp_st_close(st);
    char *cfg;
    size_t cn;
    snprintf(path, sizeof path, "%s/config.json", f->dir);
    cr_assert(rp_file_read(path, &cfg, &cn, NULL) == RP_OK);
    snprintf(path, sizeof path, "%s/config.json", out);
    rp_file_write(path, cfg, cn, NULL);
    rp_free(cfg);
}


Test(quant_model, mlx_checkpoints_match_dequantized_twin)
{
    static const char *fx[] = {"llama_gqa", "llama_tied_mha", "qwen3", "qwen2_untied"};
    static const int cfgs[][2] = {{4, 32}, {4, 64}, {8, 64}, {8, 32}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        fixture f;
        cr_assert(fixture_load(fx[i], &f) == 0, "fixture %s", fx[i]);
        for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
            char qdir[512], twin[512], what[64];
            snprintf(qdir, sizeof qdir, "/tmp/rp_mlxq_XXXXXX");
            cr_assert(mkdtemp(qdir));
            rmdir(qdir);
            rp_err err = {0};
            cr_assert(rp_quantize_dir(f.dir, qdir, cfgs[k][0], cfgs[k][1], &err) == RP_OK, "%s",
                      err.msg);
            make_mlx_twin(&f, cfgs[k][0], cfgs[k][1], twin);
            snprintf(what, sizeof what, "%s mlx%d g%d", fx[i], cfgs[k][0], cfgs[k][1]);
            check_pair(what, qdir, twin, f.ids, f.n_ids, f.vocab, f.logits);
            fixture_remove(qdir);
            fixture_remove(twin);
        }
        fixture_free(&f);
    }
}

/* ---- GGUF ------------------------------------------------------------------------------ */

Test(quant_model, gguf_f32_files_match_transformers)
{
    static const char *fx[] = {"llama_gqa", "llama_headdim", "llama_tied_mha", "qwen2", "qwen3",
                               "qwen3_untied"};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        fixture f;
        cr_assert(fixture_load(fx[i], &f) == 0);
        char path[64];
        snprintf(path, sizeof path, "/tmp/rp_gguf_%d_f32.gguf", (int)getpid());
        cr_assert(gguf_write_from_dir(f.dir, RP_DT_F32, 0, path) == 0);
        float *lg = fixture_eval(path, f.ids, f.n_ids, f.vocab, 0, NULL);
        cr_assert(lg);
        float d = max_abs_diff(lg, f.logits, (long)f.n_ids * f.vocab);
        cr_assert(d <= F32_TOL, "%s: GGUF F32 logits %g from transformers", fx[i], d);
        rp_free(lg);
        unlink(path);
        fixture_free(&f);
    }
}

static void gguf_pair(const char *dir, rp_dtype dt, const int32_t *ids, int n, int vocab,
                      const float *hf, const char *label)
{
    char qp[64], tp[64], what[64];
    snprintf(qp, sizeof qp, "/tmp/rp_gguf_%d_q.gguf", (int)getpid());
    snprintf(tp, sizeof tp, "/tmp/rp_gguf_%d_t.gguf", (int)getpid());
    cr_assert(gguf_write_from_dir(dir, dt, 0, qp) == 0);
    cr_assert(gguf_write_from_dir(dir, dt, 1, tp) == 0);
    snprintf(what, sizeof what, "%s gguf %s", label, rp_dtype_name(dt));
    check_pair(what, qp, tp, ids, n, vocab, hf);
    unlink(qp);
    unlink(tp);
}

Test(quant_model, gguf_quantized_match_dequantized_twin)
{
    static const char *fx[] = {"llama_gqa", "llama_headdim", "qwen3"};
    static const rp_dtype types[] = {RP_DT_F16,  RP_DT_BF16, RP_DT_Q8_0, RP_DT_Q4_0,
                                     RP_DT_Q4_1, RP_DT_Q5_0, RP_DT_Q5_1};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        fixture f;
        cr_assert(fixture_load(fx[i], &f) == 0);
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
            gguf_pair(f.dir, types[k], f.ids, f.n_ids, f.vocab, f.logits, fx[i]);
        fixture_free(&f);
    }
}

/* A random 256-wide Llama (1 layer, GQA) as an f32 safetensors checkpoint. */
typedef struct rnd_ctx {
    const rp_st_out *o;
    uint64_t rng;
} rnd_ctx;

static int rnd_write(void *vc, int i, FILE *fp)
{
    rnd_ctx *c = vc;
    size_t n = c->o[i].n_bytes / 4;
    int is_norm = c->o[i].n_dims == 1;
    float scale = c->o[i].n_dims == 2 ? 1.0f / sqrtf((float)c->o[i].shape[1]) : 1.0f;
    for (size_t k = 0; k < n; k++) {
        c->rng ^= c->rng << 13;
        c->rng ^= c->rng >> 7;
        c->rng ^= c->rng << 17;
        float u = (float)((c->rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
        float v = is_norm ? 1.0f + 0.1f * u : 1.7f * u * scale;
        fwrite(&v, 4, 1, fp);
    }
    return 0;
}

static void make_wide_model(char *dir)
{
    snprintf(dir, 512, "/tmp/rp_wide_XXXXXX");
    cr_assert(mkdtemp(dir));
    enum { D = 256, F = 512, V = 512, H = 4, KV = 2, HD = 64 };
    static const struct {
        const char *name;
        int64_t r, c;
    } ts[] = {{"model.embed_tokens.weight", V, D},
              {"model.norm.weight", D, 0},
              {"lm_head.weight", V, D},
              {"model.layers.0.input_layernorm.weight", D, 0},
              {"model.layers.0.post_attention_layernorm.weight", D, 0},
              {"model.layers.0.self_attn.q_proj.weight", H * HD, D},
              {"model.layers.0.self_attn.k_proj.weight", KV * HD, D},
              {"model.layers.0.self_attn.v_proj.weight", KV * HD, D},
              {"model.layers.0.self_attn.o_proj.weight", D, H * HD},
              {"model.layers.0.mlp.gate_proj.weight", F, D},
              {"model.layers.0.mlp.up_proj.weight", F, D},
              {"model.layers.0.mlp.down_proj.weight", D, F}};
    rp_st_out o[12];
    for (int i = 0; i < 12; i++) {
        o[i] = (rp_st_out){.name = ts[i].name, .dtype = "F32", .n_dims = ts[i].c ? 2 : 1,
                           .shape = {ts[i].r, ts[i].c},
                           .n_bytes = (size_t)(ts[i].r * (ts[i].c ? ts[i].c : 1)) * 4};
    }
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rnd_ctx c = {.o = o, .rng = 0x243f6a8885a308d3ull};
    cr_assert(rp_quantize_write_st(path, o, 12, rnd_write, &c, NULL) == RP_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
                      "\"hidden_size\": 256, \"intermediate_size\": 512, \"vocab_size\": 512, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                      "\"num_key_value_heads\": 2, \"head_dim\": 64, \"rms_norm_eps\": 1e-5, "
                      "\"rope_theta\": 10000.0, \"max_position_embeddings\": 256, "
                      "\"tie_word_embeddings\": false, \"bos_token_id\": 1, "
                      "\"eos_token_id\": 2}";
    cr_assert(rp_file_write(path, cfg, strlen(cfg), NULL) == RP_OK);
}

Test(quant_model, gguf_k_quants_on_a_wide_model)
{
    char dir[512];
    make_wide_model(dir);
    int32_t ids[12];
    for (int i = 0; i < 12; i++)
        ids[i] = (i * 37 + 5) % 512;
    /* the F32 GGUF equals the safetensors model (mapping + permutation round trip) */
    char p[64];
    snprintf(p, sizeof p, "/tmp/rp_gguf_%d_w.gguf", (int)getpid());
    cr_assert(gguf_write_from_dir(dir, RP_DT_F32, 0, p) == 0);
    float *a = fixture_eval(dir, ids, 12, 512, 0, NULL),
          *b = fixture_eval(p, ids, 12, 512, 0, NULL);
    cr_assert(a && b);
    cr_assert(max_abs_diff(a, b, 12 * 512) <= SAME_TOL, "wide F32 GGUF differs by %g",
              max_abs_diff(a, b, 12 * 512));
    unlink(p);
    static const rp_dtype types[] = {RP_DT_Q4_K, RP_DT_Q5_K, RP_DT_Q6_K, RP_DT_Q8_0, RP_DT_Q4_0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        gguf_pair(dir, types[k], ids, 12, 512, NULL, "wide");
    rp_free(a);
    rp_free(b);
    fixture_remove(dir);
}

Test(quant_model, gguf_unsupported_type_is_named)
{
    fixture f;
    cr_assert(fixture_load("llama_gqa", &f) == 0);
    char p[64];
    snprintf(p, sizeof p, "/tmp/rp_gguf_%d_bad.gguf", (int)getpid());
    cr_assert(gguf_write_from_dir(f.dir, RP_DT_F32, 0, p) == 0);
    char *data;
    size_t n;
    cr_assert(rp_file_read(p, &data, &n, NULL) == RP_OK);
    const char *name = "blk.0.ffn_up.weight";
    char *at = memmem(data, n, name, strlen(name));
    cr_assert(at);
    uint32_t q8_1 = 9; /* name, u32 n_dims, 2 x u64 dims, u32 type */
    memcpy(at + strlen(name) + 4 + 16, &q8_1, 4);
    cr_assert(rp_file_write(p, data, n, NULL) == RP_OK);
    rp_free(data);
    rp_model *m = NULL;
    rp_err err = {0};
    cr_assert(rp_model_load(p, NULL, &m, &err) == RP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "Q8_1") && strstr(err.msg, "blk.0.ffn_up.weight"), "%s", err.msg);
    unlink(p);
    fixture_free(&f);
}

/* ---- MLX per-module overrides ----------------------------------------------------------- */

typedef struct mix_ctx {
    const rp_st_tensor **src;
} mix_ctx;

static int mix_write(void *vc, int i, FILE *fp)
{
    const rp_st_tensor *t = ((mix_ctx *)vc)->src[i];
    return fwrite(t->t.data, 1, t->t.n_bytes, fp) == t->t.n_bytes ? 0 : -1;
}

Test(quant_model, mlx_per_module_overrides)
{
    fixture f;
    cr_assert(fixture_load("llama_gqa", &f) == 0);
    char a[512], b[512], mix[512];
    snprintf(a, sizeof a, "/tmp/rp_mlxa_XXXXXX");
    snprintf(b, sizeof b, "/tmp/rp_mlxb_XXXXXX");
    snprintf(mix, sizeof mix, "/tmp/rp_mlxm_XXXXXX");
    cr_assert(mkdtemp(a) && mkdtemp(b) && mkdtemp(mix));
    cr_assert(rp_quantize_dir(f.dir, a, 8, 64, NULL) == RP_OK);
    cr_assert(rp_quantize_dir(f.dir, b, 4, 32, NULL) == RP_OK);
    rp_st *sa, *sb, *sf;
    cr_assert(rp_st_open(a, &sa, NULL) == RP_OK && rp_st_open(b, &sb, NULL) == RP_OK &&
              rp_st_open(f.dir, &sf, NULL) == RP_OK);
    /* 4-bit g32 everywhere, but layer 0's down_proj 8-bit g64 and lm_head left in f32 */
    int n = rp_st_count(sb), k = 0;
    rp_st_out *o = rp_calloc((size_t)n + 4, sizeof *o);
    const rp_st_tensor **src = rp_calloc((size_t)n + 4, sizeof *src);
    for (int i = 0; i < n; i++) {
        const rp_st_tensor *t = rp_st_at(sb, i);
        if (strncmp(t->name, "lm_head.", 8) == 0)
            t = strcmp(t->name, "lm_head.weight") == 0 ? rp_st_find(sf, t->name) : NULL;
        else if (strncmp(t->name, "model.layers.0.mlp.down_proj.", 29) == 0)
            t = rp_st_find(sa, t->name);
        if (!t)
            continue;
        src[k] = t;
        o[k] = (rp_st_out){.name = t->name, .dtype = t->dtype, .n_dims = t->t.n_dims,
                           .n_bytes = t->t.n_bytes};
        memcpy(o[k].shape, t->t.shape, sizeof o[k].shape);
        k++;
    }
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", mix);
    mix_ctx c = {.src = src};
    cr_assert(rp_quantize_write_st(path, o, k, mix_write, &c, NULL) == RP_OK);
    snprintf(path, sizeof path, "%s/config.json", b);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_t *q = json_object_get(cfg, "quantization");
    json_object_set_new(q, "model.layers.0.mlp.down_proj",
                        json_pack("{s:i, s:i}", "group_size", 64, "bits", 8));
    json_object_set_new(q, "lm_head", json_false());
    snprintf(path, sizeof path, "%s/config.json", mix);
    json_dump_file(cfg, path, 0);
    json_decref(cfg);
    float *lg = fixture_eval(mix, f.ids, f.n_ids, f.vocab, 1, NULL);
    cr_assert(lg, "the mixed checkpoint loads");
    float d = max_abs_diff(lg, f.logits, (long)f.n_ids * f.vocab);
    cr_log_info("mixed 4/8-bit checkpoint vs transformers: %.4f", d);
    cr_assert(d < 0.3f * max_abs(f.logits, (long)f.n_ids * f.vocab), "%g", d);
    /* a group size the packed shapes contradict is named */
    cfg = json_load_file(path, 0, NULL);
    json_object_set_new(json_object_get(cfg, "quantization"), "model.layers.0.mlp.down_proj",
                        json_pack("{s:i, s:i}", "group_size", 32, "bits", 8));
    json_dump_file(cfg, path, 0);
    json_decref(cfg);
    rp_model *m = NULL;
    rp_err err = {0};
    cr_assert(rp_model_load(mix, NULL, &m, &err) == RP_ERR_INVALID);
    cr_assert(strstr(err.msg, "model.layers.0.mlp.down_proj.weight"), "%s", err.msg);
    rp_free(lg);
    rp_free(o);
    rp_free(src);
    rp_st_close(sa);
    rp_st_close(sb);
    rp_st_close(sf);
    fixture_remove(a);
    fixture_remove(b);
    fixture_remove(mix);
    fixture_free(&f);
}
