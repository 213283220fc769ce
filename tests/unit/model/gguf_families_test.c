/* tests/unit/model/gguf_families_test.c - the model families from GGUF files in llama.cpp's
 * naming, written from the fixtures by tests/unit/model/gguf_writer.c.
 *
 * qwen3moe (experts as ffn_*_exps stacks), gemma3 (norms stored as 1 + w; the layer pattern
 * from attention.sliding_window_pattern, or llama.cpp's every-6th rule without it), lfm2
 * (shortconv.* with squeezed kernels, layer types from the per-layer head_count_kv) and phi3
 * (fused attn_qkv / ffn_up, partial rotary from rope.dimension_count), qwen35 (Qwen3.5 dense:
 * ssm_* names, ssm_a = -exp(A_log), 1 + w norms, value heads reordered as the converter does;
 * float types only here, see qwen3_5_quantized_out_proj_needs_whole_blocks) and gpt-oss
 * (ffn_*_exps stacks, attn_sinks, YaRN; also with MXFP4 experts in ggml's layout):
 *   - F32 files: logits within F32_TOL of transformers' and the fixture's greedy continuation
 *     is the argmax at every step (teacher forced);
 *   - F16 / BF16 / Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 files against their dequantized-f32 twin
 *     (gguf_writer's dequant_twin): reference kernels within SAME_TOL, fast kernels within the
 *     family's bound of quant_families_test.c (int8 activations on these touchy fixtures).
 * Llama 3.1's rope_freqs tensor (the llama3 scaling as per-frequency divisors) is applied: the
 * llama3_rope fixture as a GGUF without any rope scaling keys matches transformers. Phi-3's
 * LongRoPE factor tensors (rope_factors_long / _short) give what the checkpoint's
 * long_factor / short_factor give.
 * Architectures llama.cpp defines but rapid does not map from GGUF (qwen3next, qwen35moe,
 * lfm2moe, ...) are refused with RP_ERR_UNSUPPORTED naming the architecture. A file with the
 * writer's placeholder vocabulary (what the llama.cpp peer benchmark needs) loads as model
 * and tokenizer.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "fixture_util.h"
#include "gguf_writer.h"
#include "base/gguf.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "text/tokenizer.h"

#define F32_TOL 1e-3f
#define SAME_TOL 1e-4f

typedef struct fam {
    const char *name;
    float fast_tol; /* of max |logit|, as quant_families_test.c states them */
} fam;

static const fam g_fams[] = {
    {"qwen3_moe", 0.6f}, {"gemma3", 0.03f}, {"qwen3_5", 1.0f}, {"lfm2", 0.12f},
    {"gpt_oss", 0.4f},   {"phi3", 0.06f}};




/* ids then greedy: logits within F32_TOL over the ids, argmax = the greedy token after. */
static void check_f32(const char *what, const char *path, const fixture *f)
{
    int32_t ids[128];
    int n = 0;
    for (int i = 0; i < f->n_ids; i++)
        ids[n++] = f->ids[i];
    for (int i = 0; i < f->n_greedy && n < 128; i++)
        ids[n++] = f->greedy[i];
    float *lg = fixture_eval(path, ids, n, f->vocab, 0, NULL);
    cr_assert(lg, "%s: does not run", what);
    float d = max_abs_diff(lg, f->logits, (long)f->n_ids * f->vocab);
    cr_log_info("%-24s F32 GGUF vs transformers %.2e", what, d);
    cr_assert(d <= F32_TOL, "%s: GGUF F32 logits %g from transformers", what, d);
    for (int j = 0; j < f->n_greedy; j++)
        cr_assert(argmax_f32(lg + (size_t)(f->n_ids - 1 + j) * f->vocab, f->vocab) == f->greedy[j],
                  "%s: greedy token %d differs", what, j);
    rp_free(lg);
}

static void tmp_path(char *out, size_t n, const char *tag)
{
    snprintf(out, n, "/tmp/rp_ggfam_%d_%s.gguf", (int)getpid(), tag);
}

Test(gguf_families, f32_files_match_transformers)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(g_fams); i++) {
        fixture f;
        cr_assert(fixture_load(g_fams[i].name, &f) == 0);
        char p[128];
        tmp_path(p, sizeof p, "f32");
        gguf_opts o = {.gemma_pattern = 1};
        cr_assert(gguf_write_ex(f.dir, RP_DT_F32, 0, p, &o) == 0, "%s", g_fams[i].name);
        check_f32(g_fams[i].name, p, &f);
        unlink(p);
        fixture_free(&f);
    }
}

Test(gguf_families, quantized_files_match_dequantized_twin, .timeout = 300)
{
    static const rp_dtype types[] = {RP_DT_F16,  RP_DT_BF16, RP_DT_Q8_0, RP_DT_Q4_0,
                                     RP_DT_Q4_1, RP_DT_Q5_0, RP_DT_Q5_1};
    for (size_t i = 0; i < RP_ARRAY_LEN(g_fams); i++) {
        fixture f;
        cr_assert(fixture_load(g_fams[i].name, &f) == 0);
        long len = (long)f.n_ids * f.vocab;
        for (size_t k = 0; k < RP_ARRAY_LEN(types); k++) {
            if (strcmp(g_fams[i].name, "qwen3_5") == 0 && rp_dtype_is_quant(types[k]))
                continue; /* see qwen3_5_quantized_out_proj_needs_whole_blocks */
            char qp[128], tp[128];
            tmp_path(qp, sizeof qp, "q");
            tmp_path(tp, sizeof tp, "t");
            gguf_opts o = {.gemma_pattern = 1};
            cr_assert(gguf_write_ex(f.dir, types[k], 0, qp, &o) == 0);
            cr_assert(gguf_write_ex(f.dir, types[k], 1, tp, &o) == 0);
            float *t = fixture_eval(tp, f.ids, f.n_ids, f.vocab, 0, NULL),
                  *r = fixture_eval(qp, f.ids, f.n_ids, f.vocab, 1, NULL),
                  *q = fixture_eval(qp, f.ids, f.n_ids, f.vocab, 0, NULL);
            cr_assert(t && r && q);
            float scale = max_abs(t, len), dr = max_abs_diff(r, t, len), dq = max_abs_diff(q, t, len);
            cr_log_info("%-10s gguf %-5s ref vs twin %.1e, fast vs twin %.4f (%.2f%% of %.2f), vs "
                        "transformers %.3f",
                        g_fams[i].name, rp_dtype_name(types[k]), dr, dq, 100.0 * dq / scale, scale,
                        max_abs_diff(q, f.logits, len));
            cr_assert(dr <= SAME_TOL * (scale > 1 ? scale : 1), "%s %s: reference %g from twin",
                      g_fams[i].name, rp_dtype_name(types[k]), dr);
            cr_assert(dq <= g_fams[i].fast_tol * scale, "%s %s: fast kernels %g from twin",
                      g_fams[i].name, rp_dtype_name(types[k]), dq);
            rp_free(t);
            rp_free(r);
            rp_free(q);
            unlink(qp);
            unlink(tp);
        }
        fixture_free(&f);
    }
}

/* Without attention.sliding_window_pattern a gemma3 GGUF has llama.cpp's layer pattern
 * (every 6th layer global): the same logits as the checkpoint with those layer_types. */
Test(gguf_families, gemma3_default_layer_pattern_is_llama_cpp_s)
{
    fixture f;
    cr_assert(fixture_load("gemma3", &f) == 0);
    char dir[512];
    cr_assert(fixture_convert(&f, RP_DT_F32, 0, dir) == 0);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    cr_assert(c);
    int n_layers = (int)json_integer_value(json_object_get(c, "num_hidden_layers"));
    json_t *lt = json_array();
    for (int i = 0; i < n_layers; i++)
        json_array_append_new(lt, json_string((i + 1) % 6 ? "sliding_attention" : "full_attention"));
    json_object_set_new(c, "layer_types", lt);
    cr_assert(json_dump_file(c, path, 0) == 0);
    json_decref(c);
    char p[128];
    tmp_path(p, sizeof p, "g3");
    gguf_opts o = {0};
    cr_assert(gguf_write_ex(f.dir, RP_DT_F32, 0, p, &o) == 0);
    float *a = fixture_eval(p, f.ids, f.n_ids, f.vocab, 0, NULL),
          *b = fixture_eval(dir, f.ids, f.n_ids, f.vocab, 0, NULL);
    cr_assert(a && b);
    float d = max_abs_diff(a, b, (long)f.n_ids * f.vocab);
    cr_assert(d <= SAME_TOL, "gemma3 GGUF without a pattern differs by %g", d);
    /* and that is not the fixture's pattern: the file with the pattern differs */
    cr_assert(max_abs_diff(a, f.logits, (long)f.n_ids * f.vocab) > 10 * F32_TOL);
    rp_free(a);
    rp_free(b);
    unlink(p);
    fixture_remove(dir);
    fixture_free(&f);
}

Test(gguf_families, llama3_rope_freqs_are_applied)
{
    fixture f;
    cr_assert(fixture_load("llama3_rope", &f) == 0);
    char p[128];
    tmp_path(p, sizeof p, "l3");
    cr_assert(gguf_write_from_dir(f.dir, RP_DT_F32, 0, p) == 0);
    check_f32("llama3_rope (rope_freqs)", p, &f);
    unlink(p);
    fixture_free(&f);
}

Test(gguf_families, unmapped_architectures_are_named)
{
    static const char *archs[] = {"qwen3next", "qwen35moe", "lfm2moe", "mamba"};
    fixture f;
    cr_assert(fixture_load("llama_gqa", &f) == 0);
    for (size_t i = 0; i < RP_ARRAY_LEN(archs); i++) {
        char p[128];
        tmp_path(p, sizeof p, "arch");
        gguf_opts o = {.arch = archs[i]};
        cr_assert(gguf_write_ex(f.dir, RP_DT_F32, 0, p, &o) == 0);
        rp_model *m = NULL;
        rp_err err = {0};
        cr_assert(rp_model_load(p, NULL, &m, &err) == RP_ERR_UNSUPPORTED, "%s loads", archs[i]);
        char want[64];
        snprintf(want, sizeof want, "'%s' is not supported", archs[i]);
        cr_assert(strstr(err.msg, want), "%s", err.msg);
        unlink(p);
    }
    fixture_free(&f);
}

/* gguf_writer's placeholder vocabulary (gguf_opts.vocab, what scripts/bench-llamacpp.sh
 * writes so llama.cpp loads the file): the model's logits are those of the file without it,
 * and rapid's GGUF tokenizer reads it as a SentencePiece vocabulary of vocab_size tokens. */
Test(gguf_families, placeholder_vocab_loads)
{
    fixture f;
    cr_assert(fixture_load("llama_gqa", &f) == 0);
    char p[128];
    tmp_path(p, sizeof p, "vocab");
    gguf_opts o = {.vocab = 1};
    cr_assert(gguf_write_ex(f.dir, RP_DT_F32, 0, p, &o) == 0);
    check_f32("llama_gqa (with a vocabulary)", p, &f);
    rp_tokenizer *tok = NULL;
    rp_err err = {0};
    cr_assert(rp_tokenizer_load(p, &tok, &err) == RP_OK, "%s", err.msg);
    cr_assert(rp_tokenizer_vocab_size(tok) == f.vocab);
    cr_assert(rp_tokenizer_bos_id(tok) == 1 && rp_tokenizer_eos_id(tok) == 2);
    cr_assert(rp_tokenizer_token_id(tok, "<0x0A>") == 13);
    cr_assert(rp_tokenizer_is_special(tok, 2) && !rp_tokenizer_is_special(tok, 13));
    int32_t *ids = NULL;
    int n = 0;
    cr_assert(rp_tokenizer_encode(tok, "hi\n", 3, 0, &ids, &n, &err) == RP_OK, "%s", err.msg);
    for (int i = 0; i < n; i++) /* only byte tokens carry text */
        cr_assert(ids[i] >= 3 && ids[i] < 3 + 256, "id %d", ids[i]);
    char *text = NULL;
    size_t len = 0;
    cr_assert(rp_tokenizer_decode(tok, ids, n, 0, &text, &len, &err) == RP_OK, "%s", err.msg);
    /* the prefix space's U+2581 comes through byte tokens, so it stays (as in HF's decoder:
     * Replace runs before ByteFallback) */
    cr_assert(len == 6 && memcmp(text, "\xe2\x96\x81hi\n", 6) == 0, "decoded '%.*s'", (int)len,
              text);
    rp_free(text);
    rp_free(ids);
    rp_tokenizer_free(tok);
    unlink(p);
    fixture_free(&f);
}

/* llama.cpp's converter reorders Qwen3.5's value heads, out_proj's columns included: in a
 * quantized file that is only undone when a head's columns are whole blocks (real models:
 * 128 columns; this fixture: 16 in 32-blocks), else the loader names the tensor. */
Test(gguf_families, qwen3_5_quantized_out_proj_needs_whole_blocks)
{
    fixture f;
    cr_assert(fixture_load("qwen3_5", &f) == 0);
    char p[128];
    tmp_path(p, sizeof p, "q35");
    gguf_opts o = {0};
    cr_assert(gguf_write_ex(f.dir, RP_DT_Q8_0, 0, p, &o) == 0);
    rp_model *m = NULL;
    rp_err err = {0};
    cr_assert(rp_model_load(p, NULL, &m, &err) == RP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "linear_attn.out_proj") && strstr(err.msg, "q8_0"), "%s", err.msg);
    unlink(p);
    fixture_free(&f);
}

/* The file really is in the converter's layout: blk.0.ssm_a holds -exp(A_log) with the value
 * heads tiled (GGUF head j * n_k + k = HF head k * (n_v / n_k) + j), so the loader's undoing
 * of it is what the transformers match above checks. */
Test(gguf_families, qwen3_5_file_has_llama_cpp_s_value_head_order)
{
    fixture f;
    cr_assert(fixture_load("qwen3_5", &f) == 0);
    char p[128];
    tmp_path(p, sizeof p, "q35o");
    gguf_opts o = {0};
    cr_assert(gguf_write_ex(f.dir, RP_DT_F32, 0, p, &o) == 0);
    rp_gguf *g;
    rp_st *st;
    cr_assert(rp_gguf_open(p, &g, NULL) == RP_OK && rp_st_open(f.dir, &st, NULL) == RP_OK);
    int64_t i = rp_gguf_find_tensor(g, "blk.0.ssm_a");
    cr_assert(i >= 0, "no blk.0.ssm_a");
    rp_gguf_tensor gt;
    cr_assert(rp_gguf_tensor_info(g, i, &gt) == RP_OK && gt.type == 0 && gt.dims[0] == 4);
    const rp_st_tensor *a = rp_st_find(st, "model.layers.0.linear_attn.A_log");
    cr_assert(a);
    const float *ga = gt.data, *ha = a->t.data;
    int nk = 2, per = 2; /* the fixture: 2 key heads, 4 value heads */
    for (int h = 0; h < 4; h++) {
        int j = h / nk, k = h % nk;
        cr_assert(fabsf(ga[h] + expf(ha[k * per + j])) < 1e-6f, "head %d", h);
    }
    rp_st_close(st);
    rp_gguf_close(g);
    unlink(p);
    fixture_free(&f);
}

/* gpt-oss as published in GGUF: the experts in MXFP4 (ggml's block layout, written here),
 * everything else F32, against the same values in F32. */
Test(gguf_families, gpt_oss_mxfp4_experts_match_dequantized_twin)
{
    fixture f;
    cr_assert(fixture_load("gpt_oss", &f) == 0);
    char qp[128], tp[128];
    tmp_path(qp, sizeof qp, "mx");
    tmp_path(tp, sizeof tp, "mxt");
    gguf_opts o = {0};
    cr_assert(gguf_write_ex(f.dir, RP_DT_MXFP4, 0, qp, &o) == 0);
    cr_assert(gguf_write_ex(f.dir, RP_DT_MXFP4, 1, tp, &o) == 0);
    long len = (long)f.n_ids * f.vocab;
    float *t = fixture_eval(tp, f.ids, f.n_ids, f.vocab, 0, NULL),
          *r = fixture_eval(qp, f.ids, f.n_ids, f.vocab, 1, NULL),
          *q = fixture_eval(qp, f.ids, f.n_ids, f.vocab, 0, NULL);
    cr_assert(t && r && q);
    float scale = max_abs(t, len), dr = max_abs_diff(r, t, len), dq = max_abs_diff(q, t, len);
    cr_log_info("gpt_oss gguf mxfp4 experts: ref vs twin %.1e, fast vs twin %.4f, vs "
                "transformers %.3f", dr, dq, max_abs_diff(q, f.logits, len));
    cr_assert(dr <= SAME_TOL * (scale > 1 ? scale : 1), "reference %g from twin", dr);
    cr_assert(dq <= 0.4f * scale, "fast %g from twin", dq);
    rp_free(t);
    rp_free(r);
    rp_free(q);
    unlink(qp);
    unlink(tp);
    fixture_free(&f);
}

/* Phi-3 LongRoPE from rope_factors_long / rope_factors_short and rope.scaling.*: the phi3
 * fixture given LongRoPE factors (original context 16 < the 28 positions run, so the long
 * factors apply past it) computes the same from its GGUF as from its checkpoint. */
Test(gguf_families, phi3_longrope_factors_are_read)
{
    fixture f;
    cr_assert(fixture_load("phi3", &f) == 0);
    char dir[512];
    cr_assert(fixture_convert(&f, RP_DT_F32, 0, dir) == 0);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    cr_assert(c);
    json_t *rp = json_object_get(c, "rope_parameters");
    json_object_set_new(rp, "rope_type", json_string("longrope"));
    json_object_set_new(rp, "long_factor", json_pack("[f,f,f,f]", 1.0, 1.5, 2.5, 4.0));
    json_object_set_new(rp, "short_factor", json_pack("[f,f,f,f]", 1.0, 1.1, 1.2, 1.3));
    json_object_set_new(c, "original_max_position_embeddings", json_integer(16));
    cr_assert(json_dump_file(c, path, 0) == 0);
    json_decref(c);
    char p[128];
    tmp_path(p, sizeof p, "lr");
    cr_assert(gguf_write_from_dir(dir, RP_DT_F32, 0, p) == 0);
    int32_t ids[64];
    int n = 0;
    for (int i = 0; i < f.n_ids; i++)
        ids[n++] = f.ids[i];
    for (int i = 0; i < f.n_greedy && n < 64; i++)
        ids[n++] = f.greedy[i];
    float *a = fixture_eval(p, ids, n, f.vocab, 0, NULL),
          *b = fixture_eval(dir, ids, n, f.vocab, 0, NULL);
    cr_assert(a && b);
    float d = max_abs_diff(a, b, (long)n * f.vocab);
    cr_assert(d <= SAME_TOL, "phi3 LongRoPE GGUF differs by %g", d);
    /* and the factors matter: the fixture without them differs */
    cr_assert(max_abs_diff(a, f.logits, (long)f.n_ids * f.vocab) > 10 * F32_TOL);
    rp_free(a);
    rp_free(b);
    unlink(p);
    fixture_remove(dir);
    fixture_free(&f);
}
